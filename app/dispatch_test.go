package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"geohub/app"
	"geohub/app/callback"
	"geohub/app/redact"
	"geohub/store/storetest"
)

// outboxKit is a wired outbox on a real SQLite file: publisher, cadastro,
// dispatcher on a fake clock. Loopback receivers need the insecure policy.
type outboxKit struct {
	db          storetest.Store
	pub         *app.Publisher
	integrators *app.Integrators
	dispatcher  *app.Dispatcher
	deliveries  *app.Deliveries
	clock       *fakeClock
	stop        func() // stops the dispatcher as a shutdown does
	logs        *logBuffer
}

// logBuffer is the dispatcher's log, written from its goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func newOutboxKit(t *testing.T) *outboxKit { return newOutboxKitWith(t, nil) }

// newOutboxKitWith lets tune change the dispatcher before it runs. Every
// signal the dispatcher raises is recorded, so tests wait on them instead
// of polling the store.
func newOutboxKitWith(t *testing.T, tune func(*app.Dispatcher)) *outboxKit {
	t.Helper()
	ctx := context.Background()
	clock := &fakeClock{now: time.Now().UTC().Truncate(time.Millisecond)} // the store keeps milliseconds
	logs := &logBuffer{}
	k := storetest.New(t, storetest.Options{
		Deps: app.Deps{Now: clock.Now, Logger: slog.New(slog.NewTextHandler(logs, nil)),
			Policy: callback.Policy{Insecure: true}, Version: "teste", AutoDisable: app.DefaultAutoDisable},
		Tune: func(s *app.Services) {
			d := s.Dispatcher
			d.Jitter = func() float64 { return 0.5 }
			d.PerIntegrator, d.MaxInFlight, d.Timeout = 2, 8, 300*time.Millisecond
			d.Signals.Recorded.Init()
			d.Signals.Claimed.Init()
			d.Signals.Circuit.Init()
			if tune != nil {
				tune(d)
			}
		},
	})
	types := append([]app.TypeVersion{}, testTypes...)
	for _, aud := range []string{app.AudienciaOriginador, app.AudienciaSolicitante} {
		types = append(types, app.TypeVersion{Tipo: "teste:" + aud, Versao: "1.0.0", Audiencia: aud,
			Schema: json.RawMessage(`{"type":"object"}`), Redacao: redact.Rules{Manter: []string{""}}})
	}
	for _, tv := range types {
		if _, _, err := k.Registry.Register(ctx, tv); err != nil {
			t.Fatal(err)
		}
	}
	return &outboxKit{db: k.DB, integrators: k.Integrators, dispatcher: k.Dispatcher, clock: clock,
		stop: k.Stop, logs: logs, deliveries: k.Deliveries, pub: k.Publisher}
}

// receiver is a loopback CAD endpoint that records every request and
// answers with reply (204 when nil).
type receiver struct {
	*httptest.Server
	mu    sync.Mutex
	got   []received
	reply func(n int, r *http.Request) int
}

type received struct {
	header http.Header
	body   []byte
}

func newReceiver(t *testing.T, reply func(n int, r *http.Request) int) *receiver {
	rc := &receiver{reply: reply}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.got = append(rc.got, received{r.Header.Clone(), body})
		n := len(rc.got)
		rc.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body)) // for reply
		status := 204
		if rc.reply != nil {
			status = rc.reply(n, r)
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) requests() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.got...)
}

