package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"geohub/app"
)

// Outbox is what OutboxConformance tests of a backend: app.OutboxStore,
// app.IntegratorStore and app.AttemptLog, with the event log that writes
// the rows. The audit trail's AppendAudit, which both store interfaces
// embed, is the audit suite's, so it is not required here.
type Outbox interface {
	app.EventLog
	app.AttemptLog
	ClaimDeliveries(ctx context.Context, worker string, now time.Time, lease time.Duration, quotas []app.Quota) ([]app.Delivery, error)
	FinishDeliveries(ctx context.Context, results []app.DeliveryResult, worker string, now time.Time, lease time.Duration,
		quotas []app.Quota) (map[string]time.Time, []app.Delivery, error)
	RenewDeliveries(ctx context.Context, worker string, now time.Time, lease time.Duration) ([]app.Leased, error)
	ReapDeliveries(ctx context.Context, now time.Time, maxQuedas int) (int, error)
	ReleaseDeliveries(ctx context.Context, worker string) error
	PurgeDelivered(ctx context.Context, before time.Time) (int, error)
	PurgeDeadLetters(ctx context.Context, before time.Time) (int, error)
	NextDue(ctx context.Context, integrators []string, after time.Time) (time.Time, bool, error)
	Deliveries(ctx context.Context, f app.DeliveryFilter) ([]app.Delivery, int, error)
	Delivery(ctx context.Context, id int64) (app.Delivery, []app.Attempt, error)
	Resend(ctx context.Context, id int64, now time.Time, audit *app.AuditEntry) error
	ResendAll(ctx context.Context, integrador, status string, now time.Time, audit *app.AuditEntry) (int, int, error)
	DueNow(ctx context.Context, integrador string, id int64, now time.Time, audit *app.AuditEntry) (int, error)
	OutboxBacklog(ctx context.Context) (int64, error)

	InsertIntegrator(ctx context.Context, in app.Integrator, sealedSecret []byte, apiKeyHash string, audit *app.AuditEntry) error
	Integrators(ctx context.Context) ([]app.Integrator, error)
	UpdateIntegrator(ctx context.Context, in app.Integrator, audit *app.AuditEntry) error
	SetIntegratorSecret(ctx context.Context, id string, s app.IntegratorSecrets, audit *app.AuditEntry) error
	SetIntegratorAPIKey(ctx context.Context, id, hash string, audit *app.AuditEntry) error
	IntegratorSecrets(ctx context.Context, id string) (app.IntegratorSecrets, error)
	IntegratorByAPIKey(ctx context.Context, hash string) (app.Integrator, error)
	Integrator(ctx context.Context, id string) (app.Integrator, error)
	Backlogs(ctx context.Context, ids ...string) (map[string]int, error)
}

// OutboxUnderTest is one fresh, empty database of a backend.
type OutboxUnderTest struct {
	DB Outbox
	// Audits lists the acao of every audit entry, oldest first (read with
	// the backend's own means: the trail's reader is not tested here).
	Audits func(t *testing.T) []string
	// AgeLeases, when set, says that the backend's leases end by its
	// database's clock (PostgreSQL, where replicas' clocks may disagree),
	// not by the now callers pass, and makes every lease d older, as if
	// that clock had moved d. Unset (SQLite), leases end by callers' now.
	AgeLeases func(t *testing.T, d time.Duration)
}

// NewIntegrator is an active integrator id that wants every event.
func NewIntegrator(id string, now time.Time) app.Integrator {
	return app.Integrator{ID: id, Nome: "CAD " + id, CallbackURL: "https://" + id + ".exemplo.gov.br", Ativo: true,
		HostsPermitidos: []string{id + ".exemplo.gov.br"}, Eventos: []string{"*"}, CriadoEm: now, AtualizadoEm: now}
}

// Enqueue appends one event of tipo with one delivery to each of ids in
// agregado, and returns the event.
func Enqueue(t testing.TB, db app.EventLog, tipo, agregado string, ids ...string) app.Event {
	t.Helper()
	out := &app.Outbox{Body: []byte(`{"corpo":1}`), Agregado: agregado, Recipients: func(string) []string { return ids }}
	stored, err := db.Append(context.Background(), []app.Pending{{Event: NewEvent(tipo), Outbox: out}})
	if err != nil {
		t.Fatal(err)
	}
	return stored[0].Event
}

