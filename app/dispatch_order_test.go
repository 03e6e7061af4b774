package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"geohub/app"
)

// A burst of 20 aggregates × 10 events, committed at once: the receiver sees
// every aggregate in sequence order, never two of its requests at once,
// while requests of different aggregates overlap.
func TestABurstArrivesInSequenceOrderPerAggregate(t *testing.T) {
	k := newOutboxKitWith(t, func(d *app.Dispatcher) { d.PerIntegrator, d.MaxInFlight = 8, 16 })
	var mu sync.Mutex
	inFlight, last := map[string]int{}, map[string]int{}
	var problems []string
	overlap, now := 0, 0
	rc := newReceiver(t, func(n int, r *http.Request) int {
		agg := r.Header.Get("X-Geohub-Agregado")
		seq, _ := strconv.Atoi(r.Header.Get("X-Geohub-Sequencia"))
		mu.Lock()
		inFlight[agg]++
		now++
		overlap = max(overlap, now)
		if inFlight[agg] > 1 {
			problems = append(problems, fmt.Sprintf("%s: two requests at once", agg))
		}
		if seq != last[agg]+1 {
			problems = append(problems, fmt.Sprintf("%s: #%d after #%d", agg, seq, last[agg]))
		}
		last[agg] = seq
		mu.Unlock()
		// Wall time on purpose: a receiver that takes a random while keeps
		// requests of other aggregates in flight together.
		time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
		mu.Lock()
		inFlight[agg]--
		now--
		mu.Unlock()
		return 204
	})
	k.integrator(t, rc, nil)
	// Aggregate by aggregate in one commit: each aggregate's rows are next
	// to each other in the claim's order, so a claim that ignored the
	// aggregate would send them together.
	var reqs []app.PublishRequest
	for a := range 20 {
		for range 10 {
			reqs = append(reqs, app.PublishRequest{Tipo: "teste:b", Origem: "teste", Agregado: fmt.Sprintf("ocorrencia:%d", a),
				Payload: json.RawMessage(`{}`)})
		}
	}
	if _, err := k.pub.PublishAll(context.Background(), reqs); err != nil {
		t.Fatal(err)
	}
	for delivered := 0; delivered < len(reqs); {
		n, ok := k.dispatcher.Signals.Recorded.Wait(10 * time.Second)
		if !ok {
			t.Fatalf("%d of %d delivered, then nothing", delivered, len(reqs))
		}
		delivered += n
	}
	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Fatalf("out of order: %v", problems)
	}
	for a := range 20 {
		if agg := fmt.Sprintf("ocorrencia:%d", a); last[agg] != 10 {
			t.Fatalf("%s ended at #%d", agg, last[agg])
		}
	}
	if overlap < 2 {
		t.Fatalf("at most %d request at a time: aggregates must go in parallel", overlap)
	}
}