func (k *outboxKit) integrator(t *testing.T, rc *receiver, patch func(*app.NewIntegrator)) app.CreatedIntegrator {
	t.Helper()
	req := app.NewIntegrator{Nome: "CAD " + rc.URL, CallbackURL: rc.URL + "/geohub/eventos", HostsPermitidos: []string{"127.0.0.1"}}
	if patch != nil {
		patch(&req)
	}
	c, err := k.integrators.Create(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (k *outboxKit) publish(t *testing.T, tipo, agregado string, autoria *app.Autoria) app.Event {
	t.Helper()
	ev, _, err := k.pub.Publish(context.Background(), app.PublishRequest{Tipo: tipo, Origem: "teste", Agregado: agregado,
		Autoria: autoria, Payload: json.RawMessage(`{"n": 1, "cpf": "12345678901", "z": {"b": 2, "a": 1}}`)})
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// waitOutcomes waits until the dispatcher has committed exactly n more
// outcomes (attempts, and rows handed back without one): the tests that use
// it know how many deliveries each step brings due, so one more is a failure
// too.
func (k *outboxKit) waitOutcomes(t *testing.T, n int) {
	t.Helper()
	for got := 0; got < n; {
		m, ok := k.dispatcher.Signals.Recorded.Wait(10 * time.Second)
		if !ok {
			t.Fatalf("%d of %d outcomes recorded, then nothing", got, n)
		}
		if got += m; got > n {
			t.Fatalf("%d outcomes recorded, want %d", got, n)
		}
	}
}

// recordedUntil waits on the dispatcher's recorded rounds until cond, which
// reads the store, holds after one: for the few tests whose number of
// outcomes depends on timing (how many rows a breaker catches as it opens).
func (k *outboxKit) recordedUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if _, ok := k.dispatcher.Signals.Recorded.Wait(time.Until(deadline)); !ok {
			t.Fatalf("no recorded round brought %s", what)
		}
	}
}

// waitCircuit waits for the next breaker change, which must be id's circuit
// opening (open) or closing.
func (k *outboxKit) waitCircuit(t *testing.T, id string, open bool) {
	t.Helper()
	c, ok := k.dispatcher.Signals.Circuit.Wait(10 * time.Second)
	if want := (app.CircuitChange{Integrador: id, Open: open}); !ok || c != want {
		t.Fatalf("breaker change %+v (raised: %v), want %+v", c, ok, want)
	}
}

// noCircuitChange checks that no breaker opened or closed before the
// outcomes the test has waited for: trip raises its signal before the
// round recording the attempt, so a change would already be waiting.
func (k *outboxKit) noCircuitChange(t *testing.T) {
	t.Helper()
	if c, ok := k.dispatcher.Signals.Circuit.Wait(10 * time.Millisecond); ok {
		t.Fatalf("the breaker changed: %+v", c)
	}
}

// inStatus counts an integrator's deliveries in a status.
func (k *outboxKit) inStatus(t *testing.T, integrador, status string) int {
	t.Helper()
	page, err := k.deliveries.List(context.Background(), app.DeliveryFilter{Integrador: integrador, Status: status})
	if err != nil {
		t.Fatal(err)
	}
	return page.Total
}

func (k *outboxKit) delivery(t *testing.T, eventID, integrador string) app.Delivery {
	t.Helper()
	page, err := k.deliveries.List(context.Background(), app.DeliveryFilter{EventID: eventID, Integrador: integrador})
	if err != nil || len(page.Linhas) != 1 {
		t.Fatalf("delivery of %s to %s: %v %+v", eventID, integrador, err, page)
	}
	return page.Linhas[0]
}

// verify applies seed 000's receiver rules: signature over the raw body with
// the secret, timestamp within five minutes.
func verify(t *testing.T, r received, secret string, now time.Time) {
	t.Helper()
	ts, err := strconv.ParseInt(r.header.Get("X-Geohub-Timestamp"), 10, 64)
	if err != nil || now.Sub(time.Unix(ts, 0)).Abs() > 5*time.Minute {
		t.Fatalf("timestamp %q outside the window", r.header.Get("X-Geohub-Timestamp"))
	}
	if got, want := r.header.Get("X-Geohub-Assinatura"), app.Sign([]byte(secret), ts, r.body); got != want {
		t.Fatalf("signature %s, want %s", got, want)
	}
	for _, h := range []string{"X-Geohub-Evento-Id", "X-Geohub-Agregado", "X-Geohub-Sequencia", "X-Geohub-Entrega-Id", "X-Geohub-Tentativa"} {
		if r.header.Get(h) == "" {
			t.Fatalf("missing header %s", h)
		}
	}
	if r.header.Get("Content-Type") != "application/json" || !strings.HasPrefix(r.header.Get("User-Agent"), "Geohub/") {
		t.Fatalf("headers %v", r.header)
	}
}

func TestDeliveryIsSignedOrderedAndIdenticalForEveryRecipient(t *testing.T) {
	t.Parallel()
	k := newOutboxKit(t)
	ra, rb := newReceiver(t, nil), newReceiver(t, nil)
	a := k.integrator(t, ra, nil)
	b := k.integrator(t, rb, func(n *app.NewIntegrator) { n.Eventos = []string{"teste:a"} })
	for i := range 8 {
		k.publish(t, "teste:a", fmt.Sprintf("x:%d", i%2), nil)
	}
	k.publish(t, "teste:b", "x:0", nil) // b's patterns exclude it
	k.waitOutcomes(t, 9+8)
	if na, nb := len(ra.requests()), len(rb.requests()); na != 9 || nb != 8 {
		t.Fatalf("%d and %d requests, want 9 and 8", na, nb)
	}
	if n := k.inStatus(t, a.ID, app.EntregaEntregue) + k.inStatus(t, b.ID, app.EntregaEntregue); n != 9+8 {
		t.Fatalf("%d deliveries recorded as entregue, want 17", n)
	}
	bodies := map[string]string{}
	for _, r := range ra.requests() {
		verify(t, r, a.Segredo, k.clock.Now())
		bodies[r.header.Get("X-Geohub-Evento-Id")] = string(r.body)
	}
	seqs := map[string][]int{}
	for _, r := range rb.requests() {
		verify(t, r, b.Segredo, k.clock.Now())
		if bodies[r.header.Get("X-Geohub-Evento-Id")] != string(r.body) {
			t.Fatal("the envelope differs between recipients")
		}
		n, _ := strconv.Atoi(r.header.Get("X-Geohub-Sequencia"))
		seqs[r.header.Get("X-Geohub-Agregado")] = append(seqs[r.header.Get("X-Geohub-Agregado")], n)
	}
	for agg, got := range seqs {
		slicesSortInts(got)
		if fmt.Sprint(got) != "[1 2 3 4]" {
			t.Fatalf("sequences of %s: %v, want 1..4 without gaps", agg, got)
		}
	}
	var env map[string]any
	json.Unmarshal([]byte(bodies[ra.requests()[0].header.Get("X-Geohub-Evento-Id")]), &env)
	if env["payload"].(map[string]any)["cpf"] != "12345678901" {
		t.Fatal("the webhook carries the full payload")
	}
}

func slicesSortInts(s []int) {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
}

func TestProtocolAnswersDeadLetterAtOnce(t *testing.T) {
	t.Parallel()
	for _, code := range []int{400, 401} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			t.Parallel()
			k := newOutboxKit(t)
			rc := newReceiver(t, func(int, *http.Request) int { return code })
			in := k.integrator(t, rc, nil)
			ev := k.publish(t, "teste:a", "x:1", nil)
			k.waitOutcomes(t, 1)
			if d := k.delivery(t, ev.EventID, in.ID); d.Tentativas != 1 || d.Status != app.EntregaFalhou {
				t.Fatalf("a %d answer must be a dead letter at once: %+v", code, d)
			}
			k.clock.Add(2 * time.Hour)
			k.dispatcher.Wake()
			later := k.publish(t, "teste:a", "x:2", nil) // a later delivery proves the dispatcher ran again
			k.waitOutcomes(t, 1)
			if d := k.delivery(t, later.EventID, in.ID); d.Tentativas != 1 || d.Status != app.EntregaFalhou {
				t.Fatalf("the later event: %+v", d)
			}
			if d := k.delivery(t, ev.EventID, in.ID); d.Tentativas != 1 || d.Status != app.EntregaFalhou || len(rc.requests()) != 2 {
				t.Fatalf("a %d answer was retried: %+v, %d requests", code, d, len(rc.requests()))
			}
			// SPEC 10: each dead letter is one log line, naming the
			// integrator and the reason.
			if lines := strings.Count(k.logs.String(), `msg="delivery dead-lettered"`); lines != 2 ||
				!strings.Contains(k.logs.String(), "integrador="+in.ID) {
				t.Fatalf("%d dead-letter log lines for 2 dead letters:\n%s", lines, k.logs)
			}
		})
	}
}

