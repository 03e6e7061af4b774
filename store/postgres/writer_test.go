package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"geohub/app"
	"geohub/app/ocorrencia"
	"geohub/store/postgres"
	"geohub/store/storetest"
)

// openWith opens a store on url with options.
func openWith(tb testing.TB, url string, opt postgres.Options) *postgres.DB {
	tb.Helper()
	db, err := postgres.Open(context.Background(), url, opt)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// holdLogHead takes log_head's row lock on a connection of its own, as a
// replica's group commit does, and returns the function that commits it.
func holdLogHead(t *testing.T, url string) func() {
	t.Helper()
	c := raw(t, url)
	tx, err := c.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), "SELECT ultima FROM log_head WHERE id = 1 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release := func() {
		once.Do(func() {
			if err := tx.Commit(context.Background()); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(release)
	return release
}

// A lock wait past lock_timeout (55P03) is retried, a few times; when the
// lock stays taken, the callers get 503 (indisponivel), and nothing of the
// batch was committed.
func TestLockTimeoutsRetryThenAnswerUnavailable(t *testing.T) {
	t.Parallel()
	url := freshDatabase(t)
	db := openWith(t, url, postgres.Options{LockTimeout: 50 * time.Millisecond})
	var retries []error
	postgres.OnRetry(db, func(_ int, err error) { retries = append(retries, err) })
	holdLogHead(t, url)
	_, err := db.Append(t.Context(), []app.Pending{{Event: storetest.NewEvent("a:b")}})
	if app.ErrorCode(err) != app.EUnavailable {
		t.Fatalf("append while another transaction holds log_head: %v, want code %s", err, app.EUnavailable)
	}
	if len(retries) != postgres.MaxRetries {
		t.Fatalf("%d retries, want %d", len(retries), postgres.MaxRetries)
	}
	var pe *pgconn.PgError
	if !errors.As(retries[0], &pe) || pe.Code != "55P03" {
		t.Fatalf("retried after %v, want a lock timeout", retries[0])
	}
	if n, _ := db.CountEvents(t.Context()); n != 0 {
		t.Fatalf("%d events stored by a batch that failed", n)
	}
}

// Once the lock is free again, the retry succeeds: the caller never sees
// the lock timeout.
func TestLockTimeoutsRetryUntilTheLockIsFree(t *testing.T) {
	t.Parallel()
	url := freshDatabase(t)
	db := openWith(t, url, postgres.Options{LockTimeout: 50 * time.Millisecond})
	release := holdLogHead(t, url)
	retries := 0
	postgres.OnRetry(db, func(int, error) {
		retries++
		release() // the other replica's commit
	})
	stored, err := db.Append(t.Context(), []app.Pending{{Event: storetest.NewEvent("a:b")}})
	if err != nil || !stored[0].Created || stored[0].Event.Sequence != 1 {
		t.Fatalf("append: %+v %v", stored, err)
	}
	if retries != 1 {
		t.Fatalf("%d retries, want 1", retries)
	}
}

// blockWriter makes db's next batch wait before its commit until the
// returned function is called, and returns once that batch is waiting.
func blockWriter(t *testing.T, db *postgres.DB, sizes *[]int) func() {
	t.Helper()
	gate, waiting := make(chan struct{}), make(chan struct{})
	first := true
	postgres.OnBeforeCommit(db, func(n int) {
		if first {
			first = false
			close(waiting)
			<-gate
			return
		}
		*sizes = append(*sizes, n)
	})
	go postgres.WriterNoop(context.Background(), db)
	<-waiting
	var once sync.Once
	return func() { once.Do(func() { close(gate) }) }
}

// queue starts fn in a goroutine once the writer's queue holds n
// operations, so that operations arrive in the order of the calls.
func queue(t *testing.T, db *postgres.DB, wg *sync.WaitGroup, fn func() error) {
	t.Helper()
	n := postgres.Queued(db)
	wg.Go(func() {
		if err := fn(); err != nil {
			t.Error(err)
		}
	})
	storetest.Eventually(t, "the operation to queue", func() bool { return postgres.Queued(db) != n })
}

// SetIntegratorAPIKey's update locks the row FOR UPDATE (api_key_hash is
// UNIQUE), which blocks the foreign-key checks of appends holding
// log_head: it must never share a group commit with other operations.
func TestAPIKeyChangesRunAlone(t *testing.T) {
	t.Parallel()
	url := freshDatabase(t)
	db := open(t, url)
	ctx := t.Context()
	if err := db.InsertIntegrator(ctx, storetest.NewIntegrator("int-1", time.Now()), []byte("s"), "h1", nil); err != nil {
		t.Fatal(err)
	}
	var sizes []int
	unblock := blockWriter(t, db, &sizes)
	var wg sync.WaitGroup
	appendOne := func() error {
		_, err := db.Append(ctx, []app.Pending{{Event: storetest.NewEvent("a:b"),
			Outbox: &app.Outbox{Body: []byte("{}"), Agregado: "x:1", Recipients: func(string) []string { return []string{"int-1"} }}}})
		return err
	}
	queue(t, db, &wg, appendOne)
	queue(t, db, &wg, func() error { return db.SetIntegratorAPIKey(ctx, "int-1", "h2", nil) })
	queue(t, db, &wg, appendOne)
	queue(t, db, &wg, appendOne)
	unblock()
	wg.Wait()
	if fmt.Sprint(sizes) != "[1 1 2]" {
		t.Fatalf("batches of %v operations, want [1 1 2]: the API key change alone", sizes)
	}
	if in, err := db.IntegratorByAPIKey(ctx, "h2"); err != nil || in.ID != "int-1" {
		t.Fatalf("after the change: %+v %v", in, err)
	}
}

// The claim's row lock is FOR NO KEY UPDATE: while a claim's transaction
// is open, another transaction can still take FOR KEY SHARE on the row, as
// the foreign-key check of an attempt referencing it does.
func TestClaimsLetForeignKeyChecksThrough(t *testing.T) {
	t.Parallel()
	url := freshDatabase(t)
	db := open(t, url)
	ctx := t.Context()
	if err := db.InsertIntegrator(ctx, storetest.NewIntegrator("int-1", time.Now()), []byte("s"), "h1", nil); err != nil {
		t.Fatal(err)
	}
	storetest.Enqueue(t, db, "a:b", "x:1", "int-1")
	c := raw(t, url)
	checked := make(chan error, 1)
	postgres.OnBeforeCommit(db, func(int) {
		// Inside the claim's transaction, before it commits.
		tx, err := c.Begin(context.Background())
		if err != nil {
			checked <- err
			return
		}
		defer tx.Rollback(context.Background())
		var id int64
		checked <- tx.QueryRow(context.Background(), `SELECT id FROM outbox FOR KEY SHARE NOWAIT`).Scan(&id)
	})
	claimed, err := db.ClaimDeliveries(ctx, "w", time.Now().Add(time.Second), time.Minute, []app.Quota{{Integrador: "int-1", N: 1}})
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %d %v", len(claimed), err)
	}
	if err := <-checked; err != nil {
		t.Fatalf("FOR KEY SHARE on a row being claimed: %v", err)
	}
}

// SPEC 12: a replica starting does not take back another live replica's
// leases, whatever its clock says: ReapOnStart's cut-off (a lease and an
// hour ahead) and a clock two hours fast reap nothing, since leases end by
// the database's clock.
func TestReapingLeavesLiveLeasesOfOtherReplicas(t *testing.T) {
	t.Parallel()
	url := freshDatabase(t)
	a, b := open(t, url), open(t, url)
	ctx := t.Context()
	if err := a.InsertIntegrator(ctx, storetest.NewIntegrator("int-1", time.Now()), []byte("s"), "h1", nil); err != nil {
		t.Fatal(err)
	}
	storetest.Enqueue(t, a, "a:b", "x:1", "int-1")
	lease := 30 * time.Second
	claimed, err := a.ClaimDeliveries(ctx, "a", time.Now(), lease, []app.Quota{{Integrador: "int-1", N: 1}})
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %d %v", len(claimed), err)
	}
	fast := time.Now().Add(2 * time.Hour)
	if n, err := b.ReapDeliveries(ctx, fast.Add(lease+time.Hour), app.MaxQuedas); err != nil || n != 0 {
		t.Fatalf("a second replica's reap at start took %d live leases (%v)", n, err)
	}
	d, _, err := a.Delivery(ctx, claimed[0].ID)
	if err != nil || d.Status != app.EntregaProcessando || d.Quedas != 0 {
		t.Fatalf("the leased row after the other replica's start: %+v %v", d, err)
	}
}

