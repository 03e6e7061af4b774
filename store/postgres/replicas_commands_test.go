package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"geohub/app"
	"geohub/store/postgres"
	"geohub/store/storetest"
)

// Two replicas append the same decided batch (a command's outcome and
// the domain events of its run): the second stores nothing and gets the
// first's outcome back.
func TestADecidedBatchIsStoredOnce(t *testing.T) {
	t.Parallel()
	url := freshDatabase(t)
	a, b := openWith(t, url, postgres.Options{}), openWith(t, url, postgres.Options{})
	outcome := storetest.NewEvent("integracao:comando-concluido")
	run := func(db *postgres.DB, n string) []app.Stored {
		t.Helper()
		domain := storetest.NewEvent("teste:b")
		domain.Payload = json.RawMessage(`{"run":` + n + `}`)
		o := outcome
		o.Payload = json.RawMessage(`{"run":` + n + `}`)
		stored, err := db.Append(t.Context(), []app.Pending{{Event: domain}, {Event: o, Decides: true}})
		if err != nil {
			t.Fatal(err)
		}
		return stored
	}
	first := run(a, "1")
	if !first[0].Created || !first[1].Created {
		t.Fatalf("the first run: %+v", first)
	}
	second := run(b, "2")
	if second[0].Created || second[0].Event.EventID != "" || second[1].Created ||
		string(second[1].Event.Payload) != `{"run":1}` || second[1].Event.Sequence != first[1].Event.Sequence {
		t.Fatalf("the second run: %+v, want nothing stored and the first outcome", second)
	}
	if n, _ := a.CountEvents(t.Context()); n != 2 {
		t.Fatalf("%d events stored, want the first run's 2", n)
	}
}

// A batch that keeps failing on a lock is retried; an operation whose
// caller went away meanwhile is answered at once, not after every retry.
func TestACallerThatLeftIsNotKeptForTheRetries(t *testing.T) {
	t.Parallel()
	url := freshDatabase(t)
	db := openWith(t, url, postgres.Options{LockTimeout: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(t.Context())
	retries := 0
	postgres.OnRetry(db, func(int, error) {
		retries++
		cancel()
	})
	holdLogHead(t, url)
	_, err := db.Append(ctx, []app.Pending{{Event: storetest.NewEvent("a:b")}})
	if !errors.Is(err, context.Canceled) || retries != 1 {
		t.Fatalf("append cancelled at the first retry: %v after %d retries; want it answered then", err, retries)
	}
}

// Rows made claimable without a publish (leases handed back at shutdown
// or reaped, rows left due behind a finished one) wake the other
// replicas' dispatchers: they may be the ones with room for them, and
// would otherwise wait for their sweep.
func TestFreedDeliveriesWakeTheOtherReplicas(t *testing.T) {
	t.Parallel()
	url := freshDatabase(t)
	a, b := open(t, url), open(t, url)
	ctx := t.Context()
	if err := a.InsertIntegrator(ctx, storetest.NewIntegrator("int-1", time.Now()), []byte("s"), "h1", nil); err != nil {
		t.Fatal(err)
	}
	storetest.Enqueue(t, a, "a:b", "x:1", "int-1")
	storetest.Enqueue(t, a, "a:b", "x:1", "int-1")
	wakes := make(chan app.Wakeup, 64)
	b.OnRemote(func(w app.Wakeup) { wakes <- w })
	next := func(what string) {
		t.Helper()
		for {
			select {
			case w := <-wakes:
				if w.Deliveries && !w.Resync {
					return
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("%s woke no other dispatcher", what)
			}
		}
	}
	for w := range wakes {
		if w.Resync {
			break // listening: later commits are notified
		}
	}
	quota := []app.Quota{{Integrador: "int-1", N: 1}}
	claim := func(lease time.Duration) app.Delivery {
		t.Helper()
		got, err := a.ClaimDeliveries(ctx, "a", time.Now(), lease, quota)
		if err != nil || len(got) != 1 {
			t.Fatalf("claim: %+v %v", got, err)
		}
		return got[0]
	}

	claim(time.Minute)
	if err := a.ReleaseDeliveries(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	next("a release")

	claim(time.Millisecond)
	storetest.Eventually(t, "the database's clock to pass the lease", func() bool {
		n, err := a.ReapDeliveries(ctx, time.Now(), app.MaxQuedas)
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	})
	next("a reap")

	d := claim(time.Minute)
	now := time.Now()
	res := app.DeliveryResult{ID: d.ID, Token: d.Token, Worker: "a", Integrador: "int-1", Status: app.EntregaEntregue, Proxima: now,
		Attempt: app.Attempt{EntregaID: "0199-entrega", Tentativa: 1, Inicio: now, DuracaoMS: 2, StatusCode: 204}}
	if _, _, err := a.FinishDeliveries(ctx, []app.DeliveryResult{res}, "a", now, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	next("a finish with a row due behind it")
}

// An attempt whose lease was lost (the reaper took the row back while it
// was on the wire) is recorded; the next claim of the row must number
// its attempt after it, not send X-Geohub-Tentativa 1 again.
func TestTheAttemptAfterALostLeaseHasTheNextNumber(t *testing.T) {
	t.Parallel()
	url := freshDatabase(t)
	a, b := open(t, url), open(t, url)
	ctx := t.Context()
	if err := a.InsertIntegrator(ctx, storetest.NewIntegrator("int-1", time.Now()), []byte("s"), "h1", nil); err != nil {
		t.Fatal(err)
	}
	storetest.Enqueue(t, a, "a:b", "x:1", "int-1")
	quota := []app.Quota{{Integrador: "int-1", N: 1}}
	got, err := a.ClaimDeliveries(ctx, "a", time.Now(), time.Millisecond, quota)
	if err != nil || len(got) != 1 || got[0].Tentativas != 0 {
		t.Fatalf("claim: %+v %v", got, err)
	}
	storetest.Eventually(t, "the database's clock to pass the lease", func() bool {
		n, err := b.ReapDeliveries(ctx, time.Now(), app.MaxQuedas)
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	})
	now := time.Now()
	late := app.DeliveryResult{ID: got[0].ID, Token: got[0].Token, Worker: "a", Integrador: "int-1", Status: app.EntregaPendente,
		Proxima: now, Kind: app.ResultRefused,
		Attempt: app.Attempt{EntregaID: "0199-a", Tentativa: got[0].Tentativas + 1, Inicio: now, DuracaoMS: 2, StatusCode: 500}}
	if _, _, err := a.FinishDeliveries(ctx, []app.DeliveryResult{late}, "a", now, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	again, err := b.ClaimDeliveries(ctx, "b", time.Now(), time.Minute, quota)
	if err != nil || len(again) != 1 {
		t.Fatalf("claim after the lost lease: %+v %v", again, err)
	}
	if n := again[0].Tentativas + 1; n != 2 {
		t.Fatalf("the next attempt is number %d, want 2 (after the lost lease's 1)", n)
	}
}