func TestRetriesFollowTheBackoffAndResendKeepsTheSequence(t *testing.T) {
	t.Parallel()
	k := newOutboxKit(t)
	var mu sync.Mutex
	healthy := false
	rc := newReceiver(t, func(n int, r *http.Request) int {
		mu.Lock()
		defer mu.Unlock()
		// Only the second event fails, so the breaker (5 failures) stays shut.
		if healthy || r.Header.Get("X-Geohub-Sequencia") == "1" {
			return 204
		}
		return 503
	})
	in := k.integrator(t, rc, func(n *app.NewIntegrator) { n.Backoff = []string{"5s", "30s"} })
	k.publish(t, "teste:a", "x:1", nil) // sequence 1 of x:1
	ev := k.publish(t, "teste:a", "x:1", nil)
	start := k.clock.Now()
	k.waitOutcomes(t, 2) // sequence 1 delivered, then the first attempt of 2
	d := k.delivery(t, ev.EventID, in.ID)
	if d.Tentativas != 1 || d.Status != app.EntregaPendente || d.ProximaTentativa.Sub(start) != 5*time.Second {
		t.Fatalf("after one failure: %+v (want a retry 5 s later)", d)
	}
	// Not due yet: the claim rounds after a wake and after a later event's
	// commit leave it alone, as that event's delivery shows.
	k.dispatcher.Wake()
	later := k.publish(t, "teste:a", "y:1", nil)
	k.waitOutcomes(t, 1)
	if d := k.delivery(t, later.EventID, in.ID); d.Status != app.EntregaEntregue {
		t.Fatalf("the later event: %+v", d)
	}
	if d := k.delivery(t, ev.EventID, in.ID); d.Tentativas != 1 || d.Status != app.EntregaPendente || len(rc.requests()) != 3 {
		t.Fatalf("retried before it was due: %+v, %d requests", d, len(rc.requests()))
	}
	k.clock.Add(6 * time.Second)
	k.dispatcher.Wake()
	k.waitOutcomes(t, 1)
	if d := k.delivery(t, ev.EventID, in.ID); d.Tentativas != 2 || d.Status != app.EntregaPendente ||
		!d.ProximaTentativa.Equal(start.Add(6*time.Second+30*time.Second)) {
		t.Fatalf("after the second attempt: %+v (want a retry 30 s later)", d)
	}
	k.clock.Add(31 * time.Second)
	k.dispatcher.Wake()
	k.waitOutcomes(t, 1)
	if d := k.delivery(t, ev.EventID, in.ID); d.Tentativas != 3 || d.Status != app.EntregaFalhou {
		t.Fatalf("after the third attempt: %+v, want falhou after 3 (two backoff steps)", d)
	}

	mu.Lock()
	healthy = true
	mu.Unlock()
	if err := k.deliveries.Resend(context.Background(), d.ID); err != nil {
		t.Fatal(err)
	}
	k.waitOutcomes(t, 1)
	if d := k.delivery(t, ev.EventID, in.ID); d.Status != app.EntregaEntregue {
		t.Fatalf("after the resend: %+v", d)
	}
	var mine []received
	for _, r := range rc.requests() {
		if r.header.Get("X-Geohub-Evento-Id") == ev.EventID {
			mine = append(mine, r)
		}
	}
	if len(mine) != 4 { // three failures, one resend
		t.Fatalf("%d requests for the event, want 4", len(mine))
	}
	// The numbering goes on across the resend: the receiver's log of
	// attempts reads 1, 2, 3, 4, not 1, 2, 3, 1.
	for i, r := range mine {
		if got := r.header.Get("X-Geohub-Tentativa"); got != strconv.Itoa(i+1) {
			t.Fatalf("request %d has X-Geohub-Tentativa %s", i+1, got)
		}
	}
	for i, r := range mine {
		if r.header.Get("X-Geohub-Sequencia") != "2" || string(r.body) != string(mine[0].body) {
			t.Fatalf("attempt %d changed the sequence or the body", i+1)
		}
		if i > 0 && r.header.Get("X-Geohub-Entrega-Id") == mine[i-1].header.Get("X-Geohub-Entrega-Id") {
			t.Fatal("every attempt needs its own delivery id")
		}
	}
	detail, _ := k.deliveries.Get(context.Background(), d.ID)
	if len(detail.Tentativas) != 4 || detail.Tentativas[0].StatusCode != 503 {
		t.Fatalf("attempts recorded: %+v", detail.Tentativas)
	}
}

func TestRetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	k := newOutboxKit(t)
	rc := newReceiver(t, func(n int, r *http.Request) int { return 429 })
	rc.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "120")
		w.WriteHeader(429)
	})
	in := k.integrator(t, rc, func(n *app.NewIntegrator) { n.Backoff = []string{"5s"} })
	start := k.clock.Now()
	ev := k.publish(t, "teste:a", "x:1", nil)
	k.waitOutcomes(t, 1)
	if d := k.delivery(t, ev.EventID, in.ID); d.Tentativas != 1 || d.ProximaTentativa.Sub(start) < 120*time.Second {
		t.Fatalf("Retry-After ignored: %d attempts, next at +%v", d.Tentativas, d.ProximaTentativa.Sub(start))
	}
}

// onTheWire is a Sender that counts, per integrator, the requests the
// dispatcher has on the wire, where its slot is taken and freed: a
// receiver notices an abandoned request only a while later, and on a busy
// machine that while let a receiver see four where the dispatcher had two.
type onTheWire struct {
	app.Sender
	mu        sync.Mutex
	now, most map[string]int
}

func (w *onTheWire) Send(ctx context.Context, in app.Integrator, req app.Request) app.SendResult {
	w.mu.Lock()
	w.now[in.ID]++
	w.most[in.ID] = max(w.most[in.ID], w.now[in.ID])
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.now[in.ID]--
		w.mu.Unlock()
	}()
	return w.Sender.Send(ctx, in, req)
}

func TestADeadIntegratorDoesNotSlowAHealthyOne(t *testing.T) {
	t.Parallel()
	wire := &onTheWire{now: map[string]int{}, most: map[string]int{}}
	k := newOutboxKitWith(t, func(d *app.Dispatcher) {
		wire.Sender = app.NewHTTPSender(d.Integrators, d.Policy, d.Now, d.Version, d.Timeout, d.PerIntegrator)
		d.Sender = wire
	})
	hang := make(chan struct{})
	defer close(hang)
	dead := newReceiver(t, func(_ int, r *http.Request) int {
		select { // hangs until the dispatcher gives up on it
		case <-hang:
		case <-r.Context().Done():
		}
		return 204
	})
	healthy := newReceiver(t, nil)
	deadIn := k.integrator(t, dead, nil)
	healthyIn := k.integrator(t, healthy, nil)
	for i := range 30 {
		k.publish(t, "teste:a", fmt.Sprintf("x:%d", i), nil)
	}
	// The dead one holds at most PerIntegrator requests; the rest flow. How
	// many of the dead one's rows time out, and how many its breaker hands
	// back, depends on timing: wait for the healthy one's outcomes.
	k.recordedUntil(t, "every healthy delivery", func() bool {
		return k.inStatus(t, healthyIn.ID, app.EntregaEntregue) == 30
	})
	if n := len(healthy.requests()); n != 30 {
		t.Fatalf("%d requests for 30 healthy deliveries", n)
	}
	wire.mu.Lock()
	defer wire.mu.Unlock()
	if most := wire.most[deadIn.ID]; most > 2 { // PerIntegrator
		t.Fatalf("%d requests at once to one integrator, want at most 2", most)
	}
}

