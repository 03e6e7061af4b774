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
}
