// Package docs_test keeps the integrator guide's catalogue of event types
// (docs/integradores.md) generated from the built-in types the server
// registers (app/tipos), so that the guide cannot drift from the schemas.
//
//	go test ./docs           checks the catalogue
//	go test ./docs -update   rewrites it in place
package docs_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"geohub/app"
)

var update = flag.Bool("update", false, "rewrite the generated catalogue in integradores.md")

const (
	guideFile   = "integradores.md"
	beginMarker = "<!-- catálogo: gerado por docs/catalog_test.go; não edite à mão -->"
	endMarker   = "<!-- fim do catálogo -->"
)

func TestCatalogue(t *testing.T) {
	types, err := app.BuiltinTypes()
	if err != nil {
		t.Fatal(err)
	}
	want, err := renderCatalogue(types)
	if err != nil {
		t.Fatal(err)
	}
	guide, err := os.ReadFile(guideFile)
	if err != nil {
		t.Fatal(err)
	}
	start, end, err := section(guide)
	if err != nil {
		t.Fatalf("docs/%s: %v", guideFile, err)
	}
	have := string(guide[start:end])
	if have == want {
		return
	}
	if *update {
		out := slices.Concat(guide[:start], []byte(want), guide[end:])
		if err := os.WriteFile(guideFile, out, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote the catalogue in docs/%s", guideFile)
		return
	}
	line, got, exp := firstDifference(have, want)
	t.Fatalf("docs/%s: the catalogue of event types is out of date with the built-in types (app/tipos).\n"+
		"Regenerate it with:\n\n\tgo test ./docs -update\n\n"+
		"First difference at line %d of the section:\n\thave: %q\n\twant: %q",
		guideFile, line, got, exp)
}

// section locates the generated text: from just after the begin marker's
// line to the start of the end marker's line.
func section(guide []byte) (start, end int, err error) {
	lines := bytes.SplitAfter(guide, []byte("\n"))
	begins, ends := 0, 0
	offset := 0
	start, end = -1, -1
	for _, l := range lines {
		switch strings.TrimRight(string(l), "\r\n") {
		case beginMarker:
			begins++
			start = offset + len(l)
		case endMarker:
			ends++
			end = offset
		}
		offset += len(l)
	}
	if begins != 1 || ends != 1 || start > end {
		return 0, 0, fmt.Errorf("want the line %q once, then the line %q once (found %d and %d); "+
			"put them where the catalogue goes and run: go test ./docs -update", beginMarker, endMarker, begins, ends)
	}
	return start, end, nil
}

func firstDifference(a, b string) (line int, x, y string) {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < max(len(al), len(bl)); i++ {
		var p, q string
		if i < len(al) {
			p = al[i]
		}
		if i < len(bl) {
			q = bl[i]
		}
		if p != q || i >= len(al) || i >= len(bl) {
			return i + 1, p, q
		}
	}
	return 0, "", ""
}

// family is what the registry does not say about a type: who publishes it
// and under which aggregate. A built-in family missing here fails the test,
// so a new family gets its sentence in the guide.
type family struct {
	publisher, aggregate string
}

var families = map[string]family{
	"integracao": {
		publisher: "o Geohub, ao decidir um comando (`origem.plugin` = `integracao`)",
		aggregate: "`solicitacao:<x-solicitacao-id>` (sequência sempre 1)",
	},
	"jornada": {
		publisher: "um sistema produtor (a escala de servidores) por `POST /api/events`; `origem.plugin` é a `origem` que ele informa",
		aggregate: "o que o produtor informar, por convenção `jornada:<jornadaId>`; sem agregado, `evento:<id do envelope>`",
	},
	"ocorrencia": {
		publisher: "o plugin de ocorrências, ao executar um comando (`origem.plugin` = `ocorrencia`)",
		aggregate: "`ocorrencia:<id da ocorrência>`",
	},
}

// byType is what the family's entry does not fit: a type of its own.
var byType = map[string]family{
	app.TestEventType: {
		publisher: "o Geohub, para o integrador que pede um evento de teste (`POST /api/integradores/eu/evento-teste`); " +
			"o testador de receptores usa o mesmo tipo, sem registrar entregas (`origem.plugin` = `geohub`)",
		aggregate: "`teste:<uuid>` (sequência 1)",
	},
}

// familyFor is who publishes tv and under which aggregate.
func familyFor(tipo string) (family, bool) {
	if f, ok := byType[tipo]; ok {
		return f, true
	}
	f, ok := families[familyOf(tipo)]
	return f, ok
}

var audiences = map[string]string{
	app.AudienciaOriginador: "o integrador que originou o agregado (quem registrou a ocorrência), se ativo; " +
		"o integrador que causou o evento também o recebe, e para ele é eco",
	app.AudienciaTodos:       "todo integrador ativo (por callback ou por sessão)",
	app.AudienciaSolicitante: "só o integrador que enviou o comando",
}

// renderCatalogue is the text between the markers, blank line first and last.
func renderCatalogue(types []app.TypeVersion) (string, error) {
	types = slices.Clone(types)
	slices.SortFunc(types, func(a, b app.TypeVersion) int {
		if c := strings.Compare(a.Tipo, b.Tipo); c != 0 {
			return c
		}
		return compareSemver(a.Versao, b.Versao)
	})
	var b strings.Builder
	b.WriteString("\n| tipo | versão | audiência | agregado |\n|---|---|---|---|\n")
	for _, tv := range types {
		fam, ok := familyFor(tv.Tipo)
		if !ok {
			return "", fmt.Errorf("%s: family %q has no entry in families (docs/catalog_test.go): say who publishes it and under which aggregate",
				tv.Tipo, familyOf(tv.Tipo))
		}
		fmt.Fprintf(&b, "| `%s` | %s | `%s` | %s |\n", tv.Tipo, tv.Versao, tv.Audiencia, fam.aggregate)
	}
	for _, tv := range types {
		if err := renderType(&b, tv); err != nil {
			return "", fmt.Errorf("%s@%s: %w", tv.Tipo, tv.Versao, err)
		}
	}
	b.WriteString("\n")
	return b.String(), nil
}

func familyOf(tipo string) string {
	f, _, _ := strings.Cut(tipo, ":")
	return f
}

func renderType(b *strings.Builder, tv app.TypeVersion) error {
	fam, _ := familyFor(tv.Tipo)
	who, ok := audiences[tv.Audiencia]
	if tv.Tipo == app.TestEventType {
		who = "só o integrador que pediu o teste"
	}
	if !ok {
		return fmt.Errorf("audience %q has no sentence in audiences (docs/catalog_test.go)", tv.Audiencia)
	}
	root, err := decodeSchema(tv.Schema)
	if err != nil {
		return err
	}
	rules, err := parseRules(tv)
	if err != nil {
		return err
	}
	var fields []field
	if err := walk(root, nil, nil, true, &fields); err != nil {
		return err
	}

	fmt.Fprintf(b, "\n### `%s` %s\n\n", tv.Tipo, tv.Versao)
	for _, k := range []string{"title", "description"} {
		if s, ok := root[k].(string); ok && s != "" {
			fmt.Fprintf(b, "%s\n\n", oneLine(s))
		}
	}
	situacao := tv.Status
	if situacao == app.StatusDeprecado {
		situacao = "descontinuado (não aceita novas publicações)"
	}
	fmt.Fprintf(b, "- Publicado por: %s.\n", fam.publisher)
	fmt.Fprintf(b, "- Audiência `%s`: %s.\n", tv.Audiencia, who)
	fmt.Fprintf(b, "- Agregado: %s.\n", fam.aggregate)
	fmt.Fprintf(b, "- Situação no registro: %s.\n", situacao)
	if extra, ok := root["additionalProperties"].(bool); ok && !extra {
		b.WriteString("- O payload não tem campos além dos listados.\n")
	}

	if len(fields) == 0 {
		b.WriteString("\nO payload é um objeto sem campos definidos.\n")
		return nil
	}
	described := slices.ContainsFunc(fields, func(f field) bool { return f.description != "" })
	b.WriteString("\n| campo | tipo JSON | obrigatório | restrições | no log |")
	if described {
		b.WriteString(" descrição |")
	}
	b.WriteString("\n|---|---|---|---|---|")
	if described {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	var onlyCAD []string
	var listed [][]string // redacted fields in onlyCAD: what is below them is not listed again
	for _, f := range fields {
		fate := rules.fate(f.path, f.schema)
		req := "não"
		if f.required {
			req = "sim"
		}
		constraints := strings.Join(f.constraints, "; ")
		if constraints == "" {
			constraints = "—"
		}
		fmt.Fprintf(b, "| `%s` | %s | %s | %s | %s |", f.name, f.jsonType, req, cell(constraints), fate.text)
		if described {
			d := f.description
			if d == "" {
				d = "—"
			}
			fmt.Fprintf(b, " %s |", cell(d))
		}
		b.WriteString("\n")
		if fate.redacted && !slices.ContainsFunc(listed, func(p []string) bool { return isPrefix(p, f.path) }) {
			onlyCAD = append(onlyCAD, fmt.Sprintf("`%s` (%s)", f.name, strings.Trim(fate.text, "*")))
			listed = append(listed, f.path)
		}
	}
	if len(onlyCAD) == 0 {
		b.WriteString("\nO log guarda este payload inteiro: nenhum campo é anonimizado.\n")
	} else {
		fmt.Fprintf(b, "\nChegam inteiros ao CAD, mas o log não os guarda como vieram: %s.\n", strings.Join(onlyCAD, ", "))
	}
	return nil
}

// field is one row of a payload table.
type field struct {
	name        string   // payload.comando.corpo is "comando.corpo"; array elements are "[]"
	path        []string // tokens; elemToken for "every element"
	schema      map[string]any
	jsonType    string
	required    bool
	constraints []string
	description string
}

// elemToken stands for an array element in a field path.
const elemToken = "\x00[]"

// known are the JSON Schema keywords the catalogue renders. Any other one
// fails the test rather than vanish from the guide.
var known = map[string]bool{
	"$schema": true, "$comment": true, "type": true, "properties": true, "required": true, "items": true,
	"additionalProperties": true, "format": true, "enum": true, "const": true, "minLength": true,
	"maxLength": true, "minimum": true, "maximum": true, "exclusiveMinimum": true, "exclusiveMaximum": true,
	"pattern": true, "minItems": true, "maxItems": true, "title": true, "description": true,
}

func decodeSchema(raw json.RawMessage) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber() // numbers as written in the schema
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("schema is not an object")
	}
	if t, _ := m["type"].(string); t != "object" {
		return nil, fmt.Errorf(`schema type is %v, want "object" (a payload is an object)`, m["type"])
	}
	return m, nil
}

