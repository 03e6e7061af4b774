package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"geohub/app"
)

// EventLog is the event log of a backend under test, with its commit hook.
type EventLog interface {
	app.PageLog
	OnCommit(fn func([]app.Appended))
}

// EventLogUnderTest is one fresh, empty database of a backend, as
// EventLogConformance needs it. The helpers are the backend's own, since
// the outbox's other interfaces are not what is tested here.
type EventLogUnderTest struct {
	Log EventLog
	// AddIntegrator creates an integrator that outbox rows may name: the
	// outbox references its recipients.
	AddIntegrator func(t *testing.T, id string)
	// Outbox lists the outbox rows of one event.
	Outbox func(t *testing.T, eventID string) []OutboxRow
}

// OutboxRow is what EventLogConformance checks of an outbox row.
type OutboxRow struct {
	Integrador, Agregado string
	Sequencia            int64
}

// NewEvent is a valid event of tipo with a fresh UUIDv7.
func NewEvent(tipo string) app.Event {
	id := uuid.Must(uuid.NewV7()).String()
	return app.Event{EventID: id, Tipo: tipo, VersaoSchema: "1.0.0", Timestamp: time.Now(),
		Origem: "teste", CorrelacaoID: id, Payload: json.RawMessage(`{"a":1}`)}
}

