package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"geohub/app"
	"geohub/app/keys"
	"geohub/app/redact"
	"geohub/store/storetest"
)

// fuzzSecret marks personal data in fuzzed payloads: wherever the rules do
// not keep it verbatim, it must never reach the log.
const fuzzSecret = "SEGREDO-FUZZ"

const (
	fuzzTipo       = "fuzz:registro"
	fuzzDeprecated = "2.0.0" // a deprecated version of fuzzTipo
)

var fuzzType = app.TypeVersion{Tipo: fuzzTipo, Versao: "1.0.0", Audiencia: app.AudienciaTodos,
	Schema: json.RawMessage(`{
		"type": "object",
		"required": ["id", "local"],
		"properties": {
			"id": {"type": "string", "format": "uuid"},
			"nota": {"type": "string", "maxLength": 200},
			"local": {"type": "object", "required": ["lat", "lng"],
				"properties": {"lat": {"type": "number", "minimum": -90, "maximum": 90},
				               "lng": {"type": "number", "minimum": -180, "maximum": 180}}},
			"servidor": {"type": "object",
				"properties": {"nome": {"type": "string"}, "cpf": {"type": "string", "pattern": "^[0-9]{11}$"}}},
			"itens": {"type": "array", "maxItems": 20,
				"items": {"type": "object", "properties": {"codigo": {"type": ["string", "integer"]}}}}
		}
	}`),
	Redacao: redact.Rules{
		Manter:     []string{"/id", "/nota", "/itens/*/codigo"},
		Hash:       []string{"/servidor/cpf"},
		Arredondar: []string{"/local"},
	}}

// fuzzFree keeps any object whole: the type an older binary let a 9,000-level
// payload through, so only the nesting limit keeps deep payloads out of the
// log.
var fuzzFree = app.TypeVersion{Tipo: "fuzz:livre", Versao: "1.0.0", Audiencia: app.AudienciaTodos,
	Schema: json.RawMessage(`{"type": "object"}`), Redacao: redact.Rules{Manter: []string{""}}}

// fuzzKept are the manter paths of fuzzType, as steps (* = every element).
var fuzzKept = [][]string{{"id"}, {"nota"}, {"itens", "*", "codigo"}}

var fuzzCodes = map[app.Code]bool{app.EInvalid: true, app.EMalformed: true, app.ENotFound: true,
	app.EConflict: true, app.EUnauthorized: true, app.EForbidden: true, app.ETooLarge: true,
	app.ERateLimited: true, app.EUnavailable: true, app.EInternal: true}

