package app_test

import (
	"net/http"
	"testing"
	"time"
)

// SPEC 9: each integrator's page shows its last success, success rate and
// latency over the last hour, and its backlog.
func TestIntegratorHealth(t *testing.T) {
	t.Parallel()
	k := newOutboxKit(t)
	ok := newReceiver(t, nil)
	failing := newReceiver(t, func(int, *http.Request) int { return http.StatusServiceUnavailable })
	good, bad := k.integrator(t, ok, nil), k.integrator(t, failing, nil)

	fresh, err := k.integrators.Get(t.Context(), good.ID)
	if err != nil {
		t.Fatal(err)
	}
	if h := fresh.Saude; h == nil || h.Tentativas != 0 || h.TaxaSucesso != nil || h.LatenciaP50MS != nil ||
		h.Pendentes != 0 || fresh.UltimoSucesso != nil {
		t.Fatalf("before any delivery: %+v, ultimo_sucesso %v", fresh.Saude, fresh.UltimoSucesso)
	}
	for i := range 3 {
		k.publish(t, "teste:a", "x:"+string(rune('1'+i)), nil)
	}
	k.waitOutcomes(t, 6) // 3 deliveries to each

	g, err := k.integrators.Get(t.Context(), good.ID)
	if err != nil {
		t.Fatal(err)
	}
	h := g.Saude
	if h.Tentativas != 3 || h.Sucessos != 3 || h.TaxaSucesso == nil || *h.TaxaSucesso != 1 ||
		h.LatenciaP50MS == nil || h.LatenciaP95MS == nil || *h.LatenciaP95MS < *h.LatenciaP50MS || h.Pendentes != 0 {
		t.Fatalf("a healthy integrator: %+v", h)
	}
	if g.UltimoSucesso == nil || g.UltimoSucesso.Before(k.clock.Now().Add(-time.Minute)) {
		t.Fatalf("ultimo_sucesso %v", g.UltimoSucesso)
	}
	b, err := k.integrators.Get(t.Context(), bad.ID)
	if err != nil {
		t.Fatal(err)
	}
	if h := b.Saude; h.Tentativas != 3 || h.Sucessos != 0 || h.TaxaSucesso == nil || *h.TaxaSucesso != 0 ||
		h.Pendentes != 3 || b.UltimoSucesso != nil {
		t.Fatalf("a failing integrator: %+v", h)
	}
	// The list agrees, and an hour later the window is empty again.
	k.clock.Add(time.Hour + time.Minute)
	all, err := k.integrators.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range all {
		if in.Saude == nil || in.Saude.Tentativas != 0 {
			t.Fatalf("an hour later %s still counts %+v", in.ID, in.Saude)
		}
		if in.ID == bad.ID && in.Saude.Pendentes != 3 {
			t.Fatalf("the backlog is not a window: %+v", in.Saude)
		}
	}
}
