package app

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestDecide covers every kind of answer against the backoff: where the
// budget ends, jitter at both ends, Retry-After below, above and past its
// ceiling, all counted from the end of the attempt.
func TestDecide(t *testing.T) {
	end := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	steps := []time.Duration{time.Minute, 2 * time.Minute}
	refused := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	purged := fmt.Errorf("%w: o corpo da entrega foi expurgado", errUnsendable)
	cases := []struct {
		name    string
		n       int
		r       SendResult
		jitter  float64
		kind    AttemptKind
		wait    time.Duration // Proxima - end
		reasons string
	}{
		{"200", 1, SendResult{Status: 200}, .5, Delivered, 0, ""},
		{"204 on the last attempt", 3, SendResult{Status: 204}, .5, Delivered, 0, ""},
		{"299", 1, SendResult{Status: 299}, .5, Delivered, 0, ""},
		{"400 is the protocol's answer", 1, SendResult{Status: 400}, .5, Dead, 0, "o receptor respondeu 400: não haverá nova tentativa"},
		{"401 is the protocol's answer", 1, SendResult{Status: 401}, .5, Dead, 0, "o receptor respondeu 401: não haverá nova tentativa"},
		{"unsendable", 1, SendResult{Err: purged}, .5, Unsent, 0, "entrega impossível de enviar: o corpo da entrega foi expurgado: não haverá nova tentativa"},
		{"301 retries", 1, SendResult{Status: 301}, .5, Retry, time.Minute, "o receptor respondeu 301"},
		{"404 retries", 1, SendResult{Status: 404}, .5, Retry, time.Minute, "o receptor respondeu 404"},
		{"500, second step", 2, SendResult{Status: 500}, .5, Retry, 2 * time.Minute, "o receptor respondeu 500"},
		{"500, budget spent", 3, SendResult{Status: 500}, .5, Dead, 0, "o receptor respondeu 500; tentativas esgotadas (3)"},
		{"connection refused", 1, SendResult{Err: refused, Transport: true}, .5, Retry, time.Minute, refused.Error()},
		{"timeout, budget spent", 3, SendResult{Err: refused, Transport: true}, .5, Dead, 0, refused.Error() + "; tentativas esgotadas (3)"},
		{"jitter low end", 1, SendResult{Status: 503}, 0, Retry, 54 * time.Second, "o receptor respondeu 503"},
		{"jitter high end", 1, SendResult{Status: 503}, 1, Retry, 66 * time.Second, "o receptor respondeu 503"},
		{"Retry-After shorter than the step", 1, SendResult{Status: 429, RetryAfter: 10 * time.Second}, .5, Retry, time.Minute, "o receptor respondeu 429"},
		{"Retry-After longer than the step", 1, SendResult{Status: 429, RetryAfter: 5 * time.Minute}, .5, Retry, 5 * time.Minute, "o receptor respondeu 429"},
		{"Retry-After past the ceiling", 1, SendResult{Status: 503, RetryAfter: 48 * time.Hour}, .5, Retry, time.Hour, "o receptor respondeu 503"},
		{"Retry-After on the last attempt", 3, SendResult{Status: 429, RetryAfter: time.Second}, .5, Dead, 0, "o receptor respondeu 429; tentativas esgotadas (3)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := decide(steps, c.n, c.r, end, c.jitter)
			if got.Kind != c.kind || got.Proxima.Sub(end) != c.wait || got.Reason != c.reasons {
				t.Fatalf("decide = %+v (wait %v), want kind %v wait %v reason %q", got, got.Proxima.Sub(end), c.kind, c.wait, c.reasons)
			}
		})
	}
}