// walk appends the rows below the object or array schema s at path.
func walk(s map[string]any, path []string, name []string, root bool, out *[]field) error {
	for k := range s {
		if !known[k] {
			return fmt.Errorf("schema at %s uses %q, which docs/catalog_test.go does not render: teach it", pointerOf(path), k)
		}
	}
	if ap, ok := s["additionalProperties"]; ok {
		if _, isBool := ap.(bool); !isBool {
			return fmt.Errorf("schema at %s: additionalProperties with a schema is not rendered: teach docs/catalog_test.go", pointerOf(path))
		}
	}
	if items, ok := s["items"]; ok {
		is, ok := items.(map[string]any)
		if !ok {
			return fmt.Errorf("schema at %s: items must be a schema object", pointerOf(path))
		}
		p := append(slices.Clone(path), elemToken)
		n := slices.Clone(name)
		if len(n) == 0 {
			n = []string{"[]"}
		} else {
			n[len(n)-1] += "[]"
		}
		f, err := newField(is, p, n, true)
		if err != nil {
			return err
		}
		*out = append(*out, f)
		if err := walk(is, p, n, false, out); err != nil {
			return err
		}
	}
	props, _ := s["properties"].(map[string]any)
	var required []string
	if r, ok := s["required"].([]any); ok {
		for _, x := range r {
			if name, ok := x.(string); ok {
				required = append(required, name)
			}
		}
	}
	for _, r := range required {
		if _, ok := props[r]; !ok {
			return fmt.Errorf("schema at %s requires %q but does not describe it", pointerOf(path), r)
		}
	}
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		ps, ok := props[k].(map[string]any)
		if !ok {
			return fmt.Errorf("schema at %s/%s must be a schema object", pointerOf(path), k)
		}
		p := append(slices.Clone(path), k)
		n := append(slices.Clone(name), k)
		f, err := newField(ps, p, n, slices.Contains(required, k))
		if err != nil {
			return err
		}
		*out = append(*out, f)
		if err := walk(ps, p, n, false, out); err != nil {
			return err
		}
	}
	return nil
}