// A finishing batch sent again (its commit was not confirmed) records each
// attempt once.
func TestAnAttemptIsRecordedOnce(t *testing.T) {
	t.Parallel()
	url := freshDatabase(t)
	db := open(t, url)
	ctx := t.Context()
	if err := db.InsertIntegrator(ctx, storetest.NewIntegrator("int-1", time.Now()), []byte("s"), "h1", nil); err != nil {
		t.Fatal(err)
	}
	storetest.Enqueue(t, db, "a:b", "x:1", "int-1")
	now := time.Now()
	claimed, err := db.ClaimDeliveries(ctx, "w", now, time.Minute, []app.Quota{{Integrador: "int-1", N: 1}})
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %d %v", len(claimed), err)
	}
	res := app.DeliveryResult{ID: claimed[0].ID, Token: claimed[0].Token, Worker: "w", Integrador: "int-1", Status: app.EntregaEntregue, Proxima: now,
		Attempt: app.Attempt{EntregaID: "0199-entrega", Tentativa: 1, Inicio: now, DuracaoMS: 2, StatusCode: 204}}
	for range 2 {
		if _, _, err := db.FinishDeliveries(ctx, []app.DeliveryResult{res}, "w", now, time.Minute, nil); err != nil {
			t.Fatal(err)
		}
	}
	if d, attempts, err := db.Delivery(ctx, res.ID); err != nil || len(attempts) != 1 || d.Tentativas != 1 {
		t.Fatalf("after the finish sent twice: %+v, %d attempts, %v", d, len(attempts), err)
	}
}

