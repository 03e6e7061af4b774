package app

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// boundsChain is the reviewer's schema: links d_0 … d_n, each an anyOf of
// two $refs to the next, the last a string. It expands to 2^(n+2)-2
// subschemas, and a wrong value meets every one.
func boundsChain(n int) string {
	var defs []string
	for i := range n {
		next := fmt.Sprintf(`{"$ref":"#/$defs/d_%d"}`, i+1)
		defs = append(defs, fmt.Sprintf(`"d_%d":{"anyOf":[%s,%s]}`, i, next, next))
	}
	defs = append(defs, fmt.Sprintf(`"d_%d":{"type":"string"}`, n))
	return `{"$ref":"#/$defs/d_0","$defs":{` + strings.Join(defs, ",") + `}}`
}

func boundsCompile(t *testing.T, schema string) *compiled {
	t.Helper()
	c, err := compile(TypeVersion{Tipo: "teste:limites", Versao: "1.0.0", Status: StatusAtivo,
		Audiencia: AudienciaTodos, Schema: json.RawMessage(schema)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func boundsDoc(t *testing.T, payload string) any {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// boundsList is {"l":[1,1,…]} with n numbers.
func boundsList(n int) string {
	return `{"l":[` + strings.TrimSuffix(strings.Repeat("1,", n), ",") + `]}`
}

const boundsListSchema = `{"type":"object","properties":{"l":{"type":"array","items":{"type":"string"}}}}`

func TestValidationCostCountsEachSubschemaAppliedToEachValue(t *testing.T) {
	for _, tc := range []struct {
		name, schema, payload string
		want                  int
	}{
		// The object, its list, and one per number.
		{"a list of 1,000", boundsListSchema, boundsList(1000), 1002},
		// A wrong value meets every link: 2^(n+2)-2 of them.
		{"the anyOf chain of 7 links on a wrong value", boundsChain(7), `1`, 1<<9 - 2},
		// On a right one too: the count takes every branch, never fewer.
		{"the anyOf chain of 7 links on a right value", boundsChain(7), `"a"`, 1<<9 - 2},
		// A recursive schema costs what the payload nests, once a level.
		{"a tree 3 levels deep", `{"$defs":{"no":{"type":"object","properties":{"f":{"type":"array","items":{"$ref":"#/$defs/no"}}}}},"$ref":"#/$defs/no"}`,
			`{"f":[{"f":[{}]}]}`, 2 + 3 + 3},
		// The other applicators, each application a step.
		{"prefixItems, items and contains", `{"prefixItems":[{}],"items":{},"contains":{}}`, `[1,2,3]`, 1 + 2 + 2 + 2},
		{"propertyNames, patternProperties and additionalProperties",
			`{"propertyNames":{"maxLength":3},"patternProperties":{"^a":{}},"additionalProperties":{}}`, `{"ab":1,"c":2}`, 1 + 2 + 2},
		{"dependentSchemas, if/then/else and not", `{"dependentSchemas":{"a":{},"b":{}},"if":{},"then":{},"else":{},"not":{"not":{}}}`,
			`{"a":1}`, 1 + 1 + 3 + 2},
		// uniqueItems hashes every value, 8 to a step.
		{"uniqueItems", `{"uniqueItems":true}`, `[` + strings.TrimSuffix(strings.Repeat("1,", 7999), ",") + `]`, 1 + 8000/8},
		// unevaluatedProperties copies the keys at each in-place application,
		// four to a step, and applies to each key.
		{"unevaluatedProperties", `{"allOf":[{},{}],"unevaluatedProperties":{}}`, `{"a":1,"b":1,"c":1,"d":1,"e":1,"f":1,"g":1,"h":1}`,
			3*(1+8/4) + 8},
		// A $ref to itself without a level down stops, as the validator's does.
		{"an in-place cycle", `{"$defs":{"a":{"allOf":[{"$ref":"#/$defs/a"}]}},"$ref":"#/$defs/a"}`, `{}`, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := boundsCompile(t, tc.schema)
			if got, _ := validationCost(c.schema, boundsDoc(t, tc.payload), MaxValidationSteps); got != tc.want {
				t.Fatalf("cost %d, want %d", got, tc.want)
			}
		})
	}
}

func TestValidationCostChargesWhatOneApplicationScans(t *testing.T) {
	big := strings.Repeat("7", 1<<20-16)
	for _, tc := range []struct {
		name, schema, payload string
		atLeast               int
	}{
		// Turning 1 MiB of digits into a fraction takes seconds.
		{"a number of 1 MiB under a bound", `{"properties":{"n":{"minimum":0}}}`, `{"n":` + big + `}`, MaxValidationSteps},
		// A pattern reads the whole string, at each of a thousand
		// in-place applications.
		{"a pattern applied a thousand times", `{"properties":{"s":{"allOf":[` +
			strings.TrimSuffix(strings.Repeat(`{"pattern":"^7+$"},`, 1000), ",") + `]}}}`, `{"s":"` + big + `"}`, MaxValidationSteps},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := boundsCompile(t, tc.schema)
			got, at := validationCost(c.schema, boundsDoc(t, tc.payload), MaxValidationSteps)
			if got < tc.atLeast || at == "" {
				t.Fatalf("cost %d at %q, want at least %d with a place", got, at, tc.atLeast)
			}
		})
	}
	// Without a keyword that reads it, the same number costs its visit.
	c := boundsCompile(t, `{"properties":{"n":{}}}`)
	if got, _ := validationCost(c.schema, boundsDoc(t, `{"n":`+big+`}`), MaxValidationSteps); got != 2 {
		t.Fatalf("cost %d, want 2", got)
	}
}

// The count stops where it passes its limit: counting a schema of 2^32
// paths is as cheap as counting to the limit, and names where it stopped.
func TestValidationCostStopsAtItsLimit(t *testing.T) {
	c := boundsCompile(t, strings.Replace(boundsChain(30), `"$ref"`, `"properties":{"x":{"$ref":"#/$defs/d_0"}},"$comment"`, 1))
	got, at := validationCost(c.schema, boundsDoc(t, `{"x":1}`), 1000)
	if got <= 1000 || got > 1010 || at != "/x" {
		t.Fatalf("cost %d at %q, want just past 1000 at /x", got, at)
	}
	got, at = validationCost(boundsCompile(t, boundsListSchema).schema, boundsDoc(t, boundsList(5000)), 1000)
	if got != 1001 || at != "/l/998" {
		t.Fatalf("cost %d at %q, want 1001 at /l/998", got, at)
	}
}

func TestPayloadFindingsAreCutAndCounted(t *testing.T) {
	c := boundsCompile(t, boundsListSchema)
	paths := func(details []Detail) []string {
		var out []string
		for _, d := range details {
			out = append(out, d.Caminho)
		}
		return out
	}
	for _, tc := range []struct {
		items, room int
		listed      int    // findings named, in order from /payload/l/0
		more        string // the last detail's mensagem, "" for none
	}{
		{MaxDetalhes, MaxDetalhes, MaxDetalhes, ""},
		{MaxDetalhes + 1, MaxDetalhes, MaxDetalhes - 1, "e mais 2 erros não listados"},
		{2, 2, 2, ""},
		{3, 2, 1, "e mais 2 erros não listados"},
		{2, 1, 0, "e mais 2 erros não listados"},
		{5000, MaxDetalhes, MaxDetalhes - 1, "e mais 4901 erros não listados"},
	} {
		t.Run(fmt.Sprintf("%d wrong in room for %d", tc.items, tc.room), func(t *testing.T) {
			got := c.checkPayload(boundsDoc(t, boundsList(tc.items)), tc.room)
			var want []string
			for i := range tc.listed {
				want = append(want, "/payload/l/"+strconv.Itoa(i)) // by index, not as text: 10 after 9
			}
			if tc.more != "" {
				want = append(want, "/payload")
			}
			if strings.Join(paths(got), " ") != strings.Join(want, " ") {
				t.Fatalf("caminhos %q, want %q", paths(got), want)
			}
			if tc.more != "" && got[len(got)-1].Mensagem != tc.more {
				t.Fatalf("last mensagem %q, want %q", got[len(got)-1].Mensagem, tc.more)
			}
		})
	}
}

func TestPayloadFindingsCutTheirTexts(t *testing.T) {
	// A value that fails a pattern or an enum is quoted in the message; a
	// key can be long. Neither makes the finding long.
	long := strings.Repeat("ç", 5000)
	c := boundsCompile(t, `{"additionalProperties":{"pattern":"^a$"}}`)
	got := c.checkPayload(boundsDoc(t, `{"`+long+`":"`+long+`"}`), MaxDetalhes)
	if len(got) != 1 {
		t.Fatalf("findings %+v", got)
	}
	if n := utf8.RuneCountInString(got[0].Caminho); n != maxDetalheCaminho || !strings.HasPrefix(got[0].Caminho, "/payload/ç") {
		t.Fatalf("caminho of %d characters: %.40q…", n, got[0].Caminho)
	}
	if n := utf8.RuneCountInString(got[0].Mensagem); n != maxDetalheMensagem || !strings.HasSuffix(got[0].Mensagem, "…") {
		t.Fatalf("mensagem of %d characters: %.40q…", n, got[0].Mensagem)
	}
}

func TestSchemaExpansionRefusesTheAnyOfChain(t *testing.T) {
	// 2^(n+2)-2: 11 links are 8,190, 12 are 16,382.
	if err := checkExpansion(boundsCompile(t, boundsChain(11)).schema); err != nil {
		t.Fatalf("11 links: %v", err)
	}
	for _, tc := range []struct {
		links int
		at    string // the innermost link past the bound
	}{{12, "/schema/$defs/d_0"}, {16, "/schema/$defs/d_4"}, {40, "/schema/$defs/d_28"}} {
		err := checkExpansion(boundsCompile(t, boundsChain(tc.links)).schema)
		e, ok := err.(*Error)
		if !ok || e.Code != EInvalid || len(e.Details) != 1 || e.Details[0].Caminho != tc.at ||
			!strings.Contains(e.Details[0].Mensagem, strconv.Itoa(MaxSchemaExpansion)) {
			t.Fatalf("%d links: %v, want one finding at %s naming %d", tc.links, err, tc.at, MaxSchemaExpansion)
		}
	}
}

func TestSchemaExpansionOfOrdinarySchemas(t *testing.T) {
	types, err := BuiltinTypes()
	if err != nil {
		t.Fatal(err)
	}
	for _, tv := range types {
		c := boundsCompile(t, string(tv.Schema))
		e := expansion{size: map[*jsonschema.Schema]int{}, onPath: map[*jsonschema.Schema]bool{}}
		// Far below: under a hundredth of it (they expand to at most 14).
		if n := e.of(c.schema); n > MaxSchemaExpansion/100 {
			t.Errorf("%s@%s expands to %d", tv.Tipo, tv.Versao, n)
		}
	}
	for name, schema := range map[string]string{
		// Recursion counts once: it goes only as deep as the payload.
		"a tree": `{"$defs":{"no":{"type":"object","properties":{"esq":{"$ref":"#/$defs/no"},"dir":{"$ref":"#/$defs/no"}}}},"$ref":"#/$defs/no"}`,
		// A shared $defs used from 200 fields, each an anyOf or oneOf.
		"200 fields of shared shapes": func() string {
			var props []string
			for i := range 200 {
				props = append(props, fmt.Sprintf(`"f%d":{"anyOf":[{"$ref":"#/$defs/local"},{"oneOf":[{"type":"string"},{"type":"null"}]}]}`, i))
			}
			return `{"$defs":{"local":{"type":"object","required":["lat","lng"],"properties":{"lat":{"type":"number"},"lng":{"type":"number"}}}},` +
				`"properties":{` + strings.Join(props, ",") + `}}`
		}(),
	} {
		if err := checkExpansion(boundsCompile(t, schema).schema); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