func newField(s map[string]any, path, name []string, required bool) (field, error) {
	f := field{path: path, schema: s, required: required}
	f.name = strings.Join(name, ".")
	f.jsonType = jsonType(s)
	f.description, _ = s["description"].(string)
	if t, _ := s["title"].(string); t != "" {
		f.description = strings.TrimSpace(t + ". " + f.description)
	}
	f.description = oneLine(f.description)
	c := &f.constraints
	if v, ok := s["const"]; ok {
		*c = append(*c, "sempre "+literal(v))
	}
	if v, ok := s["enum"].([]any); ok {
		vals := make([]string, len(v))
		for i, x := range v {
			vals[i] = literal(x)
		}
		*c = append(*c, "um de "+strings.Join(vals, ", "))
	}
	if v, ok := s["format"].(string); ok {
		*c = append(*c, "formato `"+v+"`")
	}
	if r := bounds(s, "minLength", "maxLength", "caractere", "caracteres"); r != "" {
		*c = append(*c, r)
	}
	if r := bounds(s, "minItems", "maxItems", "item", "itens"); r != "" {
		*c = append(*c, r)
	}
	if r := numberBounds(s); r != "" {
		*c = append(*c, r)
	}
	if v, ok := s["pattern"].(string); ok {
		*c = append(*c, "padrão `"+v+"`")
	}
	if v, ok := s["additionalProperties"].(bool); ok && !v {
		*c = append(*c, "sem campos além dos listados")
	}
	return f, nil
}