// SPEC 6.3: a receiver that reads only X-Geohub-Assinatura loses nothing to
// a rotation, whether it keeps the old secret, has the new one, or switches
// in the middle of the grace period.
func TestARotationDeadLettersNothing(t *testing.T) {
	for _, c := range []struct {
		name  string
		holds func(n int) string // which secret the receiver holds at its n-th request
	}{
		{"receiver keeps the old secret", func(int) string { return "old" }},
		{"receiver has the new secret", func(int) string { return "new" }},
		{"receiver switches in the middle", func(n int) string {
			if n <= 6 {
				return "old"
			}
			return "new"
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			k := newOutboxKit(t)
			var mu sync.Mutex
			secrets := map[string]string{}
			accepted := 0
			rc := newReceiver(t, func(n int, r *http.Request) int {
				mu.Lock()
				defer mu.Unlock()
				secret := secrets["old"]
				if len(secrets) == 2 {
					secret = secrets[c.holds(accepted+1)]
				}
				ts, _ := strconv.ParseInt(r.Header.Get("X-Geohub-Timestamp"), 10, 64)
				body, _ := io.ReadAll(r.Body)
				if r.Header.Get("X-Geohub-Assinatura") != app.Sign([]byte(secret), ts, body) {
					return 401
				}
				accepted++
				return 204
			})
			in := k.integrator(t, rc, nil)
			mu.Lock()
			secrets["old"] = in.Segredo
			mu.Unlock()
			k.publish(t, "teste:a", "x:0", nil)
			k.waitOutcomes(t, 1)
			rot, err := k.integrators.RotateSecret(context.Background(), in.ID)
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			secrets["new"] = rot.Segredo
			mu.Unlock()
			for i := range 10 {
				k.publish(t, "teste:a", fmt.Sprintf("x:%d", i%3), nil)
				k.waitOutcomes(t, 1) // one by one, so the switch falls between deliveries
			}
			page, err := k.deliveries.List(context.Background(), app.DeliveryFilter{Integrador: in.ID, Status: app.EntregaFalhou})
			if err != nil || page.Total != 0 {
				t.Fatalf("dead letters after a rotation: %+v %v", page, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if accepted != 11 {
				t.Fatalf("the receiver accepted %d of 11 deliveries", accepted)
			}
		})
	}
}

// After the grace period a 401 is terminal again: nothing signs with the
// old secret any more.
func TestAfterTheGraceA401IsTerminal(t *testing.T) {
	k := newOutboxKit(t)
	rc := newReceiver(t, func(n int, r *http.Request) int { return 401 })
	in := k.integrator(t, rc, nil)
	if _, err := k.integrators.RotateSecret(context.Background(), in.ID); err != nil {
		t.Fatal(err)
	}
	k.clock.Add(app.SecretGrace + time.Second)
	ev := k.publish(t, "teste:a", "x:1", nil)
	k.waitOutcomes(t, 1)
	if d := k.delivery(t, ev.EventID, in.ID); d.Status != app.EntregaFalhou || len(rc.requests()) != 1 {
		t.Fatalf("after the grace: %+v, %d requests", d, len(rc.requests()))
	}
	if got := rc.requests()[0].header.Get("X-Geohub-Assinatura-Anterior"); got != "" {
		t.Fatalf("the previous secret still signs after the grace: %s", got)
	}
}

// One event failing over and over, alone or among others' successes, never
// opens the breaker and never delays the other aggregates.
func TestAPoisonEventDelaysNoOtherAggregate(t *testing.T) {
	k := newOutboxKit(t)
	var poison string
	var mu sync.Mutex
	rc := newReceiver(t, func(n int, r *http.Request) int {
		mu.Lock()
		defer mu.Unlock()
		if r.Header.Get("X-Geohub-Evento-Id") == poison {
			return 500
		}
		return 204
	})
	steps := make([]string, 12)
	for i := range steps {
		steps[i] = "1s"
	}
	in := k.integrator(t, rc, func(n *app.NewIntegrator) { n.Backoff = steps })
	mu.Lock()
	poison = k.publish(t, "teste:a", "poison:1", nil).EventID
	mu.Unlock()
	k.waitOutcomes(t, 1)
	// Eight attempts of the poison event alone, a second apart.
	for range 7 {
		k.clock.Add(1100 * time.Millisecond)
		k.dispatcher.Wake()
		k.waitOutcomes(t, 1)
	}
	if d := k.delivery(t, poison, in.ID); d.Tentativas != 8 || d.Status != app.EntregaPendente {
		t.Fatalf("the poison event: %+v", d)
	}
	// Now the others: each goes at its first claim.
	for i := range 5 {
		ev := k.publish(t, "teste:a", fmt.Sprintf("other:%d", i), nil)
		k.waitOutcomes(t, 1)
		if d := k.delivery(t, ev.EventID, in.ID); d.Status != app.EntregaEntregue || d.Tentativas != 1 {
			t.Fatalf("another aggregate's event: %+v", d)
		}
	}
	if c, ok := k.dispatcher.Signals.Circuit.Wait(10 * time.Millisecond); ok {
		t.Fatalf("the breaker changed: %+v", c)
	}
	got, err := k.integrators.Get(context.Background(), in.ID)
	if err != nil || got.Circuito == nil || got.Circuito.Estado != app.CircuitoFechado {
		t.Fatalf("integrator %+v %v", got.Circuito, err)
	}
}

// An endpoint that refuses every event opens the breaker, and operators see
// it in the integrator's representation.
func TestAnEndpointFailingEveryEventOpensTheBreaker(t *testing.T) {
	k := newOutboxKit(t)
	rc := newReceiver(t, func(n int, r *http.Request) int { return 503 })
	in := k.integrator(t, rc, nil)
	for i := range 6 {
		k.publish(t, "teste:a", fmt.Sprintf("x:%d", i), nil)
	}
	c, ok := k.dispatcher.Signals.Circuit.Wait(10 * time.Second)
	if !ok || !c.Open || c.Integrador != in.ID {
		t.Fatalf("circuit change %+v %v", c, ok)
	}
	got, err := k.integrators.Get(context.Background(), in.ID)
	if err != nil || got.Circuito == nil || got.Circuito.Estado != app.CircuitoAberto || got.Circuito.Ate == nil ||
		got.Circuito.FalhasSeguidas < 5 {
		t.Fatalf("integrator's circuit %+v %v", got.Circuito, err)
	}
}

// The backoff counts from the end of the failed attempt: an attempt that
// takes its whole timeout is retried a full step after it ended.
func TestBackoffCountsFromTheEndOfTheAttempt(t *testing.T) {
	k := newOutboxKit(t)
	rc := newReceiver(t, func(n int, r *http.Request) int {
		k.clock.Add(5 * time.Second) // a slow answer, on the dispatcher's clock
		return 503
	})
	in := k.integrator(t, rc, func(n *app.NewIntegrator) { n.Backoff = []string{"1s"} })
	start := k.clock.Now()
	ev := k.publish(t, "teste:a", "x:1", nil)
	k.waitOutcomes(t, 1)
	if d := k.delivery(t, ev.EventID, in.ID); d.ProximaTentativa.Sub(start) < 5900*time.Millisecond {
		t.Fatalf("retry at +%v: counted from the attempt's start", d.ProximaTentativa.Sub(start))
	}
}

// Every envelope names its author: without one, the publishing system.
func TestEveryEnvelopeHasAnAuthor(t *testing.T) {
	k := newOutboxKit(t)
	rc := newReceiver(t, nil)
	in := k.integrator(t, rc, nil)
	k.publish(t, "teste:a", "x:1", nil)
	k.waitOutcomes(t, 1)
	if _, err := k.deliveries.Verify(context.Background(), k.integrators, in.ID); err != nil {
		t.Fatal(err)
	}
	reqs := rc.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	for i, want := range []string{`{"id":"teste","tipo":"sistema"}`, `{"id":"geohub","tipo":"sistema"}`} {
		var env struct {
			Origem struct {
				Autoria json.RawMessage `json:"autoria"`
			} `json:"origem"`
		}
		if err := json.Unmarshal(reqs[i].body, &env); err != nil || string(env.Origem.Autoria) != want {
			t.Fatalf("request %d: autoria %s, want %s (%v)", i+1, env.Origem.Autoria, want, err)
		}
	}
}
