package web_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"geohub/app"
)

// boundsChain is the reviewer's 1.2 KB schema: $defs d_0 … d_n, each an
// anyOf of two $refs to the next, the last a string: 2^(n+2)-3 subschemas
// from d_0, and a wrong value meets them all.
func boundsChain(n int) string {
	var defs []string
	for i := range n {
		next := fmt.Sprintf(`{"$ref":"#/$defs/d_%d"}`, i+1)
		defs = append(defs, fmt.Sprintf(`"d_%d":{"anyOf":[%s,%s]}`, i, next, next))
	}
	defs = append(defs, fmt.Sprintf(`"d_%d":{"type":"string"}`, n))
	return `{"$defs":{` + strings.Join(defs, ",") + `}}`
}

// boundsRegister registers tipo@1.0.0 with schema, keeping its payloads whole.
func boundsRegister(t *testing.T, env *apiEnv, tipo, schema string) apiResponse {
	t.Helper()
	return env.do(t, http.MethodPost, "/api/registro", app.PapelAdmin,
		`{"tipo":"`+tipo+`","versao":"1.0.0","audiencia":"todos","redacao":{"manter":[""]},"schema":`+schema+`}`)
}

// boundsPublish publishes payload as a producer.
func boundsPublish(t *testing.T, env *apiEnv, tipo, payload string) apiResponse {
	t.Helper()
	return env.do(t, http.MethodPost, "/api/events", app.PapelProdutor, `{"tipo":"`+tipo+`","origem":"rh","payload":`+payload+`}`)
}

// boundsNumbers is {"l":[1,1,…]} with n numbers.
func boundsNumbers(n int) string {
	return `{"l":[` + strings.TrimSuffix(strings.Repeat("1,", n), ",") + `]}`
}

// boundsFindings checks a 422 of findings: the first listed at
// prefix0 … prefix(listed-1), in that order, then one counting more.
func boundsFindings(t *testing.T, res apiResponse, prefix string, listed, more int) {
	t.Helper()
	res.want(t, http.StatusUnprocessableEntity)
	e := apiDecodeError(t, res)
	if len(e.Detalhes) != listed+1 {
		t.Fatalf("%d detalhes, want %d and one counting the rest", len(e.Detalhes), listed+1)
	}
	for i, d := range e.Detalhes[:listed] {
		if d.Caminho != prefix+strconv.Itoa(i) {
			t.Fatalf("detalhe %d at %s, want %s%d (in path order)", i, d.Caminho, prefix, i)
		}
	}
	if last := e.Detalhes[listed]; last != (app.Detail{Caminho: "/payload", Mensagem: fmt.Sprintf("e mais %d erros não listados", more)}) {
		t.Fatalf("last detalhe %+v, want the count of %d more", last, more)
	}
}

// The reviewer's payload: 1 MiB of numbers where strings belong. The 422
// names the first 99 and counts the rest, in a few kilobytes (it was 36 MB).
func TestARefusedPublishNamesAHundredFindingsAndCountsTheRest(t *testing.T) {
	env := apiSetup(t)
	boundsRegister(t, env, "teste:lista", `{"type":"object","properties":{"l":{"type":"array","items":{"type":"string"}}}}`).
		want(t, http.StatusCreated)
	envelope := len(`{"tipo":"teste:lista","origem":"rh","payload":}`)
	n := (app.MaxPayloadBytes - envelope - len(`{"l":[]}`) + 1) / 2 // the body limit is 1 MiB too
	before := env.count(t)
	res := boundsPublish(t, env, "teste:lista", boundsNumbers(n))
	boundsFindings(t, res, "/payload/l/", app.MaxDetalhes-1, n-(app.MaxDetalhes-1))
	// 100 findings of a path and a sentence each.
	if len(res.Body) > 16<<10 {
		t.Fatalf("a 422 of %d bytes, want at most 16 KiB", len(res.Body))
	}
	if env.count(t) != before {
		t.Fatal("a refused publish reached the log")
	}
}

func TestRegistryRefusesASchemaThatExpandsPastTheBound(t *testing.T) {
	env := apiSetup(t)
	// 16 links: 262,143 subschemas in 1.2 KB. The innermost past 10,000 is
	// d_4, whose 12 links below expand to 16,381.
	schema := `{"type":"object","properties":{"x":{"$ref":"#/$defs/d_0"}},` + strings.TrimPrefix(boundsChain(16), "{")
	res := boundsRegister(t, env, "teste:largo", schema).want(t, http.StatusUnprocessableEntity)
	e := apiDecodeError(t, res)
	if e.Codigo != app.EInvalid || len(e.Detalhes) != 1 || e.Detalhes[0].Caminho != "/schema/$defs/d_4" ||
		!strings.Contains(e.Detalhes[0].Mensagem, "mais de 10000 subschemas") {
		t.Fatalf("want one finding at /schema/$defs/d_4 naming the bound, got %s", apiShort(res.Body))
	}
	env.do(t, http.MethodGet, "/api/registro/teste:largo", app.PapelAdmin, nil).want(t, http.StatusNotFound)

	// 11 links expand to 8,191: registered, and a wrong value's 2,048
	// findings (one per path to the string) are cut like any.
	schema = `{"type":"object","properties":{"x":{"$ref":"#/$defs/d_0"}},` + strings.TrimPrefix(boundsChain(11), "{")
	boundsRegister(t, env, "teste:estreito", schema).want(t, http.StatusCreated)
	res = boundsPublish(t, env, "teste:estreito", `{"x":1}`).want(t, http.StatusUnprocessableEntity)
	if e := apiDecodeError(t, res); len(e.Detalhes) != app.MaxDetalhes ||
		e.Detalhes[app.MaxDetalhes-1].Mensagem != fmt.Sprintf("e mais %d erros não listados", 1<<11-(app.MaxDetalhes-1)) {
		t.Fatalf("want %d findings, the last counting the rest, got %s", app.MaxDetalhes, apiShort(res.Body))
	}
	boundsPublish(t, env, "teste:estreito", `{"x":"a"}`).want(t, http.StatusCreated)
}

