package app

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// ConsumerStore keeps cursors and the dead-letter queue.
type ConsumerStore interface {
	Cursors(ctx context.Context, colonia string) (map[string]int64, error)
	// SeedCursor sets a cursor only if the consumer has none for the type.
	SeedCursor(ctx context.Context, colonia, tipo string, seq int64) error
	// AdvanceCursors moves cursors forward, never past the first pending
	// failure of the same colonia and tipo, and never backwards.
	AdvanceCursors(ctx context.Context, colonia string, seqs map[string]int64) error
	// RecordFailure inserts a pendente entry, or reopens the existing one for
	// (event_id, colonia) with one more attempt.
	RecordFailure(ctx context.Context, e DLQEntry) error
	// SetDLQStatus moves one entry; resolved and failed_permanent stamp resolvido_em.
	SetDLQStatus(ctx context.Context, eventID, colonia, status string) error
	DLQOpen(ctx context.Context, colonia string, limit int) ([]DLQEntry, error)
	DLQStats(ctx context.Context, limit int) (DLQStats, error)
	ReprocessLimitStore
	AuditLog
}

// Handler processes one event. It must be idempotent: delivery to in-process
// consumers is at-least-once (replay after a crash repeats what the cursor
// had not yet recorded).
type Handler func(ctx context.Context, ev Event) error

// Consumers runs the in-process consumers: per colonia, a goroutine that
// catches up from the log, then follows the live stream of commits.
//
// They run only while this replica leads (SPEC 12), so that across the
// replicas of one database each event is handled once, a failure counts
// one attempt and holds the cursor back as SPEC 4.5 says: a replica that
// gains the lead starts them (a catch-up from the shared cursors, then
// live), one that loses it stops them at once, and one that resigns
// (a clean stop) waits for them to save their cursors first, so the next
// leader goes on from there. Only in the instant of a hand-over that is not
// a resignation (a term lost to a stall or a broken link) may both handle
// the same events, which handlers already tolerate (at-least-once). A lone
// process (SQLite, or a nil Leader) always leads.
type Consumers struct {
	Log            EventLog
	Store          ConsumerStore
	Now            func() time.Time
	Logger         *slog.Logger
	Metrics        *Metrics
	HandlerTimeout time.Duration // default 10s
	// Leader gates the consumers; nil runs them always.
	Leader *Leader
	// Announcer, when set, tells the other replicas after each save of the
	// cursors that the read models changed (see ConsumedAnnouncer).
	Announcer ConsumedAnnouncer
	// Signals are test hooks; see ConsumerSignals.
	Signals ConsumerSignals

	mu       sync.Mutex
	colonias map[string]*consumer
	started  bool
	wg       sync.WaitGroup

	// liveMu orders what goes into the live queues, from this process's
	// commits and from the other replicas' (Remote); seen is the highest
	// sequence number they have covered, by a row or a mark. Nothing is
	// queued while the consumers do not run (active): their next catch-up
	// reads it from the log.
	liveMu sync.Mutex
	seen   int64
	active bool

	runMu   sync.Mutex
	current *consumerRun // nil while the consumers do not run
}

// consumerRun is one term's worth of consumer goroutines.
type consumerRun struct {
	readies []chan struct{} // each closed after its colonia's first catch-up
	stopped chan struct{}   // closed once every goroutine returned
	wg      sync.WaitGroup
	release func()
}

type subscription struct {
	tipo, colonia, nome string
	fn                  Handler
}

// Subscribe registers a handler for one type under a colonia. Call it before
// Start; one handler per (tipo, colonia), since the DLQ is keyed by both.
func (c *Consumers) Subscribe(tipo, colonia, handlerNome string, fn Handler) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		panic("app: Subscribe after Start")
	}
	if c.colonias == nil {
		c.colonias = map[string]*consumer{}
	}
	k := c.colonias[colonia]
	if k == nil {
		k = &consumer{parent: c, colonia: colonia, handlers: map[string]subscription{},
			live: make(chan Appended, liveBuffer), reprocess: make(chan reprocessReq)}
		c.colonias[colonia] = k
	}
	if _, dup := k.handlers[tipo]; dup {
		panic(fmt.Sprintf("app: second handler for %s in colonia %s", tipo, colonia))
	}
	k.handlers[tipo] = subscription{tipo: tipo, colonia: colonia, nome: handlerNome, fn: fn}
}

// liveBuffer and liveBufferBytes bound what a consumer holds in memory;
// past either, the consumer drops live events and catches up from the log
// instead of slowing the bus or growing without bound.
const (
	liveBuffer      = 4096
	liveBufferBytes = 32 << 20
)

