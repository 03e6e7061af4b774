package app_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"geohub/app"
)

// roundStore is the real store, counting the dispatcher's background rounds
// and failing the first few that record outcomes, as a full disk would.
type roundStore struct {
	app.OutboxStore
	rounds   atomic.Int64
	failures atomic.Int64 // rounds with outcomes still to fail
}

var errDiskFull = errors.New("commit: database or disk is full")

func (s *roundStore) ClaimDeliveries(ctx context.Context, worker string, now time.Time, lease time.Duration,
	quotas []app.Quota) ([]app.Delivery, error) {
	s.rounds.Add(1)
	return s.OutboxStore.ClaimDeliveries(ctx, worker, now, lease, quotas)
}

func (s *roundStore) FinishDeliveries(ctx context.Context, results []app.DeliveryResult, worker string, now time.Time,
	lease time.Duration, quotas []app.Quota) (map[string]time.Time, []app.Delivery, error) {
	s.rounds.Add(1)
	if s.failures.Add(-1) >= 0 {
		return nil, nil, errDiskFull
	}
	return s.OutboxStore.FinishDeliveries(ctx, results, worker, now, lease, quotas)
}

// A request that hangs holds an integrator at its limit; with nothing else
// to claim, the loop must sleep, not run a transaction every few ms.
func TestAHangingRequestDoesNotSpinTheDispatcher(t *testing.T) {
	t.Parallel()
	rs := &roundStore{}
	k := newOutboxKitWith(t, func(d *app.Dispatcher) {
		rs.OutboxStore = d.Store
		d.Store = rs
		d.PerIntegrator = 1
		d.Timeout = 3 * time.Second
	})
	release := make(chan struct{})
	var once sync.Once
	arrived := make(chan struct{}, 1)
	hung := newReceiver(t, func(int, *http.Request) int {
		select {
		case arrived <- struct{}{}:
		default:
		}
		<-release
		return 204
	})
	// Registered after the receiver's, so it runs first: closing a server
	// waits for its handlers.
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	k.integrator(t, hung, func(n *app.NewIntegrator) { n.Eventos = []string{"teste:a"} })
	k.integrator(t, newReceiver(t, nil), func(n *app.NewIntegrator) { n.Eventos = []string{"teste:b"} })
	for i := range 3 {
		k.publish(t, "teste:a", fmt.Sprintf("x:%d", i), nil)
	}
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("no request reached the hanging receiver")
	}
	// Wall time on purpose: a rate over a second of real time, since the
	// loop's timers are real and a spinning loop raises no signal (its
	// claims find nothing).
	before := rs.rounds.Load()
	time.Sleep(time.Second)
	if n := rs.rounds.Load() - before; n > 5 {
		t.Fatalf("%d database rounds in 1 s while the only work waits for a hanging request", n)
	}
	once.Do(func() { close(release) })
}

// A round whose commit fails loses nothing: its outcomes are recorded by a
// later round, each row delivered once, with one attempt and no lease left to
// expire into a "crash".
func TestOutcomesOfAFailedRoundAreRecordedLater(t *testing.T) {
	t.Parallel()
	rs := &roundStore{}
	rs.failures.Store(3)
	k := newOutboxKitWith(t, func(d *app.Dispatcher) {
		rs.OutboxStore = d.Store
		d.Store = rs
	})
	rc := newReceiver(t, nil)
	in := k.integrator(t, rc, nil)
	for i := range 6 {
		k.publish(t, "teste:a", fmt.Sprintf("x:%d", i), nil)
	}
	// A failed round raises nothing; each round that fails waits a second
	// before the next.
	k.waitOutcomes(t, 6)
	if n := k.inStatus(t, in.ID, app.EntregaEntregue); n != 6 {
		t.Fatalf("%d of 6 deliveries recorded as entregue", n)
	}
	if rs.failures.Load() >= 0 {
		t.Fatal("no round failed: the test proved nothing")
	}
	if n := len(rc.requests()); n != 6 {
		t.Fatalf("%d requests for 6 deliveries", n)
	}
	page, _ := k.deliveries.List(context.Background(), app.DeliveryFilter{Integrador: in.ID})
	for _, d := range page.Linhas {
		if d.Tentativas != 1 || d.Quedas != 0 {
			t.Fatalf("delivery %d: %d attempts, %d crashes", d.ID, d.Tentativas, d.Quedas)
		}
	}
}