// TestBreakerMeasuresTheEndpoint: one event failing alone never opens it;
// failures across events do, and so do attempts without an HTTP answer.
func TestBreakerMeasuresTheEndpoint(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	t.Run("one poison event retried alone", func(t *testing.T) {
		var b breaker
		for i := range 50 {
			if opened, _ := b.record(7, true, false, now.Add(time.Duration(i)*time.Second)); opened {
				t.Fatalf("opened after %d failures of one event", i+1)
			}
		}
		if n, _, _ := b.limit(now, 4); n != 4 {
			t.Fatalf("limit %d with a closed circuit", n)
		}
	})
	t.Run("one poison event among successes", func(t *testing.T) {
		var b breaker
		for i := range 50 {
			b.record(7, true, false, now)
			b.record(int64(100+i), false, false, now)
		}
		if b.open || b.failures != 0 {
			t.Fatalf("%+v", b)
		}
	})
	t.Run("a poison event's retries bring it no closer", func(t *testing.T) {
		var b breaker
		for range 4 {
			b.record(7, true, false, now)
		}
		for i := range breakerThreshold - 2 {
			if opened, _ := b.record(int64(100+i), true, false, now); opened {
				t.Fatalf("opened after the poison event's retries and %d other failures", i+1)
			}
		}
	})
	t.Run("every event refused", func(t *testing.T) {
		var b breaker
		for i := range breakerThreshold - 1 {
			if opened, _ := b.record(int64(i), true, false, now); opened {
				t.Fatalf("opened at %d", i+1)
			}
			b.record(int64(i), true, false, now) // a retry of the same one changes nothing
		}
		if opened, _ := b.record(breakerThreshold, true, false, now); !opened {
			t.Fatal("failures across five events did not open it")
		}
		if n, _, reopen := b.limit(now, 4); n != 0 || !reopen.Equal(now.Add(breakerCooldown)) {
			t.Fatalf("open circuit: limit %d until %v", n, reopen)
		}
		if c := b.circuit(now); c.Estado != CircuitoAberto || c.Ate == nil || c.Desde == nil || c.FalhasSeguidas != 9 {
			t.Fatalf("circuit %+v", c)
		}
		// In flight when it opened: no longer cooldown.
		if opened, _ := b.record(2, true, false, now.Add(time.Second)); opened {
			t.Fatal("a request in flight at the opening reopened it")
		}
		probe := now.Add(breakerCooldown)
		if n, isProbe, _ := b.limit(probe, 4); n != 1 || !isProbe {
			t.Fatalf("after the cooldown: limit %d probe %v", n, isProbe)
		}
		if c := b.circuit(probe); c.Estado != CircuitoMeioAberto {
			t.Fatalf("circuit %+v", c)
		}
		if opened, _ := b.record(3, true, false, probe); !opened || !b.openUntil.Equal(probe.Add(2*breakerCooldown)) {
			t.Fatalf("a failed probe: reopened %v until %v", opened, b.openUntil)
		}
		if _, closed := b.record(3, false, false, probe.Add(time.Hour)); !closed {
			t.Fatal("a success did not close it")
		}
		if c := b.circuit(probe); c.Estado != CircuitoFechado || c.Desde != nil {
			t.Fatalf("circuit %+v", c)
		}
	})
	t.Run("a failed probe reopens it, whatever the failure", func(t *testing.T) {
		var b breaker
		for i := range breakerThreshold {
			b.record(int64(i%2), true, true, now) // refused: no HTTP answer
		}
		probe := now.Add(breakerCooldown)
		if opened, _ := b.record(1, true, false, probe); !opened { // a 503 this time
			t.Fatalf("a probe answered 503 left it %+v", b.circuit(probe))
		}
		if c := b.circuit(probe); c.Estado != CircuitoAberto {
			t.Fatalf("circuit %+v", c)
		}
	})
	t.Run("one event timing out", func(t *testing.T) {
		var b breaker
		opened := false
		for range breakerThreshold {
			opened, _ = b.record(9, true, true, now)
		}
		if !opened {
			t.Fatal("five attempts without an answer did not open it")
		}
	})
	t.Run("cooldown ceiling", func(t *testing.T) {
		var b breaker
		at := now
		for i := range 20 {
			b.record(int64(i), true, true, at)
			at = at.Add(breakerMaxCooldown)
		}
		if b.cooldown != breakerMaxCooldown {
			t.Fatalf("cooldown %v", b.cooldown)
		}
	})
	// SPEC 6.4: the first probe about 2 s after the circuit opens, then
	// twice the wait after each failed probe, up to 30 s.
	t.Run("probes after 2 s, doubling to 30 s", func(t *testing.T) {
		var b breaker
		at := now
		for i := range breakerThreshold {
			b.record(int64(i), true, true, at)
		}
		var waits []time.Duration
		for range 6 {
			waits = append(waits, b.openUntil.Sub(at))
			at = b.openUntil
			b.record(99, true, true, at) // the probe fails
		}
		want := []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
		if !slices.Equal(waits, want) {
			t.Fatalf("waits between probes %v, want %v", waits, want)
		}
	})
}
