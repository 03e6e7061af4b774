package app

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Circuit breaker limits (SPEC 6.4).
const (
	breakerThreshold = 5 // consecutive failed attempts of distinct events, or without an HTTP answer, that open it
	// The first probe goes about 2 s after the circuit opens, and each
	// failed one doubles the wait up to 30 s (SPEC 6.4): a CAD back from a
	// short restart is not held for half a minute (issue 27: a 4 s outage
	// cost ~29 s), one down for long gets a probe every 30 s.
	breakerCooldown    = 2 * time.Second
	breakerMaxCooldown = 30 * time.Second
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
//
// Each process counts the attempts it makes, but an opening or a closing
// is the integrator's, shared through the database (SPEC 12): the change
// waits in pending until the dispatcher's next round writes it (beside the
// outcomes that caused it), and every process adopts the rows other
// processes wrote (adopt), within SharedRefresh. So when one replica's
// breaker opens, the others stop sending to that receiver too, and every
// replica shows the same circuit. Once the cooldown ends each replica may
// send its own probe: at most one request per replica per cooldown.
type circuits struct {
	mu sync.Mutex
	m  map[string]*breaker
	// origin names this process in the rows it writes, so that it does not
	// adopt its own changes back.
	origin  string
	pending map[string]StoredCircuit // changes not yet written
	seen    map[string]int64         // the last version read of each row
	read    bool                     // the rows were read once
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
	switch {
	case opened:
		// In milliseconds, as the store keeps them: every replica then
		// shows the same instants.
		b.since, b.openUntil = b.since.Truncate(time.Millisecond), b.openUntil.Truncate(time.Millisecond)
		c.stage(StoredCircuit{Integrador: id, Aberto: true, Desde: b.since.UTC(), Ate: b.openUntil.UTC(),
			Cooldown: b.cooldown, Falhas: b.failures})
	case closed:
		c.stage(StoredCircuit{Integrador: id})
	}
	if !failed {
		delete(c.m, id)
	}
	return opened, closed, failures
}

// stage keeps a change for the next write; c.mu is held.
func (c *circuits) stage(sc StoredCircuit) {
	if c.pending == nil {
		c.pending = map[string]StoredCircuit{}
	}
	c.pending[sc.Integrador] = sc
}

// take hands the changes not yet written to whoever writes them, stamped
// with this process's origin.
func (c *circuits) take() []StoredCircuit {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) == 0 {
		return nil
	}
	origin := c.originLocked()
	out := make([]StoredCircuit, 0, len(c.pending))
	for _, sc := range c.pending {
		sc.Origem = origin
		out = append(out, sc)
	}
	clear(c.pending)
	return out
}

// putBack returns changes whose write failed, unless a later change of the
// same integrator replaced them meanwhile.
func (c *circuits) putBack(cs []StoredCircuit) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, sc := range cs {
		if _, newer := c.pending[sc.Integrador]; !newer {
			c.stage(sc)
		}
	}
}

func (c *circuits) originLocked() string {
	if c.origin == "" {
		c.origin = uuid.NewString()
	}
	return c.origin
}