// jsonType is the type keyword, or what const or enum imply, or "qualquer".
func jsonType(s map[string]any) string {
	switch t := s["type"].(type) {
	case string:
		return t
	case []any:
		var names []string
		for _, x := range t {
			names = append(names, fmt.Sprint(x))
		}
		return strings.Join(names, " ou ")
	}
	var vals []any
	if v, ok := s["const"]; ok {
		vals = append(vals, v)
	}
	if v, ok := s["enum"].([]any); ok {
		vals = append(vals, v...)
	}
	var names []string
	for _, v := range vals {
		n := valueType(v)
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return "qualquer"
	}
	return strings.Join(names, " ou ")
}

func valueType(v any) string {
	switch x := v.(type) {
	case string:
		return "string"
	case bool:
		return "boolean"
	case nil:
		return "null"
	case json.Number:
		if _, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return "integer"
		}
		return "number"
	case []any:
		return "array"
	}
	return "object"
}

func literal(v any) string {
	if s, ok := v.(string); ok {
		return "`" + s + "`"
	}
	raw, _ := json.Marshal(v)
	return "`" + string(raw) + "`"
}

// bounds renders a length or count range with its unit, singular or plural.
func bounds(s map[string]any, lo, hi, one, many string) string {
	a, hasA := s[lo].(json.Number)
	z, hasZ := s[hi].(json.Number)
	unit := func(n json.Number) string {
		if n == "1" {
			return one
		}
		return many
	}
	switch {
	case hasA && hasZ && a == z:
		return fmt.Sprintf("exatamente %s %s", a, unit(a))
	case hasA && hasZ:
		return fmt.Sprintf("de %s a %s %s", a, z, unit(z))
	case hasZ:
		return fmt.Sprintf("até %s %s", z, unit(z))
	case hasA:
		return fmt.Sprintf("ao menos %s %s", a, unit(a))
	}
	return ""
}

