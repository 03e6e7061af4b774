package web_test

import (
	"net/http"
	"strconv"
	"testing"

	"geohub/app"
)

// The routes of "Tentar agora" (SPEC 9): operators act, readers do not, and
// what cannot be tried now says why.
func TestRetryNowRoutes(t *testing.T) {
	t.Parallel()
	env := apiSetupWithDispatcher(t)
	env.delRegisterTypes(t)
	rc := delNewReceiver(t, http.StatusServiceUnavailable)
	a := env.delCreateIntegrator(t, rc, "CAD Polícia")
	ev := env.delPublish(t, "lote:1", 1)
	env.waitRecorded(t, "a failed attempt", func() bool { return len(rc.delRequests()) == 1 })
	del := env.delOne(t, ev.EventID, a.ID)
	one := "/api/entregas/" + strconv.FormatInt(del.ID, 10) + "/tentar-agora"
	all := "/api/integradores/" + a.ID + "/tentar-agora"
	for _, sc := range []apiScenario{
		{name: "leitor cannot try an integrator now", route: all, role: app.PapelLeitor, status: 403, codigo: app.EForbidden},
		{name: "leitor cannot try a delivery now", route: one, role: app.PapelLeitor, status: 403, codigo: app.EForbidden},
		{name: "an unknown integrator", route: "/api/integradores/nenhum/tentar-agora", status: 404, codigo: app.ENotFound},
		{name: "an unknown delivery", route: "/api/entregas/999999/tentar-agora", status: 404, codigo: app.ENotFound},
		{name: "a malformed delivery id", route: "/api/entregas/x/tentar-agora", status: 404, codigo: app.ENotFound},
	} {
		sc.method = http.MethodPost
		if sc.role == "" {
			sc.role = app.PapelOperador
		}
		t.Run(sc.name, func(t *testing.T) { env.run(t, sc) })
	}

	rc.delSet(http.StatusNoContent, "")
	// The answer is the row as read right after it was made due: pendente,
	// or already claimed, even delivered, by the dispatcher that change woke.
	env.run(t, apiScenario{method: http.MethodPost, route: one, role: app.PapelOperador, status: 200,
		contains: []string{`"id":"` + strconv.FormatInt(del.ID, 10) + `"`}})
	env.waitRecorded(t, "the delivery tried now", func() bool {
		return env.delOne(t, ev.EventID, a.ID).Status == app.EntregaEntregue
	})
	env.run(t, apiScenario{method: http.MethodPost, route: one, role: app.PapelOperador, status: 409, codigo: app.EConflict})
	env.run(t, apiScenario{method: http.MethodPost, route: all, role: app.PapelAdmin, status: 200,
		contains: []string{`"antecipadas":0`, `"estado":"fechado"`}})
}
