package app_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"geohub/app"
)

// ambiguousStore is the real store whose commits the dispatcher cannot
// confirm: the first claim and the first finish that lease rows commit,
// and then report an error, as when the link breaks during COMMIT.
type ambiguousStore struct {
	app.OutboxStore
	claimLied, finishLied atomic.Bool
	reconciled            atomic.Int64
}

var errCommitLost = errors.New("commit: connection reset by peer")

func (s *ambiguousStore) ClaimDeliveries(ctx context.Context, worker string, now time.Time, lease time.Duration,
	quotas []app.Quota) ([]app.Delivery, error) {
	got, err := s.OutboxStore.ClaimDeliveries(ctx, worker, now, lease, quotas)
	if err == nil && len(got) > 0 && s.claimLied.CompareAndSwap(false, true) {
		return nil, errCommitLost
	}
	return got, err
}

func (s *ambiguousStore) FinishDeliveries(ctx context.Context, results []app.DeliveryResult, worker string, now time.Time,
	lease time.Duration, quotas []app.Quota) (map[string]time.Time, []app.Delivery, error) {
	failing, got, err := s.OutboxStore.FinishDeliveries(ctx, results, worker, now, lease, quotas)
	if err == nil && len(got) > 0 && s.finishLied.CompareAndSwap(false, true) {
		return nil, nil, errCommitLost
	}
	return failing, got, err
}

func (s *ambiguousStore) ReconcileDeliveries(ctx context.Context, worker string, held []int64) (int, error) {
	n, err := s.OutboxStore.ReconcileDeliveries(ctx, worker, held)
	s.reconciled.Add(int64(n))
	return n, err
}

// A claim, and a finish with its claim, that committed but reported an
// error: the rows they leased are not held by anyone, yet leased to this
// live worker. The dispatcher gives them back itself at its next round,
// so they are delivered at once, not after the lease (an hour here) and
// the reaper, and with no queda counted against them.
func TestRowsOfAnUnconfirmedCommitAreNotStranded(t *testing.T) {
	t.Parallel()
	as := &ambiguousStore{}
	k := newOutboxKitWith(t, func(d *app.Dispatcher) {
		as.OutboxStore = d.Store
		d.Store = as
		d.Lease = time.Hour
	})
	rc := newReceiver(t, nil)
	in := k.integrator(t, rc, nil)
	first := k.publish(t, "teste:a", "x:1", nil)
	second := k.publish(t, "teste:a", "x:1", nil) // claimed by the finish of first
	k.recordedUntil(t, "both deliveries", func() bool { return k.inStatus(t, in.ID, app.EntregaEntregue) == 2 })
	if !as.claimLied.Load() || !as.finishLied.Load() {
		t.Fatalf("the claim and the finish did not both fail (claim %v, finish %v)", as.claimLied.Load(), as.finishLied.Load())
	}
	if n := as.reconciled.Load(); n != 2 {
		t.Fatalf("%d rows given back, want the two the failed rounds leased", n)
	}
	for _, ev := range []app.Event{first, second} {
		if del := k.delivery(t, ev.EventID, in.ID); del.Quedas != 0 || del.Tentativas != 1 {
			t.Fatalf("delivery of %s: %d quedas, %d tentativas; want none and one", ev.EventID, del.Quedas, del.Tentativas)
		}
	}
}
