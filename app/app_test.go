package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"geohub/app"
	"geohub/app/redact"
	"geohub/store/storetest"
)

// bundle is the service graph serve runs (storetest's kit), with the test
// types registered; every service and the store read one fake clock.
type bundle struct {
	kit       *storetest.Kit
	db        storetest.Store
	registry  *app.Registry
	pub       *app.Publisher
	consumers *app.Consumers
	audit     *app.Queries
	clock     *fakeClock
}

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// setup opens the database at loc (a storetest.Location; a fresh one when
// empty), lets subscribe register consumers and adjust them before they
// start, and registers the test types. Handlers time out after 2s unless
// subscribe says otherwise.
func setup(t *testing.T, loc string, subscribe func(*app.Consumers)) *bundle {
	t.Helper()
	clock := &fakeClock{now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	k := storetest.New(t, storetest.Options{
		Deps: app.Deps{Now: clock.Now},
		At:   loc,
		// In Tune, not Subscribe, so that a HandlerTimeout subscribe sets
		// wins over this default.
		Tune: func(s *app.Services) {
			s.Consumers.Signals.Init()
			s.Consumers.HandlerTimeout = 2 * time.Second
			if subscribe != nil {
				subscribe(s.Consumers)
			}
		},
	})
	for _, tv := range testTypes {
		if _, _, err := k.Registry.Register(t.Context(), tv); err != nil {
			t.Fatal(err)
		}
	}
	return &bundle{kit: k, db: k.DB, registry: k.Registry, pub: k.Publisher,
		consumers: k.Consumers, audit: k.Queries, clock: clock}
}

// close shuts the graph down and closes the database, so that a restart
// can open it again.
func (b *bundle) close(t *testing.T) {
	t.Helper()
	if err := b.kit.Close(); err != nil {
		t.Fatal(err)
	}
}

var testTypes = []app.TypeVersion{
	{Tipo: "teste:a", Versao: "1.0.0", Audiencia: app.AudienciaTodos,
		Schema:  json.RawMessage(`{"type":"object","required":["n"],"properties":{"n":{"type":"integer"},"cpf":{"type":"string"}}}`),
		Redacao: redact.Rules{Manter: []string{"/n"}, Hash: []string{"/cpf"}}},
	{Tipo: "teste:b", Versao: "1.0.0", Audiencia: app.AudienciaTodos,
		Schema:  json.RawMessage(`{"type":"object"}`),
		Redacao: redact.Rules{Manter: []string{""}}},
}

func (b *bundle) publish(t *testing.T, req app.PublishRequest) app.Event {
	t.Helper()
	ev, created, err := b.pub.Publish(context.Background(), req)
	if err != nil {
		t.Fatalf("publish %s: %v", req.Tipo, err)
	}
	if !created {
		t.Fatalf("publish %s: not created", req.Tipo)
	}
	return ev
}

func reqA(n int) app.PublishRequest {
	return app.PublishRequest{Tipo: "teste:a", Origem: "t", Payload: json.RawMessage(fmt.Sprintf(`{"n":%d,"cpf":"12345678901"}`, n))}
}

func (b *bundle) count(t *testing.T) int64 {
	t.Helper()
	n, err := b.db.CountEvents(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// consumed waits until cond holds, re-checking it whenever c's consumers
// handle an event, dead-letter one or save a cursor.
func consumed(t *testing.T, c *app.Consumers, what string, cond func() bool) {
	t.Helper()
	storetest.Await(t, what, cond, &c.Signals.Handled, &c.Signals.DeadLettered, &c.Signals.Saved)
}

// dlqSpy watches the status moves the consumers ask of the real store.
type dlqSpy struct {
	app.ConsumerStore
	mu  sync.Mutex
	got []string
}

func (s *dlqSpy) SetDLQStatus(ctx context.Context, eventID, colonia, status string) error {
	s.mu.Lock()
	s.got = append(s.got, eventID+" "+status)
	s.mu.Unlock()
	return s.ConsumerStore.SetDLQStatus(ctx, eventID, colonia, status)
}

func (s *dlqSpy) moves() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

// recorder is a handler that remembers what it saw and fails on demand.
type recorder struct {
	mu   sync.Mutex
	seen []app.Event
	fail func(app.Event) error
}

func (r *recorder) handle(ctx context.Context, ev app.Event) error {
	r.mu.Lock()
	r.seen = append(r.seen, ev)
	f := r.fail
	r.mu.Unlock()
	if f != nil {
		return f(ev)
	}
	return nil
}

func (r *recorder) events() []app.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]app.Event(nil), r.seen...)
}