// FuzzPublish drives Publish with arbitrary fields on one real store and
// checks its contract: a coded error with a located finding, or a stored,
// redacted record and exactly one more row (none for a repeat).
func FuzzPublish(f *testing.F) {
	ctx := context.Background()
	db := storetest.Open(f, time.Now)
	var (
		mu        sync.Mutex
		committed []app.Appended
	)
	db.OnCommit(func(b []app.Appended) {
		mu.Lock()
		committed = append(committed, b...)
		mu.Unlock()
	})
	reg, err := app.NewRegistry(ctx, db, time.Now)
	if err != nil {
		f.Fatal(err)
	}
	deprecated := fuzzType
	deprecated.Versao = fuzzDeprecated
	for _, tv := range []app.TypeVersion{fuzzType, deprecated, fuzzFree} {
		if _, _, err := reg.Register(ctx, tv); err != nil {
			f.Fatal(err)
		}
	}
	if _, err := reg.SetStatus(ctx, fuzzTipo, fuzzDeprecated, app.StatusDeprecado); err != nil {
		f.Fatal(err)
	}
	pub := &app.Publisher{Log: db, Registry: reg, RedactionKey: keys.Redaction(make([]byte, 32)), Now: time.Now}

	const (
		id1 = "0199bb3e-0000-7000-8000-00000000004a"
		id2 = "0199BB3E-0000-7000-8000-00000000004B"
		ok  = `{"id":"0199bb3e-0000-7000-8000-000000000001","nota":"ok","local":{"lat":-23.55052,"lng":-46.63331,"rua":"SEGREDO-FUZZ"},` +
			`"servidor":{"nome":"SEGREDO-FUZZ","cpf":"12345678901"},"itens":[{"codigo":"a","segredo":"SEGREDO-FUZZ"},{"codigo":7}],"SEGREDO-FUZZ":1}`
	)
	seeds := []struct {
		tipo, origem, eventID, ts, corr, versao string
		payload                                 string
	}{
		{fuzzTipo, "rh", "", "", "", "", ok},
		{fuzzTipo, "rh", id1, "2026-11-30T08:00:00Z", id1, "1.0.0", ok},
		{fuzzTipo, "rh", id1, "2026-11-30T08:00:00Z", id1, "1.0.0", ok}, // repeat
		{fuzzTipo, "rh", id2, "2026-11-30T08:00:00.123456789-03:00", "", "", ok},
		{fuzzTipo, "rh", id1, "", "", fuzzDeprecated, ok}, // repeat of a now-refused event
		{fuzzTipo, "rh", "", "", "", fuzzDeprecated, ok},
		{fuzzTipo, "rh", "", "", "", "9.9.9", ok},
		{"fuzz:nao-existe", "rh", "", "", "", "", ok},
		{"", "", "", "", "", "", ok},
		{fuzzTipo, " ", "", "", "", "", ok},
		{fuzzTipo, "rh", "nao-uuid", "ontem", "nao-uuid", "", ok},
		{fuzzTipo, "rh", "{" + id1 + "}", "2026-11-30 08:00:00", "urn:uuid:" + id1, "", ok},
		{fuzzTipo, strings.Repeat("o", 101), "", "", "", "", ok},
		{fuzzTipo, "rh", "", "", "", "", `{"id":"x","local":{"lat":91,"lng":"a"},"servidor":{"cpf":"SEGREDO-FUZZ"},"itens":[1,{"codigo":1.5}]}`},
		{fuzzTipo, "rh", "", "", "", "", `{"id":"0199bb3e-0000-7000-8000-000000000001","local":{"lat":1,"lng":2},"a/b~c":{"SEGREDO-FUZZ":[null,true]}}`},
		{fuzzTipo, "rh", "", "", "", "", `{"id":"0199bb3e-0000-7000-8000-000000000001","local":{"lat":1e-7,"lng":-179.9995},"itens":[]}`},
		{fuzzTipo, "rh", "", "", "", "", `{"id":"0199bb3e-0000-7000-8000-000000000001","local":{"lat":1,"lng":2},"nota":"SEGREDO-FUZZ kept"}`},
		{fuzzTipo, "rh", "", "", "", "", `{"id":"0199bb3e-0000-7000-8000-000000000001","id":"dup","local":{"lat":1,"lng":2}}`},
		{fuzzTipo, "rh", "", "", "", "", `{"id":"0199bb3e-0000-7000-8000-000000000001","local":{"lat":1,"lng":2}} {}`},
		{fuzzTipo, "rh", "", "", "", "", ` {"local":`},
		{fuzzTipo, "rh", "", "", "", "", `null`},
		{fuzzTipo, "rh", "", "", "", "", `[{}]`},
		{fuzzTipo, "rh", "", "", "", "", `"SEGREDO-FUZZ"`},
		{fuzzTipo, "rh", "", "", "", "", ``},
		{fuzzTipo, "rh", "", "", "", "", "{\"id\":\"\xff\",\"local\":{\"lat\":0,\"lng\":0}}"},
		{fuzzTipo, "rh", "", "", "", "", "{\"id\":\"0199bb3e-0000-7000-8000-000000000001\",\"nota\":\"\xff<&>\",\"local\":{\"lat\":0,\"lng\":0}}"},
	}
	for _, s := range seeds {
		f.Add(s.tipo, s.origem, s.eventID, s.ts, s.corr, s.versao, []byte(s.payload), "", "", "", "")
	}
	// The envelope's optional fields, on a valid payload.
	for _, e := range []struct{ agregado, autoriaID, autoriaTipo, solicitacao string }{
		{"ocorrencia:42", "u-1", "usuario", id1},
		{" ocorrencia:42", "u-1", "robo", "nao-uuid"},
		{strings.Repeat("a", 256), "", "sistema", ""},
		{"ocorrencia:43", strings.Repeat("u", 256), "integrador", strings.ToUpper(id1)},
		{"ocorrencia:44\r\nX-Injetado: 1", "u-2", "usuario", ""},
		{"ocorrencia:\t45", "u-2", "usuario", ""},
	} {
		f.Add(fuzzTipo, "rh", "", "", "", "", []byte(ok), e.agregado, e.autoriaID, e.autoriaTipo, e.solicitacao)
	}
	// Nesting at, around and far past the limit, of objects, lists and both,
	// with brackets inside strings that are not levels.
	for _, n := range []int{app.MaxDepth - 1, app.MaxDepth, app.MaxDepth + 1, 10_000} {
		objects := strings.Repeat(`{"a":`, n) + `1` + strings.Repeat("}", n)
		lists := `{"l":` + strings.Repeat("[", n-1) + strings.Repeat("]", n-1) + `}`
		texts := `{"s":"]}[{\"` + strings.Repeat("[", 100) + `","a":[` +
			strings.Repeat(`{"c":`, n-2) + `0` + strings.Repeat("}", n-2) + `]}`
		for _, p := range []string{objects, lists, texts} {
			f.Add(fuzzFree.Tipo, "rh", "", "", "", "", []byte(p), "", "", "", "")
		}
		f.Add(fuzzTipo, "rh", "", "", "", "", []byte(`{"id":"0199bb3e-0000-7000-8000-000000000001","local":{"lat":1,"lng":2},"x":`+objects+`}`), "", "", "", "")
	}
	rnd := rand.New(rand.NewPCG(16, 1))
	for range 20 {
		f.Add(fuzzFree.Tipo, "rh", "", "", "", "", []byte(fuzzNesting(rnd, app.MaxDepth-4+rnd.IntN(8))), "", "", "", "")
	}
	schema := fuzzSchema(f)

	f.Fuzz(func(t *testing.T, tipo, origem, eventID, ts, corr, versao string, payload []byte,
		agregado, autoriaID, autoriaTipo, solicitacao string) {
		req := app.PublishRequest{Tipo: tipo, Origem: origem, EventID: eventID, Timestamp: ts,
			CorrelacaoID: corr, VersaoSchema: versao, Payload: json.RawMessage(payload),
			Agregado: agregado, Solicitacao: solicitacao}
		if autoriaID != "" || autoriaTipo != "" {
			req.Autoria = &app.Autoria{ID: autoriaID, Tipo: autoriaTipo}
		}
		before, err := db.CountEvents(ctx)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		committed = nil
		mu.Unlock()

		ev, created, err := pub.Publish(ctx, req)

		after, cerr := db.CountEvents(ctx)
		if cerr != nil {
			t.Fatal(cerr)
		}
		mu.Lock()
		hooked := committed
		mu.Unlock()
		depth := fuzzDepth(payload)
		if err != nil {
			t.Logf("refused: %v %+v", err, fuzzDetails(err))
			fuzzCheckError(t, err)
			if after != before || len(hooked) != 0 {
				t.Fatalf("a refused publish changed the log: %d -> %d rows, %d emitted", before, after, len(hooked))
			}
			if e := (*app.Error)(nil); errors.As(err, &e) && strings.Contains(e.Message, "aninhado") &&
				json.Valid(payload) && depth <= app.MaxDepth {
				t.Fatalf("refused as nested too deep at %d levels: %+v", depth, e.Details)
			}
			return
		}
		if depth > app.MaxDepth {
			t.Fatalf("a payload nested %d levels deep was accepted", depth)
		}

		t.Logf("published: created=%v sequence=%d payload=%s", created, ev.Sequence, ev.Payload)
		if want := before + map[bool]int64{true: 1, false: 0}[created]; after != want {
			t.Fatalf("created=%v but the log went from %d to %d rows", created, before, after)
		}
		switch {
		case created && (len(hooked) != 1 || hooked[0].Event.Sequence != ev.Sequence):
			t.Fatalf("a new event must be emitted once, got %d emissions", len(hooked))
		case !created && len(hooked) != 0:
			t.Fatalf("a repeat was emitted again")
		case created && !json.Valid(hooked[0].FullPayload):
			t.Fatalf("live consumers got an invalid full payload: %q", hooked[0].FullPayload)
		}
		if created {
			if d := fuzzDepth(hooked[0].FullPayload); d > app.MaxDepth {
				t.Fatalf("live consumers got a payload nested %d levels deep", d)
			}
		}
		if !created && eventID == "" {
			t.Fatalf("created=false without an event_id to repeat")
		}

		stored, err := db.Event(ctx, ev.EventID)
		if err != nil {
			t.Fatalf("read back %s: %v", ev.EventID, err)
		}
		if stored.Sequence != ev.Sequence || stored.Tipo != ev.Tipo || stored.Origem != ev.Origem ||
			stored.CorrelacaoID != ev.CorrelacaoID || !stored.Timestamp.Equal(ev.Timestamp) ||
			!bytes.Equal(stored.Payload, ev.Payload) {
			t.Fatalf("returned record differs from the stored one:\n returned %+v\n stored   %+v", ev, stored)
		}
		if !json.Valid(stored.Payload) {
			t.Fatalf("stored payload is not valid JSON: %q", stored.Payload)
		}
		if d := fuzzDepth(stored.Payload); d > app.MaxDepth {
			t.Fatalf("the log holds a payload nested %d levels deep", d)
		}
		if !created {
			return // the first publish of this id was checked when it was made
		}
		if stored.Tipo != tipo || stored.VersaoSchema != "1.0.0" {
			t.Fatalf("stored %s@%s from a publish of %q@%q", stored.Tipo, stored.VersaoSchema, tipo, versao)
		}
		if tipo == fuzzFree.Tipo {
			if !fuzzSameJSON(t, payload, stored.Payload) {
				t.Fatalf("a type that keeps everything stored %s of %s", stored.Payload, payload)
			}
			return
		}
		fuzzCheckAccepted(t, schema, req, stored)
		fuzzCheckRedacted(t, payload, stored.Payload)
	})
}

