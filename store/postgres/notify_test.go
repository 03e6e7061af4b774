package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"geohub/app"
	"geohub/app/callback"
	"geohub/app/redact"
	"geohub/store/storetest"
)

const replicaType = "teste:replica"

// registerReplicaType registers the tests' event type on k. Replicas
// built after it load it at New.
func registerReplicaType(t *testing.T, k *storetest.Kit) {
	t.Helper()
	if _, _, err := k.Registry.Register(t.Context(), app.TypeVersion{Tipo: replicaType, Versao: "1.0.0",
		Audiencia: app.AudienciaTodos, Schema: json.RawMessage(`{"type":"object"}`),
		Redacao: redact.Rules{Manter: []string{""}}}); err != nil {
		t.Fatal(err)
	}
}

func publishOn(t *testing.T, k *storetest.Kit, agregado string) app.Event {
	t.Helper()
	ev, _, err := k.Publisher.Publish(context.Background(), app.PublishRequest{Tipo: replicaType, Origem: "teste",
		Agregado: agregado, Payload: json.RawMessage(`{"n":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// listeners are the pids of the database's listening connections that
// are listening now: their last statement was the head's read that
// follows their LISTENs.
func listeners(t *testing.T, c *pgx.Conn) []int32 {
	t.Helper()
	rows, err := c.Query(t.Context(), `SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'geohub-escuta'
		AND state = 'idle' AND query LIKE 'SELECT ultima FROM log_head%'`)
	if err != nil {
		t.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		t.Fatal(err)
	}
	return pids
}

// waitListening waits until n listeners listen, none of them one of old.
func waitListening(t *testing.T, c *pgx.Conn, n int, old []int32) []int32 {
	t.Helper()
	var pids []int32
	storetest.Eventually(t, fmt.Sprintf("%d new listening connections (old %v)", n, old), func() bool {
		pids = listeners(t, c)
		fresh := slices.DeleteFunc(slices.Clone(pids), func(p int32) bool { return slices.Contains(old, p) })
		return len(fresh) == n && len(pids) == n
	})
	return pids
}

// A publish on replica A, whose dispatcher does not run, is delivered by
// replica B, which polls only every minute: the notification of A's
// commit wakes it. Also after B's listening connection is killed: it
// listens again. And A's deliveries tail hears of B's attempts.
func TestAPublishOnOneReplicaIsDeliveredByAnother(t *testing.T) {
	url := freshDatabase(t)
	policy := callback.Policy{Insecure: true}
	delivered := make(chan string, 10)
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
		delivered <- r.Header.Get("X-Geohub-Agregado")
	}))
	t.Cleanup(rc.Close)

	a := storetest.New(t, storetest.Options{Postgres: url, Deps: app.Deps{NoDispatch: true, Policy: policy}})
	registerReplicaType(t, a)
	if _, err := a.Integrators.Create(t.Context(), app.NewIntegrator{Nome: "CAD", CallbackURL: rc.URL + "/eventos",
		HostsPermitidos: []string{"127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	const poll = time.Minute
	b := storetest.New(t, storetest.Options{Postgres: url, Deps: app.Deps{Policy: policy}, Tune: func(s *app.Services) {
		s.Dispatcher.Sweep = poll
		s.Dispatcher.Signals.Recorded.Init()
	}})
	c := raw(t, url)
	pids := waitListening(t, c, 2, nil)

	// B claims at its start: the first delivery may come from that claim.
	// Once its outcome is recorded, B sleeps until its next poll.
	deliver := func(agregado string) {
		t.Helper()
		publishOn(t, a, agregado)
		select {
		case got := <-delivered:
			if got != agregado {
				t.Fatalf("delivered %s, want %s", got, agregado)
			}
		case <-time.After(poll / 2):
			t.Fatalf("%s not delivered before half of B's poll interval: no wake-up reached B", agregado)
		}
		if _, ok := b.Dispatcher.Signals.Recorded.Wait(poll / 2); !ok {
			t.Fatal("B did not record the outcome")
		}
	}
	deliver("x:1")
	tail, stop := a.AttemptsChanged.Subscribe()
	defer stop()
	deliver("x:2")
	select {
	case <-tail:
	case <-time.After(poll / 2):
		t.Fatal("A's deliveries tail never heard of B's attempt")
	}

	if _, err := c.Exec(t.Context(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'geohub-escuta'`); err != nil {
		t.Fatal(err)
	}
	waitListening(t, c, 2, pids)
	deliver("x:3")
}

// recorder is a consumer that records what it handled.
type recorder struct {
	mu   sync.Mutex
	seqs []int64
	ids  map[string]int
}

func (r *recorder) handle(ctx context.Context, ev app.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ids == nil {
		r.ids = map[string]int{}
	}
	r.seqs = append(r.seqs, ev.Sequence)
	r.ids[ev.EventID]++
	return nil
}

func (r *recorder) snapshot() ([]int64, map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seqs), maps.Clone(r.ids)
}

// Both replicas publish at once. The leader's consumer (A's: it started
// first) handles every event, its own from the commit hook and the other's
// from the log, once and in sequence order; the follower's handles none
// (SPEC 12: consumers run on the leader); each replica's event tails are
// woken by the other's commits.
func TestEveryReplicaSeesEveryEvent(t *testing.T) {
	url := freshDatabase(t)
	recs := []*recorder{{}, {}}
	replica := func(i int) *storetest.Kit {
		return storetest.New(t, storetest.Options{Postgres: url, Subscribe: func(c *app.Consumers) {
			c.Subscribe(replicaType, "teste", "recorder", recs[i].handle)
		}, Tune: func(s *app.Services) { s.Consumers.Signals.Init() }})
	}
	a := replica(0)
	registerReplicaType(t, a)
	b := replica(1)
	c := raw(t, url)
	waitListening(t, c, 2, nil)

	tailB, stop := b.EventsChanged.Subscribe()
	defer stop()
	first := publishOn(t, a, "a:0")
	select {
	case <-tailB:
	case <-time.After(30 * time.Second):
		t.Fatal("B's event tail was not woken by A's commit")
	}

	const n = 60
	want := map[string]bool{first.EventID: true}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, k := range []*storetest.Kit{a, b} {
		for w := range 3 {
			wg.Go(func() {
				for j := range n / 6 {
					ev := publishOn(t, k, fmt.Sprintf("r%d-w%d:%d", i, w, j))
					mu.Lock()
					want[ev.EventID] = true
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	if !a.Leader.Leading() || b.Leader.Leading() {
		t.Fatal("A, started first, does not lead alone")
	}
	// The leader's consumer, A's, handles every event once, in order.
	r := recs[0]
	storetest.Await(t, fmt.Sprintf("A to handle %d events", len(want)), func() bool {
		_, ids := r.snapshot()
		return len(ids) >= len(want)
	}, &a.Consumers.Signals.Handled)
	seqs, ids := r.snapshot()
	if !slices.IsSorted(seqs) || len(seqs) != len(ids) || len(ids) != len(want) {
		t.Fatalf("A handled %v: want each of %d once, in order", seqs, len(want))
	}
	for id, times := range ids {
		if !want[id] || times != 1 {
			t.Fatalf("A handled %s %d times", id, times)
		}
	}
	if seqs, _ := recs[1].snapshot(); len(seqs) != 0 {
		t.Fatalf("the follower's consumer handled %v", seqs)
	}
}

// A change of what replicas keep in memory, made through one replica's
// store, is told to the others at its commit (issue 27): each kind (a
// registry version, a token, an integrator, a circuit) wakes them with
// Shared, and an append does not.
func TestSharedChangesWakeTheOtherReplicas(t *testing.T) {
	t.Parallel()
	url := freshDatabase(t)
	a, b := open(t, url), open(t, url)
	heard := make(chan app.Wakeup, 64)
	b.OnRemote(func(w app.Wakeup) { heard <- w })
	ctx := t.Context()
	// Listening: its first wake-up is the resync after LISTEN.
	for w := range heard {
		if w.Resync {
			break
		}
	}
	expect := func(what string, change func() error) {
		t.Helper()
		if err := change(); err != nil {
			t.Fatal(err)
		}
		deadline := time.After(10 * time.Second)
		for {
			select {
			case w := <-heard:
				if w.Shared {
					return
				}
			case <-deadline:
				t.Fatalf("%s: no Shared wake-up on the other replica", what)
			}
		}
	}
	expect("a registry version", func() error {
		_, _, err := a.InsertTypeVersion(ctx, app.TypeVersion{Tipo: "teste:avisar", Versao: "1.0.0", Status: app.StatusAtivo,
			Audiencia: app.AudienciaTodos, Schema: []byte(`{"type":"object"}`)}, nil)
		return err
	})
	expect("a token revoked", func() error {
		if err := a.InsertToken(ctx, app.Token{ID: "tok-1", Nome: "t", Papel: app.PapelLeitor, CriadoEm: time.Now()}, "hash-1", nil); err != nil {
			return err
		}
		for len(heard) > 0 { // the insert's own
			<-heard
		}
		return a.RevokeToken(ctx, "tok-1", time.Now(), nil)
	})
	expect("an integrator", func() error {
		return a.InsertIntegrator(ctx, storetest.NewIntegrator("int-1", time.Now()), []byte("s"), "h", nil)
	})
	expect("a circuit", func() error {
		return a.SaveCircuits(ctx, []app.StoredCircuit{{Integrador: "int-1", Aberto: true, Desde: time.Now(),
			Ate: time.Now().Add(time.Minute), Cooldown: time.Minute, Falhas: 5, Origem: "a"}})
	})
	for settled := false; !settled; { // what the changes above still had on the way
		select {
		case <-heard:
		case <-time.After(300 * time.Millisecond):
			settled = true
		}
	}
	storetest.Enqueue(t, a, "a:b", "x:1", "int-1")
	select {
	case w := <-heard:
		if w.Shared {
			t.Fatalf("an append woke the other replica with Shared: %+v", w)
		}
	case <-time.After(500 * time.Millisecond):
	}
}
