package app_test

// Receivers that misbehave (SPEC 6.4): each test drives the real dispatcher
// on a real store against a loopback receiver that hangs, resets, answers
// slowly, redirects, refuses, throttles or crashes, and checks what the
// delivery records (status, attempts, ultimo_status, ultimo_erro, the next
// attempt on the injected clock), while a healthy integrator next to it
// keeps receiving. Retries are driven by the clock, never by sleeping; the
// tests wait on the dispatcher's Recorded signal for the number of outcomes
// each step brings due, then read the store once.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"geohub/app"
)

// faultKit is an outbox kit with a healthy integrator, which receives
// everything, next to the misbehaving ones the test adds.
type faultKit struct {
	*outboxKit
	healthy   *receiver
	healthyIn app.CreatedIntegrator
	barriers  int
}

func newFaultKit(t *testing.T) *faultKit {
	t.Helper()
	k := &faultKit{outboxKit: newOutboxKit(t)}
	k.healthy = newReceiver(t, nil)
	k.healthyIn = k.integrator(t, k.healthy, nil)
	return k
}

// newFaultReceiver is a loopback receiver that records each request's
// headers (not its body: h decides whether to read it) and lets h answer,
// or not.
func newFaultReceiver(t *testing.T, h http.HandlerFunc) *receiver {
	t.Helper()
	rc := &receiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc.mu.Lock()
		rc.got = append(rc.got, received{header: r.Header.Clone()})
		rc.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(rc.Close)
	return rc
}

// bad registers rc as an integrator that receives only teste:a, so teste:b
// events reach the healthy integrator alone (see barrier).
func (k *faultKit) bad(t *testing.T, rc *receiver, backoff ...string) app.CreatedIntegrator {
	t.Helper()
	return k.integrator(t, rc, func(n *app.NewIntegrator) {
		n.Eventos = []string{"teste:a"}
		n.Backoff = backoff
	})
}

// barrier publishes an event only the healthy integrator receives and waits
// for its outcome and the other outcomes the clock's time brings due: the
// dispatcher has then run a claim round after the barrier's commit, at the
// clock's current time, which would have claimed any delivery due by then.
func (k *faultKit) barrier(t *testing.T, others int) {
	t.Helper()
	k.barriers++
	ev := k.publish(t, "teste:b", fmt.Sprintf("barreira:%d", k.barriers), nil)
	k.waitOutcomes(t, 1+others)
	if d := k.delivery(t, ev.EventID, k.healthyIn.ID); d.Status != app.EntregaEntregue || d.Tentativas != 1 {
		t.Fatalf("the barrier event: %+v", d)
	}
}

// healthyGot checks that the healthy integrator has every event, each at
// the first attempt, correctly signed.
func (k *faultKit) healthyGot(t *testing.T, events ...app.Event) {
	t.Helper()
	for _, ev := range events {
		if d := k.delivery(t, ev.EventID, k.healthyIn.ID); d.Status != app.EntregaEntregue || d.Tentativas != 1 ||
			d.UltimoStatus != 204 {
			t.Fatalf("the healthy integrator's delivery: %+v", d)
		}
	}
	for _, r := range k.healthy.requests() {
		verify(t, r, k.healthyIn.Segredo, k.clock.Now())
	}
}

// attempted checks that the delivery has n attempts recorded and is not in
// flight, and returns it.
func (k *faultKit) attempted(t *testing.T, ev app.Event, in app.CreatedIntegrator, n int) app.Delivery {
	t.Helper()
	d := k.delivery(t, ev.EventID, in.ID)
	if d.Tentativas != n || d.Status == app.EntregaProcessando {
		t.Fatalf("%d attempts (%s), want %d: %+v", d.Tentativas, d.Status, n, d)
	}
	return d
}

// expectRetry checks a failed attempt that will be retried at next.
func expectRetry(t *testing.T, d app.Delivery, status int, erro string, next time.Time) {
	t.Helper()
	if d.Status != app.EntregaPendente || d.UltimoStatus != status || !strings.Contains(d.UltimoErro, erro) ||
		!d.ProximaTentativa.Equal(next) || d.EntregueEm != nil {
		t.Fatalf("want pendente, ultimo_status %d, ultimo_erro with %q, next attempt at %v; got %s status %d erro %q at %v",
			status, erro, next.Format(time.RFC3339Nano), d.Status, d.UltimoStatus, d.UltimoErro,
			d.ProximaTentativa.Format(time.RFC3339Nano))
	}
}

