package app

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// builtinBounded is a free string or a list of a built-in schema, at its
// JSON Pointer in the schema.
type builtinBounded struct {
	at     string
	schema map[string]any
}

// TestEveryBuiltinFreeStringAndListHasABound walks the newest version of
// every built-in type (older ones are immutable history, kept for the
// events validated against them) and, for every string and every list,
// checks the bound is there and refuses one past it, through the
// registry's own compiler: a new built-in type, or a new field, without
// maxLength or maxItems fails here. A string with format uuid is bounded
// by the format (exactly 36 characters), which is checked the same way.
func TestEveryBuiltinFreeStringAndListHasABound(t *testing.T) {
	types, err := BuiltinTypes()
	if err != nil {
		t.Fatal(err)
	}
	newest := map[string]TypeVersion{}
	for _, tv := range types {
		if cur, ok := newest[tv.Tipo]; !ok || semverLess(cur.Versao, tv.Versao) {
			newest[tv.Tipo] = tv
		}
	}
	if len(newest) == 0 {
		t.Fatal("no built-in types")
	}
	for tipo, tv := range newest {
		var doc any
		if err := json.Unmarshal(tv.Schema, &doc); err != nil {
			t.Fatal(err)
		}
		var found []builtinBounded
		walkBuiltinSchema(doc, "", &found)
		for _, f := range found {
			t.Run(tipo+"@"+tv.Versao+f.at, func(t *testing.T) {
				checkBuiltinBound(t, f)
			})
		}
	}
}

// walkBuiltinSchema collects every subschema of type string or array.
// Values that are data (const, enum, default, examples) are not schemas.
func walkBuiltinSchema(v any, at string, found *[]builtinBounded) {
	switch v := v.(type) {
	case map[string]any:
		switch v["type"] {
		case "string", "array":
			*found = append(*found, builtinBounded{at, v})
		}
		for k, child := range v {
			if slices.Contains([]string{"const", "enum", "default", "examples"}, k) {
				continue
			}
			walkBuiltinSchema(child, at+"/"+k, found)
		}
	case []any:
		for i, child := range v {
			walkBuiltinSchema(child, at+"/"+strconv.Itoa(i), found)
		}
	}
}

func checkBuiltinBound(t *testing.T, f builtinBounded) {
	raw, err := json.Marshal(f.schema)
	if err != nil {
		t.Fatal(err)
	}
	sch, err := compileSchema(raw)
	if err != nil {
		t.Fatalf("compile %s: %v", raw, err)
	}
	if f.schema["type"] == "array" {
		n, ok := f.schema["maxItems"].(float64)
		if !ok {
			t.Fatalf("a list without maxItems: %s", raw)
		}
		over := make([]any, int(n)+1)
		for i := range over {
			over[i] = map[string]any{}
		}
		wantRefused(t, sch, over, func(k jsonschema.ErrorKind) bool { _, ok := k.(*kind.MaxItems); return ok })
		return
	}
	n, ok := f.schema["maxLength"].(float64)
	if !ok {
		if f.schema["format"] != "uuid" {
			t.Fatalf("a free string without maxLength: %s", raw)
		}
		wantRefused(t, sch, strings.Repeat("a", 37), func(k jsonschema.ErrorKind) bool { _, ok := k.(*kind.Format); return ok })
		return
	}
	// The bound alone: a format or pattern would refuse the test's string
	// first, whatever its length.
	alone := map[string]any{}
	for k, v := range f.schema {
		if k != "format" && k != "pattern" {
			alone[k] = v
		}
	}
	if raw, err = json.Marshal(alone); err != nil {
		t.Fatal(err)
	}
	if sch, err = compileSchema(raw); err != nil {
		t.Fatal(err)
	}
	// Characters, not bytes: ç is two bytes and one character.
	wantRefused(t, sch, strings.Repeat("ç", int(n)+1), func(k jsonschema.ErrorKind) bool { _, ok := k.(*kind.MaxLength); return ok })
	if err := sch.Validate(strings.Repeat("ç", int(n))); err != nil {
		t.Fatalf("%d characters refused: %v", int(n), err)
	}
}