// adopt takes in the rows other processes wrote since the last read, and
// says which circuits opened or closed here because of them. A row newer
// than this process's own view wins, except over a change of this process
// not yet written. At the first read only circuits open now are taken: a
// row left by a process long gone says nothing about the receiver today.
func (c *circuits) adopt(rows []StoredCircuit, now time.Time) []CircuitChange {
	c.mu.Lock()
	defer c.mu.Unlock()
	first := !c.read
	c.read = true
	origin := c.originLocked()
	var changes []CircuitChange
	for _, r := range rows {
		if r.Versao <= c.seen[r.Integrador] {
			continue
		}
		if c.seen == nil {
			c.seen = map[string]int64{}
		}
		c.seen[r.Integrador] = r.Versao
		if _, mine := c.pending[r.Integrador]; mine || r.Origem == origin {
			continue
		}
		b := c.m[r.Integrador]
		if !r.Aberto {
			if b != nil && b.open {
				delete(c.m, r.Integrador)
				changes = append(changes, CircuitChange{Integrador: r.Integrador, Open: false})
			}
			continue
		}
		if first && !now.Before(r.Ate) {
			continue
		}
		if b == nil {
			if c.m == nil {
				c.m = map[string]*breaker{}
			}
			b = &breaker{}
			c.m[r.Integrador] = b
		}
		if b.open && !r.Ate.After(b.openUntil) {
			continue // this process's circuit holds as long already
		}
		wasOpen := b.open
		b.open, b.since, b.openUntil = true, r.Desde, r.Ate
		b.cooldown, b.failures = max(b.cooldown, r.Cooldown), max(b.failures, r.Falhas)
		if !wasOpen {
			changes = append(changes, CircuitChange{Integrador: r.Integrador, Open: true})
		}
	}
	return changes
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

// failing says whether the integrator's last attempts failed for more than
// one event, or twice without an HTTP answer: the endpoint, not one poison
// event, while the circuit is still closed.
func (c *circuits) failing(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.m[id]
	return b != nil && !b.open && (len(b.events) >= 2 || b.transport >= 2)
}

// followShared runs Integrators.Follow for the dispatcher until ctx ends:
// a circuit another replica opened or closed is this dispatcher's too
// (logged, counted, signalled, and the loop woken to act on it). The
// returned function waits for it to stop.
func (d *Dispatcher) followShared(ctx context.Context) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.Integrators.Follow(ctx, SharedRefresh, func(c CircuitChange) {
			if c.Open {
				d.Logger.Warn("circuit open on another replica", "integrador", c.Integrador)
			} else {
				d.Logger.Info("circuit closed on another replica", "integrador", c.Integrador)
			}
			d.Metrics.breaker(c.Integrador, c.Open)
			d.Signals.Circuit.raise(c)
			if d.OnRecorded != nil {
				d.OnRecorded() // the console's incident badge reads circuits too
			}
			d.Wake()
		}, func(err error) {
			d.Logger.Warn("read what other replicas changed", "err", err)
		})
	}()
	return func() { <-done }
}

// saveCircuits starts writing the circuits that opened or closed here since
// the last round; the returned function waits for the write. A failed write
// is logged and tried again with the next round.
func (d *Dispatcher) saveCircuits(ctx context.Context) (wait func()) {
	cs := d.Integrators.circuits.take()
	if len(cs) == 0 {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := d.Integrators.saveCircuits(ctx, cs); err != nil {
			d.Logger.Error("save circuits", "err", err)
		}
	}()
	return func() { <-done }
}

// Incident is a CAD that is not receiving now, as every console page
// announces it (SPEC 9, "At 3 a.m.").
type Incident struct {
	ID, Nome string
	// Estado is the circuit's (CircuitoAberto, CircuitoMeioAberto) or
	// IncidenteFalhando: failures in a row with the circuit still closed.
	Estado         string
	FalhasSeguidas int
	// Recusado is why this server refuses the integrator's callback.
	Recusado string
}

// The incidents that are not a circuit's state: failing with the circuit
// still closed (for more than one event, or without an HTTP answer), and
// disabled by the dispatcher after failing for days, when nothing is
// queued for it any more.
const (
	IncidenteFalhando = "falhando"
	IncidenteInativo  = "inativo"
)

// Incidents lists, by name, the integrators that are not receiving: circuit
// open or half-open, failing (circuits.failing: one poison event's retries
// are not the endpoint failing), a callback this server refuses, or
// disabled by the dispatcher.
// It reads memory only, so every page and its live badge may ask often.
func (s *Integrators) Incidents() []Incident {
	now := s.Now()
	s.mu.RLock()
	all := slices.Clone(s.all)
	s.mu.RUnlock()
	var out []Incident
	for _, in := range all {
		if !in.Ativo {
			if strings.HasPrefix(in.MotivoInativo, autoDisabled) {
				out = append(out, Incident{ID: in.ID, Nome: in.Nome, Estado: IncidenteInativo})
			}
			continue
		}
		c := s.circuits.circuit(in.ID, now)
		inc := Incident{ID: in.ID, Nome: in.Nome, Estado: c.Estado, FalhasSeguidas: c.FalhasSeguidas,
			Recusado: s.refusal(in)}
		switch {
		case c.Estado != CircuitoFechado, inc.Recusado != "":
		case s.circuits.failing(in.ID):
			inc.Estado = IncidenteFalhando
		default:
			continue
		}
		out = append(out, inc)
	}
	slices.SortFunc(out, func(a, b Incident) int { return strings.Compare(a.Nome, b.Nome) })
	return out
}
