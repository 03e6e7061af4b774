package app_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"geohub/app"
)

// SPEC 9: after a CAD comes back, "Tentar agora" closes its circuit and
// sends its queue now, in order, instead of at the backoff slots it earned
// while down (the clock here never moves, so nothing else would send them).
func TestRetryNowClosesTheCircuitAndSendsTheQueue(t *testing.T) {
	t.Parallel()
	k := newOutboxKit(t)
	var healthy atomic.Bool
	rc := newReceiver(t, func(int, *http.Request) int {
		if healthy.Load() {
			return 204
		}
		return 503
	})
	in := k.integrator(t, rc, nil)
	for i := range 8 {
		k.publish(t, "teste:a", fmt.Sprintf("x:%d", i), nil)
	}
	k.waitCircuit(t, in.ID, true)
	k.recordedUntil(t, "nothing of the integrator on the wire", func() bool {
		return k.inStatus(t, in.ID, app.EntregaProcessando) == 0
	})

	// One pending delivery: due now, but the open circuit still holds it.
	page, err := k.deliveries.List(context.Background(), app.DeliveryFilter{Integrador: in.ID, Status: app.EntregaPendente})
	if err != nil || len(page.Linhas) == 0 {
		t.Fatalf("pending deliveries: %+v %v", page, err)
	}
	one := page.Linhas[0]
	if _, err := k.deliveries.RetryDeliveryNow(context.Background(), one.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := k.deliveries.RetryDeliveryNow(context.Background(), 1<<40); app.ErrorCode(err) != app.ENotFound {
		t.Fatalf("an unknown delivery: %v", err)
	}
	before := len(rc.requests())

	healthy.Store(true)
	res, err := k.deliveries.RetryNow(context.Background(), k.integrators, in.ID)
	if err != nil {
		t.Fatal(err)
	}
	if res.Circuito.Estado != app.CircuitoFechado || res.Antecipadas == 0 {
		t.Fatalf("Tentar agora: %+v", res)
	}
	k.waitCircuit(t, in.ID, false)
	k.recordedUntil(t, "the whole queue delivered", func() bool {
		return k.inStatus(t, in.ID, app.EntregaEntregue) == 8
	})
	if n := len(rc.requests()) - before; n > 8 {
		t.Fatalf("%d requests after Tentar agora for 8 deliveries", n)
	}
	// A delivered row is not pending any more.
	if _, err := k.deliveries.RetryDeliveryNow(context.Background(), one.ID); app.ErrorCode(err) != app.EConflict {
		t.Fatalf("Tentar agora on a delivered row: %v", err)
	}
	// An inactive integrator is refused: reactivating is another decision.
	off := false
	if _, err := k.integrators.Update(context.Background(), in.ID, app.IntegratorPatch{Ativo: &off}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.deliveries.RetryNow(context.Background(), k.integrators, in.ID); app.ErrorCode(err) != app.EConflict {
		t.Fatalf("Tentar agora on an inactive integrator: %v", err)
	}
}

// "Tentar agora" runs once per integrator per RetryNowInterval: 40 calls in
// a row made 474 requests to a failing CAD in 10 s (issue 26, L6). The
// others get 429 with the wait, and another integrator is not held back.
func TestRetryNowIsOncePerIntervalPerIntegrator(t *testing.T) {
	t.Parallel()
	k := newOutboxKit(t)
	rc := newReceiver(t, func(int, *http.Request) int { return 503 })
	a, b := k.integrator(t, rc, nil), k.integrator(t, rc, nil)
	if _, err := k.deliveries.RetryNow(t.Context(), k.integrators, a.ID); err != nil {
		t.Fatal(err)
	}
	for range 40 {
		_, err := k.deliveries.RetryNow(t.Context(), k.integrators, a.ID)
		var e *app.Error
		if !errors.As(err, &e) || e.Code != app.ERateLimited || e.RetryAfter <= 0 || e.RetryAfter > app.RetryNowInterval {
			t.Fatalf("a second Tentar agora within the interval: %v", err)
		}
	}
	if _, err := k.deliveries.RetryNow(t.Context(), k.integrators, b.ID); err != nil {
		t.Fatalf("another integrator's: %v", err)
	}
}

// An attempt that outlived its lease by the dispatcher's own clock (the
// process was paused: SIGSTOP, a VM pause) records no failure: the 204 the
// receiver gave in 20 ms read 40 s later was "não respondeu a tempo", and the
// row went out again after its successors (issue 27, B4). It goes back to
// pendente uncounted, and the next attempt is the one recorded.
func TestAnAttemptPastItsLeaseRecordsNoFailure(t *testing.T) {
	t.Parallel()
	k := newOutboxKit(t)
	rc := newReceiver(t, func(n int, _ *http.Request) int {
		if n == 1 {
			k.clock.Add(2 * app.DefaultLease) // paused mid-attempt
			return http.StatusServiceUnavailable
		}
		return http.StatusNoContent
	})
	in := k.integrator(t, rc, nil)
	k.publish(t, "teste:a", "x:1", nil)
	k.recordedUntil(t, "the row delivered", func() bool { return k.inStatus(t, in.ID, app.EntregaEntregue) == 1 })
	page, err := k.deliveries.List(t.Context(), app.DeliveryFilter{Integrador: in.ID})
	if err != nil || len(page.Linhas) != 1 {
		t.Fatalf("%+v %v", page, err)
	}
	d, err := k.deliveries.Get(t.Context(), page.Linhas[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Tentativas) != 1 || d.Tentativas[0].StatusCode != http.StatusNoContent {
		t.Fatalf("attempts recorded: %+v; want only the one that delivered", d.Tentativas)
	}
	if len(rc.requests()) != 2 {
		t.Fatalf("%d requests, want the paused one and the next", len(rc.requests()))
	}
}