// Every connection bounds its lock waits.
func TestLockTimeoutHoldsOnEveryConnection(t *testing.T) {
	t.Parallel()
	db := open(t, freshDatabase(t))
	for _, writer := range []bool{true, false} {
		if v, err := db.Setting(t.Context(), "lock_timeout", writer); err != nil || v != "5s" {
			t.Fatalf("writer %v: lock_timeout = %q (%v), want 5s", writer, v, err)
		}
	}
}

// proxy forwards TCP connections to addr until frozen: then it stops
// passing bytes either way, as a link that hangs does (no FIN, no RST).
type proxy struct {
	ln     net.Listener
	frozen atomic.Bool
	thaw   chan struct{}
}

func newProxy(t *testing.T, addr string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, thaw: make(chan struct{})}
	t.Cleanup(func() {
		p.unfreeze()
		ln.Close()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			go p.pass(c, u)
			go p.pass(u, c)
		}
	}()
	return p
}

func (p *proxy) pass(from, to net.Conn) {
	defer from.Close()
	defer to.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if p.frozen.Load() {
			<-p.thaw
		}
		if n > 0 {
			if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *proxy) freeze() { p.frozen.Store(true) }

func (p *proxy) unfreeze() {
	if p.frozen.CompareAndSwap(true, false) {
		close(p.thaw)
	}
}

// A replica whose link to the database hangs fails its batch at the
// batch's deadline, with code indisponivel, instead of waiting forever;
// once the link is back, the next batch commits on a new connection.
func TestAHungLinkFailsTheBatch(t *testing.T) {
	t.Parallel()
	url := freshDatabase(t)
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	p := newProxy(t, fmt.Sprintf("%s:%d", cfg.Host, cfg.Port))
	proxied := strings.Replace(url, fmt.Sprintf("%s:%d", cfg.Host, cfg.Port), p.ln.Addr().String(), 1)
	db := openWith(t, proxied, postgres.Options{BatchTimeout: 300 * time.Millisecond})
	ctx := t.Context()
	if _, err := db.Append(ctx, []app.Pending{{Event: storetest.NewEvent("a:b")}}); err != nil {
		t.Fatal(err)
	}
	p.freeze()
	ev := storetest.NewEvent("a:b")
	_, err = db.Append(ctx, []app.Pending{{Event: ev}})
	if app.ErrorCode(err) != app.EUnavailable {
		t.Fatalf("append over a hung link: %v, want code %s", err, app.EUnavailable)
	}
	p.unfreeze()
	// The caller retries with the same event_id, as a client answered 503
	// does: stored once, whether or not the first try committed.
	stored, err := db.Append(ctx, []app.Pending{{Event: ev}})
	if err != nil {
		t.Fatal(err)
	}
	if stored[0].Event.Sequence != 2 {
		t.Fatalf("stored %+v, want sequence 2", stored[0])
	}
}

// Two replicas whose group commits each hold operations over the same few
// resources (consumer cursors, ocorrências, integrators' failing periods,
// aggregates), arriving in every order: their batches take the locks in
// one order, so none deadlocks (PostgreSQL would abort one with 40P01,
// which the writer would retry, after a second of every replica's appends
// waiting).
func TestReplicasBatchesDoNotDeadlock(t *testing.T) {
	t.Parallel()
	url := freshDatabase(t)
	replicas := []*postgres.DB{open(t, url), open(t, url)}
	ctx := t.Context()
	var deadlocks atomic.Int32
	for _, db := range replicas {
		postgres.OnRetry(db, func(_ int, err error) {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "40P01" {
				deadlocks.Add(1)
			}
		})
	}
	tipos := []string{"t:1", "t:2", "t:3"}
	for _, tipo := range tipos {
		if err := replicas[0].SeedCursor(ctx, "c", tipo, 0); err != nil {
			t.Fatal(err)
		}
	}
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	for r, db := range replicas {
		for w := range 8 {
			wg.Go(func() {
				for i := range 40 {
					var err error
					switch rand.IntN(3) {
					case 0:
						err = db.AdvanceCursors(ctx, "c", map[string]int64{tipos[rand.IntN(3)]: int64(i)})
					case 1:
						o := rand.IntN(3)
						err = db.SaveOcorrencia(ctx, ocorrencia.Summary{Ocorrencia: ocorrencia.Ocorrencia{
							ID: fmt.Sprintf("o-%d", o), Natureza: "incendio", Status: ocorrencia.EmAtendimento,
							Versao: i}, RegistradaEm: at, AtualizadaEm: at, Cursor: int64(1 + o),
							UltimaSequencia: int64(r*1000 + w*100 + i)})
					case 2:
						err = db.RecordFailure(ctx, app.DLQEntry{EventID: "missing", Colonia: "c", Tipo: "t:1",
							HandlerNome: "h", MensagemErro: "x", UltimaTentativa: at, CriadoEm: at})
						if err != nil && strings.Contains(err.Error(), "foreign key") {
							err = nil // fails inside the batch, as a bad operation does
						}
					}
					if err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	if n := deadlocks.Load(); n > 0 {
		t.Fatalf("%d batches deadlocked", n)
	}
}

// An append does its enqueue work that needs no sequence number (the
// aggregate's owner, its per-integrator sequences) before it waits for
// log_head, which every replica's appends queue for: while it waits, it
// already holds the aggregate's sequence row.
func TestAppendsEnqueueBeforeTakingLogHead(t *testing.T) {
	t.Parallel()
	url := freshDatabase(t)
	db := open(t, url)
	ctx := t.Context()
	if err := db.InsertIntegrator(ctx, storetest.NewIntegrator("int-1", time.Now()), []byte("s"), "h1", nil); err != nil {
		t.Fatal(err)
	}
	storetest.Enqueue(t, db, "a:b", "x:1", "int-1")
	release := holdLogHead(t, url)
	done := make(chan error, 1)
	go func() {
		_, err := db.Append(context.Background(), []app.Pending{{Event: storetest.NewEvent("a:b"),
			Outbox: &app.Outbox{Body: []byte("{}"), Agregado: "x:1", Recipients: func(string) []string { return []string{"int-1"} }}}})
		done <- err
	}()
	c := raw(t, url)
	storetest.Eventually(t, "the append to wait for log_head's lock", func() bool {
		var waiting bool
		if err := c.QueryRow(ctx, `SELECT count(*) > 0 FROM pg_stat_activity WHERE application_name = 'geohub'
			AND wait_event_type = 'Lock' AND query LIKE '%log_head%'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		return waiting
	})
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctx, `SELECT ultima FROM outbox_sequence WHERE integrador_id = 'int-1' AND agregado = 'x:1' FOR UPDATE NOWAIT`)
	tx.Rollback(ctx)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "55P03" {
		t.Fatalf("while the append waits for log_head, its aggregate's sequence row is free (%v): the enqueue work waits too", err)
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// /readyz's check does not wait on the writer: a write held on another
// replica's lock (a frozen replica holds log_head until its session is cut)
// must not make every replica unready (issue 27, B2).
func TestWritableDoesNotWaitOnTheWriter(t *testing.T) {
	t.Parallel()
	db := open(t, freshDatabase(t))
	var sizes []int
	release := blockWriter(t, db, &sizes)
	defer release()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if err := db.Writable(ctx); err != nil {
		t.Fatalf("Writable while the writer is held: %v", err)
	}
}
