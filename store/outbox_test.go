package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"geohub/app"
)

// outboxFixture enqueues n deliveries of distinct events to one integrator,
// each in an aggregate of its own (x:1, x:2, ...).
func outboxFixture(t *testing.T, n int) (*dbWithClock, string) {
	t.Helper()
	k := openWithClock(t)
	in := app.Integrator{ID: "int-1", Nome: "CAD", CallbackURL: "https://cad.exemplo.gov.br", Ativo: true,
		HostsPermitidos: []string{"cad.exemplo.gov.br"}, Eventos: []string{"*"}, CriadoEm: k.now, AtualizadoEm: k.now}
	if err := k.db.InsertIntegrator(t.Context(), in, []byte("sealed"), "hash", nil); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		ev := newEvent("a:b")
		out := &app.Outbox{Body: []byte(`{}`), Agregado: fmt.Sprintf("x:%d", i+1), Recipients: func(string) []string { return []string{in.ID} }}
		if _, _, err := appendOne(k.db, t.Context(), ev, nil, out); err != nil {
			t.Fatal(err)
		}
	}
	return k, in.ID
}

type dbWithClock struct {
	db interface {
		app.OutboxStore
		app.EventLog
		app.IntegratorStore
	}
	now time.Time
}

func openWithClock(t *testing.T) *dbWithClock {
	db := mustOpen(t)
	return &dbWithClock{db: db, now: time.Now().UTC().Truncate(time.Millisecond)}
}

func TestLeasesExpireAndPoisonRowsDeadLetter(t *testing.T) {
	k, _ := outboxFixture(t, 1)
	ctx := context.Background()
	now := k.now.Add(time.Second)
	for crash := 1; crash <= app.MaxQuedas; crash++ {
		claimed, err := k.db.ClaimDeliveries(ctx, "w", now, 30*time.Second, []app.Quota{{Integrador: "int-1", N: 10}})
		if err != nil || len(claimed) != 1 {
			t.Fatalf("crash %d: claim %v %d", crash, err, len(claimed))
		}
		// While leased, nobody else gets it.
		if again, _ := k.db.ClaimDeliveries(ctx, "other", now, 30*time.Second, []app.Quota{{Integrador: "int-1", N: 10}}); len(again) != 0 {
			t.Fatal("a leased row was claimed twice")
		}
		now = now.Add(31 * time.Second) // the worker died holding it
		if n, err := k.db.ReapDeliveries(ctx, now, app.MaxQuedas); err != nil || n != 1 {
			t.Fatalf("reap: %d %v", n, err)
		}
	}
	page, _, _ := k.db.Deliveries(ctx, app.DeliveryFilter{Limite: 10})
	if d := page[0]; d.Status != app.EntregaFalhou || d.Quedas != app.MaxQuedas {
		t.Fatalf("after %d crashes: %+v", app.MaxQuedas, d)
	}
}

