package postgres_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"geohub/app"
	"geohub/store/postgres"
	"geohub/store/storetest"
)

// freshDatabase is a database of the test's own on the test server
// (storetest.PostgresDatabase): tests run in parallel.
func freshDatabase(tb testing.TB) string { return storetest.PostgresDatabase(tb) }

func open(tb testing.TB, url string) *postgres.DB {
	tb.Helper()
	db, err := postgres.Open(context.Background(), url, postgres.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// raw is a plain connection to url, for what the store does not expose.
func raw(tb testing.TB, url string) *pgx.Conn {
	tb.Helper()
	c, err := pgx.Connect(context.Background(), url)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func TestEventLogConformance(t *testing.T) {
	storetest.EventLogConformance(t, func(t *testing.T) storetest.EventLogUnderTest {
		url := freshDatabase(t)
		db := open(t, url)
		c := raw(t, url)
		var mu sync.Mutex // a pgx.Conn serves one statement at a time
		return storetest.EventLogUnderTest{Log: db,
			AddIntegrator: func(t *testing.T, id string) {
				mu.Lock()
				defer mu.Unlock()
				now := time.Now().UnixMilli()
				if _, err := c.Exec(t.Context(), `INSERT INTO integrator (id, nome, callback_url, hosts_permitidos,
					eventos, ativo, segredo, api_key_hash, criado_em, atualizado_em)
					VALUES ($1, $1, 'https://x.exemplo.gov.br', '[]', '["*"]', true, 'sealed', 'hash-' || $1, $2, $2)`,
					id, now); err != nil {
					t.Fatal(err)
				}
			},
			Outbox: func(t *testing.T, eventID string) []storetest.OutboxRow {
				mu.Lock()
				defer mu.Unlock()
				rows, err := c.Query(t.Context(), `SELECT integrador_id, agregado, sequencia FROM outbox
					WHERE event_id = $1 ORDER BY id`, eventID)
				if err != nil {
					t.Fatal(err)
				}
				out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (storetest.OutboxRow, error) {
					var o storetest.OutboxRow
					return o, r.Scan(&o.Integrador, &o.Agregado, &o.Sequencia)
				})
				if err != nil {
					t.Fatal(err)
				}
				return out
			}}
	})
}

// SPEC 11: durability is a setting of every connection, so it is read back
// on the writer's and on each reader's.
func TestSynchronousCommitHoldsOnEveryConnection(t *testing.T) {
	t.Parallel()
	db := open(t, freshDatabase(t))
	ctx := t.Context()
	if v, err := db.Setting(ctx, "synchronous_commit", true); err != nil || v != "on" {
		t.Fatalf("writer: synchronous_commit = %q (%v), want on", v, err)
	}
	// Concurrent reads, so that the pool opens several connections.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if v, err := db.Setting(ctx, "synchronous_commit", false); err != nil || v != "on" {
				t.Errorf("reader: synchronous_commit = %q (%v), want on", v, err)
			}
			if v, err := db.Setting(ctx, "fsync", false); err != nil || v != "on" {
				t.Errorf("the server runs with fsync = %q (%v): nothing is durable", v, err)
			}
		})
	}
	wg.Wait()
}

// Replicas starting together on an empty database apply each migration
// once: the advisory lock makes the later ones wait and find nothing to do.
func TestReplicasStartingTogetherMigrateOnce(t *testing.T) {
	t.Parallel()
	url := freshDatabase(t)
	want := strings.Count(postgres.Schema, "\n-- migration: ")
	var wg sync.WaitGroup
	dbs := make([]*postgres.DB, 3)
	for i := range dbs {
		wg.Go(func() {
			db, err := postgres.Open(t.Context(), url, postgres.Options{})
			if err != nil {
				t.Error(err)
				return
			}
			dbs[i] = db
		})
	}
	wg.Wait()
	for _, db := range dbs {
		if db == nil {
			t.FailNow()
		}
		defer db.Close()
		if v, err := db.SchemaVersion(t.Context()); err != nil || v != want {
			t.Fatalf("schema version %d (%v), want %d", v, err, want)
		}
	}
	var n int
	if err := raw(t, url).QueryRow(t.Context(), "SELECT count(*) FROM schema_migrations").Scan(&n); err != nil || n != want {
		t.Fatalf("%d migrations recorded (%v), want %d", n, err, want)
	}
	// And a reopen applies none again.
	db := open(t, url)
	if _, err := db.Append(t.Context(), []app.Pending{{Event: storetest.NewEvent("a:b")}}); err != nil {
		t.Fatal(err)
	}
}

