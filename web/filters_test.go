package web_test

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"geohub/app"
)

// A type filter takes the family patterns the integrator form teaches
// (teste:*), on events and deliveries; deliveries filter by when they were
// enqueued, both ends included.
func TestListsFilterByFamilyAndByTime(t *testing.T) {
	e := apiSetupWithDispatcher(t)
	e.delRegisterTypes(t)
	rc := delNewReceiver(t, http.StatusNoContent)
	in := e.delCreateIntegrator(t, rc, "CAD Filtros")
	e.Clock.Advance(30 * time.Second)
	early := e.delPublish(t, "x:1", 1)
	e.publish(t, map[string]any{"tipo": "teste:livre", "origem": "teste", "payload": map[string]any{"n": 2}})
	e.publish(t, apiPublishBody("jornada:iniciada", apiJornada()))
	e.Clock.Advance(2 * time.Minute)
	late := e.delPublish(t, "x:1", 3)
	e.delWaitStatus(t, late.EventID, in.ID, app.EntregaEntregue)

	var evs app.Page[app.Event]
	e.do(t, http.MethodGet, "/api/events?tipo="+url.QueryEscape("teste:*"), app.PapelLeitor, nil).want(t, http.StatusOK).decode(t, &evs)
	if evs.Total != 3 {
		t.Errorf("teste:* selects %d events, want 3", evs.Total)
	}
	for _, ev := range evs.Linhas {
		if ev.Tipo != "teste:todos" && ev.Tipo != "teste:livre" {
			t.Errorf("teste:* selected %s", ev.Tipo)
		}
	}
	var ds app.Page[app.Delivery]
	e.do(t, http.MethodGet, "/api/entregas?tipo="+url.QueryEscape("teste:*"), app.PapelLeitor, nil).want(t, http.StatusOK).decode(t, &ds)
	if ds.Total != 2 {
		t.Errorf("teste:* selects %d deliveries, want the 2 of teste:todos", ds.Total)
	}
	until := url.QueryEscape(early.Timestamp.Format(time.RFC3339Nano))
	e.do(t, http.MethodGet, "/api/entregas?criado_fim="+until, app.PapelLeitor, nil).want(t, http.StatusOK).decode(t, &ds)
	// The teste:todos and the jornada went at that time; the last did not.
	if ds.Total != 2 || ds.Linhas[0].EventID == late.EventID || ds.Linhas[1].EventID == late.EventID {
		t.Errorf("deliveries enqueued up to the first event's time, included: %+v", ds.Linhas)
	}
	from := url.QueryEscape(late.Timestamp.Format(time.RFC3339Nano))
	e.do(t, http.MethodGet, "/api/entregas?criado_inicio="+from, app.PapelLeitor, nil).want(t, http.StatusOK).decode(t, &ds)
	if ds.Total != 1 || ds.Linhas[0].EventID != late.EventID {
		t.Errorf("deliveries enqueued from the last event's time: %+v", ds.Linhas)
	}
	e.do(t, http.MethodGet, "/api/entregas?criado_fim=ontem", app.PapelLeitor, nil).want(t, http.StatusUnprocessableEntity)
}