// notBefore checks that a retry does not go out before it is due: with
// the clock just short of next, a claim round leaves it alone. others is
// how many other deliveries that clock brings due.
func (k *faultKit) notBefore(t *testing.T, ev app.Event, in app.CreatedIntegrator, rc *receiver, next time.Time, others int) {
	t.Helper()
	if n := k.inStatus(t, in.ID, app.EntregaProcessando); n != 0 {
		t.Fatalf("%d attempts in flight after their outcomes were recorded", n)
	}
	before := k.delivery(t, ev.EventID, in.ID)
	requests := len(rc.requests())
	k.clock.Add(next.Sub(k.clock.Now()) - time.Millisecond)
	k.dispatcher.Wake()
	k.barrier(t, others)
	if d := k.delivery(t, ev.EventID, in.ID); d.Tentativas != before.Tentativas || d.Status != before.Status ||
		len(rc.requests()) != requests {
		t.Fatalf("retried before %v (clock %v): %+v", next, k.clock.Now(), d)
	}
}

// due moves the clock to next and wakes the dispatcher.
func (k *faultKit) due(next time.Time) {
	k.clock.Add(next.Sub(k.clock.Now()))
	k.dispatcher.Wake()
}

func attempts(t *testing.T, k *faultKit, id int64) []app.Attempt {
	t.Helper()
	d, err := k.deliveries.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return d.Tentativas
}

func TestFaultHangingReceiverTimesOutAndIsRetriedWithBackoff(t *testing.T) {
	t.Parallel()
	k := newFaultKit(t)
	release := make(chan struct{})
	var hanging atomic.Int32
	rc := newFaultReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		hanging.Add(1)
		defer hanging.Add(-1)
		select { // outlives the dispatcher's timeout (300 ms in the kit)
		case <-r.Context().Done():
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) }) // before the server's Close, which waits for handlers
	in := k.bad(t, rc)

	start := k.clock.Now()
	ev := k.publish(t, "teste:a", "x:1", nil)
	// A second one hangs alongside (PerIntegrator is 2): two timeouts a
	// round, four in all, so the breaker (5) stays shut.
	other := k.publish(t, "teste:a", "x:2", nil)
	k.waitOutcomes(t, 2+2) // both to the healthy integrator, both timing out here
	k.healthyGot(t, ev, other)
	k.attempted(t, other, in, 1)
	d := k.attempted(t, ev, in, 1)
	expectRetry(t, d, 0, "Timeout", start.Add(time.Minute)) // the default schedule: 1 min, doubling
	if a := attempts(t, k, d.ID); len(a) != 1 || a[0].StatusCode != 0 || !strings.Contains(a[0].Erro, "Timeout") {
		t.Fatalf("recorded attempts: %+v", a)
	}

	k.notBefore(t, ev, in, rc, start.Add(time.Minute), 0)
	k.due(start.Add(time.Minute))
	k.waitOutcomes(t, 2) // both time out again
	k.attempted(t, other, in, 2)
	d = k.attempted(t, ev, in, 2)
	expectRetry(t, d, 0, "Timeout", start.Add(time.Minute+2*time.Minute))
}

func TestFaultConnectionResetIsARetryableFailure(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		handle func(net.Conn, *http.Request)
	}{
		// RST before reading the request body.
		{"reset", func(c net.Conn, _ *http.Request) {
			c.(*net.TCPConn).SetLinger(0)
			c.Close()
		}},
		// Reads the whole request, then closes without a word.
		{"read-then-close", func(c net.Conn, r *http.Request) {
			io.ReadAll(r.Body)
			c.Close()
		}},
		// Half an answer: a status line and no end of headers.
		{"truncated-answer", func(c net.Conn, r *http.Request) {
			io.ReadAll(r.Body)
			c.Write([]byte("HTTP/1.1 204 No Con"))
			c.Close()
		}},
		// Not HTTP at all.
		{"garbage", func(c net.Conn, r *http.Request) {
			io.ReadAll(r.Body)
			c.Write([]byte("\x00\x01 not http\r\n\r\n"))
			c.Close()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k := newFaultKit(t)
			var mu sync.Mutex
			healed := false
			rc := newFaultReceiver(t, func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				ok := healed
				mu.Unlock()
				if ok {
					io.ReadAll(r.Body)
					w.WriteHeader(204)
					return
				}
				c, _, err := http.NewResponseController(w).Hijack()
				if err != nil {
					t.Errorf("hijack: %v", err)
					return
				}
				tc.handle(c, r)
			})
			in := k.bad(t, rc, "10s", "20s")

			start := k.clock.Now()
			ev := k.publish(t, "teste:a", "x:1", nil)
			k.waitOutcomes(t, 2)
			k.healthyGot(t, ev)
			d := k.attempted(t, ev, in, 1)
			expectRetry(t, d, 0, "", start.Add(10*time.Second))
			if d.UltimoErro == "" {
				t.Fatalf("a connection failure must say what happened: %+v", d)
			}
			// One request per attempt: the transport must not replay a POST
			// that may have reached the receiver.
			if n := len(rc.requests()); n != 1 {
				t.Fatalf("%d requests for one attempt", n)
			}

			k.notBefore(t, ev, in, rc, start.Add(10*time.Second), 0)
			mu.Lock()
			healed = true
			mu.Unlock()
			k.due(start.Add(10 * time.Second))
			k.waitOutcomes(t, 1)
			if d := k.delivery(t, ev.EventID, in.ID); d.Status != app.EntregaEntregue || d.Tentativas != 2 ||
				d.UltimoStatus != 204 || d.EntregueEm == nil {
				t.Fatalf("after the receiver healed: %+v", d)
			}
			if a := attempts(t, k, d.ID); len(a) != 2 || a[0].Erro == "" || a[0].StatusCode != 0 || a[1].StatusCode != 204 {
				t.Fatalf("recorded attempts: %+v", a)
			}
		})
	}
}

