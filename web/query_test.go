package web_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"geohub/app"
)

// A query that does not parse is refused, where it used to be read as the
// parts that did (or as none past 10,000 parameters): a filtered request
// answered 200 with its filters silently ignored (issue 26, I1).
func TestMalformedQueriesAreRefused(t *testing.T) {
	t.Parallel()
	env := apiSetup(t)
	many := "?tipo=nada:aqui" + strings.Repeat("&x=1", 10_001)
	for name, route := range map[string]string{
		"more than 10,000 parameters": "/api/events" + many,
		"a bad escape":                "/api/events?tipo=%zz",
		"a semicolon":                 "/api/events?tipo=a:b;limite=1",
		"the console too":             "/eventos?tipo=%zz",
	} {
		t.Run(name, func(t *testing.T) {
			res := env.do(t, http.MethodGet, route, app.PapelLeitor, nil).want(t, http.StatusBadRequest)
			e := apiDecodeError(t, res)
			if e.Codigo != app.EMalformed || !strings.Contains(e.Erro, "consulta") {
				t.Fatalf("%+v", e)
			}
			if many := strings.HasPrefix(name, "more than"); many != strings.Contains(e.Erro, "parâmetros demais") {
				t.Fatalf("the reason does not fit the query: %s", e.Erro)
			}
		})
	}
	env.do(t, http.MethodGet, "/api/events?tipo=a:b&limite=1", app.PapelLeitor, nil).want(t, http.StatusOK)
}

// The answer to unknown query parameters is bounded whatever the query
// (issue 26, L7): it named each one with the list of accepted names, 21
// times the request, and stalled readers of it held hundreds of MB.
func TestUnknownParametersAnswerIsBounded(t *testing.T) {
	t.Parallel()
	env := apiSetup(t)
	var q strings.Builder
	q.WriteString("?tipo=a:b")
	for i := range 5000 {
		fmt.Fprintf(&q, "&%s%d=1", strings.Repeat("p", 100), i)
	}
	res := env.do(t, http.MethodGet, "/api/events"+q.String(), app.PapelLeitor, nil).want(t, http.StatusUnprocessableEntity)
	if len(res.Body) > 4096 {
		t.Fatalf("a 422 of %d bytes for a query of %d", len(res.Body), q.Len())
	}
	e := apiDecodeError(t, res)
	if len(e.Detalhes) != 11 || !strings.Contains(e.Detalhes[10].Mensagem, "e mais 4990") || !strings.Contains(e.Erro, "limite") {
		t.Fatalf("%d findings: %+v", len(e.Detalhes), e)
	}
}