// EventLogConformance checks the contract of app.EventLog and app.PageLog
// (Append's group commit, idempotency, outbox rows and their sequences,
// filters, pages and chunks) on a backend; open gives each subtest a
// fresh database. Every backend runs the same checks, so they behave alike.
func EventLogConformance(t *testing.T, open func(t *testing.T) EventLogUnderTest) {
	to := func(ids ...string) *app.Outbox {
		return &app.Outbox{Body: []byte(`{}`), Agregado: "x:1", Recipients: func(string) []string { return ids }}
	}
	appendOne := func(t *testing.T, l app.EventLog, ev app.Event, full json.RawMessage, out *app.Outbox) (app.Event, bool, error) {
		t.Helper()
		stored, err := l.Append(t.Context(), []app.Pending{{Event: ev, Full: full, Outbox: out}})
		if err != nil {
			return app.Event{}, false, err
		}
		return stored[0].Event, stored[0].Created, nil
	}
	gapless := func(t *testing.T, l app.EventLog, n int) {
		t.Helper()
		rows, _, err := l.EventsAfter(t.Context(), 0, nil, n+10, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != n {
			t.Fatalf("log holds %d rows, want %d", len(rows), n)
		}
		for i, ev := range rows {
			if ev.Sequence != int64(i+1) {
				t.Fatalf("row %d has sequence %d: the log has a gap", i, ev.Sequence)
			}
		}
	}

	t.Run("concurrent appends get distinct sequences, handed to the hook in order", func(t *testing.T) {
		t.Parallel()
		u := open(t)
		var committed [][]app.Appended
		var mu sync.Mutex
		u.Log.OnCommit(func(b []app.Appended) {
			mu.Lock()
			committed = append(committed, b)
			mu.Unlock()
		})
		const n = 200
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				_, created, err := appendOne(t, u.Log, NewEvent("a:b"), json.RawMessage(`{"full":true}`), nil)
				if err != nil || !created {
					t.Errorf("append: created=%v err=%v", created, err)
				}
			})
		}
		wg.Wait()
		var last int64
		count := 0
		mu.Lock()
		defer mu.Unlock()
		for _, b := range committed {
			for _, a := range b {
				if a.Event.Sequence != last+1 {
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
		gapless(t, u.Log, n)
		if len(committed) == n {
			t.Logf("no two appends shared a commit (machine too fast to queue?)")
		}
	})

	t.Run("concurrent appends of one event_id store it once", func(t *testing.T) {
		t.Parallel()
		u := open(t)
		u.AddIntegrator(t, "int-1")
		ev := NewEvent("a:b")
		const n = 50
		var news sync.Map
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				got, c, err := appendOne(t, u.Log, ev, nil, to("int-1"))
				if err != nil {
					t.Error(err)
					return
				}
				news.Store(i, c)
				if got.EventID != ev.EventID || got.Sequence != 1 {
					t.Errorf("got %s seq %d, want %s seq 1", got.EventID, got.Sequence, ev.EventID)
				}
			})
		}
		wg.Wait()
		created := 0
		news.Range(func(_, v any) bool {
			if v.(bool) {
				created++
			}
			return true
		})
		if created != 1 {
			t.Fatalf("%d callers were told they created the event, want 1", created)
		}
		if n, _ := u.Log.CountEvents(t.Context()); n != 1 {
			t.Fatalf("log holds %d rows, want 1", n)
		}
		if rows := u.Outbox(t, ev.EventID); len(rows) != 1 {
			t.Fatalf("%d outbox rows for one event and one recipient", len(rows))
		}
	})

	t.Run("a duplicate inside one batch is stored once", func(t *testing.T) {
		t.Parallel()
		u := open(t)
		ev := NewEvent("a:b")
		stored, err := u.Log.Append(t.Context(), []app.Pending{{Event: ev}, {Event: ev}, {Event: NewEvent("a:b")}})
		if err != nil {
			t.Fatal(err)
		}
		if !stored[0].Created || stored[1].Created || stored[1].Event.Sequence != 1 || stored[2].Event.Sequence != 2 {
			t.Fatalf("stored %+v", stored)
		}
		gapless(t, u.Log, 2)
	})

	t.Run("a batch is all or nothing", func(t *testing.T) {
		t.Parallel()
		u := open(t)
		u.AddIntegrator(t, "int-1")
		ctx := t.Context()
		first, second := NewEvent("a:b"), NewEvent("a:b")
		// The outbox's reference to integrator refuses a recipient that
		// does not exist.
		if _, err := u.Log.Append(ctx, []app.Pending{{Event: first, Outbox: to("int-1")},
			{Event: second, Outbox: to("nao-existe")}}); err == nil {
			t.Fatal("a batch with a failing event was accepted")
		}
		for _, id := range []string{first.EventID, second.EventID} {
			if _, err := u.Log.Event(ctx, id); !errors.Is(err, app.ErrNotFound) {
				t.Fatalf("event %s of a failed batch: %v", id, err)
			}
		}
		stored, err := u.Log.Append(ctx, []app.Pending{{Event: first, Outbox: to("int-1")}, {Event: second, Outbox: to("int-1")}})
		if err != nil || len(stored) != 2 || !stored[0].Created || !stored[1].Created ||
			stored[0].Event.Sequence != 1 || stored[1].Event.Sequence != 2 {
			t.Fatalf("repaired batch: %+v %v", stored, err)
		}
		for i, ev := range []app.Event{first, second} {
			rows := u.Outbox(t, ev.EventID)
			if len(rows) != 1 || rows[0].Sequencia != int64(i+1) {
				t.Fatalf("outbox of event %d: %+v, want sequencia %d", i+1, rows, i+1)
			}
		}
	})

	t.Run("a failing append undoes neither the others of its group commit nor leaves a gap", func(t *testing.T) {
		t.Parallel()
		u := open(t)
		u.AddIntegrator(t, "int-1")
		var hooked int
		var mu sync.Mutex
		u.Log.OnCommit(func(b []app.Appended) {
			mu.Lock()
			hooked += len(b)
			mu.Unlock()
		})
		var wg sync.WaitGroup
		errs := make(chan error, 100)
		for i := range 100 {
			wg.Go(func() {
				out := to("int-1")
				if i%10 == 0 {
					out = to("int-1", "nao-existe")
				}
				_, _, err := appendOne(t, u.Log, NewEvent("a:b"), nil, out)
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		failed := 0
		for err := range errs {
			if err != nil {
				failed++
			}
		}
		if failed != 10 {
			t.Fatalf("%d appends failed, want the 10 bad ones", failed)
		}
		gapless(t, u.Log, 90)
		mu.Lock()
		defer mu.Unlock()
		if hooked != 90 {
			t.Fatalf("the hook saw %d events, want 90", hooked)
		}
	})

	t.Run("outbox sequences are gapless per integrator and aggregate, and owners stick", func(t *testing.T) {
		t.Parallel()
		u := open(t)
		u.AddIntegrator(t, "int-1")
		u.AddIntegrator(t, "int-2")
		ctx := t.Context()
		var hooked []app.Appended
		var mu sync.Mutex
		u.Log.OnCommit(func(b []app.Appended) {
			mu.Lock()
			hooked = append(hooked, b...)
			mu.Unlock()
		})
		// The originator of x:1 is the first integrator that claims it;
		// events of audience "originador" go to it alone.
		owned := func(claim string) *app.Outbox {
			return &app.Outbox{Body: []byte(`{"b":1}`), Agregado: "x:1", Claim: claim, NeedsOwner: true,
				Recipients: func(owner string) []string { return []string{owner} }}
		}
		var events []app.Event
		for _, out := range []*app.Outbox{owned("int-1"), owned("int-2"), owned(""), to("int-1", "int-2"),
			{Body: []byte(`{}`), Agregado: "y:1", Recipients: func(string) []string { return []string{"int-2"} }}} {
			ev, created, err := appendOne(t, u.Log, NewEvent("a:b"), nil, out)
			if err != nil || !created {
				t.Fatalf("append: %v %v", created, err)
			}
			events = append(events, ev)
		}
		var got []string
		for _, ev := range events {
			for _, r := range u.Outbox(t, ev.EventID) {
				got = append(got, fmt.Sprintf("%s/%s#%d", r.Integrador, r.Agregado, r.Sequencia))
			}
		}
		slices.Sort(got)
		want := []string{"int-1/x:1#1", "int-1/x:1#2", "int-1/x:1#3", "int-1/x:1#4", "int-2/x:1#1", "int-2/y:1#1"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("outbox rows %v, want %v", got, want)
		}
		mu.Lock()
		defer mu.Unlock()
		var deliveries []int
		for _, a := range hooked {
			deliveries = append(deliveries, a.Deliveries)
		}
		if fmt.Sprint(deliveries) != "[1 1 1 2 1]" {
			t.Fatalf("the hook counted deliveries %v", deliveries)
		}
		// A publish again of a stored event enqueues nothing.
		if _, created, err := appendOne(t, u.Log, events[0], nil, to("int-1")); err != nil || created {
			t.Fatalf("republish: created=%v err=%v", created, err)
		}
		if rows := u.Outbox(t, events[0].EventID); len(rows) != 1 {
			t.Fatalf("a republished event was enqueued again: %+v", rows)
		}
		if _, err := u.Log.Event(ctx, events[0].EventID); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("records read back as they were written", func(t *testing.T) {
		t.Parallel()
		u := open(t)
		ctx := t.Context()
		ev := NewEvent("a:b")
		ev.Timestamp = time.Date(2026, 3, 4, 5, 6, 7, 891234567, time.FixedZone("BRT", -3*3600))
		ev.Agregado, ev.Solicitacao = "x:1", "req-1"
		ev.Autoria = &app.Autoria{ID: "u-1", Tipo: "usuario"}
		ev.Payload = json.RawMessage(`{"z":1,"a":[true,null,"ç"]}`)
		stored, _, err := appendOne(t, u.Log, ev, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		plain, _, err := appendOne(t, u.Log, NewEvent("a:c"), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []app.Event{stored, plain} {
			got, err := u.Log.Event(ctx, want.EventID)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Timestamp.Equal(want.Timestamp) || !got.CriadoEm.Equal(want.CriadoEm) {
				t.Fatalf("times %v %v, want %v %v", got.Timestamp, got.CriadoEm, want.Timestamp, want.CriadoEm)
			}
			got.Timestamp, got.CriadoEm, want.Timestamp, want.CriadoEm = time.Time{}, time.Time{}, time.Time{}, time.Time{}
			if gj, wj := mustJSON(t, got), mustJSON(t, want); gj != wj {
				t.Fatalf("read back\n%s\nwant\n%s", gj, wj)
			}
		}
		if !stored.Timestamp.Equal(ev.Timestamp.Truncate(time.Millisecond)) {
			t.Fatalf("timestamp %v, want %v at millisecond precision", stored.Timestamp, ev.Timestamp)
		}
		if _, err := u.Log.Event(ctx, "nao-existe"); !errors.Is(err, app.ErrNotFound) {
			t.Fatalf("unknown event: %v", err)
		}
	})

	t.Run("filters, orders and pages", func(t *testing.T) {
		t.Parallel()
		u := open(t)
		ctx := t.Context()
		base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		for i := range 30 {
			ev := NewEvent(fmt.Sprintf("a:t%d", i%3))
			ev.Agregado = fmt.Sprintf("x:%d", i%2)
			ev.Origem = fmt.Sprintf("o%d", i%5)
			ev.Timestamp = base.Add(time.Duration(i) * time.Minute)
			if i == 7 {
				ev.CorrelacaoID = "corr"
			}
			if _, _, err := appendOne(t, u.Log, ev, nil, nil); err != nil {
				t.Fatal(err)
			}
		}
		seqs := func(rows []app.Event) []int64 {
			var out []int64
			for _, r := range rows {
				out = append(out, r.Sequence)
			}
			return out
		}
		for _, c := range []struct {
			name  string
			f     app.EventFilter
			total int
			want  string
		}{
			{"type and aggregate, offset", app.EventFilter{Tipo: "a:t1", Agregado: "x:1", Limite: 2, Deslocamento: 1}, 5, "[8 14]"},
			{"newest first", app.EventFilter{Tipo: "a:t0", Desc: true, Limite: 3}, 10, "[28 25 22]"},
			{"origin", app.EventFilter{Origem: "o3", Limite: 10}, 6, "[4 9 14 19 24 29]"},
			{"correlation", app.EventFilter{CorrelacaoID: "corr", Limite: 10}, 1, "[8]"},
			{"sequence range (keyset)", app.EventFilter{SequenceInicio: 11, SequenceFim: 13, Limite: 10}, 3, "[11 12 13]"},
			{"keyset, newest first", app.EventFilter{SequenceFim: 3, Desc: true, Limite: 10}, 3, "[3 2 1]"},
			{"time range", app.EventFilter{TimestampInicio: base.Add(5 * time.Minute), TimestampFim: base.Add(7 * time.Minute), Limite: 10}, 3, "[6 7 8]"},
			{"from a time", app.EventFilter{TimestampInicio: base.Add(28 * time.Minute), Limite: 10}, 2, "[29 30]"},
			{"until a time", app.EventFilter{TimestampFim: base.Add(time.Minute), Limite: 10}, 2, "[1 2]"},
		} {
			rows, total, err := u.Log.Events(ctx, c.f)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if total != c.total || fmt.Sprint(seqs(rows)) != c.want {
				t.Errorf("%s: total %d rows %v, want %d and %s", c.name, total, seqs(rows), c.total, c.want)
			}
			if n, err := u.Log.CountMatching(ctx, c.f); err != nil || n != c.total {
				t.Errorf("%s: CountMatching %d %v", c.name, n, err)
			}
		}
		after, cut, err := u.Log.EventsAfter(ctx, 20, []string{"a:t0", "a:t2"}, 3, 0)
		if err != nil || cut || fmt.Sprint(seqs(after)) != "[21 22 24]" {
			t.Fatalf("EventsAfter: %v %v %v", seqs(after), cut, err)
		}
		if max, err := u.Log.MaxSequence(ctx); err != nil || max != 30 {
			t.Fatalf("MaxSequence %d %v", max, err)
		}
		if n, err := u.Log.CountEvents(ctx); err != nil || n != 30 {
			t.Fatalf("CountEvents %d %v", n, err)
		}
	})

	t.Run("an empty log", func(t *testing.T) {
		t.Parallel()
		u := open(t)
		ctx := t.Context()
		if max, err := u.Log.MaxSequence(ctx); err != nil || max != 0 {
			t.Fatalf("MaxSequence %d %v", max, err)
		}
		rows, total, err := u.Log.Events(ctx, app.EventFilter{Limite: 10})
		if err != nil || total != 0 || rows == nil || len(rows) != 0 {
			t.Fatalf("Events %v %d %v", rows, total, err)
		}
		after, cut, err := u.Log.EventsAfter(ctx, 0, nil, 10, app.ChunkBytes)
		if err != nil || cut || after == nil || len(after) != 0 {
			t.Fatalf("EventsAfter %v %v %v", after, cut, err)
		}
	})

	t.Run("chunks stop at the row that reaches the byte bound", func(t *testing.T) {
		t.Parallel()
		u := open(t)
		ctx := t.Context()
		big := json.RawMessage(`{"s":"` + strings.Repeat("x", 1000) + `"}`)
		var size int
		for range 6 {
			ev := NewEvent("a:b")
			ev.Payload = big
			stored, _, err := appendOne(t, u.Log, ev, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			size = stored.Size()
		}
		for _, c := range []struct {
			max, want int
			cut       bool
		}{{0, 6, false}, {size*2 + 1, 3, true}, {size * 2, 2, true}, {1, 1, true}, {size * 100, 6, false}} {
			rows, cut, err := u.Log.EventChunk(ctx, app.EventFilter{Limite: 100}, c.max)
			if err != nil || len(rows) != c.want || cut != c.cut {
				t.Errorf("EventChunk max %d: %d rows cut %v (%v), want %d cut %v", c.max, len(rows), cut, err, c.want, c.cut)
			}
			rows, cut, err = u.Log.EventsAfter(ctx, 0, nil, 100, c.max)
			if err != nil || len(rows) != c.want || cut != c.cut {
				t.Errorf("EventsAfter max %d: %d rows cut %v (%v), want %d cut %v", c.max, len(rows), cut, err, c.want, c.cut)
			}
		}
	})
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