// OutboxConformance checks the delivery side of the outbox and the
// integrators' cadastro on a backend (the cases package store's SQLite
// tests held before there was a second backend); open gives each subtest
// a fresh database.
func OutboxConformance(t *testing.T, open func(t *testing.T) OutboxUnderTest) {
	// fixture is a fresh database with integrator int-1 and n deliveries to
	// it, each in an aggregate of its own (x:1, x:2, ...), enqueued before
	// now.
	type fix struct {
		OutboxUnderTest
		now time.Time
		id  string
	}
	fixture := func(t *testing.T, n int) fix {
		t.Helper()
		u := open(t)
		f := fix{OutboxUnderTest: u, now: time.Now().UTC().Truncate(time.Millisecond), id: "int-1"}
		if err := u.DB.InsertIntegrator(t.Context(), NewIntegrator(f.id, f.now), []byte("sealed"), "hash", nil); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			Enqueue(t, u.DB, "a:b", fmt.Sprintf("x:%d", i+1), f.id)
		}
		return f
	}
	quota := func(id string, n int) []app.Quota { return []app.Quota{{Integrador: id, N: n}} }
	result := func(d app.Delivery, status string, at time.Time) app.DeliveryResult {
		kind := app.ResultAccepted
		if status != app.EntregaEntregue {
			kind = app.ResultRefused
		}
		return app.DeliveryResult{ID: d.ID, Token: d.Token, Worker: "w", Integrador: d.Integrador, Status: status, Proxima: at,
			Kind: kind, Attempt: app.Attempt{EntregaID: fmt.Sprint("e-", d.ID, "-", d.Tentativas+1),
				Tentativa: d.Tentativas + 1, Inicio: at, DuracaoMS: 3, StatusCode: map[bool]int{true: 204, false: 500}[status == app.EntregaEntregue]}}
	}

	t.Run("leases expire and poison rows dead-letter", func(t *testing.T) {
		f := fixture(t, 1)
		ctx := t.Context()
		now := f.now.Add(time.Second)
		for crash := 1; crash <= app.MaxQuedas; crash++ {
			claimed, err := f.DB.ClaimDeliveries(ctx, "w", now, 30*time.Second, quota(f.id, 10))
			if err != nil || len(claimed) != 1 {
				t.Fatalf("crash %d: claim %v %d", crash, err, len(claimed))
			}
			if string(claimed[0].Corpo) != `{"corpo":1}` {
				t.Fatalf("claimed body %q", claimed[0].Corpo)
			}
			// While leased, nobody else gets it.
			if again, _ := f.DB.ClaimDeliveries(ctx, "other", now, 30*time.Second, quota(f.id, 10)); len(again) != 0 {
				t.Fatal("a leased row was claimed twice")
			}
			if n, err := f.DB.ReapDeliveries(ctx, now.Add(30*time.Second), app.MaxQuedas); err != nil || n != 0 {
				t.Fatalf("reap at the lease's end: %d %v; the lease still holds", n, err)
			}
			now = now.Add(31 * time.Second) // the worker died holding it
			if f.AgeLeases != nil {
				f.AgeLeases(t, 31*time.Second)
			}
			if n, err := f.DB.ReapDeliveries(ctx, now, app.MaxQuedas); err != nil || n != 1 {
				t.Fatalf("reap: %d %v", n, err)
			}
		}
		page, _, _ := f.DB.Deliveries(ctx, app.DeliveryFilter{Limite: 10})
		if d := page[0]; d.Status != app.EntregaFalhou || d.Quedas != app.MaxQuedas ||
			d.UltimoErro != fmt.Sprint(app.PoisonPrefix, app.MaxQuedas, app.PoisonSuffix) {
			t.Fatalf("after %d crashes: %+v", app.MaxQuedas, d)
		}
	})

	t.Run("release returns leases at once", func(t *testing.T) {
		f := fixture(t, 3)
		ctx := t.Context()
		claimed, _ := f.DB.ClaimDeliveries(ctx, "w", f.now.Add(time.Second), time.Hour, quota(f.id, 10))
		if len(claimed) != 3 {
			t.Fatalf("claimed %d", len(claimed))
		}
		if err := f.DB.ReleaseDeliveries(ctx, "w"); err != nil {
			t.Fatal(err)
		}
		again, _ := f.DB.ClaimDeliveries(ctx, "w2", f.now.Add(time.Second), time.Hour, quota(f.id, 10))
		if len(again) != 3 {
			t.Fatalf("after release %d claimable, want 3", len(again))
		}
		for i, d := range again {
			if d.Agregado != fmt.Sprintf("x:%d", i+1) || d.Sequencia != 1 {
				t.Fatalf("row %d is %s #%d: want x:%d #1, oldest first", i, d.Agregado, d.Sequencia, i+1)
			}
		}
	})

	t.Run("claims honour quotas", func(t *testing.T) {
		f := fixture(t, 6)
		ctx := t.Context()
		if err := f.DB.InsertIntegrator(ctx, NewIntegrator("int-2", f.now), []byte("sealed"), "hash2", nil); err != nil {
			t.Fatal(err)
		}
		Enqueue(t, f.DB, "a:b", "y:1", "int-2")
		claimed, _ := f.DB.ClaimDeliveries(ctx, "w", f.now.Add(time.Second), time.Minute,
			[]app.Quota{{Integrador: f.id, N: 1}, {Integrador: "int-2", N: 1}})
		if len(claimed) != 2 || claimed[0].Integrador == claimed[1].Integrador {
			t.Fatalf("quotas of one each must take one of each integrator, got %+v", claimed)
		}
		if claimed[0].Sequencia != 1 || claimed[0].Agregado != "x:1" {
			t.Fatalf("the oldest due row goes first, got %s #%d", claimed[0].Agregado, claimed[0].Sequencia)
		}
		others, _ := f.DB.ClaimDeliveries(ctx, "w", f.now.Add(time.Second), time.Minute, quota("int-2", 10))
		if len(others) != 0 {
			t.Fatalf("an integrator without quota was claimed: %+v", others)
		}
		if rows, _ := f.DB.ClaimDeliveries(ctx, "w", f.now.Add(time.Second), time.Minute, quota(f.id, 0)); len(rows) != 0 {
			t.Fatalf("a quota of 0 claimed %d", len(rows))
		}
		backlogs, err := f.DB.Backlogs(ctx)
		if err != nil || backlogs[f.id] != 6 || backlogs["int-2"] != 1 {
			t.Fatalf("backlogs %v %v; want 6 and 1 (pending and in flight)", backlogs, err)
		}
		if one, _ := f.DB.Backlogs(ctx, "int-2"); len(one) != 1 || one["int-2"] != 1 {
			t.Fatalf("backlog of int-2 alone: %v", one)
		}
		if n, err := f.DB.OutboxBacklog(ctx); err != nil || n != 7 {
			t.Fatalf("outbox backlog %d %v", n, err)
		}
	})

	t.Run("an append batch is all or nothing", func(t *testing.T) {
		f := fixture(t, 0)
		ctx := t.Context()
		ok := &app.Outbox{Body: []byte(`{}`), Agregado: "x:2", Recipients: func(string) []string { return []string{f.id} }}
		// The foreign key to integrator refuses a recipient that does not exist.
		broken := &app.Outbox{Body: []byte(`{}`), Agregado: "x:2", Recipients: func(string) []string { return []string{"nao-existe"} }}
		first, second := NewEvent("a:b"), NewEvent("a:b")
		if _, err := f.DB.Append(ctx, []app.Pending{{Event: first, Outbox: ok}, {Event: second, Outbox: broken}}); err == nil {
			t.Fatal("a batch with a failing event was accepted")
		}
		if _, n, err := f.DB.Deliveries(ctx, app.DeliveryFilter{Limite: 10}); err != nil || n != 0 {
			t.Fatalf("%d deliveries of a failed batch (%v)", n, err)
		}
		stored, err := f.DB.Append(ctx, []app.Pending{{Event: first, Outbox: ok}, {Event: second, Outbox: ok}})
		if err != nil || len(stored) != 2 {
			t.Fatalf("repaired batch: %+v %v", stored, err)
		}
		dels, _, err := f.DB.Deliveries(ctx, app.DeliveryFilter{Limite: 10})
		if err != nil || len(dels) != 2 || dels[0].Sequencia != 1 || dels[1].Sequencia != 2 {
			t.Fatalf("deliveries %+v %v", dels, err)
		}
	})

	// SPEC 6.4's rule through the claim: at most one row per (integrator,
	// aggregate) in flight, in sequence order; a failed attempt, once
	// ended, lets the next row go; a row still waiting for its first
	// attempt holds the ones behind it.
	t.Run("the claim keeps each aggregate in order", func(t *testing.T) {
		f := fixture(t, 0)
		ctx := t.Context()
		for range 3 {
			Enqueue(t, f.DB, "a:b", "a:1", f.id)
		}
		Enqueue(t, f.DB, "a:b", "b:1", f.id)
		now := f.now.Add(time.Second)
		claim := func(want ...string) []app.Delivery {
			t.Helper()
			got, err := f.DB.ClaimDeliveries(ctx, "w", now, time.Minute, quota(f.id, 10))
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
			r := result(d, status, now)
			r.Proxima = proxima
			if _, _, err := f.DB.FinishDeliveries(ctx, []app.DeliveryResult{r}, "w", now, time.Minute, nil); err != nil {
				t.Fatal(err)
			}
		}
		got := claim("a:1#1", "b:1#1")
		claim()
		finish(got[0], app.EntregaEntregue, now)
		a2 := claim("a:1#2")[0]
		finish(a2, app.EntregaPendente, now.Add(time.Minute))
		a3 := claim("a:1#3")[0] // #2 failed and waits for its retry: #3 goes
		now = now.Add(2 * time.Minute)
		claim() // #2 is due again, but #3 is still in flight
		finish(a3, app.EntregaEntregue, now)
		claim("a:1#2")

		Enqueue(t, f.DB, "a:b", "c:1", f.id)
		c1 := claim("c:1#1")[0]
		deferred := app.DeliveryResult{ID: c1.ID, Token: c1.Token, Worker: "w", Integrador: f.id, Status: app.EntregaPendente,
			Proxima: now.Add(time.Hour), Kind: app.ResultDeferred}
		if _, _, err := f.DB.FinishDeliveries(ctx, []app.DeliveryResult{deferred}, "w", now, time.Minute, nil); err != nil {
			t.Fatal(err)
		}
		if _, attempts, _ := f.DB.Delivery(ctx, c1.ID); len(attempts) != 0 {
			t.Fatalf("a deferred row got %d attempts recorded", len(attempts))
		}
		Enqueue(t, f.DB, "a:b", "c:1", f.id)
		claim()
		if next, ok, err := f.DB.NextDue(ctx, []string{"nao-existe", f.id}, now); err != nil || !ok || !next.Equal(now.Add(time.Hour)) {
			t.Fatalf("next due %v %v %v, want %v", next, ok, err, now.Add(time.Hour))
		}
		now = now.Add(time.Hour)
		claim("c:1#1")
		if _, ok, err := f.DB.NextDue(ctx, []string{f.id}, now); err != nil || ok {
			t.Fatalf("next due after every row is due: %v %v", ok, err)
		}
	})

	t.Run("finish records attempts, the failing period and the last success, and claims in the same commit", func(t *testing.T) {
		f := fixture(t, 4)
		ctx := t.Context()
		now := f.now.Add(time.Second)
		rows, err := f.DB.ClaimDeliveries(ctx, "w", now, time.Minute, quota(f.id, 2))
		if err != nil || len(rows) != 2 {
			t.Fatalf("claim %d %v", len(rows), err)
		}
		// x:1 fails at now, x:2 fails at now+1s: the period starts at now.
		r1, r2 := result(rows[0], app.EntregaPendente, now), result(rows[1], app.EntregaPendente, now.Add(time.Second))
		r1.Proxima, r2.Proxima = now.Add(time.Hour), now.Add(time.Hour)
		failing, next, err := f.DB.FinishDeliveries(ctx, []app.DeliveryResult{r1, r2}, "w", now, time.Minute, quota(f.id, 10))
		if err != nil {
			t.Fatal(err)
		}
		if !failing[f.id].Equal(now) || len(failing) != 1 {
			t.Fatalf("failing %v, want %s since %v", failing, f.id, now)
		}
		if len(next) != 2 || next[0].Agregado != "x:3" || next[1].Agregado != "x:4" {
			t.Fatalf("the claim in the finish took %+v, want x:3 and x:4", next)
		}
		in, _ := f.DB.Integrator(ctx, f.id)
		if in.FalhandoDesde == nil || !in.FalhandoDesde.Equal(now) || in.UltimoSucesso != nil {
			t.Fatalf("integrator after failures: %+v", in)
		}
		// A success at now+2s (3 ms long) clears it; a failure after it in the
		// same batch starts it again there.
		ok := result(next[0], app.EntregaEntregue, now.Add(2*time.Second))
		bad := result(next[1], app.EntregaPendente, now.Add(3*time.Second))
		bad.Proxima = now.Add(time.Hour)
		failing, _, err = f.DB.FinishDeliveries(ctx, []app.DeliveryResult{ok, bad}, "w", now, time.Minute, nil)
		if err != nil || !failing[f.id].Equal(now.Add(3*time.Second)) {
			t.Fatalf("failing %v %v, want since now+3s", failing, err)
		}
		in, _ = f.DB.Integrator(ctx, f.id)
		if in.FalhandoDesde == nil || !in.FalhandoDesde.Equal(now.Add(3*time.Second)) ||
			in.UltimoSucesso == nil || !in.UltimoSucesso.Equal(now.Add(2*time.Second+3*time.Millisecond)) {
			t.Fatalf("integrator after success then failure: %+v", in)
		}
		d, attempts, err := f.DB.Delivery(ctx, ok.ID)
		if err != nil || d.Status != app.EntregaEntregue || d.EntregueEm == nil || d.Tentativas != 1 || d.UltimoStatus != 204 ||
			len(attempts) != 1 || attempts[0].EntregaID != ok.Attempt.EntregaID || attempts[0].StatusCode != 204 ||
			!attempts[0].Inicio.Equal(ok.Attempt.Inicio) || attempts[0].DuracaoMS != 3 {
			t.Fatalf("delivered row %+v, attempts %+v, %v", d, attempts, err)
		}
		// A finish by a worker that lost the lease changes nothing but is recorded.
		stale := result(next[1], app.EntregaEntregue, now.Add(4*time.Second))
		stale.Worker, stale.Attempt.EntregaID = "outro", "e-outro"
		if _, _, err := f.DB.FinishDeliveries(ctx, []app.DeliveryResult{stale}, "outro", now, time.Minute, nil); err != nil {
			t.Fatal(err)
		}
		if d, attempts, _ := f.DB.Delivery(ctx, stale.ID); d.Status != app.EntregaPendente || len(attempts) != 2 {
			t.Fatalf("a stale finish changed the row: %+v, %d attempts", d, len(attempts))
		}
		// The tail of attempts: 5 so far, in id order, filtered.
		all, cursor, err := f.DB.AttemptsAfter(ctx, 0, app.AttemptFilter{}, 100)
		if err != nil || len(all) != 5 {
			t.Fatalf("attempts after 0: %d %v", len(all), err)
		}
		if top, _ := f.DB.MaxAttemptID(ctx); cursor != top || all[4].ID != top {
			t.Fatalf("cursor %d, max %d, last %d", cursor, top, all[4].ID)
		}
		for i := 1; i < len(all); i++ {
			if all[i].ID <= all[i-1].ID {
				t.Fatal("attempts out of id order")
			}
		}
		x3, cursor, err := f.DB.AttemptsAfter(ctx, 0, app.AttemptFilter{Agregado: "x:3"}, 100)
		if err != nil || len(x3) != 1 || x3[0].Delivery.Agregado != "x:3" || x3[0].Attempt.StatusCode != 204 || cursor != all[4].ID {
			t.Fatalf("attempts of x:3: %+v, cursor %d, %v", x3, cursor, err)
		}
		if two, cursor, _ := f.DB.AttemptsAfter(ctx, 0, app.AttemptFilter{}, 2); len(two) != 2 || cursor != two[1].ID {
			t.Fatalf("a full page's cursor is its last id: %d rows, cursor %d", len(two), cursor)
		}
		if none, cursor, _ := f.DB.AttemptsAfter(ctx, all[4].ID, app.AttemptFilter{}, 10); len(none) != 0 || cursor != all[4].ID {
			t.Fatalf("after the last: %d rows, cursor %d", len(none), cursor)
		}
		// An unsent result says nothing of the receiver.
		// (The stale finish above was a success the receiver gave: it ended
		// the failing period.)
		if in, _ = f.DB.Integrator(ctx, f.id); in.FalhandoDesde != nil {
			t.Fatalf("a recorded success, even on a lost lease, ends the failing period: %v", in.FalhandoDesde)
		}
		rows, _ = f.DB.ClaimDeliveries(ctx, "w", now.Add(2*time.Hour), time.Minute, quota(f.id, 1))
		unsent := result(rows[0], app.EntregaFalhou, now.Add(2*time.Hour))
		unsent.Kind = app.ResultUnsent
		if failing, _, err := f.DB.FinishDeliveries(ctx, []app.DeliveryResult{unsent}, "w", now, time.Minute, nil); err != nil || len(failing) != 0 {
			t.Fatalf("an unsent result: failing %v %v", failing, err)
		}
		if in2, _ := f.DB.Integrator(ctx, f.id); in2.FalhandoDesde != nil {
			t.Fatalf("an unsent result moved the failing period to %v", in2.FalhandoDesde)
		}
	})

	t.Run("a resend keeps the attempt count", func(t *testing.T) {
		f := fixture(t, 1)
		ctx := t.Context()
		now := f.now.Add(time.Second)
		for i := range 3 {
			d, err := f.DB.ClaimDeliveries(ctx, "w", now, time.Minute, quota(f.id, 1))
			if err != nil || len(d) != 1 {
				t.Fatalf("attempt %d: claim %v %d", i+1, err, len(d))
			}
			status := app.EntregaPendente
			if i == 2 {
				status = app.EntregaFalhou
			}
			if _, _, err := f.DB.FinishDeliveries(ctx, []app.DeliveryResult{result(d[0], status, now)}, "w", now, time.Minute, nil); err != nil {
				t.Fatal(err)
			}
		}
		page, _, _ := f.DB.Deliveries(ctx, app.DeliveryFilter{Limite: 1})
		if err := f.DB.Resend(ctx, page[0].ID, now, nil); err != nil {
			t.Fatal(err)
		}
		if err := f.DB.Resend(ctx, page[0].ID, now, nil); !conflict(err, app.EntregaPendente, false) {
			t.Fatalf("resending a pending row: %v", err)
		}
		if err := f.DB.Resend(ctx, 999999, now, nil); !errors.Is(err, app.ErrNotFound) {
			t.Fatalf("resending a missing row: %v", err)
		}
		d, err := f.DB.ClaimDeliveries(ctx, "w", now, time.Minute, quota(f.id, 1))
		if err != nil || len(d) != 1 || d[0].Tentativas != 3 || d[0].TentativasAntes != 3 {
			t.Fatalf("after a resend: %+v %v; want tentativas 3, budget from 3", d, err)
		}
	})

	// A backlog whose oldest rows all belong to one aggregate (a burst, or
	// a CAD back from an outage): the claim still takes every aggregate's
	// first row, however far behind the oldest rows it lies (issue 27: the
	// claim reads a window of the oldest due rows, then looks by aggregate).
	t.Run("a claim finds every aggregate's head behind a long backlog of one", func(t *testing.T) {
		f := fixture(t, 0)
		ctx := t.Context()
		for _, agg := range []string{"lote:a", "lote:b", "lote:c"} {
			n := 300
			if agg != "lote:a" {
				n = 2
			}
			for range n {
				Enqueue(t, f.DB, "a:b", agg, f.id)
			}
		}
		got, err := f.DB.ClaimDeliveries(ctx, "w", f.now.Add(time.Hour), time.Minute, quota(f.id, 10))
		if err != nil {
			t.Fatal(err)
		}
		heads := map[string]int64{}
		for _, d := range got {
			heads[d.Agregado] = d.Sequencia
		}
		if len(got) != 3 || heads["lote:a"] != 1 || heads["lote:b"] != 1 || heads["lote:c"] != 1 {
			t.Fatalf("claimed %d rows, heads %v; want each aggregate's sequence 1", len(got), heads)
		}
		if again, err := f.DB.ClaimDeliveries(ctx, "w", f.now.Add(time.Hour), time.Minute, quota(f.id, 10)); err != nil || len(again) != 0 {
			t.Fatalf("a second claim with every head in flight: %d rows, %v", len(again), err)
		}
	})

	// Issue 27, B4: a worker renews only its own leases that have not
	// ended, and an outcome counts only for the claim that sent it: a
	// worker that lost a lease and claimed the row again cannot finish or
	// defer the new claim with the old attempt's outcome.
	t.Run("renewals keep live leases and outcomes fence by claim", func(t *testing.T) {
		f := fixture(t, 2)
		ctx := t.Context()
		now := f.now.Add(time.Second)
		lease := 30 * time.Second
		mine, err := f.DB.ClaimDeliveries(ctx, "w", now, lease, quota(f.id, 1))
		if err != nil || len(mine) != 1 || mine[0].Token == 0 {
			t.Fatalf("claim: %+v %v; want one row with its claim's token", mine, err)
		}
		theirs, err := f.DB.ClaimDeliveries(ctx, "outro", now, lease, quota(f.id, 1))
		if err != nil || len(theirs) != 1 || theirs[0].Token == mine[0].Token {
			t.Fatalf("claim by another worker: %+v %v; want its own token", theirs, err)
		}
		if f.AgeLeases != nil {
			f.AgeLeases(t, 20*time.Second)
		}
		renewed, err := f.DB.RenewDeliveries(ctx, "w", now.Add(20*time.Second), lease)
		if err != nil || len(renewed) != 1 || renewed[0] != (app.Leased{ID: mine[0].ID, Token: mine[0].Token}) {
			t.Fatalf("renew: %+v %v; want only %d, token %d", renewed, err, mine[0].ID, mine[0].Token)
		}
		// Renewed 20 s in, the lease now runs to 50 s: the reaper leaves it
		// at 40 s, and takes the other worker's, which was not renewed.
		if f.AgeLeases != nil {
			f.AgeLeases(t, 20*time.Second)
		}
		if n, err := f.DB.ReapDeliveries(ctx, now.Add(40*time.Second), app.MaxQuedas); err != nil || n != 1 {
			t.Fatalf("reap 40 s in: %d %v; want only the lease not renewed", n, err)
		}
		if got, err := f.DB.RenewDeliveries(ctx, "outro", now.Add(40*time.Second), lease); err != nil || len(got) != 0 {
			t.Fatalf("renewing a reaped lease: %+v %v; want none", got, err)
		}
		if f.AgeLeases != nil {
			f.AgeLeases(t, time.Minute)
		}
		at := now.Add(100 * time.Second)
		if n, err := f.DB.ReapDeliveries(ctx, at, app.MaxQuedas); err != nil || n != 1 {
			t.Fatalf("reap after the renewed lease ended: %d %v", n, err)
		}
		if got, err := f.DB.RenewDeliveries(ctx, "w", at, lease); err != nil || len(got) != 0 {
			t.Fatalf("renewing an ended lease: %+v %v; want none", got, err)
		}
		again, err := f.DB.ClaimDeliveries(ctx, "w", at, lease, quota(f.id, 2))
		if err != nil || len(again) != 2 {
			t.Fatalf("claim after the reap: %+v %v", again, err)
		}
		var row app.Delivery
		for _, d := range again {
			if d.ID == mine[0].ID {
				row = d
			}
		}
		if row.Token == 0 || row.Token == mine[0].Token {
			t.Fatalf("the row claimed again has token %d, the lost claim %d: want a new one", row.Token, mine[0].Token)
		}
		stale := result(mine[0], app.EntregaPendente, at)
		stale.Kind = app.ResultDeferred
		if _, _, err := f.DB.FinishDeliveries(ctx, []app.DeliveryResult{stale}, "w", at, lease, nil); err != nil {
			t.Fatal(err)
		}
		late := result(mine[0], app.EntregaEntregue, at)
		if _, _, err := f.DB.FinishDeliveries(ctx, []app.DeliveryResult{late}, "w", at, lease, nil); err != nil {
			t.Fatal(err)
		}
		if d, _, err := f.DB.Delivery(ctx, row.ID); err != nil || d.Status != app.EntregaProcessando || d.Token != row.Token {
			t.Fatalf("the lost claim's outcomes changed the new claim's row: %+v %v", d, err)
		}
		if _, _, err := f.DB.FinishDeliveries(ctx, []app.DeliveryResult{result(row, app.EntregaEntregue, at)}, "w", at, lease, nil); err != nil {
			t.Fatal(err)
		}
		if d, _, err := f.DB.Delivery(ctx, row.ID); err != nil || d.Status != app.EntregaEntregue || d.Token != 0 {
			t.Fatalf("the new claim's outcome: %+v %v", d, err)
		}
	})

	// One batch can hold a row twice: the outcome of a lease the worker
	// lost and that of the lease it claimed again since (it landed within
	// the round's delay). Only the current lease's outcome applies, in
	// whichever order they come; both attempts are recorded.
	t.Run("a batch with a lost lease's outcome and the current one applies the current", func(t *testing.T) {
		f := fixture(t, 1)
		ctx := t.Context()
		now := f.now.Add(time.Second)
		lease := 30 * time.Second
		first, err := f.DB.ClaimDeliveries(ctx, "w", now, lease, quota(f.id, 1))
		if err != nil || len(first) != 1 {
			t.Fatalf("claim: %+v %v", first, err)
		}
		if f.AgeLeases != nil {
			f.AgeLeases(t, time.Minute)
		}
		at := now.Add(time.Minute)
		if n, err := f.DB.ReapDeliveries(ctx, at, app.MaxQuedas); err != nil || n != 1 {
			t.Fatalf("reap: %d %v", n, err)
		}
		again, err := f.DB.ClaimDeliveries(ctx, "w", at, lease, quota(f.id, 1))
		if err != nil || len(again) != 1 || again[0].Token == first[0].Token {
			t.Fatalf("claim again: %+v %v", again, err)
		}
		stale := result(first[0], app.EntregaPendente, at.Add(time.Hour))
		stale.Attempt.EntregaID, stale.UltimoErr = "perdida", "o receptor respondeu 500"
		current := result(again[0], app.EntregaEntregue, at)
		current.Attempt.EntregaID = "atual"
		if _, _, err := f.DB.FinishDeliveries(ctx, []app.DeliveryResult{stale, current}, "w", at, lease, nil); err != nil {
			t.Fatal(err)
		}
		d, attempts, err := f.DB.Delivery(ctx, again[0].ID)
		if err != nil || d.Status != app.EntregaEntregue || d.UltimoStatus == 500 {
			t.Fatalf("after a batch of the lost and the current outcome: %+v %v; want entregue by the current", d, err)
		}
		if len(attempts) != 2 {
			t.Fatalf("attempts: %+v; want both recorded", attempts)
		}
	})

	// A dead letter's retention counts from when it dead-lettered
	// (falhou_em): set by the attempt that gave up or by the reaper that
	// found it poison, cleared by a resend and set again by the next failure.
	t.Run("dead letters are purged after their retention from when they failed", func(t *testing.T) {
		f := fixture(t, 3)
		ctx := t.Context()
		lease := 30 * time.Second
		claim := func(at time.Time, want int) []app.Delivery {
			t.Helper()
			got, err := f.DB.ClaimDeliveries(ctx, "w", at, lease, quota(f.id, 10))
			if err != nil || len(got) != want {
				t.Fatalf("claim at %v: %d rows, %v; want %d", at, len(got), err, want)
			}
			return got
		}
		fail := func(d app.Delivery, at time.Time) {
			t.Helper()
			res := app.DeliveryResult{ID: d.ID, Token: d.Token, Worker: "w", Integrador: f.id, Status: app.EntregaFalhou, Proxima: at,
				UltimoErr: "o receptor respondeu 400", Kind: app.ResultRefused,
				Attempt: app.Attempt{EntregaID: "a", Tentativa: d.Tentativas + 1, Inicio: at.Add(-time.Second), DuracaoMS: 1000, StatusCode: 400,
					RespostaSelada: []byte("campo inválido no corpo")}}
			if _, _, err := f.DB.FinishDeliveries(ctx, []app.DeliveryResult{res}, "w", at, lease, nil); err != nil {
				t.Fatal(err)
			}
		}
		purge := func(before time.Time, want int) {
			t.Helper()
			if n, err := f.DB.PurgeDeadLetters(ctx, before); err != nil || n != want {
				t.Fatalf("purge before %v: %d, %v; want %d", before, n, err, want)
			}
		}
		purged := func(id int64) bool {
			t.Helper()
			d, _, err := f.DB.Delivery(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if d.CorpoExpurgado != (d.Corpo == nil) {
				t.Fatalf("row %d: expurgado %v with a %d-byte body", id, d.CorpoExpurgado, len(d.Corpo))
			}
			return d.CorpoExpurgado
		}
		t0 := f.now.Add(time.Hour)
		rows := claim(t0, 3)
		first, poison, resent := rows[0], rows[1], rows[2]
		fail(first, t0)
		fail(resent, t0)
		if f.AgeLeases != nil {
			f.AgeLeases(t, time.Hour)
		}
		if n, err := f.DB.ReapDeliveries(ctx, t0.Add(time.Hour), 1); err != nil || n != 1 {
			t.Fatalf("reap: %d %v", n, err)
		}
		if err := f.DB.Resend(ctx, resent.ID, t0.Add(10*time.Minute), nil); err != nil {
			t.Fatal(err)
		}
		purge(t0, 0)
		purge(t0.Add(time.Millisecond), 1)
		if !purged(first.ID) || purged(poison.ID) || purged(resent.ID) {
			t.Fatal("the purge at t0 must take the row that failed at t0, and only it")
		}
		if _, attempts, _ := f.DB.Delivery(ctx, first.ID); len(attempts) != 1 || attempts[0].RespostaSelada != nil {
			t.Fatalf("the purged dead letter's answer outlived its body: %+v", attempts)
		}
		if _, attempts, _ := f.DB.Delivery(ctx, resent.ID); len(attempts) != 1 || attempts[0].RespostaSelada == nil {
			t.Fatalf("a kept dead letter lost its answer: %+v", attempts)
		}
		purge(t0.Add(time.Hour), 0)
		purge(t0.Add(time.Hour+time.Millisecond), 1)
		if !purged(poison.ID) {
			t.Fatal("the poison row's retention must count from when the reaper dead-lettered it")
		}
		if err := f.DB.Resend(ctx, first.ID, t0, nil); !conflict(err, app.EntregaFalhou, true) {
			t.Fatalf("resend of a purged dead letter: %v", err)
		}
		fail(claim(t0.Add(5*time.Hour), 1)[0], t0.Add(5*time.Hour))
		if n, skipped, err := f.DB.ResendAll(ctx, f.id, app.EntregaFalhou, t0.Add(5*time.Hour), nil); err != nil || n != 1 || skipped != 2 {
			t.Fatalf("bulk resend: %d resent, %d skipped, %v; want 1 and 2", n, skipped, err)
		}
		fail(claim(t0.Add(6*time.Hour), 1)[0], t0.Add(6*time.Hour))
		purge(t0.Add(6*time.Hour), 0)
		purge(t0.Add(6*time.Hour+time.Millisecond), 1)
		if n, skipped, err := f.DB.ResendAll(ctx, f.id, app.EntregaFalhou, t0.Add(7*time.Hour), nil); err != nil || n != 0 || skipped != 3 {
			t.Fatalf("bulk resend: %d resent, %d skipped, %v; want 0 and 3", n, skipped, err)
		}
		if _, _, err := f.DB.ResendAll(ctx, f.id, app.EntregaPendente, t0, nil); app.ErrorCode(err) != app.EInvalid {
			t.Fatalf("bulk resend of pending rows: %v", err)
		}
	})

	t.Run("delivered bodies are purged after their retention", func(t *testing.T) {
		f := fixture(t, 2)
		ctx := t.Context()
		now := f.now.Add(time.Second)
		rows, _ := f.DB.ClaimDeliveries(ctx, "w", now, time.Minute, quota(f.id, 10))
		// Each attempt carries the receiver's answer, which may quote the
		// body: it goes with it (issue 26, L5).
		answered := func(r app.DeliveryResult) app.DeliveryResult {
			r.Attempt.RespostaSelada = []byte("o corpo citado pelo receptor")
			return r
		}
		if _, _, err := f.DB.FinishDeliveries(ctx, []app.DeliveryResult{answered(result(rows[0], app.EntregaEntregue, now))}, "w", now, time.Minute, nil); err != nil {
			t.Fatal(err)
		}
		pend := answered(result(rows[1], app.EntregaPendente, now))
		pend.Proxima = now.Add(time.Hour)
		if _, _, err := f.DB.FinishDeliveries(ctx, []app.DeliveryResult{pend}, "w", now, time.Minute, nil); err != nil {
			t.Fatal(err)
		}
		end := now.Add(3 * time.Millisecond) // entregue_em is the attempt's end
		if n, err := f.DB.PurgeDelivered(ctx, end); err != nil || n != 0 {
			t.Fatalf("purge before the delivery: %d %v", n, err)
		}
		if n, err := f.DB.PurgeDelivered(ctx, end.Add(time.Millisecond)); err != nil || n != 1 {
			t.Fatalf("purge: %d %v", n, err)
		}
		if n, _ := f.DB.PurgeDelivered(ctx, end.Add(time.Hour)); n != 0 {
			t.Fatalf("a second purge took %d", n)
		}
		d, attempts, _ := f.DB.Delivery(ctx, rows[0].ID)
		other, otherAttempts, _ := f.DB.Delivery(ctx, rows[1].ID)
		if !d.CorpoExpurgado || d.Corpo != nil || other.CorpoExpurgado || other.Corpo == nil {
			t.Fatalf("after the purge: delivered %+v, pending %+v", d, other)
		}
		if len(attempts) != 1 || attempts[0].RespostaSelada != nil || attempts[0].Resposta != "" {
			t.Fatalf("the purged row's answer outlived its body: %+v", attempts)
		}
		if len(otherAttempts) != 1 || string(otherAttempts[0].RespostaSelada) != "o corpo citado pelo receptor" {
			t.Fatalf("the pending row's answer: %+v", otherAttempts)
		}
	})

	t.Run("tentar agora makes pending rows due, with its audit entry", func(t *testing.T) {
		f := fixture(t, 3)
		ctx := t.Context()
		now := f.now.Add(time.Second)
		rows, _ := f.DB.ClaimDeliveries(ctx, "w", now, time.Minute, quota(f.id, 10))
		later := now.Add(time.Hour)
		var results []app.DeliveryResult
		for _, d := range rows[:2] {
			r := result(d, app.EntregaPendente, now)
			r.Proxima = later
			results = append(results, r)
		}
		if _, _, err := f.DB.FinishDeliveries(ctx, results, "w", now, time.Minute, nil); err != nil {
			t.Fatal(err)
		}
		audit := &app.AuditEntry{Acao: "entregas.tentar_agora", Resultado: app.AuditOK, Alvo: app.AuditTarget{Tipo: "integrador", ID: f.id}}
		if _, err := f.DB.DueNow(ctx, f.id, rows[2].ID, now, audit); !conflict(err, app.EntregaProcessando, false) {
			t.Fatalf("due now of a row in flight: %v", err)
		}
		if _, err := f.DB.DueNow(ctx, "outro", rows[0].ID, now, nil); !errors.Is(err, app.ErrNotFound) {
			t.Fatalf("due now of another integrator's row: %v", err)
		}
		if n, err := f.DB.DueNow(ctx, f.id, rows[0].ID, now, audit); err != nil || n != 1 {
			t.Fatalf("due now of one row: %d %v", n, err)
		}
		if n, err := f.DB.DueNow(ctx, f.id, 0, now, audit); err != nil || n != 1 {
			t.Fatalf("due now of the rest: %d %v, want the one row still waiting", n, err)
		}
		if got, _ := f.DB.ClaimDeliveries(ctx, "w", now, time.Minute, quota(f.id, 10)); len(got) != 2 {
			t.Fatalf("claimed %d after due now, want 2", len(got))
		}
		if u := f.Audits(t); fmt.Sprint(u) != "[entregas.tentar_agora entregas.tentar_agora]" {
			t.Fatalf("audit entries %v: one per change, none for the refusals", u)
		}
	})

	t.Run("the deliveries list filters and pages", func(t *testing.T) {
		f := fixture(t, 0)
		ctx := t.Context()
		if err := f.DB.InsertIntegrator(ctx, NewIntegrator("int-2", f.now), []byte("s"), "h2", nil); err != nil {
			t.Fatal(err)
		}
		var evs []app.Event
		for i := range 10 {
			evs = append(evs, Enqueue(t, f.DB, fmt.Sprintf("t:%d", i%2), fmt.Sprintf("x:%d", i%3), f.id, "int-2"))
		}
		all, total, err := f.DB.Deliveries(ctx, app.DeliveryFilter{Limite: 100})
		if err != nil || total != 20 || len(all) != 20 {
			t.Fatalf("all: %d of %d, %v", len(all), total, err)
		}
		for i := 1; i < len(all); i++ {
			if all[i].ID <= all[i-1].ID {
				t.Fatal("not in id order")
			}
		}
		check := func(name string, fl app.DeliveryFilter, want int, ok func(app.Delivery) bool) []app.Delivery {
			t.Helper()
			fl.Limite = 100
			rows, total, err := f.DB.Deliveries(ctx, fl)
			if err != nil || total != want || len(rows) != want {
				t.Fatalf("%s: %d rows of %d, %v; want %d", name, len(rows), total, err, want)
			}
			for _, d := range rows {
				if !ok(d) {
					t.Fatalf("%s: row %+v", name, d)
				}
			}
			return rows
		}
		check("integrador", app.DeliveryFilter{Integrador: "int-2"}, 10, func(d app.Delivery) bool { return d.Integrador == "int-2" })
		check("tipo", app.DeliveryFilter{Tipo: "t:1", Integrador: f.id}, 5, func(d app.Delivery) bool { return d.Tipo == "t:1" })
		check("agregado", app.DeliveryFilter{Agregado: "x:0"}, 8, func(d app.Delivery) bool { return d.Agregado == "x:0" })
		check("event_id", app.DeliveryFilter{EventID: evs[3].EventID}, 2, func(d app.Delivery) bool { return d.EventID == evs[3].EventID })
		check("status", app.DeliveryFilter{Status: app.EntregaPendente}, 20, func(d app.Delivery) bool { return d.Status == app.EntregaPendente })
		check("id range", app.DeliveryFilter{IDInicio: all[4].ID, IDFim: all[9].ID}, 6,
			func(d app.Delivery) bool { return d.ID >= all[4].ID && d.ID <= all[9].ID })
		// x:0 gets events 0, 3, 6, 9: sequences 1..4 per integrator.
		x0 := check("agregado and integrador", app.DeliveryFilter{Agregado: "x:0", Integrador: f.id}, 4, func(app.Delivery) bool { return true })
		for i, d := range x0 {
			if d.Sequencia != int64(i+1) {
				t.Fatalf("x:0 row %d has sequence %d", i, d.Sequencia)
			}
		}
		page, total, _ := f.DB.Deliveries(ctx, app.DeliveryFilter{Desc: true, Limite: 3, Deslocamento: 2})
		if total != 20 || len(page) != 3 || page[0].ID != all[17].ID || page[2].ID != all[15].ID {
			t.Fatalf("a page newest first: %d rows of %d", len(page), total)
		}
		if rows, total, err := f.DB.Deliveries(ctx, app.DeliveryFilter{Integrador: "nao-existe", Limite: 10}); err != nil || total != 0 || rows == nil {
			t.Fatalf("no match: %v rows, %d, %v (want an empty list, not nil)", rows, total, err)
		}
		if _, _, err := f.DB.Delivery(ctx, 999999); !errors.Is(err, app.ErrNotFound) {
			t.Fatalf("a missing delivery: %v", err)
		}
	})

	t.Run("integrators: insert, list, get, secrets, api key, update and disable, each with its audit entry", func(t *testing.T) {
		u := open(t)
		ctx := t.Context()
		now := time.Now().UTC().Truncate(time.Millisecond)
		b := NewIntegrator("int-b", now)
		b.Nome, b.Backoff, b.Eventos = "Bombeiros", []string{"5s", "30s"}, []string{"ocorrencia:*"}
		a := NewIntegrator("int-a", now)
		a.Nome = "Ambulância"
		audit := func(acao string) *app.AuditEntry {
			return &app.AuditEntry{Acao: acao, Resultado: app.AuditOK, Alvo: app.AuditTarget{Tipo: "integrador"}}
		}
		if err := u.DB.InsertIntegrator(ctx, b, []byte("sealed-b"), "hash-b", audit("integrador.criar")); err != nil {
			t.Fatal(err)
		}
		if err := u.DB.InsertIntegrator(ctx, a, []byte("sealed-a"), "hash-a", audit("integrador.criar")); err != nil {
			t.Fatal(err)
		}
		// An API key hash is unique: the failing insert writes no audit entry.
		dup := NewIntegrator("int-c", now)
		if err := u.DB.InsertIntegrator(ctx, dup, []byte("s"), "hash-a", audit("integrador.criar")); err == nil {
			t.Fatal("a second integrator with the same API key hash was accepted")
		}
		list, err := u.DB.Integrators(ctx)
		if err != nil || len(list) != 2 || list[0].ID != "int-a" || list[1].ID != "int-b" {
			t.Fatalf("list %+v %v; want ordered by name", list, err)
		}
		got, err := u.DB.Integrator(ctx, "int-b")
		if err != nil || got.Nome != "Bombeiros" || fmt.Sprint(got.Backoff) != "[5s 30s]" || fmt.Sprint(got.Eventos) != "[ocorrencia:*]" ||
			fmt.Sprint(got.HostsPermitidos) != "[int-b.exemplo.gov.br]" || !got.Ativo || !got.CriadoEm.Equal(now) ||
			got.FalhandoDesde != nil || got.UltimoSucesso != nil {
			t.Fatalf("integrator %+v %v", got, err)
		}
		if list[0].Backoff != nil {
			t.Fatalf("no backoff override reads as nil, got %v", list[0].Backoff)
		}
		if _, err := u.DB.Integrator(ctx, "nao-existe"); !errors.Is(err, app.ErrNotFound) {
			t.Fatalf("a missing integrator: %v", err)
		}
		if byKey, err := u.DB.IntegratorByAPIKey(ctx, "hash-a"); err != nil || byKey.ID != "int-a" {
			t.Fatalf("by API key: %+v %v", byKey, err)
		}
		if _, err := u.DB.IntegratorByAPIKey(ctx, "nao-existe"); !errors.Is(err, app.ErrNotFound) {
			t.Fatalf("an unknown API key: %v", err)
		}
		if s, err := u.DB.IntegratorSecrets(ctx, "int-b"); err != nil || string(s.Atual) != "sealed-b" || s.Anterior != nil || !s.AnteriorAte.IsZero() {
			t.Fatalf("secrets %+v %v", s, err)
		}
		until := now.Add(app.SecretGrace)
		rot := app.IntegratorSecrets{Atual: []byte("novo"), Anterior: []byte("sealed-b"), AnteriorAte: until}
		if err := u.DB.SetIntegratorSecret(ctx, "int-b", rot, audit("integrador.rotacionar_segredo")); err != nil {
			t.Fatal(err)
		}
		if s, err := u.DB.IntegratorSecrets(ctx, "int-b"); err != nil || string(s.Atual) != "novo" || string(s.Anterior) != "sealed-b" || !s.AnteriorAte.Equal(until) {
			t.Fatalf("secrets after rotation %+v %v", s, err)
		}
		if err := u.DB.SetIntegratorSecret(ctx, "nao-existe", rot, audit("x")); !errors.Is(err, app.ErrNotFound) {
			t.Fatalf("rotating a missing integrator's secret: %v", err)
		}
		if _, err := u.DB.IntegratorSecrets(ctx, "nao-existe"); !errors.Is(err, app.ErrNotFound) {
			t.Fatalf("a missing integrator's secrets: %v", err)
		}
		if err := u.DB.SetIntegratorAPIKey(ctx, "int-a", "hash-a2", audit("integrador.nova_api_key")); err != nil {
			t.Fatal(err)
		}
		if _, err := u.DB.IntegratorByAPIKey(ctx, "hash-a"); !errors.Is(err, app.ErrNotFound) {
			t.Fatalf("the replaced API key still finds its integrator: %v", err)
		}
		if byKey, _ := u.DB.IntegratorByAPIKey(ctx, "hash-a2"); byKey.ID != "int-a" {
			t.Fatal("the new API key does not find its integrator")
		}
		if err := u.DB.SetIntegratorAPIKey(ctx, "nao-existe", "h", audit("x")); !errors.Is(err, app.ErrNotFound) {
			t.Fatalf("a missing integrator's API key: %v", err)
		}

		// A failing period, then the auto-disable: an update that keeps the
		// period keeps it; one that clears FalhandoDesde (a reactivation)
		// clears it.
		Enqueue(t, u.DB, "a:b", "x:1", "int-b")
		rows, _ := u.DB.ClaimDeliveries(ctx, "w", now.Add(time.Second), time.Minute, quota("int-b", 1))
		r := result(rows[0], app.EntregaPendente, now.Add(time.Second))
		if _, _, err := u.DB.FinishDeliveries(ctx, []app.DeliveryResult{r}, "w", now, time.Minute, nil); err != nil {
			t.Fatal(err)
		}
		got, _ = u.DB.Integrator(ctx, "int-b")
		if got.FalhandoDesde == nil || !got.FalhandoDesde.Equal(now.Add(time.Second)) {
			t.Fatalf("failing period %v", got.FalhandoDesde)
		}
		got.Ativo, got.MotivoInativo, got.AtualizadoEm = false, "falhando há 120 h", now.Add(time.Minute)
		if err := u.DB.UpdateIntegrator(ctx, got, audit("integrador.desativar")); err != nil {
			t.Fatal(err)
		}
		off, _ := u.DB.Integrator(ctx, "int-b")
		if off.Ativo || off.MotivoInativo != "falhando há 120 h" || off.FalhandoDesde == nil || !off.AtualizadoEm.Equal(now.Add(time.Minute)) {
			t.Fatalf("after disabling: %+v", off)
		}
		off.Ativo, off.MotivoInativo, off.FalhandoDesde = true, "", nil
		off.CallbackURL, off.Eventos, off.Backoff = "https://int-b.exemplo.gov.br/v2", []string{"jornada:*"}, nil
		if err := u.DB.UpdateIntegrator(ctx, off, audit("integrador.atualizar")); err != nil {
			t.Fatal(err)
		}
		on, _ := u.DB.Integrator(ctx, "int-b")
		if !on.Ativo || on.FalhandoDesde != nil || on.CallbackURL != off.CallbackURL || fmt.Sprint(on.Eventos) != "[jornada:*]" || on.Backoff != nil {
			t.Fatalf("after reactivating: %+v", on)
		}
		if err := u.DB.UpdateIntegrator(ctx, NewIntegrator("nao-existe", now), audit("x")); !errors.Is(err, app.ErrNotFound) {
			t.Fatalf("updating a missing integrator: %v", err)
		}
		want := "[integrador.criar integrador.criar integrador.rotacionar_segredo integrador.nova_api_key integrador.desativar integrador.atualizar]"
		if got := fmt.Sprint(u.Audits(t)); got != want {
			t.Fatalf("audit entries %s, want %s (one per change, none for a failed one)", got, want)
		}
	})

	t.Run("resends write their audit entry with the count", func(t *testing.T) {
		f := fixture(t, 2)
		ctx := t.Context()
		now := f.now.Add(time.Second)
		rows, _ := f.DB.ClaimDeliveries(ctx, "w", now, time.Minute, quota(f.id, 10))
		var results []app.DeliveryResult
		for _, d := range rows {
			results = append(results, result(d, app.EntregaFalhou, now))
		}
		if _, _, err := f.DB.FinishDeliveries(ctx, results, "w", now, time.Minute, nil); err != nil {
			t.Fatal(err)
		}
		one := &app.AuditEntry{Acao: "entrega.reenviar", Resultado: app.AuditOK}
		if err := f.DB.Resend(ctx, rows[0].ID, now, one); err != nil {
			t.Fatal(err)
		}
		if err := f.DB.Resend(ctx, rows[0].ID, now, one); !conflict(err, app.EntregaPendente, false) {
			t.Fatalf("a second resend: %v", err)
		}
		all := &app.AuditEntry{Acao: "entregas.reenviar", Resultado: app.AuditOK, CountAs: "reenviadas"}
		if n, skipped, err := f.DB.ResendAll(ctx, f.id, app.EntregaFalhou, now, all); err != nil || n != 1 || skipped != 0 {
			t.Fatalf("bulk resend %d %d %v", n, skipped, err)
		}
		if got := fmt.Sprint(f.Audits(t)); got != "[entrega.reenviar entregas.reenviar]" {
			t.Fatalf("audit entries %s", got)
		}
		if d, _, _ := f.DB.Delivery(ctx, rows[1].ID); d.Status != app.EntregaPendente || !d.ProximaTentativa.Equal(now) {
			t.Fatalf("a bulk-resent row: %+v", d)
		}
	})
}

// conflict says err is the store's refusal of a change to a row in status,
// its body purged or not.
func conflict(err error, status string, purged bool) bool {
	var c *app.StateConflict
	return errors.As(err, &c) && c.Status == status && c.Purged == purged
}