func TestPublish(t *testing.T) {
	t.Run("T1 a valid event is stored with a sequence and delivered with its full payload", func(t *testing.T) {
		rec := &recorder{}
		b := setup(t, "", func(c *app.Consumers) { c.Subscribe("teste:a", "col", "rec", rec.handle) })
		ev := b.publish(t, reqA(7))
		if ev.Sequence != 1 {
			t.Fatalf("sequence %d, want 1", ev.Sequence)
		}
		if got := string(ev.Payload); !strings.Contains(got, `"cpf":"hmac-sha256:`) || strings.Contains(got, "12345678901") {
			t.Fatalf("the returned record must be the redacted one: %s", got)
		}
		consumed(t, b.consumers, "handler", func() bool { return len(rec.events()) == 1 })
		if got := string(rec.events()[0].Payload); got != `{"n":7,"cpf":"12345678901"}` {
			t.Fatalf("live consumer got %s, want the full payload", got)
		}
	})
	t.Run("T6 an unregistered type is refused and nothing is inserted", func(t *testing.T) {
		b := setup(t, "", nil)
		_, _, err := b.pub.Publish(t.Context(), app.PublishRequest{Tipo: "teste:nao-existe", Origem: "t", Payload: json.RawMessage(`{}`)})
		assertInvalid(t, err, "/tipo")
		if b.count(t) != 0 {
			t.Fatal("an invalid event reached the log")
		}
	})
	for _, payload := range []string{``, `null`, `"texto"`, `[1,2]`, `42`} {
		t.Run("T7 T8 payload "+payload+" is refused and nothing is inserted", func(t *testing.T) {
			b := setup(t, "", nil)
			_, _, err := b.pub.Publish(t.Context(), app.PublishRequest{Tipo: "teste:b", Origem: "t", Payload: json.RawMessage(payload)})
			assertInvalid(t, err, "/payload")
			if b.count(t) != 0 {
				t.Fatal("an invalid event reached the log")
			}
		})
	}
	t.Run("T9 T19 the same event_id twice stores one row and emits once", func(t *testing.T) {
		rec := &recorder{}
		b := setup(t, "", func(c *app.Consumers) { c.Subscribe("teste:a", "col", "rec", rec.handle) })
		req := reqA(1)
		req.EventID = "0199bb3e-0000-7000-8000-00000000004a"
		first := b.publish(t, req)
		again, created, err := b.pub.Publish(t.Context(), req)
		if err != nil || created {
			t.Fatalf("repeat: created=%v err=%v", created, err)
		}
		if again.Sequence != first.Sequence || again.EventID != first.EventID {
			t.Fatalf("repeat returned %+v, want the first record", again)
		}
		b.publish(t, reqA(2)) // a later event proves the consumer moved past the repeat
		consumed(t, b.consumers, "handler", func() bool { return len(rec.events()) == 2 })
		if b.count(t) != 2 {
			t.Fatalf("count %d, want 2", b.count(t))
		}
		if got := rec.events(); got[0].EventID != first.EventID || got[1].EventID == first.EventID {
			t.Fatal("the duplicate was emitted again")
		}
	})
	t.Run("concurrent duplicates insert one row", func(t *testing.T) {
		b := setup(t, "", nil)
		req := reqA(1)
		req.EventID = "0199bb3e-0000-7000-8000-0000000000ff"
		var created atomic.Int32
		var wg sync.WaitGroup
		for range 32 {
			wg.Go(func() {
				_, c, err := b.pub.Publish(context.Background(), req)
				if err != nil {
					t.Error(err)
				}
				if c {
					created.Add(1)
				}
			})
		}
		wg.Wait()
		if created.Load() != 1 || b.count(t) != 1 {
			t.Fatalf("created %d times, %d rows; want 1 and 1", created.Load(), b.count(t))
		}
	})
	t.Run("T12 T13 defaults: versao 1.0.0, correlacao_id = event_id, timestamp now", func(t *testing.T) {
		b := setup(t, "", nil)
		ev := b.publish(t, reqA(1))
		if ev.VersaoSchema != "1.0.0" || ev.CorrelacaoID != ev.EventID || ev.Timestamp.IsZero() {
			t.Fatalf("defaults not applied: %+v", ev)
		}
	})
	t.Run("formats, version and schema are validated before anything is stored", func(t *testing.T) {
		b := setup(t, "", nil)
		cases := []struct {
			name string
			req  app.PublishRequest
			path string
		}{
			{"bad event_id", app.PublishRequest{Tipo: "teste:b", Origem: "t", Payload: json.RawMessage(`{}`), EventID: "abc"}, "/event_id"},
			{"bad correlacao_id", app.PublishRequest{Tipo: "teste:b", Origem: "t", Payload: json.RawMessage(`{}`), CorrelacaoID: "1"}, "/correlacao_id"},
			{"bad timestamp", app.PublishRequest{Tipo: "teste:b", Origem: "t", Payload: json.RawMessage(`{}`), Timestamp: "ontem"}, "/timestamp"},
			{"version without schema", app.PublishRequest{Tipo: "teste:b", Origem: "t", Payload: json.RawMessage(`{}`), VersaoSchema: "9.0.0"}, "/versao_schema"},
			{"missing origem", app.PublishRequest{Tipo: "teste:b", Payload: json.RawMessage(`{}`)}, "/origem"},
			{"schema violation", app.PublishRequest{Tipo: "teste:a", Origem: "t", Payload: json.RawMessage(`{"n":"x","cpf":3}`)}, "/payload/n"},
		}
		for _, c := range cases {
			_, _, err := b.pub.Publish(t.Context(), c.req)
			assertInvalid(t, err, c.path)
			if b.count(t) != 0 {
				t.Fatalf("%s: an invalid event reached the log", c.name)
			}
		}
		_, _, err := b.pub.Publish(t.Context(), app.PublishRequest{Tipo: "teste:a", Origem: "t", Payload: json.RawMessage(`{"n":"x","cpf":3}`)})
		var e *app.Error
		errors.As(err, &e)
		if len(e.Details) != 2 {
			t.Fatalf("want both schema errors, got %+v", e.Details)
		}
	})
	t.Run("a deprecated version is refused", func(t *testing.T) {
		b := setup(t, "", nil)
		if _, err := b.registry.SetStatus(t.Context(), "teste:b", "1.0.0", app.StatusDeprecado); err != nil {
			t.Fatal(err)
		}
		_, _, err := b.pub.Publish(t.Context(), app.PublishRequest{Tipo: "teste:b", Origem: "t", Payload: json.RawMessage(`{}`)})
		assertInvalid(t, err, "/versao_schema")
		if b.count(t) != 0 {
			t.Fatal("an event of a deprecated version reached the log")
		}
	})
}