// fuzzDepth is how deeply doc nests objects and lists, read token by token
// (apart from the checker under test). It stops counting just past the
// limit, and at the first token that is not JSON.
func fuzzDepth(doc []byte) int {
	dec := json.NewDecoder(bytes.NewReader(doc))
	level, depth := 0, 0
	for depth <= app.MaxDepth {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			level++
			depth = max(depth, level)
		case json.Delim('}'), json.Delim(']'):
			level--
		}
	}
	return depth
}

// fuzzNesting is a random object nesting objects and lists exactly levels
// deep: one spine of containers, each with a few scalar siblings, keys and
// strings holding brackets, quotes and escapes.
func fuzzNesting(rnd *rand.Rand, levels int) string {
	texts := []string{`"a"`, `"[{"`, `"\"}"`, `"x/y~z"`, `"\u007b"`, `""`}
	scalar := func() string { return []string{`1`, `null`, texts[rnd.IntN(len(texts))]}[rnd.IntN(3)] }
	var open, closing []string
	for level := range levels {
		object := level == 0 || rnd.IntN(2) == 0
		siblings := rnd.IntN(3)
		var b strings.Builder
		b.WriteString(map[bool]string{true: "{", false: "["}[object])
		for k := range siblings {
			if object {
				b.WriteString(`"s` + strconv.Itoa(k) + texts[rnd.IntN(len(texts))][1:] + ":")
			}
			b.WriteString(scalar() + ",")
		}
		if object {
			b.WriteString(`"n` + texts[rnd.IntN(len(texts))][1:] + ":")
		}
		open = append(open, b.String())
		closing = append(closing, map[bool]string{true: "}", false: "]"}[object])
	}
	slices.Reverse(closing)
	return strings.Join(open, "") + scalar() + strings.Join(closing, "")
}

func fuzzSameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	return reflect.DeepEqual(fuzzDecode(t, bytes.TrimSpace(a)), fuzzDecode(t, b))
}

// fuzzSchema compiles fuzzType's schema apart from the registry, as the
// oracle of what Publish may accept.
func fuzzSchema(f *testing.F) *jsonschema.Schema {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(fuzzType.Schema))
	if err != nil {
		f.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource("fuzz.json", doc); err != nil {
		f.Fatal(err)
	}
	sch, err := c.Compile("fuzz.json")
	if err != nil {
		f.Fatal(err)
	}
	return sch
}

var fuzzUUID = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// fuzzCheckAccepted fails when Publish accepted what it must refuse: a
// payload outside the schema, or an envelope field out of its format.
func fuzzCheckAccepted(t *testing.T, schema *jsonschema.Schema, req app.PublishRequest, stored app.Event) {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(req.Payload))
	if err != nil {
		t.Fatalf("accepted a payload that is not JSON: %q", req.Payload)
	}
	if err := schema.Validate(doc); err != nil {
		t.Fatalf("accepted a payload the schema refuses: %v", err)
	}
	for name, id := range map[string]string{"event_id": stored.EventID, "correlacao_id": stored.CorrelacaoID} {
		if !fuzzUUID.MatchString(id) {
			t.Fatalf("stored %s %q is not a lower-case UUID", name, id)
		}
	}
	switch {
	case req.EventID != "" && !strings.EqualFold(req.EventID, stored.EventID):
		t.Fatalf("event_id %q stored as %q", req.EventID, stored.EventID)
	case req.CorrelacaoID != "" && !strings.EqualFold(req.CorrelacaoID, stored.CorrelacaoID):
		t.Fatalf("correlacao_id %q stored as %q", req.CorrelacaoID, stored.CorrelacaoID)
	case req.Solicitacao != "" && (!fuzzUUID.MatchString(stored.Solicitacao) || !strings.EqualFold(req.Solicitacao, stored.Solicitacao)):
		t.Fatalf("solicitacao %q stored as %q", req.Solicitacao, stored.Solicitacao)
	case strings.TrimSpace(req.Origem) == "" || len(req.Origem) > 100:
		t.Fatalf("accepted origem %q", req.Origem)
	case req.Agregado != "" && (strings.TrimSpace(req.Agregado) != req.Agregado || len(req.Agregado) > 255 ||
		strings.ContainsFunc(req.Agregado, unicode.IsControl)):
		t.Fatalf("accepted agregado %q", req.Agregado)
	case req.Autoria != nil && (req.Autoria.ID == "" || len(req.Autoria.ID) > 255 ||
		!slices.Contains([]string{"usuario", "integrador", "sistema"}, req.Autoria.Tipo)):
		t.Fatalf("accepted autoria %+v", *req.Autoria)
	case req.Autoria != nil && (stored.Autoria == nil || *stored.Autoria != *req.Autoria):
		t.Fatalf("autoria %+v stored as %+v", *req.Autoria, *stored.Autoria)
	case req.Autoria == nil && (stored.Autoria == nil || stored.Autoria.Tipo != "sistema" ||
		stored.Autoria.ID != strings.TrimSpace(req.Origem)):
		// SPEC 6.3: every envelope names its author; without one, the
		// publishing system.
		t.Fatalf("publish without autoria stored %+v, want sistema %q", stored.Autoria, strings.TrimSpace(req.Origem))
	}
	if req.Timestamp != "" {
		ts, err := time.Parse(time.RFC3339Nano, req.Timestamp)
		if err != nil || !ts.Truncate(time.Millisecond).Equal(stored.Timestamp.Truncate(time.Millisecond)) {
			t.Fatalf("timestamp %q stored as %v (%v)", req.Timestamp, stored.Timestamp, err)
		}
	}
}

