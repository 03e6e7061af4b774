package store_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"geohub"
	"geohub/app"
	"geohub/store"
)

// mustOpen opens a fresh database file in a temp dir and closes it with the test.
func mustOpen(tb testing.TB) *store.DB {
	tb.Helper()
	db, err := store.Open(tb.Context(), filepath.Join(tb.TempDir(), store.FileName), store.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

func newEvent(tipo string) app.Event {
	id := uuid.Must(uuid.NewV7()).String()
	return app.Event{EventID: id, Tipo: tipo, VersaoSchema: "1.0.0", Timestamp: time.Now(),
		Origem: "teste", CorrelacaoID: id, Payload: json.RawMessage(`{"a":1}`)}
}

func TestPragmasHoldOnEveryConnection(t *testing.T) {
	db := mustOpen(t)
	want := map[string]string{"journal_mode": "wal", "synchronous": "2", "foreign_keys": "1", "busy_timeout": "10000",
		"temp_store": "2"}
	for _, writer := range []bool{true, false} {
		for name, v := range want {
			got, err := db.Pragma(t.Context(), name, writer)
			if err != nil {
				t.Fatal(err)
			}
			if got != v {
				t.Errorf("%s driver, writer=%v: PRAGMA %s = %s, want %s", store.DriverName, writer, name, got, v)
			}
		}
	}
	if got, _ := db.Pragma(t.Context(), "query_only", false); got != "1" {
		t.Errorf("reader connections must be query_only, got %s", got)
	}
}

func TestReopenAppliesNoMigrationTwice(t *testing.T) {
	path := filepath.Join(t.TempDir(), store.FileName)
	want := strconv.Itoa(strings.Count(geohub.Schema, "\n-- migration: "))
	for range 2 {
		db, err := store.Open(t.Context(), path, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := db.Pragma(t.Context(), "user_version", true); v != want {
			t.Fatalf("user_version = %s, want %s", v, want)
		}
		if _, _, err := appendOne(db, t.Context(), newEvent("a:b"), nil, nil); err != nil {
			t.Fatal(err)
		}
		db.Close()
	}
}

func TestConcurrentAppendsGetDistinctOrderedSequences(t *testing.T) {
	db := mustOpen(t)
	var committed [][]app.Appended
	var mu sync.Mutex
	db.OnCommit(func(b []app.Appended) {
		mu.Lock()
		committed = append(committed, b)
		mu.Unlock()
	})
	const n = 200
	seqs := make(chan int64, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			ev, created, err := appendOne(db, t.Context(), newEvent("a:b"), json.RawMessage(`{"full":true}`), nil)
			if err != nil || !created {
				t.Errorf("append: created=%v err=%v", created, err)
			}
			seqs <- ev.Sequence
		})
	}
	wg.Wait()
	close(seqs)
	seen := map[int64]bool{}
	for s := range seqs {
		if seen[s] {
			t.Fatalf("sequence %d given twice", s)
		}
		seen[s] = true
	}
	// The commit hook sees every event once, in strictly increasing order.
	var last int64
	count := 0
	for _, b := range committed {
		for _, a := range b {
			if a.Event.Sequence <= last {
				t.Fatalf("commit hook out of order: %d after %d", a.Event.Sequence, last)
			}
			if string(a.FullPayload) != `{"full":true}` {
				t.Fatalf("commit hook lost the full payload: %s", a.FullPayload)
			}
			last = a.Event.Sequence
			count++
		}
	}
	if count != n {
		t.Fatalf("commit hook saw %d events, want %d", count, n)
	}
	if len(committed) == n {
		t.Logf("no two appends shared a commit (machine too fast to queue?)")
	}
}

func TestConcurrentDuplicatesInsertOneRow(t *testing.T) {
	db := mustOpen(t)
	ev := newEvent("a:b")
	const n = 50
	var created sync.Map
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			got, c, err := appendOne(db, t.Context(), ev, nil, nil)
			if err != nil {
				t.Error(err)
				return
			}
			created.Store(i, c)
			if got.EventID != ev.EventID || got.Sequence != 1 {
				t.Errorf("got %s seq %d, want %s seq 1", got.EventID, got.Sequence, ev.EventID)
			}
		})
	}
	wg.Wait()
	news := 0
	created.Range(func(_, v any) bool {
		if v.(bool) {
			news++
		}
		return true
	})
	if news != 1 {
		t.Fatalf("%d callers were told they created the event, want 1", news)
	}
	if n, _ := db.CountEvents(t.Context()); n != 1 {
		t.Fatalf("log holds %d rows, want 1", n)
	}
}