func assertInvalid(t *testing.T, err error, path string) {
	t.Helper()
	var e *app.Error
	if !errors.As(err, &e) || e.Code != app.EInvalid {
		t.Fatalf("want a validation error at %s, got %v", path, err)
	}
	for _, d := range e.Details {
		if d.Caminho == path {
			return
		}
	}
	t.Fatalf("no detail at %s in %+v", path, e.Details)
}

func TestQueries(t *testing.T) {
	b := setup(t, "", nil)
	for i := range 12 {
		req := reqA(i)
		if i%3 == 0 {
			req = app.PublishRequest{Tipo: "teste:b", Origem: "outra", Payload: json.RawMessage(`{"k":1}`)}
		}
		b.publish(t, req)
	}
	t.Run("T3 a type filter returns only that type, paginated", func(t *testing.T) {
		page, err := b.audit.Events(t.Context(), app.EventFilter{Tipo: "teste:b", Limite: 2})
		if err != nil {
			t.Fatal(err)
		}
		if page.Total != 4 || len(page.Linhas) != 2 || page.Linhas[0].Tipo != "teste:b" {
			t.Fatalf("got total %d, %d rows", page.Total, len(page.Linhas))
		}
		next, _ := b.audit.Events(t.Context(), app.EventFilter{Tipo: "teste:b", Limite: 2, Deslocamento: 2})
		if next.Linhas[0].Sequence <= page.Linhas[1].Sequence {
			t.Fatal("second page does not follow the first")
		}
	})
	t.Run("T14 limite is capped at 500", func(t *testing.T) {
		page, _ := b.audit.Events(t.Context(), app.EventFilter{Limite: 10000})
		if page.Limite != 500 {
			t.Fatalf("limite %d, want 500", page.Limite)
		}
	})
	t.Run("T4 T16 replay returns sequence > N in order, filtered by type", func(t *testing.T) {
		var got []int64
		for ev, err := range b.audit.Replay(t.Context(), 3, []string{"teste:a"}) {
			if err != nil {
				t.Fatal(err)
			}
			if ev.Tipo != "teste:a" {
				t.Fatalf("replay returned %s", ev.Tipo)
			}
			got = append(got, ev.Sequence)
		}
		want := []int64{5, 6, 8, 9, 11, 12}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("replay %v, want %v", got, want)
		}
	})
	t.Run("T15 replay past the head is empty", func(t *testing.T) {
		for range b.audit.Replay(t.Context(), 12, nil) {
			t.Fatal("replay past the head returned an event")
		}
	})
	t.Run("T5 an event by id, or not found", func(t *testing.T) {
		first, _ := b.audit.Events(t.Context(), app.EventFilter{Limite: 1})
		ev, err := b.audit.Event(t.Context(), first.Linhas[0].EventID)
		if err != nil || ev.Sequence != 1 {
			t.Fatalf("got %+v, %v", ev, err)
		}
		if _, err := b.audit.Event(t.Context(), "0199bb3e-0000-7000-8000-000000000000"); app.ErrorCode(err) != app.ENotFound {
			t.Fatalf("want not found, got %v", err)
		}
	})
}