func TestReleaseReturnsLeasesAtOnce(t *testing.T) {
	k, _ := outboxFixture(t, 3)
	ctx := context.Background()
	claimed, _ := k.db.ClaimDeliveries(ctx, "w", k.now.Add(time.Second), time.Hour, []app.Quota{{Integrador: "int-1", N: 10}})
	if len(claimed) != 3 {
		t.Fatalf("claimed %d", len(claimed))
	}
	if err := k.db.ReleaseDeliveries(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	again, _ := k.db.ClaimDeliveries(ctx, "w2", k.now.Add(time.Second), time.Hour, []app.Quota{{Integrador: "int-1", N: 10}})
	if len(again) != 3 {
		t.Fatalf("after release %d claimable, want 3", len(again))
	}
	for i, d := range again {
		if d.Agregado != fmt.Sprintf("x:%d", i+1) || d.Sequencia != 1 {
			t.Fatalf("row %d is %s #%d: want x:%d #1, oldest first", i, d.Agregado, d.Sequencia, i+1)
		}
	}
}

func TestClaimsHonourQuotas(t *testing.T) {
	k, first := outboxFixture(t, 6)
	ctx := context.Background()
	in := app.Integrator{ID: "int-2", Nome: "CAD 2", CallbackURL: "https://b.exemplo.gov.br", Ativo: true,
		HostsPermitidos: []string{"b.exemplo.gov.br"}, Eventos: []string{"*"}, CriadoEm: k.now, AtualizadoEm: k.now}
	if err := k.db.InsertIntegrator(ctx, in, []byte("sealed"), "hash2", nil); err != nil {
		t.Fatal(err)
	}
	ev := newEvent("a:b")
	out := &app.Outbox{Body: []byte(`{}`), Agregado: "y:1", Recipients: func(string) []string { return []string{in.ID} }}
	if _, _, err := appendOne(k.db, ctx, ev, nil, out); err != nil {
		t.Fatal(err)
	}
	claimed, _ := k.db.ClaimDeliveries(ctx, "w", k.now.Add(time.Second), time.Minute,
		[]app.Quota{{Integrador: first, N: 1}, {Integrador: in.ID, N: 1}})
	if len(claimed) != 2 || claimed[0].Integrador == claimed[1].Integrador {
		t.Fatalf("quotas of one each must take one of each integrator, got %+v", claimed)
	}
	if claimed[0].Sequencia != 1 {
		t.Fatalf("the oldest due row goes first, got sequence %d", claimed[0].Sequencia)
	}
	others, _ := k.db.ClaimDeliveries(ctx, "w", k.now.Add(time.Second), time.Minute, []app.Quota{{Integrador: in.ID, N: 10}})
	if len(others) != 0 {
		t.Fatalf("an integrator without quota was claimed: %+v", others)
	}
}

// A command's events and its outcome are one batch: when any of them fails,
// none is in the log and no delivery was enqueued.
func TestAppendBatchIsAllOrNothing(t *testing.T) {
	k, integrador := outboxFixture(t, 0)
	ctx := t.Context()
	ok := &app.Outbox{Body: []byte(`{}`), Agregado: "x:2", Recipients: func(string) []string { return []string{integrador} }}
	// The foreign key to integrator refuses a recipient that does not exist.
	broken := &app.Outbox{Body: []byte(`{}`), Agregado: "x:2", Recipients: func(string) []string { return []string{"nao-existe"} }}
	first, second := newEvent("a:b"), newEvent("a:b")
	if _, err := k.db.Append(ctx, []app.Pending{{Event: first, Outbox: ok}, {Event: second, Outbox: broken}}); err == nil {
		t.Fatal("a batch with a failing event was accepted")
	}
	for _, id := range []string{first.EventID, second.EventID} {
		if _, err := k.db.Event(ctx, id); err != app.ErrNotFound {
			t.Fatalf("event %s of a failed batch: %v", id, err)
		}
	}
	if _, n, err := k.db.Deliveries(ctx, app.DeliveryFilter{Limite: 10}); err != nil || n != 0 {
		t.Fatalf("%d deliveries of a failed batch (%v)", n, err)
	}
	// The same batch, repaired, goes in whole, in order, with gapless sequences.
	stored, err := k.db.Append(ctx, []app.Pending{{Event: first, Outbox: ok}, {Event: second, Outbox: ok}})
	if err != nil || len(stored) != 2 || !stored[0].Created || !stored[1].Created ||
		stored[1].Event.Sequence != stored[0].Event.Sequence+1 {
		t.Fatalf("repaired batch: %+v %v", stored, err)
	}
	dels, _, err := k.db.Deliveries(ctx, app.DeliveryFilter{Limite: 10})
	if err != nil || len(dels) != 2 || dels[0].Sequencia != 1 || dels[1].Sequencia != 2 {
		t.Fatalf("deliveries %+v %v", dels, err)
	}
}

// TestClaimKeepsEachAggregateInOrder walks SPEC 6.4's rule through the
// claim: at most one row per (integrator, aggregate) in flight, in sequence
// order; a failed attempt, once ended, lets the next row go; a row still
// waiting for its first attempt holds the ones behind it.
func TestClaimKeepsEachAggregateInOrder(t *testing.T) {
	k, id := outboxFixture(t, 0)
	ctx := t.Context()
	enqueue := func(agregado string) {
		t.Helper()
		out := &app.Outbox{Body: []byte(`{}`), Agregado: agregado, Recipients: func(string) []string { return []string{id} }}
		if _, _, err := appendOne(k.db, ctx, newEvent("a:b"), nil, out); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		enqueue("a:1")
	}
	enqueue("b:1")
	now := k.now.Add(time.Second)
	claim := func(want ...string) []app.Delivery {
		t.Helper()
		got, err := k.db.ClaimDeliveries(ctx, "w", now, time.Minute, []app.Quota{{Integrador: id, N: 10}})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, d := range got {
			names = append(names, fmt.Sprintf("%s#%d", d.Agregado, d.Sequencia))
		}
		if fmt.Sprint(names) != fmt.Sprint(want) {
			t.Fatalf("claimed %v, want %v", names, want)
		}
		return got
	}
	finish := func(d app.Delivery, status string, proxima time.Time) {
		t.Helper()
		r := app.DeliveryResult{ID: d.ID, Worker: "w", Integrador: id, Status: status, Proxima: proxima,
			Falha: status != app.EntregaEntregue, Attempt: app.Attempt{EntregaID: "e", Tentativa: d.Tentativas + 1, Inicio: now}}
		if _, _, err := k.db.FinishDeliveries(ctx, []app.DeliveryResult{r}, "w", now, time.Minute, nil); err != nil {
			t.Fatal(err)
		}
	}

	got := claim("a:1#1", "b:1#1") // one row per aggregate, the first of each
	claim()                        // both aggregates have a row in flight
	finish(got[0], app.EntregaEntregue, now)
	a2 := claim("a:1#2")[0] // the next one, once the attempt ended
	finish(a2, app.EntregaPendente, now.Add(time.Minute))
	a3 := claim("a:1#3")[0] // #2 failed and waits for its retry: #3 goes
	now = now.Add(2 * time.Minute)
	claim() // #2 is due again, but #3 is still in flight
	finish(a3, app.EntregaEntregue, now)
	claim("a:1#2") // then #2, at its retry

	// A row deferred before its first attempt (its integrator's circuit was
	// open) holds the rows behind it: it has not had its attempt yet.
	enqueue("c:1")
	c1 := claim("c:1#1")[0]
	deferred := app.DeliveryResult{ID: c1.ID, Worker: "w", Integrador: id, Status: app.EntregaPendente,
		Proxima: now.Add(time.Hour), Deferred: true}
	if _, _, err := k.db.FinishDeliveries(ctx, []app.DeliveryResult{deferred}, "w", now, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	enqueue("c:1")
	claim()
	now = now.Add(time.Hour)
	claim("c:1#1")
}

// A resend gives a dead letter a fresh budget but keeps its attempts'
// numbering: X-Geohub-Tentativa never starts again at 1.
func TestResendKeepsTheAttemptCount(t *testing.T) {
	k, id := outboxFixture(t, 1)
	ctx := t.Context()
	now := k.now.Add(time.Second)
	for i := range 3 {
		d, err := k.db.ClaimDeliveries(ctx, "w", now, time.Minute, []app.Quota{{Integrador: id, N: 1}})
		if err != nil || len(d) != 1 {
			t.Fatalf("attempt %d: claim %v %d", i+1, err, len(d))
		}
		status := app.EntregaPendente
		if i == 2 {
			status = app.EntregaFalhou
		}
		r := app.DeliveryResult{ID: d[0].ID, Worker: "w", Integrador: id, Status: status, Proxima: now, Falha: true,
			Attempt: app.Attempt{EntregaID: fmt.Sprint(i), Tentativa: i + 1, Inicio: now}}
		if _, _, err := k.db.FinishDeliveries(ctx, []app.DeliveryResult{r}, "w", now, time.Minute, nil); err != nil {
			t.Fatal(err)
		}
	}
	page, _, _ := k.db.Deliveries(ctx, app.DeliveryFilter{Limite: 1})
	if err := k.db.Resend(ctx, page[0].ID, now, nil); err != nil {
		t.Fatal(err)
	}
	d, err := k.db.ClaimDeliveries(ctx, "w", now, time.Minute, []app.Quota{{Integrador: id, N: 1}})
	if err != nil || len(d) != 1 || d[0].Tentativas != 3 || d[0].TentativasAntes != 3 {
		t.Fatalf("after a resend: %+v %v; want tentativas 3, budget from 3", d, err)
	}
}
