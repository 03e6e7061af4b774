package web_test

import (
	"net/http"
	"testing"

	"geohub/app"
)

// No API answer may be sniffed into HTML or script by a browser: every one,
// errors, the NDJSON replay and the metrics included, says nosniff.
func TestEveryAPIAnswerSaysNosniff(t *testing.T) {
	t.Parallel()
	env := apiSetup(t)
	env.registerTypes(t)
	for _, sc := range []apiScenario{
		{name: "health", method: http.MethodGet, route: "/healthz", status: http.StatusOK},
		{name: "readiness", method: http.MethodGet, route: "/readyz", status: http.StatusOK},
		{name: "metrics", method: http.MethodGet, route: "/metrics", status: http.StatusOK},
		{name: "a list", method: http.MethodGet, route: "/api/events", role: app.PapelLeitor, status: http.StatusOK},
		{name: "the NDJSON replay", method: http.MethodGet, route: "/api/events/replay?de_sequence=0", role: app.PapelLeitor, status: http.StatusOK},
		{name: "a publish", method: http.MethodPost, route: "/api/events", role: app.PapelProdutor,
			body: apiPublishBody("teste:livre", map[string]any{"n": 1}), status: http.StatusCreated},
		{name: "400", method: http.MethodPost, route: "/api/events", role: app.PapelProdutor, body: "{", status: http.StatusBadRequest},
		{name: "401", method: http.MethodGet, route: "/api/events", status: http.StatusUnauthorized},
		{name: "403", method: http.MethodGet, route: "/api/events", role: app.PapelProdutor, status: http.StatusForbidden},
		{name: "404 of a route", method: http.MethodGet, route: "/api/nao-existe", role: app.PapelLeitor, status: http.StatusNotFound},
		{name: "404 of a record", method: http.MethodGet, route: "/api/events/0199bb3e-0000-7000-8000-000000000001", role: app.PapelLeitor, status: http.StatusNotFound},
		{name: "405", method: http.MethodDelete, route: "/api/events", role: app.PapelAdmin, status: http.StatusMethodNotAllowed},
		{name: "422", method: http.MethodPost, route: "/api/events", role: app.PapelProdutor,
			body: apiPublishBody("teste:livre", "não é objeto"), status: http.StatusUnprocessableEntity},
	} {
		t.Run(sc.name, func(t *testing.T) {
			sc.header = map[string]string{"X-Content-Type-Options": "nosniff"}
			env.run(t, sc)
		})
	}
}