func TestConsumers(t *testing.T) {
	t.Run("T2 T10 T11 T17 a failing handler is recorded in the DLQ and others still run", func(t *testing.T) {
		bad := &recorder{fail: func(app.Event) error { return errors.New("boom") }}
		good := &recorder{}
		panicky := &recorder{fail: func(app.Event) error { panic("kaboom") }}
		b := setup(t, "", func(c *app.Consumers) {
			c.Subscribe("teste:a", "ruim", "ruimHandler", bad.handle)
			c.Subscribe("teste:a", "boa", "boaHandler", good.handle)
			c.Subscribe("teste:a", "panico", "panicoHandler", panicky.handle)
		})
		ev := b.publish(t, reqA(1))
		consumed(t, b.consumers, "two DLQ entries", func() bool {
			st, _ := b.audit.DLQ(t.Context())
			return st.TotalPendentes == 2
		})
		consumed(t, b.consumers, "good handler", func() bool { return len(good.events()) == 1 })
		st, _ := b.audit.DLQ(t.Context())
		if st.PendentesPorColonia["ruim"] != 1 || st.PendentesPorColonia["panico"] != 1 {
			t.Fatalf("per colonia %v", st.PendentesPorColonia)
		}
		for _, e := range st.Entradas {
			if e.EventID != ev.EventID || e.Sequence != ev.Sequence || e.Status != app.DLQPendente || e.Tentativas != 1 {
				t.Fatalf("entry %+v", e)
			}
			switch e.Colonia {
			case "ruim":
				if e.HandlerNome != "ruimHandler" || e.MensagemErro != "boom" {
					t.Fatalf("entry %+v", e)
				}
			case "panico":
				if !strings.Contains(e.MensagemErro, "kaboom") || !strings.Contains(e.PilhaErro, "goroutine") {
					t.Fatalf("a panic must be recorded with its stack: %+v", e)
				}
			}
		}
		page, _ := b.audit.Events(t.Context(), app.EventFilter{})
		if page.Total != 1 {
			t.Fatal("the event must stay in the log")
		}
	})
	t.Run("a handler that never returns times out into the DLQ", func(t *testing.T) {
		stuck := &recorder{}
		stuckHandler := func(ctx context.Context, ev app.Event) error {
			stuck.handle(ctx, ev)
			<-ctx.Done() // overruns its timeout, then honours the cancellation
			return ctx.Err()
		}
		b := setup(t, "", func(c *app.Consumers) {
			c.HandlerTimeout = 50 * time.Millisecond
			c.Subscribe("teste:a", "lenta", "h", stuckHandler)
		})
		b.publish(t, reqA(1))
		consumed(t, b.consumers, "timeout entry", func() bool {
			st, _ := b.audit.DLQ(t.Context())
			return st.TotalPendentes == 1 && strings.Contains(st.Entradas[0].MensagemErro, "excedeu o tempo limite")
		})
	})
	t.Run("a handler that ignores its cancellation is abandoned: recorded, its colonia goes on, shutdown does not wait", func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		rec := &recorder{}
		deaf := func(ctx context.Context, ev app.Event) error {
			rec.handle(ctx, ev)
			if len(rec.events()) == 1 {
				<-release // never looks at ctx
			}
			return nil
		}
		b := setup(t, "", func(c *app.Consumers) {
			c.HandlerTimeout = 50 * time.Millisecond
			c.Subscribe("teste:a", "surda", "h", deaf)
		})
		first := b.publish(t, reqA(1))
		second := b.publish(t, reqA(2))
		consumed(t, b.consumers, "the next event handled", func() bool { return len(rec.events()) == 2 })
		if got := rec.events()[1].EventID; got != second.EventID {
			t.Fatalf("handled %s second, want %s", got, second.EventID)
		}
		st, _ := b.audit.DLQ(t.Context())
		if st.TotalPendentes != 1 || st.Entradas[0].EventID != first.EventID || !strings.Contains(st.Entradas[0].MensagemErro, "abandonado") {
			t.Fatalf("DLQ %+v", st)
		}
		// The third event reaches the handler while the first is still
		// stuck in it; shutdown does not wait for that one either.
		b.publish(t, reqA(3))
		consumed(t, b.consumers, "the third event handled", func() bool { return len(rec.events()) == 3 })
		stopped := make(chan struct{})
		go func() { b.kit.Stop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(10 * time.Second):
			t.Fatal("Wait blocks on an abandoned handler")
		}
	})
	t.Run("an entry that fails its fifth attempt is given up and leaves the open DLQ", func(t *testing.T) {
		rec := &recorder{fail: func(app.Event) error { return errors.New("still down") }}
		b := setup(t, "", func(c *app.Consumers) { c.Subscribe("teste:a", "col", "h", rec.handle) })
		ev := b.publish(t, reqA(1))
		consumed(t, b.consumers, "DLQ entry", func() bool { st, _ := b.audit.DLQ(t.Context()); return st.TotalPendentes == 1 })
		for attempt := 2; attempt <= app.MaxDLQAttempts; attempt++ {
			b.clock.Add(app.ReprocessInterval)
			res, err := b.consumers.ReprocessDLQ(t.Context(), "col")
			if err != nil || res.Reprocessados != 1 || res.Falharam != 1 {
				t.Fatalf("attempt %d: %+v %v", attempt, res, err)
			}
			st, _ := b.audit.DLQ(t.Context())
			if attempt < app.MaxDLQAttempts && (st.TotalPendentes != 1 || st.Entradas[0].Tentativas != attempt) {
				t.Fatalf("after attempt %d: %+v", attempt, st)
			}
			if attempt == app.MaxDLQAttempts && st.TotalPendentes != 0 {
				t.Fatalf("still open after %d attempts: %+v", attempt, st)
			}
		}
		b.clock.Add(app.ReprocessInterval)
		if res, err := b.consumers.ReprocessDLQ(t.Context(), "col"); err != nil || res.Reprocessados != 0 {
			t.Fatalf("a given-up entry was retried: %+v %v", res, err)
		}
		// Given up, it no longer holds the cursor back.
		cur, _ := b.db.Cursors(t.Context(), "col")
		if cur["teste:a"] != ev.Sequence {
			t.Fatalf("cursor %d, want %d", cur["teste:a"], ev.Sequence)
		}
	})
	t.Run("T18 failure, DLQ, reprocess, resolved; at most once a minute", func(t *testing.T) {
		var failing atomic.Bool
		failing.Store(true)
		rec := &recorder{fail: func(app.Event) error {
			if failing.Load() {
				return errors.New("down")
			}
			return nil
		}}
		spy := &dlqSpy{}
		b := setup(t, "", func(c *app.Consumers) {
			spy.ConsumerStore = c.Store
			c.Store = spy
			c.Subscribe("teste:a", "col", "h", rec.handle)
		})
		ev := b.publish(t, reqA(1))
		consumed(t, b.consumers, "DLQ entry", func() bool { st, _ := b.audit.DLQ(t.Context()); return st.TotalPendentes == 1 })
		if st, _ := b.audit.DLQ(t.Context()); st.Entradas[0].Status != app.DLQPendente || st.Entradas[0].EventID != ev.EventID {
			t.Fatalf("DLQ entry %+v, want pendente for %s", st.Entradas[0], ev.EventID)
		}
		failing.Store(false)
		res, err := b.consumers.ReprocessDLQ(t.Context(), "col")
		if err != nil || res.Reprocessados != 1 || res.Resolvidos != 1 {
			t.Fatalf("reprocess %+v %v", res, err)
		}
		if got, want := spy.moves(), []string{ev.EventID + " retrying", ev.EventID + " resolved"}; !slices.Equal(got, want) {
			t.Fatalf("DLQ status moves %q, want %q", got, want)
		}
		st, _ := b.audit.DLQ(t.Context())
		if st.TotalPendentes != 0 {
			t.Fatalf("still pending: %+v", st)
		}
		// Replay and reprocess deliver the redacted payload from the log.
		last := rec.events()[len(rec.events())-1]
		if last.EventID != ev.EventID || strings.Contains(string(last.Payload), "12345678901") {
			t.Fatalf("reprocess delivered %s", last.Payload)
		}
		_, err = b.consumers.ReprocessDLQ(t.Context(), "col")
		var e *app.Error
		if !errors.As(err, &e) || e.Code != app.ERateLimited || e.RetryAfter <= 0 {
			t.Fatalf("second reprocess within a minute: %v", err)
		}
		b.clock.Add(app.ReprocessInterval)
		if _, err := b.consumers.ReprocessDLQ(t.Context(), "col"); err != nil {
			t.Fatalf("reprocess after a minute: %v", err)
		}
		cur, _ := b.db.Cursors(t.Context(), "col")
		if cur["teste:a"] != ev.Sequence {
			t.Fatalf("cursor %d after resolution, want %d", cur["teste:a"], ev.Sequence)
		}
	})
	t.Run("T20 a restart replays the failed type from its failure; the other type's cursor is untouched", func(t *testing.T) {
		loc := storetest.Location(t)
		var failA atomic.Bool
		failA.Store(true)
		recA := &recorder{fail: func(app.Event) error {
			if failA.Load() {
				return errors.New("A down")
			}
			return nil
		}}
		recB := &recorder{}
		sub := func(c *app.Consumers) {
			c.Subscribe("teste:a", "col", "hA", recA.handle)
			c.Subscribe("teste:b", "col", "hB", recB.handle)
		}
		b := setup(t, loc, sub)
		evA := b.publish(t, reqA(1))
		evB := b.publish(t, app.PublishRequest{Tipo: "teste:b", Origem: "t", Payload: json.RawMessage(`{}`)})
		consumed(t, b.consumers, "B handled and A failed", func() bool {
			st, _ := b.audit.DLQ(t.Context())
			cur, _ := b.db.Cursors(t.Context(), "col")
			return len(recB.events()) == 1 && st.TotalPendentes == 1 && cur["teste:b"] == evB.Sequence
		})
		cur, _ := b.db.Cursors(t.Context(), "col")
		if cur["teste:a"] >= evA.Sequence {
			t.Fatalf("cursor A advanced past its failure: %d", cur["teste:a"])
		}
		b.close(t)

		failA.Store(false)
		recA2, recB2 := &recorder{}, &recorder{}
		b2 := setup(t, loc, func(c *app.Consumers) {
			c.Subscribe("teste:a", "col", "hA", recA2.handle)
			c.Subscribe("teste:b", "col", "hB", recB2.handle)
		})
		consumed(t, b2.consumers, "replay of A", func() bool { return len(recA2.events()) == 1 })
		if recA2.events()[0].EventID != evA.EventID {
			t.Fatal("replay delivered the wrong event")
		}
		consumed(t, b2.consumers, "DLQ resolved", func() bool { st, _ := b2.audit.DLQ(t.Context()); return st.TotalPendentes == 0 })
		if n := len(recB2.events()); n != 0 {
			t.Fatalf("B was replayed %d events although its cursor was current", n)
		}
	})
	t.Run("a new consumer starts at the head, not at 0", func(t *testing.T) {
		loc := storetest.Location(t)
		b := setup(t, loc, nil)
		b.publish(t, reqA(1))
		b.publish(t, reqA(2))
		b.close(t)
		rec := &recorder{}
		b2 := setup(t, loc, func(c *app.Consumers) { c.Subscribe("teste:a", "nova", "h", rec.handle) })
		cur, _ := b2.db.Cursors(t.Context(), "nova")
		if cur["teste:a"] != 2 {
			t.Fatalf("seeded cursor %d, want 2", cur["teste:a"])
		}
		b2.publish(t, reqA(3))
		consumed(t, b2.consumers, "live event", func() bool { return len(rec.events()) == 1 })
		if rec.events()[0].Sequence != 3 {
			t.Fatal("a new consumer replayed history")
		}
	})
	t.Run("a consumer that falls behind catches up from the log without loss or repeats", func(t *testing.T) {
		release := make(chan struct{})
		var mu sync.Mutex
		var seqs []int64
		slow := func(ctx context.Context, ev app.Event) error {
			<-release
			mu.Lock()
			seqs = append(seqs, ev.Sequence)
			mu.Unlock()
			return nil
		}
		b := setup(t, "", func(c *app.Consumers) {
			c.HandlerTimeout = time.Hour // blocked on purpose, not timed out
			c.Subscribe("teste:b", "lenta", "h", slow)
		})
		const n = 5000 // more than the live buffer holds
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				for i := w; i < n; i += 8 {
					b.publish(t, app.PublishRequest{Tipo: "teste:b", Origem: "t", Payload: json.RawMessage(`{}`)})
				}
			})
		}
		wg.Wait()
		close(release)
		consumed(t, b.consumers, "catch-up", func() bool { mu.Lock(); defer mu.Unlock(); return len(seqs) >= n })
		mu.Lock()
		defer mu.Unlock()
		if len(seqs) != n {
			dup := map[int64]int{}
			for i, s := range seqs {
				if dup[s] > 0 {
					t.Logf("seq %d repeated at index %d (first at %d)", s, i, dup[s]-1)
				}
				dup[s] = i + 1
			}
			t.Fatalf("handled %d events, want %d", len(seqs), n)
		}
		for i, s := range seqs {
			if s != int64(i+1) {
				t.Fatalf("event %d has sequence %d: lost, repeated or out of order", i, s)
			}
		}
	})
}