// wantRefused checks sch refuses v for the reason is names.
func wantRefused(t *testing.T, sch *jsonschema.Schema, v any, is func(jsonschema.ErrorKind) bool) {
	t.Helper()
	err := sch.Validate(v)
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("one past the bound was accepted (%v)", err)
	}
	if !hasKind(ve, is) {
		t.Fatalf("refused, but not for its bound: %v", err)
	}
}

func hasKind(e *jsonschema.ValidationError, is func(jsonschema.ErrorKind) bool) bool {
	if is(e.ErrorKind) {
		return true
	}
	for _, c := range e.Causes {
		if hasKind(c, is) {
			return true
		}
	}
	return false
}

// TestOutcomesAreCutToTheirSchema: an outcome carries what the request
// brought (a path, field names, ids in a message); cut, it validates
// against OutcomeVersao, so a command with an absurd route is still
// answered and recorded.
func TestOutcomesAreCutToTheirSchema(t *testing.T) {
	types, err := BuiltinTypes()
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("ç", 100_000)
	many := make([]Detail, 5000)
	for i := range many {
		many[i] = Detail{Caminho: "/" + long, Mensagem: long}
	}
	out := outcomePayload{Comando: commandRecord{Metodo: "POST", Rota: "/api/ocorrencias/" + long,
		CorpoHMAC: "hmac-sha256:" + strings.Repeat("0", 64)}, Status: 404,
		Motivo: &motivo{Erro: "ocorrência " + long + " não encontrada", Codigo: ENotFound, Detalhes: many}}
	out.bound()
	if many[0].Caminho != "/"+long {
		t.Fatal("bound changed the refusing error's own findings")
	}
	payload, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, tv := range types {
		if tv.Tipo != TipoComandoRecusado || tv.Versao != OutcomeVersao {
			continue
		}
		c, err := compile(tv)
		if err != nil {
			t.Fatal(err)
		}
		var doc any
		if err := json.Unmarshal(payload, &doc); err != nil {
			t.Fatal(err)
		}
		if d := c.validatePayload(doc); len(d) > 0 {
			t.Fatalf("the cut outcome does not validate: %v", d)
		}
		if !strings.HasSuffix(out.Comando.Rota, "…") || len(out.Motivo.Detalhes) != maxOutcomeDetalhes {
			t.Fatalf("cut without saying so: %.40s… %d findings", out.Comando.Rota, len(out.Motivo.Detalhes))
		}
		return
	}
	t.Fatal(fmt.Sprintf("no built-in %s@%s", TipoComandoRecusado, OutcomeVersao))
}

// TestPublishedBuiltinVersionsNeverChange holds each built-in version's
// content to the digest it was published with (testdata/builtin-versions):
// a data directory keeps the content a version was first registered with,
// and a start that brought other content under the same version would
// report a conflict and go on validating with the old one (SPEC 5: a
// published version never changes). Tightening a schema is a new version:
// add its file and its line.
func TestPublishedBuiltinVersionsNeverChange(t *testing.T) {
	raw, err := os.ReadFile("testdata/builtin-versions")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if key, digest, ok := strings.Cut(line, " "); ok && !strings.HasPrefix(line, "#") {
			want[key] = digest
		}
	}
	types, err := BuiltinTypes()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, tv := range types {
		key := tv.Tipo + "@" + tv.Versao
		seen[key] = true
		rules, err := json.Marshal(tv.Redacao)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(slices.Concat([]byte(tv.Audiencia+"\n"), canonicalJSON(tv.Schema), []byte("\n"), rules))
		got := hex.EncodeToString(sum[:])
		switch digest, ok := want[key]; {
		case !ok:
			t.Errorf("%s is new: add the line %q to testdata/builtin-versions", key, key+" "+got)
		case digest != got:
			t.Errorf("%s changed after it was published: restore it and publish the change as a new version", key)
		}
	}
	for key := range want {
		if !seen[key] {
			t.Errorf("%s was published and is gone: data directories and the log still name it", key)
		}
	}
}