func numberBounds(s map[string]any) string {
	lo, hasLo := s["minimum"].(json.Number)
	hi, hasHi := s["maximum"].(json.Number)
	if hasLo && hasHi {
		return fmt.Sprintf("de %s a %s", lo, hi)
	}
	var parts []string
	if hasLo {
		parts = append(parts, "≥ "+string(lo))
	}
	if v, ok := s["exclusiveMinimum"].(json.Number); ok {
		parts = append(parts, "> "+string(v))
	}
	if hasHi {
		parts = append(parts, "≤ "+string(hi))
	}
	if v, ok := s["exclusiveMaximum"].(json.Number); ok {
		parts = append(parts, "< "+string(v))
	}
	return strings.Join(parts, " e ")
}

// rules are a type's redaction rules, as token lists.
type rules struct {
	keep, hash, round [][]string
}

func parseRules(tv app.TypeVersion) (rules, error) {
	var r rules
	for _, l := range []struct {
		dst  *[][]string
		ptrs []string
	}{{&r.keep, tv.Redacao.Manter}, {&r.hash, tv.Redacao.Hash}, {&r.round, tv.Redacao.Arredondar}} {
		for _, p := range l.ptrs {
			toks, err := tokens(p)
			if err != nil {
				return r, err
			}
			*l.dst = append(*l.dst, toks)
		}
	}
	return r, nil
}