// SPEC 12: sequence numbers are monotonic in commit order across replicas.
// Three stores on one database (three pools, as three replicas) append
// concurrently while a reader follows the log as the live tail and replay
// do, by "sequence > last seen". If a transaction holding sequence n
// committed after one holding n+1, the reader would at some point see n+1
// without n and step over n, which then appears: that is what it checks,
// besides a final log without gap or duplicate.
func TestSequencesAreMonotonicInCommitOrderAcrossReplicas(t *testing.T) {
	t.Parallel()
	url := freshDatabase(t)
	replicas := []*postgres.DB{open(t, url), open(t, url), open(t, url)}
	reader := open(t, url)
	const publishers, each = 8, 60 // per replica
	ctx := t.Context()

	var writing atomic.Int32
	writing.Store(int32(len(replicas) * publishers))
	var wg sync.WaitGroup
	for _, db := range replicas {
		for range publishers {
			wg.Go(func() {
				defer writing.Add(-1)
				for i := 0; i < each; {
					// Batches of one to three, as publishes and commands are.
					var batch []app.Pending
					for range min(1+i%3, each-i) {
						batch = append(batch, app.Pending{Event: storetest.NewEvent("a:b")})
						i++
					}
					if _, err := db.Append(ctx, batch); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
	}
	var last int64
	skipped := map[int64]bool{}
	reads := 0
	for {
		done := writing.Load() == 0
		rows, _, err := reader.EventsAfter(ctx, last, nil, 1000, 0)
		if err != nil {
			t.Fatal(err)
		}
		reads++
		for _, ev := range rows {
			for s := last + 1; s < ev.Sequence; s++ {
				skipped[s] = true
			}
			last = ev.Sequence
		}
		if done && len(rows) == 0 {
			break
		}
	}
	wg.Wait()

	all, _, err := reader.EventsAfter(ctx, 0, nil, 1<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for i, ev := range all {
		if ev.Sequence != int64(i+1) {
			t.Fatalf("row %d has sequence %d: gap or duplicate", i, ev.Sequence)
		}
		if ids[ev.EventID] {
			t.Fatalf("event %s stored twice", ev.EventID)
		}
		ids[ev.EventID] = true
	}
	if want := len(replicas) * publishers * each; len(all) != want {
		t.Fatalf("log holds %d events, want %d", len(all), want)
	}
	var late []int64
	for s := range skipped {
		if s <= int64(len(all)) {
			late = append(late, s)
		}
	}
	if len(late) > 0 {
		t.Fatalf("a reader saw later sequences before %d earlier ones committed (e.g. %d): "+
			"a tail following the log would have skipped them", len(late), late[0])
	}
	t.Logf("%d events from %d replicas, followed in %d reads", len(all), len(replicas), reads)
}

// Idempotency holds across replicas: the same event_id appended from three
// stores at once is stored once, and exactly one caller is told it created it.
func TestConcurrentDuplicatesAcrossReplicasStoreOnce(t *testing.T) {
	t.Parallel()
	url := freshDatabase(t)
	replicas := []*postgres.DB{open(t, url), open(t, url), open(t, url)}
	ctx := t.Context()
	const events, tries = 40, 4 // each event tries times from each replica
	evs := make([]app.Event, events)
	for i := range evs {
		evs[i] = storetest.NewEvent("a:b")
	}
	var created [events]atomic.Int32
	seqs := make([]sync.Map, events)
	var wg sync.WaitGroup
	for _, db := range replicas {
		for range tries {
			wg.Go(func() {
				for i, ev := range evs {
					stored, err := db.Append(ctx, []app.Pending{{Event: ev}})
					if err != nil {
						t.Error(err)
						return
					}
					if stored[0].Created {
						created[i].Add(1)
					}
					seqs[i].Store(stored[0].Event.Sequence, true)
				}
			})
		}
	}
	wg.Wait()
	for i := range evs {
		if n := created[i].Load(); n != 1 {
			t.Fatalf("event %d: %d callers created it, want 1", i, n)
		}
		n := 0
		seqs[i].Range(func(_, _ any) bool { n++; return true })
		if n != 1 {
			t.Fatalf("event %d was answered with %d different sequences", i, n)
		}
	}
	if n, _ := replicas[0].CountEvents(ctx); n != events {
		t.Fatalf("log holds %d rows, want %d", n, events)
	}
}

func TestWithDatabase(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u@h:1/postgres?sslmode=disable": "postgres://u@h:1/x?sslmode=disable",
		"postgres://u@h:1":                          "postgres://u@h:1/x",
		"postgres://u@h:1/db":                       "postgres://u@h:1/x",
	} {
		if got := storetest.WithDatabase(in, "x"); got != want {
			t.Errorf("WithDatabase(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestKeyCheckConformance(t *testing.T) { storetest.KeyCheckConformance(t, "postgres") }
