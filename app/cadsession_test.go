package app_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"geohub/app"
	"geohub/store/storetest"
)

// SPEC 8d: a session integrator without a session makes no attempt, so
// its 120 h of failures never start; what disables it is 120 h with
// deliveries waiting and no session. One with nothing waiting stays.
func TestASessionIntegratorWithoutASessionFor120HoursIsDisabled(t *testing.T) {
	t.Parallel()
	k := newOutboxKit(t)
	ctx := context.Background()
	create := func(nome string, eventos ...string) app.CreatedIntegrator {
		c, err := k.integrators.Create(ctx, app.NewIntegrator{Nome: nome, Entrega: app.EntregaSessao, Eventos: eventos})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	waiting, idle := create("CAD sumido", "teste:a"), create("CAD sem eventos", "teste:b")
	ev := k.publish(t, "teste:a", "x:1", nil)
	if d := k.delivery(t, ev.EventID, waiting.ID); d.Status != app.EntregaPendente || d.Tentativas != 0 {
		t.Fatalf("without a session: %+v", d)
	}

	k.clock.Add(119 * time.Hour)
	k.dispatcher.Wake()
	k.clock.Add(2 * time.Hour)
	k.dispatcher.Wake()
	var got app.Integrator
	if !storetest.Poll(10*time.Second, func() bool {
		got, _ = k.integrators.Get(ctx, waiting.ID)
		return !got.Ativo
	}) {
		t.Fatalf("121 h without a session, with a delivery waiting: %+v", got)
	}
	if !strings.Contains(got.MotivoInativo, "automaticamente") || !strings.Contains(got.MotivoInativo, "sem sessão") {
		t.Errorf("the reason: %q", got.MotivoInativo)
	}
	if d := k.delivery(t, ev.EventID, waiting.ID); d.Tentativas != 0 {
		t.Errorf("the waiting delivery was attempted: %+v", d)
	}
	if in, _ := k.integrators.Get(ctx, idle.ID); !in.Ativo {
		t.Errorf("a session integrator with nothing waiting was disabled: %q", in.MotivoInativo)
	}

	// An admin reactivates it: the 120 h count from then on, not from its
	// last session, or the next sweep would disable it again at once.
	k.clock.Add(time.Hour) // the reactivation's minute differs from the last count's
	yes := true
	if _, err := k.integrators.Update(ctx, waiting.ID, app.IntegratorPatch{Ativo: &yes}); err != nil {
		t.Fatal(err)
	}
	reactivated := k.clock.Now()
	k.clock.Add(121 * time.Hour)
	k.dispatcher.Wake()
	if !storetest.Poll(10*time.Second, func() bool {
		got, _ = k.integrators.Get(ctx, waiting.ID)
		return !got.Ativo
	}) {
		t.Fatalf("121 h after its reactivation, still without a session: %+v", got)
	}
	brasilia, _ := time.LoadLocation("America/Sao_Paulo")
	if since := reactivated.In(brasilia).Format("02/01/2006 15:04"); !strings.Contains(got.MotivoInativo, since) {
		t.Errorf("disabled again counting from %q, want from the reactivation, %s", got.MotivoInativo, since)
	}
}