func TestRoutingByAudience(t *testing.T) {
	t.Parallel()
	k := newOutboxKit(t)
	ra, rb := newReceiver(t, nil), newReceiver(t, nil)
	a := k.integrator(t, ra, nil)
	b := k.integrator(t, rb, nil)
	byA := &app.Autoria{ID: a.ID, Tipo: "integrador"}
	byB := &app.Autoria{ID: b.ID, Tipo: "integrador"}
	k.publish(t, "teste:originador", "oc:1", byA)   // a originates oc:1
	k.publish(t, "teste:originador", "oc:1", nil)   // system event on oc:1: to a only
	k.publish(t, "teste:solicitante", "sol:1", byB) // command outcome: to b only
	k.publish(t, "teste:a", "x:1", nil)             // todos: both
	k.waitOutcomes(t, 3+2)
	if na, nb := len(ra.requests()), len(rb.requests()); na != 3 || nb != 2 {
		t.Fatalf("%d and %d requests, want 3 and 2", na, nb)
	}
	for _, r := range rb.requests() {
		if r.header.Get("X-Geohub-Agregado") == "oc:1" {
			t.Fatal("an originador event reached another integrator")
		}
	}
	var oc []string
	for _, r := range ra.requests() {
		if r.header.Get("X-Geohub-Agregado") == "oc:1" {
			oc = append(oc, r.header.Get("X-Geohub-Sequencia"))
		}
	}
	if !slices.Equal(oc, []string{"1", "2"}) {
		t.Fatalf("oc:1 reached its originator as %v, want 1 then 2", oc)
	}
}

func TestTheBreakerDefersAFailingIntegratorUntilAProbeSucceeds(t *testing.T) {
	t.Parallel()
	k := newOutboxKit(t)
	var mu sync.Mutex
	healthy := false
	rc := newReceiver(t, func(int, *http.Request) int {
		mu.Lock()
		defer mu.Unlock()
		if healthy {
			return 204
		}
		return 500
	})
	in := k.integrator(t, rc, nil)
	// Another integrator, for teste:b only: its deliveries show that a claim
	// round ran.
	witness := k.integrator(t, newReceiver(t, nil), func(n *app.NewIntegrator) { n.Eventos = []string{"teste:b"} })
	for i := range 10 {
		k.publish(t, "teste:a", fmt.Sprintf("x:%d", i), nil)
	}
	k.waitCircuit(t, in.ID, true)
	if got, err := k.integrators.Get(context.Background(), in.ID); err != nil || got.Circuito == nil ||
		got.Circuito.Estado != app.CircuitoAberto || got.Circuito.FalhasSeguidas < 5 {
		t.Fatalf("integrator's circuit %+v %v", got.Circuito, err)
	}
	// What was on the wire when it opened lands, and the rows claimed ahead
	// go back to pendente.
	k.recordedUntil(t, "no delivery of the failing integrator leased", func() bool {
		return k.inStatus(t, in.ID, app.EntregaProcessando) == 0
	})
	attempts := len(rc.requests())
	if attempts > 5+1 { // at most one more was in flight when it opened
		t.Fatalf("%d attempts: the open breaker did not defer deliveries", attempts)
	}
	k.dispatcher.Wake()
	outro := k.publish(t, "teste:b", "outro", nil) // a commit and a claim round while open
	k.recordedUntil(t, "the witness's delivery", func() bool {
		return k.delivery(t, outro.EventID, witness.ID).Status == app.EntregaEntregue
	})
	if d := k.delivery(t, outro.EventID, in.ID); d.Status != app.EntregaPendente || d.Tentativas != 0 || len(rc.requests()) != attempts {
		t.Fatalf("sent while the breaker was open: %+v, %d requests after %d", d, len(rc.requests()), attempts)
	}
	mu.Lock()
	healthy = true
	mu.Unlock()
	k.clock.Add(31 * time.Second) // cooldown over: one probe, then the rest
	k.dispatcher.Wake()
	k.waitCircuit(t, in.ID, false)
	// Every row but those whose attempt failed (retried a minute after it)
	// is delivered, once.
	failedOnce := func(d app.Delivery) bool {
		return d.Status == app.EntregaPendente && d.Tentativas == 1 && d.UltimoStatus == 500
	}
	k.recordedUntil(t, "the deferred deliveries after a successful probe", func() bool {
		page, _ := k.deliveries.List(context.Background(), app.DeliveryFilter{Integrador: in.ID})
		for _, d := range page.Linhas {
			if d.Status != app.EntregaEntregue && !failedOnce(d) {
				return false
			}
		}
		return page.Total == 11
	})
	// Rows claimed ahead of a free slot when the circuit opened went back to
	// pendente without an attempt: none sat leased until the reaper took it
	// for a crash.
	page, _ := k.deliveries.List(context.Background(), app.DeliveryFilter{Integrador: in.ID})
	delivered := 0
	for _, d := range page.Linhas {
		if d.Quedas != 0 {
			t.Fatalf("delivery %d was reaped as if its worker had died: %+v", d.ID, d)
		}
		if d.Status == app.EntregaEntregue {
			if delivered++; d.Tentativas != 1 {
				t.Fatalf("delivery %d: %d attempts", d.ID, d.Tentativas)
			}
		}
	}
	if delivered != 11-attempts || len(rc.requests()) != 11 {
		t.Fatalf("%d delivered after %d failed, %d requests; want %d and 11", delivered, attempts, len(rc.requests()), 11-attempts)
	}
}