func TestOneFailingOperationDoesNotUndoItsBatch(t *testing.T) {
	db := mustOpen(t)
	// A DLQ entry must reference an existing event (foreign key): this one
	// fails inside the group transaction while appends around it succeed.
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 100 {
		wg.Go(func() {
			if i%10 == 0 {
				errs <- db.RecordFailure(t.Context(), app.DLQEntry{EventID: "missing", Colonia: "c", Tipo: "a:b",
					HandlerNome: "h", MensagemErro: "x", UltimaTentativa: time.Now(), CriadoEm: time.Now()})
				return
			}
			_, _, err := appendOne(db, t.Context(), newEvent("a:b"), nil, nil)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if err != nil {
			if !strings.Contains(strings.ToLower(err.Error()), "foreign key") {
				t.Errorf("unexpected error: %v", err)
			}
			failed++
		}
	}
	if failed != 10 {
		t.Fatalf("%d operations failed, want the 10 bad ones", failed)
	}
	if n, _ := db.CountEvents(t.Context()); n != 90 {
		t.Fatalf("log holds %d rows, want 90", n)
	}
}

func TestCursorNeverPassesAnOpenFailure(t *testing.T) {
	db := mustOpen(t)
	ctx := t.Context()
	var evs []app.Event
	for range 5 {
		ev, _, err := appendOne(db, ctx, newEvent("a:b"), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	if err := db.SeedCursor(ctx, "c", "a:b", 0); err != nil {
		t.Fatal(err)
	}
	if err := db.SeedCursor(ctx, "c", "a:b", 4); err != nil { // seeding never overwrites
		t.Fatal(err)
	}
	fail := evs[2]
	if err := db.RecordFailure(ctx, app.DLQEntry{EventID: fail.EventID, Sequence: fail.Sequence, Tipo: "a:b",
		Colonia: "c", HandlerNome: "h", MensagemErro: "boom", UltimaTentativa: time.Now(), CriadoEm: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := db.AdvanceCursors(ctx, "c", map[string]int64{"a:b": 5}); err != nil {
		t.Fatal(err)
	}
	cur, _ := db.Cursors(ctx, "c")
	if cur["a:b"] != fail.Sequence-1 {
		t.Fatalf("cursor = %d, want %d (just before the failure)", cur["a:b"], fail.Sequence-1)
	}
	if err := db.SetDLQStatus(ctx, fail.EventID, "c", app.DLQResolved); err != nil {
		t.Fatal(err)
	}
	if err := db.AdvanceCursors(ctx, "c", map[string]int64{"a:b": 5}); err != nil {
		t.Fatal(err)
	}
	cur, _ = db.Cursors(ctx, "c")
	if cur["a:b"] != 5 {
		t.Fatalf("cursor = %d after resolution, want 5", cur["a:b"])
	}
	if err := db.AdvanceCursors(ctx, "c", map[string]int64{"a:b": 3}); err != nil {
		t.Fatal(err)
	}
	if cur, _ = db.Cursors(ctx, "c"); cur["a:b"] != 5 {
		t.Fatalf("cursor moved backwards to %d", cur["a:b"])
	}
}

func TestBackupIsAConsistentCopy(t *testing.T) {
	db := mustOpen(t)
	for range 20 {
		if _, _, err := appendOne(db, t.Context(), newEvent("a:b"), nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "copy.db")
	if err := db.Backup(t.Context(), out); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("a backup holds secrets and must be 0600: %v %v", fi.Mode(), err)
	}
	cp, err := store.Open(t.Context(), out, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close()
	if n, _ := cp.CountEvents(t.Context()); n != 20 {
		t.Fatalf("backup holds %d events, want 20", n)
	}
}

func TestEventsFilterAndPage(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	for i := range 30 {
		ev := newEvent(fmt.Sprintf("a:t%d", i%3))
		ev.Agregado = fmt.Sprintf("x:%d", i%2)
		if _, _, err := appendOne(db, ctx, ev, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	rows, total, err := db.Events(ctx, app.EventFilter{Tipo: "a:t1", Agregado: "x:1", Limite: 2, Deslocamento: 1})
	if err != nil {
		t.Fatal(err)
	}
	if total != 5 || len(rows) != 2 {
		t.Fatalf("total %d rows %d, want 5 and 2", total, len(rows))
	}
	if rows[0].Sequence >= rows[1].Sequence {
		t.Fatal("rows not ordered by sequence")
	}
}

func TestARevokedTokenIsNotFound(t *testing.T) {
	db := mustOpen(t)
	now := time.Now()
	tok := app.Token{ID: "t1", Nome: "x", Papel: app.PapelLeitor, CriadoEm: now}
	if err := db.InsertToken(t.Context(), tok, "h1", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := db.TokenByHash(t.Context(), "h1"); err != nil {
		t.Fatal(err)
	}
	if err := db.RevokeToken(t.Context(), "t1", now, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := db.TokenByHash(t.Context(), "h1"); err != app.ErrNotFound {
		t.Fatalf("a revoked token still authenticates: %v", err)
	}
	if err := db.RevokeToken(t.Context(), "t1", now, nil); err != app.ErrNotFound {
		t.Fatalf("revoking twice: %v", err)
	}
}

// appendOne appends a batch of one event, as a single publish does.
func appendOne(db app.EventLog, ctx context.Context, ev app.Event, full json.RawMessage, out *app.Outbox) (app.Event, bool, error) {
	stored, err := db.Append(ctx, []app.Pending{{Event: ev, Full: full, Outbox: out}})
	if err != nil {
		return app.Event{}, false, err
	}
	return stored[0].Event, stored[0].Created, nil
}

// The DLQ's life per seed 001: pendente, retrying while reprocessed,
// resolved, reopened by a new failure, and failed_permanent (stamped) at the
// attempt limit, which nothing reopens.
func TestDLQStatusTransitions(t *testing.T) {
	path := filepath.Join(t.TempDir(), store.FileName)
	db, err := store.Open(t.Context(), path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	raw, err := sql.Open(store.DriverName, store.DSN(path, true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	ctx := t.Context()
	ev, _, err := appendOne(db, ctx, newEvent("a:b"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	fail := func() {
		t.Helper()
		if err := db.RecordFailure(ctx, app.DLQEntry{EventID: ev.EventID, Sequence: ev.Sequence, Tipo: "a:b", Colonia: "c",
			HandlerNome: "h", MensagemErro: "boom", UltimaTentativa: time.Now(), CriadoEm: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	check := func(step, status string, tentativas int, stamped bool) {
		t.Helper()
		var st string
		var n int
		var resolvido sql.NullInt64
		if err := raw.QueryRowContext(ctx, `SELECT status, tentativas, resolvido_em FROM dead_letter_queue
			WHERE event_id = ? AND colonia = 'c'`, ev.EventID).Scan(&st, &n, &resolvido); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if st != status || n != tentativas || resolvido.Valid != stamped {
			t.Fatalf("%s: status %s, tentativas %d, resolvido_em set %v; want %s, %d, %v", step, st, n, resolvido.Valid, status, tentativas, stamped)
		}
	}
	fail()
	check("first failure", app.DLQPendente, 1, false)
	if err := db.SetDLQStatus(ctx, ev.EventID, "c", app.DLQRetrying); err != nil {
		t.Fatal(err)
	}
	check("reprocessing", app.DLQRetrying, 1, false)
	if err := db.SetDLQStatus(ctx, ev.EventID, "c", app.DLQResolved); err != nil {
		t.Fatal(err)
	}
	check("resolved", app.DLQResolved, 1, true)
	fail()
	check("a new failure reopens it", app.DLQPendente, 2, false)
	for n := 3; n < app.MaxDLQAttempts; n++ {
		fail()
		check("failure", app.DLQPendente, n, false)
	}
	fail()
	check("the last attempt", app.DLQFailedPermanent, app.MaxDLQAttempts, true)
	fail()
	check("a failure after giving up", app.DLQFailedPermanent, app.MaxDLQAttempts+1, true)
	if open, err := db.DLQOpen(ctx, "c", 10); err != nil || len(open) != 0 {
		t.Fatalf("open entries %v %v", open, err)
	}
	if err := db.SetDLQStatus(ctx, "nao-existe", "c", app.DLQResolved); err != app.ErrNotFound {
		t.Fatalf("unknown entry: %v", err)
	}
}
