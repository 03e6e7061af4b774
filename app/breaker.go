package app

import (
	"slices"
	"sync"
	"time"
)

// Circuit breaker limits (SPEC 6.4).
const (
	breakerThreshold   = 5 // consecutive failed attempts of distinct events, or without an HTTP answer, that open it
	breakerCooldown    = 30 * time.Second
	breakerMaxCooldown = 10 * time.Minute
)

// Circuit states, as the integrator's representation names them.
const (
	CircuitoFechado    = "fechado"
	CircuitoAberto     = "aberto"
	CircuitoMeioAberto = "meio_aberto" // the cooldown ended: one probe may go
)

// Circuit is an integrator's breaker as operators see it (GET
// /api/integradores/{id}, "circuito").
type Circuit struct {
	Estado string `json:"estado"`
	// Desde is when it opened; absent while closed.
	Desde *time.Time `json:"desde,omitempty"`
	// Ate is when the probe may go, while open.
	Ate            *time.Time `json:"ate,omitempty"`
	FalhasSeguidas int        `json:"falhas_seguidas"`
}

// breaker is one integrator's circuit. It measures the endpoint, not one
// event: a run of failures with no success between opens it only once it
// spans breakerThreshold distinct events, or once breakerThreshold attempts
// in a row got no HTTP answer (refused, reset, timed out: the endpoint
// itself). So a poison event's retries, alone in the queue or between the
// other events' successes, never open it, nor do they bring it closer to
// opening than one failure does; an endpoint failing every event opens it
// within breakerThreshold events.
type breaker struct {
	failures  int     // consecutive failed attempts
	transport int     // consecutive attempts without an HTTP answer
	events    []int64 // distinct rows of the run, at most breakerThreshold
	open      bool
	since     time.Time // when it opened
	openUntil time.Time // when a probe may go
	cooldown  time.Duration
}

// record takes the outcome of an attempt that ended at now and says whether
// the circuit opened or closed with it. An attempt that was already in flight
// when the circuit opened changes nothing until the cooldown ends.
func (b *breaker) record(row int64, failed, transport bool, now time.Time) (opened, closed bool) {
	if !failed {
		closed = b.open
		*b = breaker{}
		return false, closed
	}
	b.failures++
	if transport {
		b.transport++
	} else {
		b.transport = 0
	}
	if len(b.events) < breakerThreshold && !slices.Contains(b.events, row) {
		b.events = append(b.events, row)
	}
	switch {
	case b.open && now.Before(b.openUntil):
		return false, false // in flight when it opened
	case b.open:
		// The probe failed, whatever the failure: open again.
	case len(b.events) < breakerThreshold && b.transport < breakerThreshold:
		return false, false
	default:
		b.since = now
	}
	// Opened now, or a probe failed: a longer cooldown each time.
	b.open = true
	b.cooldown = min(max(2*b.cooldown, breakerCooldown), breakerMaxCooldown)
	b.openUntil = now.Add(b.cooldown)
	return true, false
}

// limit is how many requests may be on the wire now: none while open
// (reopen says until when), one probe once the cooldown ends, else
// perIntegrator.
func (b *breaker) limit(now time.Time, perIntegrator int) (n int, probe bool, reopen time.Time) {
	if b == nil || !b.open {
		return perIntegrator, false, time.Time{}
	}
	if now.Before(b.openUntil) {
		return 0, false, b.openUntil
	}
	return 1, true, time.Time{}
}

func (b *breaker) circuit(now time.Time) Circuit {
	if b == nil {
		return Circuit{Estado: CircuitoFechado}
	}
	c := Circuit{Estado: CircuitoFechado, FalhasSeguidas: b.failures}
	if b.open {
		since, until := b.since.UTC(), b.openUntil.UTC()
		c.Desde = &since
		c.Estado = CircuitoMeioAberto
		if now.Before(b.openUntil) {
			c.Estado, c.Ate = CircuitoAberto, &until
		}
	}
	return c
}

// circuits holds every integrator's breaker. It belongs to Integrators,
// because the circuit is part of an integrator's state that operators read,
// while the dispatcher is what feeds it.
type circuits struct {
	mu sync.Mutex
	m  map[string]*breaker
}

func (c *circuits) record(id string, row int64, failed, transport bool, now time.Time) (opened, closed bool, failures int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.m[id]
	if b == nil {
		if !failed {
			return false, false, 0
		}
		if c.m == nil {
			c.m = map[string]*breaker{}
		}
		b = &breaker{}
		c.m[id] = b
	}
	opened, closed = b.record(row, failed, transport, now)
	failures = b.failures
	if !failed {
		delete(c.m, id)
	}
	return opened, closed, failures
}

func (c *circuits) limit(id string, now time.Time, perIntegrator int) (int, bool, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[id].limit(now, perIntegrator)
}

func (c *circuits) circuit(id string, now time.Time) Circuit {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[id].circuit(now)
}
