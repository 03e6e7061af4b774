package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"geohub/app"
	"geohub/app/callback"
	"geohub/app/ocorrencia"
	"geohub/app/redact"
	"geohub/store/storetest"
)

// registerTestTypes registers, on one replica, types the others read when
// they are built.
func registerTestTypes(t *testing.T, k *storetest.Kit, tipos ...string) {
	t.Helper()
	for _, tipo := range tipos {
		if _, _, err := k.Registry.Register(t.Context(), app.TypeVersion{Tipo: tipo, Versao: "1.0.0",
			Audiencia: app.AudienciaTodos, Schema: json.RawMessage(`{"type":"object"}`),
			Redacao: redact.Rules{Manter: []string{""}}}); err != nil {
			t.Fatal(err)
		}
	}
}

func publishOn(t *testing.T, k *storetest.Kit, tipo, agregado string, n int) app.Event {
	t.Helper()
	ev, _, err := k.Publisher.Publish(t.Context(), app.PublishRequest{Tipo: tipo, Origem: "teste", Agregado: agregado,
		Payload: json.RawMessage(fmt.Sprintf(`{"n": %d}`, n))})
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// A row waiting behind its aggregate's row in flight on another replica is
// claimed as soon as that replica records the outcome, not at the next
// sweep. Here "replica A" is the test itself, claiming and finishing through
// A's store, so that A's own dispatcher cannot take the next row; B's sweep
// is an hour.
func TestARowFreedOnAnotherReplicaIsClaimedAtOnce(t *testing.T) {
	t.Run("the finish's own wake-up", func(t *testing.T) { testFreedRow(t, false) })
	// An attempts wake-up alone, as a replica of an older version (a
	// rolling upgrade) sends for its finishes, wakes the dispatcher too.
	// The finish goes through B's own store, which wakes none of B's
	// services, and B is then told what its listener would hear.
	t.Run("an attempts wake-up", func(t *testing.T) { testFreedRow(t, true) })
}

func testFreedRow(t *testing.T, attemptsOnly bool) {
	url := storetest.PostgresDatabase(t)
	ctx := t.Context()
	policy := callback.Policy{Insecure: true}
	a := storetest.New(t, storetest.Options{Postgres: url, Deps: app.Deps{Policy: policy, NoDispatch: true}})
	registerTestTypes(t, a, "teste:b")
	rc := newReceiver(t, nil)
	in, err := a.Integrators.Create(ctx, app.NewIntegrator{Nome: "CAD", CallbackURL: rc.URL + "/geohub/eventos",
		HostsPermitidos: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	first := publishOn(t, a, "teste:b", "unidade:1", 1)
	second := publishOn(t, a, "teste:b", "unidade:1", 2)
	const worker = "replica-a"
	claimed, err := a.DB.ClaimDeliveries(ctx, worker, time.Now(), time.Minute, []app.Quota{{Integrador: in.ID, N: 10}})
	if err != nil {
		t.Fatal(err)
	}
	if len(claimed) != 1 || claimed[0].EventID != first.EventID {
		t.Fatalf("claimed %+v, want the aggregate's first row alone", claimed)
	}

	b := storetest.New(t, storetest.Options{Postgres: url, Deps: app.Deps{Policy: policy},
		Tune: func(s *app.Services) {
			s.Dispatcher.Sweep = time.Hour
			s.Dispatcher.Signals.Recorded.Init()
		}})
	// B has claimed and delivered since it started (another aggregate), so
	// it sleeps now: the second row waits behind the first, leased to A.
	other := publishOn(t, b, "teste:b", "unidade:2", 3)
	got := func(ev app.Event) bool {
		for _, r := range rc.requests() {
			if bytes.Contains(r.body, []byte(ev.EventID)) {
				return true
			}
		}
		return false
	}
	// B records the round that delivered its own publish.
	for rounds := 0; rounds == 0 || !got(other); rounds++ {
		if _, ok := b.Dispatcher.Signals.Recorded.Wait(10 * time.Second); !ok {
			t.Fatal("B did not deliver and record its own publish")
		}
	}
	if got(second) {
		t.Fatal("the second row went out while the first was in flight")
	}

	now := time.Now()
	finisher := a.DB
	if attemptsOnly {
		finisher = b.DB
	}
	if _, _, err := finisher.FinishDeliveries(ctx, []app.DeliveryResult{{ID: claimed[0].ID, Token: claimed[0].Token, Worker: worker,
		Integrador: in.ID, Status: app.EntregaEntregue,
		Attempt: app.Attempt{EntregaID: uuid.NewString(), Tentativa: 1, Inicio: now, StatusCode: http.StatusNoContent}}},
		worker, now, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	if attemptsOnly {
		b.Remote(app.Wakeup{Attempts: true})
	}
	storetest.Await(t, "B to claim the row A's outcome freed", func() bool { return got(second) }, &b.Dispatcher.Signals.Recorded)
}

// stalledRenewals is a real election whose renewals hang without regard
// for their context: the elector's goroutine stands still, as in a process
// paused past its term.
type stalledRenewals struct {
	app.LeaderStore
	resume chan struct{}
}

func (s *stalledRenewals) Renew(_ context.Context, replica string, term int64, ttl time.Duration) (bool, error) {
	<-s.resume
	return s.LeaderStore.Renew(context.Background(), replica, term, ttl)
}

// A leader whose elector stands still (the process was paused) stops
// acting at its trust deadline: the term's context ends, Leading and Term
// say it no longer leads, before the elector notices the late renewal.
func TestALeaderStopsActingAtItsTrustDeadline(t *testing.T) {
	db := storetest.OpenPostgres(t, storetest.PostgresDatabase(t), nil)
	store := &stalledRenewals{LeaderStore: db, resume: make(chan struct{})}
	l := &app.Leader{Store: store, TTL: 600 * time.Millisecond}
	ctx, cancel := context.WithCancel(t.Context())
	done := l.Start(ctx)
	t.Cleanup(func() {
		close(store.resume)
		cancel()
		<-done
	})
	term, release, ok := l.Term(ctx)
	if !ok {
		t.Fatal("a replica alone on its database does not lead after Start")
	}
	defer release()
	select {
	case <-term.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the term's context outlived its trust deadline while the renewal hung")
	}
	if l.Leading() {
		t.Fatal("Leading past the trust deadline")
	}
	if _, release, ok := l.Term(ctx); ok {
		release()
		t.Fatal("Term handed out past the trust deadline")
	}
}

// handledLog records which replica's handler ran on which event.
type handledLog struct {
	mu sync.Mutex
	by map[string][]string // replica: event ids
}

func (h *handledLog) add(replica, eventID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.by == nil {
		h.by = map[string][]string{}
	}
	h.by[replica] = append(h.by[replica], eventID)
}

func (h *handledLog) of(replica string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.by[replica])
}

// The in-process consumers run on the leader only: each event is handled
// once across replicas, a failure counts one attempt and holds its type's
// cursor; a follower's ocorrência list still wakes when the leader folds;
// and when the leader stops, the next one goes on from its cursors.
func TestConsumersRunOnTheLeaderOnly(t *testing.T) {
	url := storetest.PostgresDatabase(t)
	ctx := t.Context()
	var conta, falha handledLog
	replica := func(name string) *storetest.Kit {
		return storetest.New(t, storetest.Options{Postgres: url, BuiltinTypes: true,
			Deps: app.Deps{NoDispatch: true}, Tune: func(s *app.Services) { s.Consumers.Signals.Init() },
			Subscribe: func(c *app.Consumers) {
				c.Subscribe("teste:conta", "teste", "teste.conta", func(_ context.Context, ev app.Event) error {
					conta.add(name, ev.EventID)
					return nil
				})
				c.Subscribe("teste:falha", "teste", "teste.falha", func(_ context.Context, ev app.Event) error {
					falha.add(name, ev.EventID)
					return errors.New("recusado")
				})
			}})
	}
	a := replica("a")
	registerTestTypes(t, a, "teste:conta", "teste:falha")
	failed := publishOn(t, a, "teste:falha", "unidade:1", 0)
	var want []string
	for i := range 3 {
		want = append(want, publishOn(t, a, "teste:conta", "unidade:1", i).EventID)
	}
	consumed(t, a.Consumers, "A to handle its events", func() bool { return len(conta.of("a")) == 3 })

	// B starts while A leads: before, its start-up replay handled every
	// event again from the shared cursors.
	b := replica("b")
	for i := range 3 {
		want = append(want, publishOn(t, b, "teste:conta", "unidade:2", i).EventID)
	}
	consumed(t, a.Consumers, "A to handle B's events", func() bool { return len(conta.of("a")) == 6 })
	if got := conta.of("a"); !slices.Equal(got, want) {
		t.Fatalf("the leader handled %v, want %v", got, want)
	}
	if got := append(conta.of("b"), falha.of("b")...); len(got) != 0 {
		t.Fatalf("the follower handled %v", got)
	}
	if got := falha.of("a"); len(got) != 1 || got[0] != failed.EventID {
		t.Fatalf("the failing handler ran on %v, want once on %s", got, failed.EventID)
	}
	open, err := a.DB.DLQOpen(ctx, "teste", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(open) != 1 || open[0].EventID != failed.EventID || open[0].Tentativas != 1 {
		t.Fatalf("DLQ %+v, want the failed event once with one attempt", open)
	}
	cursors, err := a.DB.Cursors(ctx, "teste")
	if err != nil {
		t.Fatal(err)
	}
	if cursors["teste:falha"] >= failed.Sequence {
		t.Fatalf("the failing type's cursor is at %d, past its failure at %d", cursors["teste:falha"], failed.Sequence)
	}

	t.Run("the follower's ocorrência list wakes when the leader folds", func(t *testing.T) {
		wake, unsubscribe := b.Ocorrencias.Changed.Subscribe()
		defer unsubscribe()
		out, err := b.Ocorrencias.Register(ctx, app.Command{Operador: "operador-1", Solicitacao: uuid.NewString(),
			Metodo: http.MethodPost, Rota: "/api/ocorrencias", Body: []byte(`{"natureza": "incendio"}`)})
		if err != nil || out.Status != http.StatusCreated {
			t.Fatalf("register: %d %s %v", out.Status, out.Body, err)
		}
		var created struct{ ID string }
		if err := json.Unmarshal(out.Body, &created); err != nil {
			t.Fatal(err)
		}
		for {
			select {
			case <-wake:
			case <-time.After(30 * time.Second):
				t.Fatal("the follower's list was not woken by the leader's fold")
			}
			list, err := b.Ocorrencias.List(ctx, ocorrencia.Filter{})
			if err != nil {
				t.Fatal(err)
			}
			if len(list.Linhas) > 0 && list.Linhas[0].ID == created.ID {
				return
			}
		}
	})

	// A clean stop resigns once A's consumers saved their cursors: B takes
	// over from there and handles nothing A had handled.
	a.Stop()
	last := publishOn(t, b, "teste:conta", "unidade:2", 9)
	consumed(t, b.Consumers, "B, now leading, to handle its publish", func() bool { return len(conta.of("b")) > 0 })
	if got := conta.of("b"); !slices.Equal(got, []string{last.EventID}) {
		t.Fatalf("the new leader handled %v, want %s alone", got, last.EventID)
	}
	if got := conta.of("a"); len(got) != 6 {
		t.Fatalf("the old leader handled %d events after it stopped", len(got)-6)
	}
}

// An integrator created on one replica receives every event published on
// another after its creation was answered, at once, not after that
// replica next reads the cadastro (issue 27: events published on B in the
// second after an integrator was created on A were routed without it, and
// never delivered to it).
func TestAnIntegratorCreatedOnOneReplicaGetsTheNextPublishOnAnother(t *testing.T) {
	url := storetest.PostgresDatabase(t)
	ctx := t.Context()
	deps := app.Deps{Policy: callback.Policy{Insecure: true}, NoDispatch: true}
	a := storetest.New(t, storetest.Options{Postgres: url, Deps: deps})
	registerTestTypes(t, a, "teste:b")
	b := storetest.New(t, storetest.Options{Postgres: url, Deps: deps})
	publishOn(t, b, "teste:b", "unidade:1", 0) // B has routed with the cadastro it read at start
	in, err := a.Integrators.Create(ctx, app.NewIntegrator{Nome: "CAD", CallbackURL: "http://127.0.0.1:9/eventos",
		HostsPermitidos: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	ev := publishOn(t, b, "teste:b", "unidade:1", 1)
	rows, _, err := b.DB.Deliveries(ctx, app.DeliveryFilter{Integrador: in.ID, Limite: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].EventID != ev.EventID {
		t.Fatalf("deliveries to the integrator created on A: %+v; want the event published on B after it", rows)
	}
}