// fuzzCheckError checks the one error shape the API promises.
func fuzzCheckError(t *testing.T, err error) {
	t.Helper()
	var e *app.Error
	if !errors.As(err, &e) {
		t.Fatalf("uncoded error %T: %v", err, err)
	}
	if !fuzzCodes[e.Code] || e.Message == "" {
		t.Fatalf("error with unknown code or no message: %+v", e)
	}
	if e.Code == app.EInvalid && len(e.Details) == 0 {
		t.Fatalf("validation error without a finding: %+v", e)
	}
	if len(e.Details) > app.MaxDetalhes {
		t.Fatalf("%d findings, more than the %d an answer holds", len(e.Details), app.MaxDetalhes)
	}
	for _, d := range e.Details {
		if !strings.HasPrefix(d.Caminho, "/") {
			t.Fatalf("finding not located by a JSON pointer: %+v in %+v", d, e)
		}
	}
}

// fuzzCheckRedacted checks the stored payload against fuzzType's rules: only
// named members, the CPF hashed, the location rounded, and the secret marker
// gone unless a kept value carries it.
func fuzzCheckRedacted(t *testing.T, sent []byte, stored json.RawMessage) {
	t.Helper()
	in := fuzzDecode(t, bytes.TrimSpace(sent))
	out := fuzzDecode(t, stored)
	obj, ok := out.(map[string]any)
	if !ok {
		t.Fatalf("stored payload is not an object: %s", stored)
	}
	for k, v := range obj {
		switch k {
		case "id", "nota":
		case "servidor":
			s, _ := v.(map[string]any)
			h, _ := s["cpf"].(string)
			if len(s) != 1 || !strings.HasPrefix(h, "hmac-sha256:") {
				t.Fatalf("servidor must keep only the hashed cpf: %s", stored)
			}
		case "local":
			if l, isObj := v.(map[string]any); isObj {
				for lk := range l {
					if lk != "lat" && lk != "lng" {
						t.Fatalf("local kept %q: %s", lk, stored)
					}
				}
			} else if _, isNum := v.(json.Number); !isNum {
				t.Fatalf("local is neither rounded number nor {lat, lng}: %s", stored)
			}
		case "itens":
			arr, _ := v.([]any)
			if arr == nil {
				t.Fatalf("itens is not an array: %s", stored)
			}
			for _, it := range arr {
				if m, isObj := it.(map[string]any); it != nil && (!isObj || len(m) != 1 || m["codigo"] == nil) {
					t.Fatalf("itens element kept more than codigo: %s", stored)
				}
			}
		default:
			t.Fatalf("stored payload kept %q, which no rule names: %s", k, stored)
		}
	}
	if !fuzzContains(in, fuzzSecret) {
		return
	}
	for _, path := range fuzzKept {
		for _, v := range fuzzAt(in, path) {
			if fuzzContains(v, fuzzSecret) {
				return // a kept value carries the marker: it is the publisher's choice
			}
		}
	}
	if fuzzContains(out, fuzzSecret) {
		t.Fatalf("secret %q from an unkept field reached the log:\n sent   %s\n stored %s", fuzzSecret, sent, stored)
	}
}

func fuzzDecode(t *testing.T, raw []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %q: %v", raw, err)
	}
	return v
}

// fuzzContains reports whether s occurs in any key or scalar of v.
func fuzzContains(v any, s string) bool {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if strings.Contains(k, s) || fuzzContains(e, s) {
				return true
			}
		}
	case []any:
		for _, e := range v {
			if fuzzContains(e, s) {
				return true
			}
		}
	case string:
		return strings.Contains(v, s)
	case json.Number:
		return strings.Contains(v.String(), s)
	}
	return false
}

// fuzzAt returns the values at path in v, "*" standing for every element.
func fuzzAt(v any, path []string) []any {
	if len(path) == 0 {
		return []any{v}
	}
	switch v := v.(type) {
	case map[string]any:
		if e, ok := v[path[0]]; ok {
			return fuzzAt(e, path[1:])
		}
	case []any:
		if path[0] == "*" {
			var out []any
			for _, e := range v {
				out = append(out, fuzzAt(e, path[1:])...)
			}
			return out
		}
	}
	return nil
}

func fuzzDetails(err error) []app.Detail {
	var e *app.Error
	if errors.As(err, &e) {
		return e.Details
	}
	return nil
}