func TestFaultReceiverThatAcceptsThenCrashes(t *testing.T) {
	t.Parallel()
	k := newFaultKit(t)
	rc := newReceiver(t, nil)
	in := k.bad(t, rc, "30s")

	first := k.publish(t, "teste:a", "x:1", nil)
	k.waitOutcomes(t, 2)
	if d := k.delivery(t, first.EventID, in.ID); d.Status != app.EntregaEntregue {
		t.Fatalf("the first delivery: %+v", d)
	}
	// It crashes: the process and its listener are gone.
	addr := rc.Listener.Addr().String()
	rc.Close()

	start := k.clock.Now()
	ev := k.publish(t, "teste:a", "x:1", nil)
	k.waitOutcomes(t, 2)
	k.healthyGot(t, first, ev)
	d := k.attempted(t, ev, in, 1)
	// "connection refused", or the pooled connection's error when the
	// transport learns of the crash by writing to it.
	expectRetry(t, d, 0, "", start.Add(30*time.Second))
	if d.UltimoErro == "" {
		t.Fatalf("a connection failure must say what happened: %+v", d)
	}

	// It comes back on the same address; the retry, when due, goes through
	// with the same body and sequence.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", addr, err)
	}
	restarted := httptest.NewUnstartedServer(rc.Config.Handler) // records into rc
	restarted.Listener.Close()
	restarted.Listener = ln
	restarted.Start()
	t.Cleanup(restarted.Close)
	k.notBefore(t, ev, in, rc, start.Add(30*time.Second), 0)
	k.due(start.Add(30 * time.Second))
	k.waitOutcomes(t, 1)
	if d := k.delivery(t, ev.EventID, in.ID); d.Status != app.EntregaEntregue || d.Tentativas != 2 {
		t.Fatalf("the retry: %+v", d)
	}
	got := rc.requests()
	if len(got) != 2 {
		t.Fatalf("%d requests reached the receiver, want 2 (one before the crash, one after)", len(got))
	}
	if r := got[1]; r.header.Get("X-Geohub-Evento-Id") != ev.EventID || r.header.Get("X-Geohub-Sequencia") != "2" ||
		r.header.Get("X-Geohub-Tentativa") != "2" {
		t.Fatalf("the retry after the restart: %v", r.header)
	}
	verify(t, got[1], in.Segredo, k.clock.Now())
}

func TestFaultSlowReceiverWithinTheTimeoutSucceeds(t *testing.T) {
	t.Parallel()
	k := newFaultKit(t)
	// Slow to answer, then slow to finish the answer: well inside the
	// kit's 300 ms timeout.
	rc := newFaultReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		// Wall time on purpose: the client's real timeout is what is tested.
		time.Sleep(40 * time.Millisecond)
		w.WriteHeader(200)
		for range 4 {
			io.WriteString(w, "ok ")
			http.NewResponseController(w).Flush()
			// Wall time on purpose: an answer that trickles in.
			time.Sleep(10 * time.Millisecond)
		}
	})
	in := k.bad(t, rc)
	ev := k.publish(t, "teste:a", "x:1", nil)
	k.waitOutcomes(t, 2)
	k.healthyGot(t, ev)
	d := k.attempted(t, ev, in, 1)
	if d.Status != app.EntregaEntregue || d.UltimoStatus != 200 || d.UltimoErro != "" || d.EntregueEm == nil {
		t.Fatalf("a slow answer within the timeout is a delivery: %+v", d)
	}
	if a := attempts(t, k, d.ID); len(a) != 1 || a[0].Resposta != "ok ok ok ok " {
		t.Fatalf("recorded attempts: %+v", a)
	}
}