// An integrator failing for 120 h is disabled by whichever replica sees it
// fail: a follower too (issue 27), where only the leader's own finishes
// could disable.
func TestAnIntegratorFailingFor120HoursIsDisabled(t *testing.T) {
	t.Parallel()
	t.Run("on the leader", func(t *testing.T) { testDisabledAfter120Hours(t, nil) })
	t.Run("on a follower", func(t *testing.T) {
		testDisabledAfter120Hours(t, func(d *app.Dispatcher) { d.Leader.Store = neverElected{d.Leader.Store} })
	})
}

// neverElected is an election another replica always holds.
type neverElected struct{ app.LeaderStore }

func (neverElected) Elect(context.Context, string, time.Duration) (int64, error) { return 0, nil }

func testDisabledAfter120Hours(t *testing.T, tune func(*app.Dispatcher)) {
	t.Parallel()
	k := newOutboxKitWith(t, tune)
	rc := newReceiver(t, func(int, *http.Request) int { return 500 })
	in := k.integrator(t, rc, func(n *app.NewIntegrator) {
		n.Eventos = []string{"teste:a"}
		n.Backoff = []string{"10h", "10h", "10h", "10h", "10h", "10h", "10h", "10h", "10h", "10h", "10h", "10h"}
	})
	witness := k.integrator(t, newReceiver(t, nil), func(n *app.NewIntegrator) { n.Eventos = []string{"teste:b"} })
	ev := k.publish(t, "teste:a", "x:1", nil)
	k.waitOutcomes(t, 1)
	if d := k.delivery(t, ev.EventID, in.ID); d.Tentativas != 1 || d.Status != app.EntregaPendente {
		t.Fatalf("after the first failure: %+v", d)
	}
	got, _ := k.integrators.Get(context.Background(), in.ID)
	if got.FalhandoDesde == nil {
		t.Fatal("a failure must start the failing period")
	}
	// Attempt i ends (i-1)·11 h after the first: the 12th, at 121 h, is the
	// first past 120 h.
	for i := 2; i <= 12; i++ {
		k.clock.Add(11 * time.Hour)
		k.dispatcher.Wake()
		k.waitOutcomes(t, 1)
		if d := k.delivery(t, ev.EventID, in.ID); d.Tentativas != i {
			t.Fatalf("retry %d: %+v", i, d)
		}
	}
	// The disable follows the recording of the attempt that crossed 120 h,
	// in the same step of the dispatcher: a later event's outcome comes after.
	witnessed := k.publish(t, "teste:b", "x:1", nil)
	k.waitOutcomes(t, 1)
	if d := k.delivery(t, witnessed.EventID, witness.ID); d.Status != app.EntregaEntregue {
		t.Fatalf("the later event: %+v", d)
	}
	got, _ = k.integrators.Get(context.Background(), in.ID)
	if got.Ativo || !strings.Contains(got.MotivoInativo, "automaticamente") {
		t.Fatalf("after 121 h of failures: %+v", got)
	}
	if elapsed := k.clock.Now().Sub(*got.FalhandoDesde); elapsed < 120*time.Hour {
		t.Fatalf("disabled after only %v", elapsed)
	}
}

func TestATimeoutIsRetried(t *testing.T) {
	t.Parallel()
	k := newOutboxKit(t)
	release := make(chan struct{})
	defer close(release)
	var mu sync.Mutex
	calls := 0
	rc := newReceiver(t, func(int, *http.Request) int {
		mu.Lock()
		calls++
		first := calls == 1
		mu.Unlock()
		if first {
			select { // outlives the dispatcher's timeout
			case <-release:
			case <-time.After(5 * time.Second):
			}
		}
		return 204
	})
	in := k.integrator(t, rc, func(n *app.NewIntegrator) { n.Backoff = []string{"5s"} })
	ev := k.publish(t, "teste:a", "x:1", nil)
	k.waitOutcomes(t, 1)
	d := k.delivery(t, ev.EventID, in.ID)
	if d.Tentativas != 1 || d.Status != app.EntregaPendente || !strings.Contains(d.UltimoErro, "Timeout") {
		t.Fatalf("a timeout must be retried: %+v", d)
	}
	k.clock.Add(6 * time.Second)
	k.dispatcher.Wake()
	k.waitOutcomes(t, 1)
	if d := k.delivery(t, ev.EventID, in.ID); d.Tentativas != 2 || d.Status != app.EntregaEntregue {
		t.Fatalf("the retry: %+v", d)
	}
}