func TestALaggingConsumerHoldsBoundedBytes(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var seqs []int64
	b := setup(t, "", func(c *app.Consumers) {
		c.HandlerTimeout = time.Hour
		c.Subscribe("teste:b", "lenta", "h", func(ctx context.Context, ev app.Event) error {
			<-release
			mu.Lock()
			seqs = append(seqs, ev.Sequence)
			mu.Unlock()
			return nil
		})
	})
	big := json.RawMessage(`{"blob":"` + strings.Repeat("x", 900<<10) + `"}`)
	const n = 48 // about 86 MiB of payloads (full and redacted) against a 32 MiB bound
	for range n {
		b.publish(t, app.PublishRequest{Tipo: "teste:b", Origem: "t", Payload: big})
	}
	close(release)
	consumed(t, b.consumers, "catch-up", func() bool { mu.Lock(); defer mu.Unlock(); return len(seqs) >= n })
	mu.Lock()
	defer mu.Unlock()
	for i, s := range seqs {
		if s != int64(i+1) {
			t.Fatalf("event %d has sequence %d: lost, repeated or out of order", i, s)
		}
	}
}

func TestRegistry(t *testing.T) {
	b := setup(t, "", nil)
	ctx := t.Context()
	tv := testTypes[0]
	if _, created, err := b.registry.Register(ctx, tv); err != nil || created {
		t.Fatalf("identical registration: created=%v err=%v", created, err)
	}
	changed := tv
	changed.Schema = json.RawMessage(`{"type":"object"}`)
	if _, _, err := b.registry.Register(ctx, changed); app.ErrorCode(err) != app.EConflict {
		t.Fatalf("changed content: want conflict, got %v", err)
	}
	broken := []struct {
		tv   app.TypeVersion
		path string
	}{
		{app.TypeVersion{Tipo: "Sem Dois Pontos", Versao: "1.0.0", Audiencia: "todos", Schema: json.RawMessage(`{}`)}, "/tipo"},
		{app.TypeVersion{Tipo: "x:y", Versao: "1.0", Audiencia: "todos", Schema: json.RawMessage(`{}`)}, "/versao"},
		{app.TypeVersion{Tipo: "x:y", Versao: "1.0.0", Audiencia: "prefeitura", Schema: json.RawMessage(`{}`)}, "/audiencia"},
		{app.TypeVersion{Tipo: "x:y", Versao: "1.0.0", Audiencia: "todos", Schema: json.RawMessage(`{"type":"objeto"}`)}, "/schema"},
		{app.TypeVersion{Tipo: "x:y", Versao: "1.0.0", Audiencia: "todos", Schema: json.RawMessage(`{}`),
			Redacao: redact.Rules{Hash: []string{"cpf"}}}, "/redacao/hash/0"},
	}
	for _, c := range broken {
		_, _, err := b.registry.Register(ctx, c.tv)
		assertInvalid(t, err, c.path)
	}
	if len(b.registry.List()) != len(testTypes) {
		t.Fatal("a refused registration was stored")
	}
}

