package web_test

import (
	"net/http"
	"strings"
	"testing"

	"geohub/app"
)

func TestEdgeCases(t *testing.T) {
	env := apiSetup(t)
	env.registerTypes(t)
	for _, sc := range []apiScenario{
		{name: "a misspelt filter is refused, not ignored", method: http.MethodGet, route: "/api/events?limit=5&tipo=x",
			role: app.PapelLeitor, status: 422, codigo: app.EInvalid, caminhos: []string{"/limit"}},
		{name: "an unknown replay parameter is refused", method: http.MethodGet, route: "/api/events/replay?desde=3",
			role: app.PapelLeitor, status: 422, codigo: app.EInvalid, caminhos: []string{"/desde"}},
		{name: "a wrong method is 405 with Allow, in the error shape", method: http.MethodDelete, route: "/api/events",
			role: app.PapelAdmin, status: 405, codigo: app.EMethod},
		{name: "an unknown path is 404 in the error shape", method: http.MethodGet, route: "/api/nada/mais",
			role: app.PapelAdmin, status: 404, codigo: app.ENotFound},
		{name: "the bearer scheme is case-insensitive", method: http.MethodGet, route: "/api/events",
			auth: "bearer " + env.Tokens[app.PapelLeitor], status: 200},
		{name: "over 1 MiB of trailing data is too large, not malformed", method: http.MethodPost, route: "/api/events",
			role: app.PapelProdutor, body: `{"tipo":"teste:livre","origem":"t","payload":{}}` + strings.Repeat(" ", 1<<20),
			status: 413, codigo: app.ETooLarge},
	} {
		t.Run(sc.name, func(t *testing.T) { env.run(t, sc) })
	}

	t.Run("a retry of a published event after its version was deprecated gets the stored record", func(t *testing.T) {
		body := apiPublishBody("teste:livre", map[string]any{"n": 1})
		body["event_id"] = "0199bb3e-0000-7000-8000-0000000000e1"
		env.do(t, http.MethodPost, "/api/events", app.PapelProdutor, body).want(t, http.StatusCreated)
		env.do(t, http.MethodPatch, "/api/registro/teste:livre/1.0.0", app.PapelAdmin, map[string]string{"status": "deprecado"}).
			want(t, http.StatusOK)
		env.do(t, http.MethodPost, "/api/events", app.PapelProdutor, body).want(t, http.StatusOK)
		fresh := apiPublishBody("teste:livre", map[string]any{"n": 2})
		env.run(t, apiScenario{method: http.MethodPost, route: "/api/events", role: app.PapelProdutor, body: fresh,
			status: 422, caminhos: []string{"/versao_schema"}})
	})
}

func TestPublishRefusesImpersonationAndLooseFields(t *testing.T) {
	env := apiSetup(t)
	env.registerTypes(t)
	before := env.count(t)
	for _, sc := range []apiScenario{
		{name: "a producer cannot claim an integrator's authorship", method: http.MethodPost, route: "/api/events",
			role: app.PapelProdutor, body: map[string]any{"tipo": "teste:livre", "origem": "t", "payload": map[string]any{},
				"autoria": map[string]string{"id": "cad-1", "tipo": "integrador"}}, status: 403, caminhos: []string{"/autoria/tipo"}},
		{name: "solicitacao must be a command id", method: http.MethodPost, route: "/api/events", role: app.PapelProdutor,
			body:   map[string]any{"tipo": "teste:livre", "origem": "t", "payload": map[string]any{}, "solicitacao": "abc"},
			status: 422, caminhos: []string{"/solicitacao"}},
		{name: "a blank aggregate is refused", method: http.MethodPost, route: "/api/events", role: app.PapelProdutor,
			body:   map[string]any{"tipo": "teste:livre", "origem": "t", "payload": map[string]any{}, "agregado": "  "},
			status: 422, caminhos: []string{"/agregado"}},
		{name: "a replay of too many types is refused", method: http.MethodGet,
			route: "/api/events/replay?tipos=" + strings.Repeat("a:b,", 51), role: app.PapelLeitor, status: 422,
			caminhos: []string{"/tipos"}},
	} {
		t.Run(sc.name, func(t *testing.T) { env.run(t, sc) })
	}
	if env.count(t) != before {
		t.Fatal("a refused publish reached the log")
	}
}