func TestDeliveredBodiesArePurgedAfterRetention(t *testing.T) {
	t.Parallel()
	k := newOutboxKit(t)
	rc := newReceiver(t, nil)
	in := k.integrator(t, rc, nil)
	ev := k.publish(t, "teste:a", "x:1", nil)
	k.waitOutcomes(t, 1)
	d := k.delivery(t, ev.EventID, in.ID)
	if d.Status != app.EntregaEntregue {
		t.Fatalf("delivery %+v", d)
	}
	if d, _ := k.deliveries.Get(context.Background(), d.ID); d.Corpo == nil {
		t.Fatal("the body is kept until the retention ends")
	}
	k.clock.Add(app.DefaultRetention + time.Hour)
	k.dispatcher.Wake()
	// The purge runs as a pass of the dispatcher's loop begins. Two later
	// deliveries: the first one's claim may have begun a pass before the
	// clock moved, the second's began after the first was recorded.
	var later app.Event
	for i := range 2 {
		later = k.publish(t, "teste:a", fmt.Sprintf("x:%d", i+2), nil)
		k.waitOutcomes(t, 1)
	}
	if got, _ := k.deliveries.Get(context.Background(), d.ID); got.Corpo != nil {
		t.Fatal("the body outlived the retention")
	}
	if got, _ := k.deliveries.Get(context.Background(), k.delivery(t, later.EventID, in.ID).ID); got.Corpo == nil {
		t.Fatal("a body within the retention was purged")
	}
}

func TestShutdownLeavesNoDeliveryLeased(t *testing.T) {
	t.Parallel()
	k := newOutboxKit(t)
	hang := make(chan struct{})
	defer close(hang)
	arrived := make(chan struct{}, 10)
	rc := newReceiver(t, func(int, *http.Request) int {
		select {
		case arrived <- struct{}{}:
		default:
		}
		<-hang
		return 204
	})
	in := k.integrator(t, rc, nil)
	for i := range 5 {
		k.publish(t, "teste:a", fmt.Sprintf("x:%d", i), nil)
	}
	// Two requests on the wire (PerIntegrator), the other rows claimed ahead.
	for n := range 2 {
		select {
		case <-arrived:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d requests reached the receiver, want 2", n)
		}
	}
	k.stop() // waits for in-flight attempts (bounded by the timeout), then releases
	if n := k.inStatus(t, in.ID, app.EntregaProcessando); n != 0 {
		t.Fatalf("%d deliveries still leased after shutdown", n)
	}
	// The attempts that were on the wire were recorded on the way out.
	page, _ := k.deliveries.List(context.Background(), app.DeliveryFilter{Integrador: in.ID})
	recorded := 0
	for _, d := range page.Linhas {
		recorded += d.Tentativas
	}
	if n := len(rc.requests()); recorded != n {
		t.Fatalf("%d attempts recorded for %d requests", recorded, n)
	}
}

// SPEC 6.4: a failing event does not hold the ones behind it, even in its
// own aggregate; receivers reorder by sequence.
func TestAFailingEventDoesNotHoldTheOnesBehindIt(t *testing.T) {
	t.Parallel()
	k := newOutboxKit(t)
	var mu sync.Mutex
	healthy := false
	rc := newReceiver(t, func(n int, r *http.Request) int {
		mu.Lock()
		defer mu.Unlock()
		if !healthy && r.Header.Get("X-Geohub-Sequencia") == "1" {
			return 503
		}
		return 204
	})
	in := k.integrator(t, rc, nil)
	first := k.publish(t, "teste:a", "x:1", nil)
	k.waitOutcomes(t, 1)
	if d := k.delivery(t, first.EventID, in.ID); d.Tentativas != 1 {
		t.Fatalf("the first attempt: %+v", d)
	}
	second := k.publish(t, "teste:a", "x:1", nil)
	third := k.publish(t, "teste:a", "x:1", nil)
	k.waitOutcomes(t, 2)
	for _, ev := range []app.Event{second, third} {
		if d := k.delivery(t, ev.EventID, in.ID); d.Status != app.EntregaEntregue {
			t.Fatalf("a later event of the aggregate: %+v", d)
		}
	}
	if d := k.delivery(t, first.EventID, in.ID); d.Status != app.EntregaPendente || d.Tentativas != 1 {
		t.Fatalf("the failing event: %+v", d)
	}
	mu.Lock()
	healthy = true
	mu.Unlock()
	k.clock.Add(2 * time.Minute) // past the default first step (1 min ± 10%)
	k.dispatcher.Wake()
	k.waitOutcomes(t, 1)
	if d := k.delivery(t, first.EventID, in.ID); d.Status != app.EntregaEntregue || d.Tentativas != 2 {
		t.Fatalf("the first event, late: %+v", d)
	}
	var order []string
	for _, r := range rc.requests() {
		order = append(order, r.header.Get("X-Geohub-Sequencia"))
	}
	// One at a time per aggregate, in sequence order; the failed one comes
	// back at its retry time and the receiver puts it in its place.
	if !slices.Equal(order, []string{"1", "2", "3", "1"}) {
		t.Fatalf("arrivals by sequence %v, want 1, 2, 3, then 1 again", order)
	}
}