// A schema within the bound that applies thousands of subschemas to each
// value of a long list is refused on that list before the validator runs,
// naming where the count passed the limit; on a shorter list it validates.
func TestPublishRefusesAPayloadThatWouldCostMoreThanTheStepBudget(t *testing.T) {
	env := apiSetup(t)
	// 9 links under items: 2,045 subschemas for each wrong item.
	schema := `{"type":"object","properties":{"l":{"type":"array","items":{"$ref":"#/$defs/d_0"}}},` + strings.TrimPrefix(boundsChain(9), "{")
	boundsRegister(t, env, "teste:itens", schema).want(t, http.StatusCreated)

	res := boundsPublish(t, env, "teste:itens", boundsNumbers(1000)).want(t, http.StatusUnprocessableEntity)
	e := apiDecodeError(t, res)
	if len(e.Detalhes) != 1 || !strings.HasPrefix(e.Detalhes[0].Caminho, "/payload/l/5") ||
		!strings.Contains(e.Detalhes[0].Mensagem, strconv.Itoa(app.MaxValidationSteps)) {
		t.Fatalf("want one finding in /payload/l/5xx naming %d steps, got %s", app.MaxValidationSteps, apiShort(res.Body))
	}
	// 100 items: 204,602 steps, validated: 512 findings each (one per
	// path to the string), the first item's named.
	res = boundsPublish(t, env, "teste:itens", boundsNumbers(100)).want(t, http.StatusUnprocessableEntity)
	e = apiDecodeError(t, res)
	if len(e.Detalhes) != app.MaxDetalhes || e.Detalhes[0].Caminho != "/payload/l/0" ||
		e.Detalhes[app.MaxDetalhes-2].Caminho != "/payload/l/0" ||
		e.Detalhes[app.MaxDetalhes-1].Mensagem != fmt.Sprintf("e mais %d erros não listados", 100*512-(app.MaxDetalhes-1)) {
		t.Fatalf("want %d findings at /payload/l/0, the last counting the rest, got %s", app.MaxDetalhes, apiShort(res.Body))
	}
}

// Ordinary schemas, with anyOf, oneOf, $defs and if/then, register and
// validate as before, their findings in path order.
func TestOrdinarySchemasWithAnyOfAndOneOfRegisterAndValidate(t *testing.T) {
	env := apiSetup(t)
	schema := `{
	  "type": "object",
	  "required": ["id", "local"],
	  "$defs": {
	    "ponto": {"type": "object", "required": ["lat", "lng"],
	      "properties": {"lat": {"type": "number", "minimum": -90, "maximum": 90}, "lng": {"type": "number", "minimum": -180, "maximum": 180}}},
	    "telefone": {"anyOf": [{"type": "string", "pattern": "^[0-9]{10,11}$"}, {"type": "null"}]}
	  },
	  "properties": {
	    "id": {"type": "string", "format": "uuid"},
	    "local": {"oneOf": [{"$ref": "#/$defs/ponto"}, {"type": "object", "required": ["endereco"], "properties": {"endereco": {"type": "string", "maxLength": 500}}}]},
	    "contatos": {"type": "array", "maxItems": 20, "items": {"type": "object", "properties": {"nome": {"type": "string"}, "telefone": {"$ref": "#/$defs/telefone"}}}},
	    "prioridade": {"enum": ["baixa", "media", "alta"]},
	    "viatura": {"type": "object", "if": {"required": ["tipo"], "properties": {"tipo": {"const": "resgate"}}}, "then": {"required": ["equipe"]}}
	  }
	}`
	boundsRegister(t, env, "teste:ocorrencia", schema).want(t, http.StatusCreated)
	ok := `{"id":"0199bb3e-0000-7000-8000-000000000001","local":{"lat":-23.55,"lng":-46.63},` +
		`"contatos":[{"nome":"Ana","telefone":"11999990000"},{"nome":"Rui","telefone":null}],"prioridade":"alta",` +
		`"viatura":{"tipo":"resgate","equipe":4}}`
	boundsPublish(t, env, "teste:ocorrencia", ok).want(t, http.StatusCreated)

	bad := `{"id":"x","local":{"lat":91,"lng":0},"contatos":[{"telefone":"12"}],"viatura":{"tipo":"resgate"}}`
	res := boundsPublish(t, env, "teste:ocorrencia", bad).want(t, http.StatusUnprocessableEntity)
	var got []string
	for _, d := range apiDecodeError(t, res).Detalhes {
		got = append(got, d.Caminho)
	}
	// The failing branches of anyOf and oneOf, each where it failed.
	want := []string{"/payload/contatos/0/telefone", "/payload/contatos/0/telefone", "/payload/id",
		"/payload/local", "/payload/local/lat", "/payload/viatura"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("caminhos %q, want %q", got, want)
	}
}
