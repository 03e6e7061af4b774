package store_test

import (
	"context"
	"testing"
	"time"

	"geohub/app"
)

// A dead letter's retention counts from when it dead-lettered (falhou_em):
// set by the attempt that gave up or by the reaper that found it poison,
// cleared by a resend and set again by the next failure.
func TestDeadLettersArePurgedAfterTheirRetentionFromWhenTheyFailed(t *testing.T) {
	k, in := outboxFixture(t, 3)
	ctx := context.Background()
	lease := 30 * time.Second
	claim := func(at time.Time, want int) []app.Delivery {
		t.Helper()
		got, err := k.db.ClaimDeliveries(ctx, "w", at, lease, []app.Quota{{Integrador: in, N: 10}})
		if err != nil || len(got) != want {
			t.Fatalf("claim at %v: %d rows, %v; want %d", at, len(got), err, want)
		}
		return got
	}
	fail := func(d app.Delivery, at time.Time) {
		t.Helper()
		res := app.DeliveryResult{ID: d.ID, Worker: "w", Integrador: in, Status: app.EntregaFalhou, Proxima: at,
			UltimoErr: "o receptor respondeu 400", Falha: true,
			Attempt: app.Attempt{EntregaID: "a", Tentativa: d.Tentativas + 1, Inicio: at.Add(-time.Second), DuracaoMS: 1000, StatusCode: 400}}
		if _, _, err := k.db.FinishDeliveries(ctx, []app.DeliveryResult{res}, "w", at, lease, nil); err != nil {
			t.Fatal(err)
		}
	}
	purge := func(before time.Time, want int) {
		t.Helper()
		if n, err := k.db.PurgeDeadLetters(ctx, before); err != nil || n != want {
			t.Fatalf("purge before %v: %d, %v; want %d", before, n, err, want)
		}
	}
	purged := func(id int64) bool {
		t.Helper()
		d, _, err := k.db.Delivery(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if d.CorpoExpurgado != (d.Corpo == nil) {
			t.Fatalf("row %d: expurgado %v with a %d-byte body", id, d.CorpoExpurgado, len(d.Corpo))
		}
		return d.CorpoExpurgado
	}

	t0 := k.now.Add(time.Hour)
	rows := claim(t0, 3)
	first, poison, resent := rows[0], rows[1], rows[2]
	fail(first, t0)
	fail(resent, t0)
	// The poison row's worker dies: with a budget of one crash, the reaper
	// dead-letters it at t0+1h.
	if n, err := k.db.ReapDeliveries(ctx, t0.Add(time.Hour), 1); err != nil || n != 1 {
		t.Fatalf("reap: %d %v", n, err)
	}
	// A resent row is pendente again: no retention runs for it.
	if err := k.db.Resend(ctx, resent.ID, t0.Add(10*time.Minute), nil); err != nil {
		t.Fatal(err)
	}
	purge(t0, 0) // falhou_em < before: not at the same millisecond
	purge(t0.Add(time.Millisecond), 1)
	if !purged(first.ID) || purged(poison.ID) || purged(resent.ID) {
		t.Fatal("the purge at t0 must take the row that failed at t0, and only it")
	}
	purge(t0.Add(time.Hour), 0)
	purge(t0.Add(time.Hour+time.Millisecond), 1)
	if !purged(poison.ID) {
		t.Fatal("the poison row's retention must count from when the reaper dead-lettered it")
	}
	// A resend of a purged row is refused and changes nothing.
	if err := k.db.Resend(ctx, first.ID, t0, nil); app.ErrorCode(err) != app.EConflict {
		t.Fatalf("resend of a purged dead letter: %v", err)
	}
	// The resent row fails again at t0+5h: its retention starts from there.
	fail(claim(t0.Add(5*time.Hour), 1)[0], t0.Add(5*time.Hour))
	if n, skipped, err := k.db.ResendAll(ctx, in, app.EntregaFalhou, t0.Add(5*time.Hour), nil); err != nil || n != 1 || skipped != 2 {
		t.Fatalf("bulk resend: %d resent, %d skipped, %v; want 1 and 2", n, skipped, err)
	}
	fail(claim(t0.Add(6*time.Hour), 1)[0], t0.Add(6*time.Hour))
	purge(t0.Add(6*time.Hour), 0)
	purge(t0.Add(6*time.Hour+time.Millisecond), 1)
	if n, skipped, err := k.db.ResendAll(ctx, in, app.EntregaFalhou, t0.Add(7*time.Hour), nil); err != nil || n != 0 || skipped != 3 {
		t.Fatalf("bulk resend: %d resent, %d skipped, %v; want 0 and 3", n, skipped, err)
	}
}