// SPEC 6.4: 1 min doubling up to 1 h, at most 10 attempts, with jitter.
func TestTheDefaultBackoff(t *testing.T) {
	t.Parallel()
	m := time.Minute
	want := []time.Duration{m, 2 * m, 4 * m, 8 * m, 16 * m, 32 * m, time.Hour, time.Hour, time.Hour}
	if got := app.DefaultBackoff(); !slices.Equal(got, want) {
		t.Fatalf("default backoff %v, want %v (9 waits: 10 attempts)", got, want)
	}
	// The jitter spreads each wait by ±10%: from 54 s to 66 s for the first.
	for jitter, wait := range map[float64]time.Duration{0: 54 * time.Second, 1: 66 * time.Second} {
		t.Run(fmt.Sprint("jitter ", jitter), func(t *testing.T) {
			t.Parallel()
			k := newOutboxKitWith(t, func(d *app.Dispatcher) { d.Jitter = func() float64 { return jitter } })
			rc := newReceiver(t, func(int, *http.Request) int { return 503 })
			in := k.integrator(t, rc, nil)
			start := k.clock.Now()
			ev := k.publish(t, "teste:a", "x:1", nil)
			k.waitOutcomes(t, 1)
			d := k.delivery(t, ev.EventID, in.ID)
			if got := d.ProximaTentativa.Sub(start); d.Tentativas != 1 || got != wait {
				t.Fatalf("%d attempts, next %v after the first, want 1 and %v", d.Tentativas, got, wait)
			}
		})
	}
}

// A row that cannot be put on the wire (an agregado with a line break,
// stored before publish refused one) is dead-lettered at its first attempt,
// and, saying nothing of the receiver, never opens its breaker: the events
// behind it go out at once.
func TestAnUnsendableDeliveryIsDeadLetteredWithoutTrippingTheBreaker(t *testing.T) {
	t.Parallel()
	k := newOutboxKit(t)
	rc := newReceiver(t, nil)
	in := k.integrator(t, rc, nil)
	var poisoned []string
	for range 6 { // more than the breaker's threshold
		id := uuid.Must(uuid.NewV7()).String()
		ev := app.Event{EventID: id, Tipo: "teste:a", VersaoSchema: "1.0.0", Timestamp: k.clock.Now(), Origem: "teste",
			CorrelacaoID: id, Agregado: "x\r\nX-Injetado: 1", Payload: json.RawMessage(`{"n":1}`)}
		out := &app.Outbox{Body: k.integrators.Sealer.SealBody([]byte(`{"n":1}`), id), Agregado: ev.Agregado, Recipients: func(string) []string { return []string{in.ID} }}
		if _, err := k.db.Append(context.Background(), []app.Pending{{Event: ev, Outbox: out}}); err != nil {
			t.Fatal(err)
		}
		poisoned = append(poisoned, id)
	}
	k.dispatcher.Wake()
	k.waitOutcomes(t, len(poisoned)) // one aggregate: one at a time, in order
	for _, id := range poisoned {
		if d := k.delivery(t, id, in.ID); d.Status != app.EntregaFalhou || d.Tentativas != 1 ||
			!strings.Contains(d.UltimoErro, "cabeçalho HTTP") {
			t.Fatalf("unsendable row: %+v", d)
		}
	}
	healthy := k.publish(t, "teste:a", "x:1", nil)
	k.waitOutcomes(t, 1)
	if d := k.delivery(t, healthy.EventID, in.ID); d.Status != app.EntregaEntregue || d.Tentativas != 1 {
		t.Fatalf("the next event, with no breaker in the way: %+v", d)
	}
	k.noCircuitChange(t)
	if n := len(rc.requests()); n != 1 {
		t.Fatalf("the receiver got %d requests; want only the healthy event's", n)
	}
	if in, _ := k.integrators.Get(context.Background(), in.ID); in.FalhandoDesde != nil {
		t.Fatalf("an unsendable row started a failing period: %v", in.FalhandoDesde)
	}
}
