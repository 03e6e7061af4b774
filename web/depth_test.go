package web_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"

	"geohub/app"
)

// depthNest is a value nesting levels objects (each {"a": ...}) around
// leaf, and the JSON Pointer of its innermost object under prefix.
func depthNest(levels int, leaf, prefix string) (doc, innermost string) {
	return strings.Repeat(`{"a":`, levels) + leaf + strings.Repeat("}", levels),
		prefix + strings.Repeat("/a", levels-1)
}

// depthRefusal checks res is the 422 of the nesting limit, located at want.
func depthRefusal(t *testing.T, res apiResponse, want string) {
	t.Helper()
	res.want(t, http.StatusUnprocessableEntity)
	e := apiDecodeError(t, res)
	if e.Codigo != app.EInvalid || len(e.Detalhes) != 1 || e.Detalhes[0].Caminho != want ||
		!strings.Contains(e.Erro, "64 níveis") {
		t.Fatalf("want one finding at %s naming the 64-level limit, got %s", want, apiShort(res.Body))
	}
}

func TestPublishTakesPayloadsNestedUpTo64LevelsAndRefuses65AtTheirPath(t *testing.T) {
	env := apiSetup(t)
	env.registerTypes(t)
	body := func(payload string) string {
		return `{"tipo":"teste:livre","origem":"rh","payload":` + payload + `}`
	}

	t.Run("64 levels of objects are stored whole", func(t *testing.T) {
		payload, _ := depthNest(app.MaxDepth, `1`, "/payload")
		res := env.do(t, http.MethodPost, "/api/events", app.PapelProdutor, body(payload)).want(t, http.StatusCreated)
		var ev app.Event
		res.decode(t, &ev)
		if string(ev.Payload) != payload {
			t.Fatalf("stored payload differs from the one sent:\n sent   %s\n stored %s", payload, ev.Payload)
		}
	})
	t.Run("65 levels of objects are refused at the 65th", func(t *testing.T) {
		before := env.count(t)
		payload, at := depthNest(app.MaxDepth+1, `1`, "/payload")
		depthRefusal(t, env.do(t, http.MethodPost, "/api/events", app.PapelProdutor, body(payload)), at)
		if env.count(t) != before {
			t.Fatal("a refused publish reached the log")
		}
	})
	t.Run("lists count like objects, and the path names the element and escapes the key", func(t *testing.T) {
		inner := strings.Repeat("[", app.MaxDepth-1) + strings.Repeat("]", app.MaxDepth-1)
		payload := `{"x/y~":[1,"[",{"k":` + inner + `}]}` // levels: object, list, object, 62 lists... one too many
		depthRefusal(t, env.do(t, http.MethodPost, "/api/events", app.PapelProdutor, body(payload)),
			"/payload/x~1y~0/2/k"+strings.Repeat("/0", app.MaxDepth-3))
		inner = strings.Repeat("[", app.MaxDepth-3) + strings.Repeat("]", app.MaxDepth-3)
		payload = `{"x/y~":[1,"[",{"k":` + inner + `}]}`
		env.do(t, http.MethodPost, "/api/events", app.PapelProdutor, body(payload)).want(t, http.StatusCreated)
	})
	t.Run("brackets inside strings are text, not levels", func(t *testing.T) {
		payload := `{"s":"` + strings.Repeat("[{", 5000) + `","t":"\"` + strings.Repeat("{", 100) + `\\"}`
		env.do(t, http.MethodPost, "/api/events", app.PapelProdutor, body(payload)).want(t, http.StatusCreated)
	})
	t.Run("the reviewer's 9,000 levels are refused", func(t *testing.T) {
		payload, _ := depthNest(9000, `1`, "/payload")
		_, at := depthNest(app.MaxDepth+1, `1`, "/payload")
		depthRefusal(t, env.do(t, http.MethodPost, "/api/events", app.PapelProdutor, body(payload)), at)
	})
}

func TestRegistrySchemasNestedPast64LevelsAreRefused(t *testing.T) {
	env := apiSetup(t)
	reg := func(schema string) apiResponse {
		return env.do(t, http.MethodPost, "/api/registro", app.PapelAdmin,
			`{"tipo":"teste:fundo","versao":"1.0.0","audiencia":"todos","redacao":{"manter":[""]},"schema":`+schema+`}`)
	}
	// {"not": {"not": ...}} is a valid schema at any depth.
	deep := func(levels int) string {
		return strings.Repeat(`{"not":`, levels-1) + `{}` + strings.Repeat("}", levels-1)
	}
	depthRefusal(t, reg(deep(app.MaxDepth+1)), "/schema"+strings.Repeat("/not", app.MaxDepth))
	reg(deep(app.MaxDepth)).want(t, http.StatusCreated)
}

func TestCommandBodiesNestedPast64LevelsAreRefusedAndRecorded(t *testing.T) {
	e := cmdSetup(t)
	send := func(descricao string) apiResponse {
		return e.cmd(t, e.A.APIKey, uuid.NewString(), "/api/ocorrencias", `{"natureza":"resgate","descricao":`+descricao+`}`)
	}
	// 64 levels pass the limit and meet the field's type.
	deep, _ := depthNest(app.MaxDepth, `1`, "/descricao")
	res := send(deep).want(t, http.StatusUnprocessableEntity)
	if e := apiDecodeError(t, res); len(e.Detalhes) != 1 || e.Detalhes[0].Caminho != "/descricao" || strings.Contains(e.Erro, "níveis") {
		t.Fatalf("a 64-level field must reach the type check, got %s", apiShort(res.Body))
	}
	// 65 levels are refused by the limit, and the refusal is an outcome
	// like any other (recorded as comando-recusado, not a 503 because the
	// echoed body would nest the outcome too deep).
	before := e.count(t)
	deep, at := depthNest(app.MaxDepth+1, `1`, "/descricao")
	depthRefusal(t, send(deep), at)
	if e.count(t) != before+1 {
		t.Fatalf("the refused command left %d new events, want its one outcome", e.count(t)-before)
	}
}