// Replay reads the log in batches of ReplayBatch: past the first batch it
// must continue after the last sequence it read, neither repeating nor
// skipping one.
func TestReplayPagesThroughBatches(t *testing.T) {
	b := setup(t, "", nil)
	const n = 2*app.ReplayBatch + 500
	for start := 0; start < n; start += app.ReplayBatch {
		var batch []app.Pending
		for i := start; i < min(start+app.ReplayBatch, n); i++ {
			id := uuid.Must(uuid.NewV7()).String()
			tipo := "teste:a"
			if i%2 == 1 {
				tipo = "teste:b"
			}
			batch = append(batch, app.Pending{Event: app.Event{EventID: id, Tipo: tipo, VersaoSchema: "1.0.0",
				Timestamp: time.Now(), Origem: "teste", CorrelacaoID: id, Payload: json.RawMessage(`{"n":1}`)}})
		}
		if _, err := b.db.Append(t.Context(), batch); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		name  string
		after int64
		tipos []string
		want  []int64
	}{
		{"every event", 0, nil, seqRange(1, n, 1)},
		{"after a sequence", 1234, nil, seqRange(1235, n, 1)},
		{"one type, spread over more batches than it fills", 0, []string{"teste:b"}, seqRange(2, n, 2)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got []int64
			for ev, err := range b.audit.Replay(t.Context(), tt.after, tt.tipos) {
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, ev.Sequence)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("replayed %d events (%v ... %v), want %d (%v ... %v)", len(got), head(got), tail(got), len(tt.want), head(tt.want), tail(tt.want))
			}
		})
	}
}