func tokens(p string) ([]string, error) {
	if p == "" {
		return []string{}, nil
	}
	if !strings.HasPrefix(p, "/") {
		return nil, fmt.Errorf("redaction rule %q is not a JSON pointer", p)
	}
	var out []string
	for _, t := range strings.Split(p[1:], "/") {
		out = append(out, strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~"))
	}
	return out, nil
}

// match says how a rule covers a field path: not at all, every value of it,
// or only some (a rule on one array index, where the field is every element).
type coverage int

const (
	none coverage = iota
	some
	all
)

// covers is how rule, a prefix of path or equal to it, covers path.
func covers(rule, path []string) coverage {
	if len(rule) > len(path) {
		return none
	}
	c := all
	for i, r := range rule {
		p := path[i]
		switch {
		case p == elemToken && r == "*":
		case p == elemToken && isIndex(r):
			c = some
		case p != elemToken && r == p:
		default:
			return none
		}
	}
	return c
}

// below says whether some rule names something strictly inside path.
func below(rs [][]string, path []string) bool {
	for _, r := range rs {
		if len(r) > len(path) && covers(r[:len(path)], path) != none {
			return true
		}
	}
	return false
}

func isIndex(t string) bool {
	if t == "" || (t[0] == '0' && len(t) > 1) {
		return false
	}
	for i := 0; i < len(t); i++ {
		if t[i] < '0' || t[i] > '9' {
			return false
		}
	}
	return true
}

// fate is what the log keeps of a field; redacted says the log does not
// keep it as the CAD receives it.
type fate struct {
	text     string
	redacted bool
}

// fate follows app/redact: a transform wins over manter and covers what is
// below it; arredondar keeps a number or just lat and lng of an object;
// whatever no rule names is dropped.
func (r rules) fate(path []string, s map[string]any) fate {
	for _, h := range r.hash {
		switch covers(h, path) {
		case all:
			if len(h) == len(path) {
				return fate{"hash HMAC-SHA256", true}
			}
			return fate{"hash HMAC-SHA256 (no campo acima)", true}
		case some:
			return fate{"hash HMAC-SHA256 em parte dos itens", true}
		}
	}
	for _, a := range r.round {
		cov := covers(a, path)
		if cov == none {
			continue
		}
		var f fate
		switch {
		case len(a) == len(path) && jsonType(s) == "object":
			f = fate{"arredondado a 3 casas, só `lat` e `lng`", true}
		case len(a) == len(path):
			f = fate{"arredondado a 3 casas", true}
		case len(path) == len(a)+1 && (path[len(a)] == "lat" || path[len(a)] == "lng"):
			f = fate{"arredondado a 3 casas", true}
		default:
			f = fate{"**descartado**", true}
		}
		if cov == some {
			f.text += " em parte dos itens"
		}
		return f
	}
	kept := none
	for _, k := range r.keep {
		if c := covers(k, path); c > kept {
			kept = c
		}
	}
	switch {
	case kept == all && below(slices.Concat(r.hash, r.round), path):
		return fate{"mantido, exceto o indicado abaixo", false}
	case kept == all:
		return fate{"mantido", false}
	case kept == some:
		return fate{"mantido em parte dos itens", true}
	case below(slices.Concat(r.keep, r.hash, r.round), path):
		return fate{"só o indicado abaixo", false}
	}
	return fate{"**descartado**", true}
}

func isPrefix(p, path []string) bool {
	return len(p) <= len(path) && slices.Equal(p, path[:len(p)])
}

func pointerOf(path []string) string {
	var b strings.Builder
	for _, t := range path {
		if t == elemToken {
			t = "*"
		}
		b.WriteString("/" + strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1"))
	}
	if b.Len() == 0 {
		return "/"
	}
	return b.String()
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// cell escapes a table cell's pipes.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

func compareSemver(a, b string) int {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < min(len(pa), len(pb)); i++ {
		x, _ := strconv.Atoi(pa[i])
		y, _ := strconv.Atoi(pb[i])
		if x != y {
			return x - y
		}
	}
	return len(pa) - len(pb)
}

// TestRenderer covers what the built-in types do not use yet: a
// description, arrays of objects, redaction under an array, and the
// refusals that keep the catalogue from silently omitting a rule.
func TestRenderer(t *testing.T) {
	tv := func(schema string) app.TypeVersion {
		var r app.TypeVersion
		r.Tipo, r.Versao, r.Status, r.Audiencia = "jornada:teste", "1.2.0", app.StatusAtivo, app.AudienciaTodos
		r.Schema = json.RawMessage(schema)
		r.Redacao.Manter = []string{"/paradas/*/id"}
		r.Redacao.Hash = []string{"/paradas/*/cpf"}
		return r
	}
	out, err := renderCatalogue([]app.TypeVersion{tv(`{"type":"object","required":["paradas"],"properties":{
		"paradas":{"type":"array","maxItems":3,"items":{"type":"object","required":["id"],"properties":{
			"id":{"type":"integer","description":"número | da parada"},"cpf":{"type":"string"},"obs":{"type":"string"}}}}}}`)})
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{
		"| campo | tipo JSON | obrigatório | restrições | no log | descrição |",
		"| `paradas` | array | sim | até 3 itens | só o indicado abaixo | — |",
		"| `paradas[]` | object | sim | — | só o indicado abaixo | — |",
		"| `paradas[].cpf` | string | não | — | hash HMAC-SHA256 | — |",
		"| `paradas[].id` | integer | sim | — | mantido | número \\| da parada |",
		"| `paradas[].obs` | string | não | — | **descartado** | — |",
	} {
		if !strings.Contains(out, row+"\n") {
			t.Errorf("missing row %q in:\n%s", row, out)
		}
	}
	if _, err := renderCatalogue([]app.TypeVersion{tv(`{"type":"object","properties":{"a":{"oneOf":[{"type":"string"}]}}}`)}); err == nil ||
		!strings.Contains(err.Error(), `"oneOf"`) {
		t.Errorf("an unrenderable keyword must fail, got %v", err)
	}
	other := tv(`{"type":"object"}`)
	other.Tipo = "guarnicao:formada"
	if _, err := renderCatalogue([]app.TypeVersion{other}); err == nil || !strings.Contains(err.Error(), `"guarnicao"`) {
		t.Errorf("an unknown family must fail, got %v", err)
	}
}
