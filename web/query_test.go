package web_test

import (
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
			if e := apiDecodeError(t, res); e.Codigo != app.EMalformed || !strings.Contains(e.Erro, "consulta") {
				t.Fatalf("%+v", e)
			}
		})
	}
	env.do(t, http.MethodGet, "/api/events?tipo=a:b&limite=1", app.PapelLeitor, nil).want(t, http.StatusOK)
}