func seqRange(from, to, step int64) []int64 {
	var out []int64
	for s := from; s <= to; s += step {
		out = append(out, s)
	}
	return out
}

func head(s []int64) []int64 { return s[:min(3, len(s))] }
func tail(s []int64) []int64 { return s[max(0, len(s)-3):] }

// Schemas are 2020-12: another declared draft is refused at registration,
// but a version stored before that rule still loads and still answers an
// identical re-registration with 200.
func TestRegistryDraftRule(t *testing.T) {
	loc := storetest.Location(t)
	old := app.TypeVersion{Tipo: "antigo:tipo", Versao: "1.0.0", Status: app.StatusAtivo, Audiencia: app.AudienciaTodos,
		Schema:   json.RawMessage(`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object"}`),
		Redacao:  redact.Rules{Manter: []string{""}},
		CriadoEm: time.Now()}
	db := storetest.OpenAt(t, loc, nil)
	if _, _, err := db.InsertTypeVersion(t.Context(), old, nil); err != nil { // as an older geohub stored it
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	b := setup(t, loc, nil)
	if _, created, err := b.registry.Register(t.Context(), old); err != nil || created {
		t.Fatalf("identical re-registration of a stored draft-07 version: created=%v err=%v", created, err)
	}
	newer := old
	newer.Versao = "1.0.1"
	if _, _, err := b.registry.Register(t.Context(), newer); app.ErrorCode(err) != app.EInvalid {
		t.Fatalf("a new draft-07 version: %v", err)
	}
	for i, decl := range []string{"https://json-schema.org/draft/2020-12/schema", "http://json-schema.org/draft/2020-12/schema#"} {
		ok := old
		ok.Versao = fmt.Sprintf("2.0.%d", i)
		ok.Schema = json.RawMessage(`{"$schema":"` + decl + `","type":"object"}`)
		if _, _, err := b.registry.Register(t.Context(), ok); err != nil {
			t.Fatalf("$schema %s: %v", decl, err)
		}
	}
}