func TestFaultEndlessAnswerBodyIsCutAndDelivered(t *testing.T) {
	t.Parallel()
	k := newFaultKit(t)
	rc := newFaultReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		chunk := []byte(strings.Repeat("x", 4096))
		for r.Context().Err() == nil { // until the dispatcher hangs up
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	in := k.bad(t, rc)
	ev := k.publish(t, "teste:a", "x:1", nil)
	k.waitOutcomes(t, 2)
	k.healthyGot(t, ev)
	d := k.attempted(t, ev, in, 1)
	if d.Status != app.EntregaEntregue || d.UltimoStatus != 200 {
		t.Fatalf("a 200 is a delivery however long its body: %+v", d)
	}
	if a := attempts(t, k, d.ID); len(a) != 1 || len(a[0].Resposta) == 0 || len(a[0].Resposta) > 512 {
		t.Fatalf("the recorded answer must be its first bytes: %d bytes", len(a[0].Resposta))
	}
}

func TestFaultRedirectIsAFailureAndIsNeverFollowed(t *testing.T) {
	t.Parallel()
	k := newFaultKit(t)
	// Where the redirects point: loopback, allowed by the kit's insecure
	// policy, so only the no-redirect rule keeps the dispatcher away.
	target := newReceiver(t, nil)
	type bad struct {
		code int
		rc   *receiver
		in   app.CreatedIntegrator
	}
	var bads []bad
	for _, code := range []int{301, 302, 303, 307, 308} {
		rc := newFaultReceiver(t, func(w http.ResponseWriter, r *http.Request) {
			io.ReadAll(r.Body)
			http.Redirect(w, r, target.URL+"/geohub/eventos", code)
		})
		bads = append(bads, bad{code, rc, k.bad(t, rc)})
	}
	start := k.clock.Now()
	ev := k.publish(t, "teste:a", "x:1", nil)
	k.waitOutcomes(t, 1+len(bads))
	k.healthyGot(t, ev)
	for _, b := range bads {
		d := k.attempted(t, ev, b.in, 1)
		expectRetry(t, d, b.code, fmt.Sprintf("o receptor respondeu %d", b.code), start.Add(time.Minute))
		if n := len(b.rc.requests()); n != 1 {
			t.Fatalf("%d: %d requests", b.code, n)
		}
	}
	// Their retries redirect again, and still nobody follows.
	k.due(start.Add(time.Minute))
	k.waitOutcomes(t, len(bads))
	for _, b := range bads {
		d := k.attempted(t, ev, b.in, 2)
		expectRetry(t, d, b.code, strconv.Itoa(b.code), start.Add(time.Minute+2*time.Minute))
	}
	if n := len(target.requests()); n != 0 {
		t.Fatalf("the redirect target was contacted %d times", n)
	}
}

func TestFaultStatusCodes(t *testing.T) {
	t.Parallel()
	k := newFaultKit(t)
	type bad struct {
		code  int
		retry bool
		rc    *receiver
		in    app.CreatedIntegrator
	}
	// 400 and 401 are the protocol's answers (bad body, bad signature):
	// dead letter at once. Any other failure is retried.
	var bads []bad
	for _, c := range []struct {
		code  int
		retry bool
	}{{400, false}, {401, false}, {403, true}, {404, true}, {408, true}, {410, true}, {413, true}, {422, true},
		{500, true}, {502, true}, {503, true}, {504, true}} {
		rc := newFaultReceiver(t, func(w http.ResponseWriter, r *http.Request) {
			io.ReadAll(r.Body)
			http.Error(w, "não", c.code)
		})
		bads = append(bads, bad{c.code, c.retry, rc, k.bad(t, rc)})
	}
	retryable := 0
	for _, b := range bads {
		if b.retry {
			retryable++
		}
	}
	start := k.clock.Now()
	ev := k.publish(t, "teste:a", "x:1", nil)
	k.waitOutcomes(t, 1+len(bads))
	k.healthyGot(t, ev)
	for _, b := range bads {
		d := k.attempted(t, ev, b.in, 1)
		if b.retry {
			expectRetry(t, d, b.code, fmt.Sprintf("o receptor respondeu %d", b.code), start.Add(time.Minute))
			continue
		}
		if d.Status != app.EntregaFalhou || d.UltimoStatus != b.code || !strings.Contains(d.UltimoErro, "não haverá nova tentativa") {
			t.Fatalf("%d must go to dead letter at once: %+v", b.code, d)
		}
		if a := attempts(t, k, d.ID); len(a) != 1 || a[0].StatusCode != b.code || a[0].Resposta != "não\n" {
			t.Fatalf("%d: recorded attempts %+v", b.code, a)
		}
	}

	// The retryable ones have their second attempt 1 min after the first
	// and wait 2 min more; an hour later, their third (4 min more), while
	// the dead letters were never tried again.
	k.due(start.Add(time.Minute))
	k.waitOutcomes(t, retryable)
	for _, b := range bads {
		if b.retry {
			d := k.attempted(t, ev, b.in, 2)
			expectRetry(t, d, b.code, strconv.Itoa(b.code), start.Add(3*time.Minute))
		}
	}
	k.due(start.Add(time.Hour))
	k.barrier(t, retryable)
	for _, b := range bads {
		if b.retry {
			d := k.attempted(t, ev, b.in, 3)
			expectRetry(t, d, b.code, strconv.Itoa(b.code), start.Add(time.Hour+4*time.Minute))
			continue
		}
		if d := k.delivery(t, ev.EventID, b.in.ID); d.Tentativas != 1 || d.Status != app.EntregaFalhou {
			t.Fatalf("%d was retried: %+v", b.code, d)
		}
		if n := len(b.rc.requests()); n != 1 {
			t.Fatalf("%d: %d requests, want 1", b.code, n)
		}
	}
}

func TestFaultTooManyRequestsHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	k := newFaultKit(t)
	start := k.clock.Now()
	date := start.Add(10 * time.Minute).UTC().Format(http.TimeFormat) // whole seconds
	dateAt, _ := http.ParseTime(date)
	type bad struct {
		retryAfter string
		next       time.Time // of the first retry, backoff 5 s
		rc         *receiver
		in         app.CreatedIntegrator
	}
	var bads []bad
	for _, c := range []struct {
		retryAfter string
		next       time.Time
	}{
		{"120", start.Add(120 * time.Second)},
		{date, dateAt},
		{"86400", start.Add(time.Hour)},      // capped
		{"1", start.Add(5 * time.Second)},    // shorter than the backoff: the backoff
		{"", start.Add(5 * time.Second)},     // none
		{"soon", start.Add(5 * time.Second)}, // unreadable
		{"-30", start.Add(5 * time.Second)},
	} {
		rc := newFaultReceiver(t, func(w http.ResponseWriter, r *http.Request) {
			io.ReadAll(r.Body)
			if c.retryAfter != "" {
				w.Header().Set("Retry-After", c.retryAfter)
			}
			w.WriteHeader(http.StatusTooManyRequests)
		})
		bads = append(bads, bad{c.retryAfter, c.next, rc, k.bad(t, rc, "5s", "5s")})
	}
	ev := k.publish(t, "teste:a", "x:1", nil)
	k.waitOutcomes(t, 1+len(bads))
	k.healthyGot(t, ev)
	for _, b := range bads {
		d := k.attempted(t, ev, b.in, 1)
		expectRetry(t, d, 429, "o receptor respondeu 429", b.next)
	}
	// Retry-After 120: not at the backoff's 5 s, nor at 119.999 s; at 120 s.
	// By 119.999 s the ones retried at the backoff's 5 s have had their
	// second attempt, and wait the second step.
	b := bads[0]
	var atBackoff []bad
	for _, o := range bads {
		if o.next.Equal(start.Add(5 * time.Second)) {
			atBackoff = append(atBackoff, o)
		}
	}
	k.notBefore(t, ev, b.in, b.rc, b.next, len(atBackoff))
	for _, o := range atBackoff {
		d := k.attempted(t, ev, o.in, 2)
		expectRetry(t, d, 429, "o receptor respondeu 429", b.next.Add(-time.Millisecond+5*time.Second))
	}
	k.due(b.next)
	k.waitOutcomes(t, 1)
	k.attempted(t, ev, b.in, 2)
	if n := len(b.rc.requests()); n != 2 {
		t.Fatalf("%d requests, want 2", n)
	}
}