// Start seeds missing cursors with the log's highest sequence and, while
// this replica leads, runs one goroutine per colonia; each replays what it
// missed before following live commits. When this replica leads as Start
// is called, Start returns once every consumer has replayed what it missed
// (the boot protocol of seed 001: replay, then consume live), so events
// published after Start reach handlers with their full payload; when it
// does not, it returns at once, and the consumers start whenever it gains
// the lead, until ctx ends.
func (c *Consumers) Start(ctx context.Context) error {
	c.mu.Lock()
	c.started = true
	if c.HandlerTimeout == 0 {
		c.HandlerTimeout = 10 * time.Second
	}
	ks := make([]*consumer, 0, len(c.colonias))
	for _, k := range c.colonias {
		ks = append(ks, k)
	}
	c.mu.Unlock()
	max, err := c.Log.MaxSequence(ctx)
	if err != nil {
		return err
	}
	// Whatever committed before, also on another replica whose
	// notification was missed, is read from the log.
	c.Remote(max)
	for _, k := range ks {
		for tipo := range k.handlers {
			if err := c.Store.SeedCursor(ctx, k.colonia, tipo, max); err != nil {
				return fmt.Errorf("seed cursor %s/%s: %w", k.colonia, tipo, err)
			}
		}
	}
	var first *consumerRun
	if term, release, ok := c.Leader.Term(ctx); ok {
		first = c.launch(term, release, ks)
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.supervise(ctx, first, ks)
	}()
	if first == nil {
		return nil
	}
	for _, ready := range first.readies {
		select {
		case <-ready:
		case <-first.stopped:
			return nil // the lead was lost meanwhile: the next leader catches up
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// supervise follows the lead: it waits for the running consumers to stop
// (their term ended), then starts them again when this replica next leads.
func (c *Consumers) supervise(ctx context.Context, run *consumerRun, ks []*consumer) {
	for {
		if run != nil {
			c.finish(run)
		}
		term, release, ok := c.Leader.Await(ctx)
		if !ok {
			return
		}
		run = c.launch(term, release, ks)
	}
}

// launch starts one goroutine per colonia under term, which ends with
// this replica's term.
func (c *Consumers) launch(term context.Context, release func(), ks []*consumer) *consumerRun {
	run := &consumerRun{stopped: make(chan struct{}), release: release}
	c.liveMu.Lock()
	c.active = true
	c.liveMu.Unlock()
	c.runMu.Lock()
	c.current = run
	c.runMu.Unlock()
	for _, k := range ks {
		ready := make(chan struct{})
		run.readies = append(run.readies, ready)
		run.wg.Add(1)
		go func() {
			defer run.wg.Done()
			k.run(term, ready)
		}()
	}
	return run
}

// finish waits for run's goroutines, which saved their cursors, and lets
// the term go (a resignation waits for that).
func (c *Consumers) finish(run *consumerRun) {
	run.wg.Wait()
	c.liveMu.Lock()
	c.active = false
	c.liveMu.Unlock()
	c.runMu.Lock()
	c.current = nil
	c.runMu.Unlock()
	close(run.stopped)
	run.release()
}

// Wait blocks until every consumer goroutine has stopped (after ctx ends).
func (c *Consumers) Wait() { c.wg.Wait() }

// Committed is the store's commit hook: it fans committed events out to the
// consumers that subscribed to their type, never blocking the writer.
//
// Batches come in sequence order, each with consecutive numbers (both
// stores give them gapless). On a database several replicas share, the
// numbers between two of this process's batches are the other replicas'
// events: a mark goes first, so that each consumer reads them from the log
// before it takes this batch's rows, whose full payload it then keeps.
// Rows a mark already covered (a remote notification that overtook this
// hook) are left to the log too, so each queue stays in sequence order.
func (c *Consumers) Committed(batch []Appended) {
	c.mu.Lock()
	started := c.started
	c.mu.Unlock()
	if !started || len(batch) == 0 {
		return
	}
	c.liveMu.Lock()
	defer c.liveMu.Unlock()
	if !c.active {
		c.seen = max(c.seen, batch[len(batch)-1].Event.Sequence)
		return
	}
	if first := batch[0].Event.Sequence; first > c.seen+1 {
		c.mark(first - 1)
	}
	seen := c.seen
	c.seen = max(c.seen, batch[len(batch)-1].Event.Sequence)
	for _, k := range c.colonias {
		for _, a := range batch {
			if _, ok := k.handlers[a.Event.Tipo]; !ok || a.Event.Sequence <= seen {
				continue
			}
			size := int64(len(a.FullPayload) + len(a.Event.Payload))
			if k.queued.Load()+size > liveBufferBytes {
				k.overflow.Store(true)
				continue
			}
			select {
			case k.live <- a:
				k.queued.Add(size)
			default:
				k.overflow.Store(true)
			}
		}
	}
}

// Remote wakes every consumer for events another replica committed, up to
// seq: a notification carries no rows, so each reads its types from the log
// after what it has seen, up to seq, and handles them with their redacted
// payload (the full one stayed in the memory of the replica that took the
// publish). It never blocks; a full queue makes the consumer catch up.
func (c *Consumers) Remote(seq int64) {
	c.mu.Lock()
	started := c.started
	c.mu.Unlock()
	if !started {
		return // Start reads the log's head after this
	}
	c.liveMu.Lock()
	defer c.liveMu.Unlock()
	if seq <= c.seen {
		return // covered: by this process's rows or an earlier mark
	}
	if c.active {
		c.mark(seq)
	}
	c.seen = seq
}

// mark queues, on every consumer, the instruction to read the log up to
// seq: an Appended without an event id, which no stored event lacks.
// Called with liveMu held.
func (c *Consumers) mark(seq int64) {
	for _, k := range c.colonias {
		select {
		case k.live <- Appended{Event: Event{Sequence: seq}}:
		default:
			k.overflow.Store(true)
		}
	}
}

func isMark(a Appended) bool { return a.Event.EventID == "" }

// announce tells the other replicas the read models changed; a lost
// announcement only leaves their console pages behind until the next.
func (c *Consumers) announce(ctx context.Context) {
	if c.Announcer == nil {
		return
	}
	if err := c.Announcer.AnnounceConsumed(ctx); err != nil && ctx.Err() == nil {
		c.Logger.Warn("could not tell the other replicas the read models changed", "err", err)
	}
}
