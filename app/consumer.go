package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// DLQ statuses.
const (
	DLQPendente        = "pendente"
	DLQRetrying        = "retrying"
	DLQResolved        = "resolved"
	DLQFailedPermanent = "failed_permanent"
)

// DLQEntry is one consumer failure (SPEC 4.5).
type DLQEntry struct {
	ID              int64      `json:"id,string"`
	EventID         string     `json:"event_id"`
	Sequence        int64      `json:"sequence_number,string"`
	Tipo            string     `json:"tipo"`
	Colonia         string     `json:"colonia"`
	HandlerNome     string     `json:"handler_nome"`
	MensagemErro    string     `json:"mensagem_erro"`
	PilhaErro       string     `json:"pilha_erro"`
	Tentativas      int        `json:"tentativas"`
	UltimaTentativa time.Time  `json:"ultima_tentativa"`
	Status          string     `json:"status"`
	CriadoEm        time.Time  `json:"criado_em"`
	ResolvidoEm     *time.Time `json:"resolvido_em,omitempty"`
}

// DLQStats is the body of GET /api/events/dlq.
type DLQStats struct {
	PendentesPorColonia map[string]int `json:"pendentes_por_colonia"`
	TotalPendentes      int            `json:"total_pendentes"`
	Entradas            []DLQEntry     `json:"entradas"`
}

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

// MaxDLQAttempts is how many times a failed event is tried before its entry
// becomes failed_permanent.
const MaxDLQAttempts = 5

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

// ReprocessResult is the body of POST /api/events/dlq/reprocessar.
type ReprocessResult struct {
	Reprocessados int `json:"reprocessados"`
	Resolvidos    int `json:"resolvidos"`
	Falharam      int `json:"falharam"`
}

// ReprocessInterval is the least time between two DLQ reprocess requests.
const ReprocessInterval = time.Minute

// ReprocessDLQ retries a colonia's open DLQ entries with the redacted
// payload from the log. It runs on the colonia's own goroutine, so a handler
// never runs twice at once.
//
// Its audit entry is appended once the reprocess ends, with its counts: a
// reprocess is many transactions (each handler's outcome, each entry's
// status), and the DLQ rows themselves record each of them.
func (c *Consumers) ReprocessDLQ(ctx context.Context, colonia string) (res ReprocessResult, err error) {
	audit := NewAudit(ctx, AcaoDLQReprocessar, AuditTarget{Tipo: "colonia", ID: colonia})
	defer func() {
		if err != nil {
			recordRefusal(ctx, c.Store, audit, err)
			return
		}
		audit.Campos = []AuditField{Set("reprocessados", res.Reprocessados), Set("resolvidos", res.Resolvidos),
			Set("falharam", res.Falharam)}
		c.Store.AppendAudit(context.WithoutCancel(ctx), *audit)
	}()
	c.mu.Lock()
	k := c.colonias[colonia]
	if k == nil {
		c.mu.Unlock()
		return ReprocessResult{}, &Error{Code: ENotFound, Message: fmt.Sprintf("colônia %s não tem consumidores", colonia),
			Details: []Detail{{"/colonia", "colônia desconhecida"}}}
	}
	c.mu.Unlock()
	// The limit is per colonia: reprocessing one consumer's failures does not
	// hold back another's. It is kept in the database, so a request that
	// lands on another replica counts against the same minute.
	wait, err := c.Store.ClaimReprocess(ctx, colonia, c.Now(), ReprocessInterval)
	if err != nil {
		return ReprocessResult{}, err
	}
	if wait > 0 {
		return ReprocessResult{}, &Error{Code: ERateLimited, RetryAfter: wait,
			Message: "reprocessamento permitido uma vez por minuto por colônia"}
	}
	c.runMu.Lock()
	run := c.current
	c.runMu.Unlock()
	if run != nil {
		req := reprocessReq{ctx: ctx, done: make(chan reprocessRes, 1)}
		select {
		case k.reprocess <- req:
			select {
			case res := <-req.done:
				return res.ReprocessResult, res.err
			case <-ctx.Done():
				return ReprocessResult{}, ctx.Err()
			}
		case <-run.stopped:
			// The lead was lost before the colonia's goroutine took it.
		case <-ctx.Done():
			return ReprocessResult{}, ctx.Err()
		}
	}
	return c.reprocessHere(ctx, k)
}

// reprocessHere retries the open entries on a replica whose consumers do
// not run (it does not lead): the request may land on any replica. It runs
// on the request's goroutine, one at a time per colonia on this replica
// (and the minute's limit, in the database, keeps replicas from running it
// at once), possibly beside the leader's live handling of the same
// colonia: handlers are idempotent, and the ocorrências' fold is
// order-free. It moves no cursor, since this replica does not know where
// the leader's are: the store stops clamping them before the entries
// resolved, and the leader's next save moves them past.
func (c *Consumers) reprocessHere(ctx context.Context, k *consumer) (ReprocessResult, error) {
	k.inline.Lock()
	defer k.inline.Unlock()
	// As on the goroutine: a client that hangs up must not leave entries
	// half-processed.
	ctx = context.WithoutCancel(ctx)
	res, err := c.retryOpen(ctx, k, func(string) {})
	if res.Resolvidos > 0 {
		c.announce(ctx)
	}
	return res, err
}

type reprocessReq struct {
	ctx  context.Context
	done chan reprocessRes
}

type reprocessRes struct {
	ReprocessResult
	err error
}

type consumer struct {
	parent    *Consumers
	colonia   string
	handlers  map[string]subscription
	live      chan Appended
	overflow  atomic.Bool
	queued    atomic.Int64 // payload bytes waiting in live
	reprocess chan reprocessReq
	inline    sync.Mutex // reprocessHere, one at a time

	held    *Appended        // first live event met during catch-up
	pos     int64            // highest sequence seen (handled or skipped)
	cursors map[string]int64 // per type, as loaded, to skip what is done
	done    map[string]int64 // per type, handled since the last save
	blocked map[string]bool  // per type, after a failure the DLQ could not record
	unsaved int              // live events handled since the last save
	open    map[string]bool  // event ids with an open DLQ entry
}

// run closes ready after its first catch-up. When ctx ends (the term or
// the process), it saves what it handled since the last save, so that the
// next leader does not handle it again.
func (k *consumer) run(ctx context.Context, ready chan struct{}) {
	c := k.parent
	log := c.Logger.With("colonia", k.colonia)
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if err := k.save(sctx); err != nil {
			log.Error("save consumer cursor on stopping: the next run handles those events again", "err", err)
		}
	}()
	for {
		if err := k.catchUp(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Error("consumer catch-up failed; retrying", "err", err)
			select {
			case <-time.After(time.Second):
				continue
			case <-ctx.Done():
				return
			}
		}
		if ready != nil {
			close(ready)
			ready = nil
		}
		if !k.follow(ctx) {
			return
		}
	}
}

// catchUp loads cursors and open failures, then replays the log from the
// lowest cursor until it reaches the head or the first event already waiting
// in the live queue: from there on the live queue carries the full payload.
func (k *consumer) catchUp(ctx context.Context) error {
	c := k.parent
	// Record what the live phase handled, so the reload below does not
	// replay it.
	if err := k.save(ctx); err != nil {
		return err
	}
	// Clear the flag before draining: a drop after this sets it again, and
	// anything dropped before is already in the log read below.
	k.overflow.Store(false)
	for len(k.live) > 0 {
		k.dequeued(<-k.live)
	}
	k.held = nil
	cursors, err := c.Store.Cursors(ctx, k.colonia)
	if err != nil {
		return err
	}
	k.cursors, k.done, k.blocked = cursors, map[string]int64{}, map[string]bool{}
	open, err := c.Store.DLQOpen(ctx, k.colonia, 10000)
	if err != nil {
		return err
	}
	k.open = map[string]bool{}
	for _, e := range open {
		k.open[e.EventID] = true
	}
	tipos := make([]string, 0, len(k.handlers))
	k.pos = -1
	for tipo := range k.handlers {
		tipos = append(tipos, tipo)
		if cur := cursors[tipo]; k.pos < 0 || cur < k.pos {
			k.pos = cur
		}
	}
	sort.Strings(tipos)
	for {
		if k.held == nil {
			select {
			case a := <-k.live:
				k.dequeued(a)
				k.held = &a
			default:
			}
		}
		batch, cut, err := c.Log.EventsAfter(ctx, k.pos, tipos, replayPage, ChunkBytes)
		if err != nil {
			return err
		}
		reachedLive := false
		for _, ev := range batch {
			if k.held != nil && ev.Sequence >= k.held.Event.Sequence {
				reachedLive = true
				break
			}
			k.handle(ctx, ev)
			k.pos = ev.Sequence
		}
		if err := k.save(ctx); err != nil {
			return err
		}
		if reachedLive || (len(batch) < replayPage && !cut) {
			return nil
		}
	}
}

// follow applies live commits until the queue overflows (true: catch up
// again) or ctx ends (false).
func (k *consumer) follow(ctx context.Context) bool {
	if a := k.held; a != nil {
		k.held = nil
		if !k.apply(ctx, *a) {
			return true
		}
	}
	for {
		select {
		case <-ctx.Done():
			return false
		case req := <-k.reprocess:
			// The consumer's own context: a client that hangs up must not
			// leave entries half-processed.
			res, err := k.reprocessDLQ(ctx)
			req.done <- reprocessRes{res, err}
		case a := <-k.live:
			k.dequeued(a)
			if !k.apply(ctx, a) {
				return true
			}
		}
	}
}

func (k *consumer) dequeued(a Appended) {
	k.queued.Add(-int64(len(a.FullPayload) + len(a.Event.Payload)))
}

// apply handles one live event; false means the queue overflowed and the
// consumer must catch up from the log.
func (k *consumer) apply(ctx context.Context, a Appended) bool {
	if k.overflow.Load() {
		return false
	}
	if a.Event.Sequence <= k.pos {
		return true
	}
	if isMark(a) {
		return k.readTo(ctx, a.Event.Sequence)
	}
	ev := a.Event
	ev.Payload = a.FullPayload
	k.handle(ctx, ev)
	k.pos = ev.Sequence
	// Save once the burst is drained, or every 256 events under sustained
	// load: one write per burst, yet a crash replays little.
	if k.unsaved++; len(k.live) == 0 || k.unsaved >= 256 {
		k.unsaved = 0
		if err := k.save(ctx); err != nil {
			k.parent.Logger.Error("save consumer cursor", "colonia", k.colonia, "err", err)
			return false
		}
	}
	return true
}

// readTo handles, from the log, this consumer's events after its position
// and up to seq: those another replica committed (see Remote). False means
// the read failed and the consumer must catch up.
func (k *consumer) readTo(ctx context.Context, seq int64) bool {
	c := k.parent
	tipos := make([]string, 0, len(k.handlers))
	for tipo := range k.handlers {
		tipos = append(tipos, tipo)
	}
	sort.Strings(tipos)
	for k.pos < seq {
		batch, cut, err := c.Log.EventsAfter(ctx, k.pos, tipos, replayPage, ChunkBytes)
		if err != nil {
			if ctx.Err() == nil {
				c.Logger.Error("read other replicas' events", "colonia", k.colonia, "err", err)
			}
			return false
		}
		for _, ev := range batch {
			if ev.Sequence > seq {
				break
			}
			k.handle(ctx, ev)
			k.pos = ev.Sequence
		}
		if len(batch) < replayPage && !cut || len(batch) > 0 && batch[len(batch)-1].Sequence >= seq {
			break
		}
	}
	k.pos = max(k.pos, seq)
	if len(k.live) == 0 {
		k.unsaved = 0
		if err := k.save(ctx); err != nil {
			c.Logger.Error("save consumer cursor", "colonia", k.colonia, "err", err)
			return false
		}
	}
	return true
}

func (k *consumer) handle(ctx context.Context, ev Event) {
	sub, ok := k.handlers[ev.Tipo]
	if !ok || ev.Sequence <= k.cursors[ev.Tipo] {
		return
	}
	if k.blocked[ev.Tipo] {
		return // an unrecorded failure before it: the next catch-up retries from there
	}
	if err := k.parent.guard(ctx, sub, ev); err != nil {
		if errors.Is(err, errUnrecorded) {
			k.blocked[ev.Tipo] = true
		}
		return
	}
	k.done[ev.Tipo] = ev.Sequence
	if k.open[ev.EventID] {
		delete(k.open, ev.EventID)
		if err := k.parent.Store.SetDLQStatus(ctx, ev.EventID, k.colonia, DLQResolved); err != nil {
			k.parent.Logger.Error("resolve DLQ entry", "colonia", k.colonia, "event_id", ev.EventID, "err", err)
		}
	}
}

func (k *consumer) save(ctx context.Context) error {
	if len(k.done) == 0 {
		return nil
	}
	if err := k.parent.Store.AdvanceCursors(ctx, k.colonia, k.done); err != nil {
		return err
	}
	for tipo, seq := range k.done {
		k.cursors[tipo] = seq
	}
	k.done = map[string]int64{}
	k.parent.announce(ctx)
	return nil
}

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

func (k *consumer) reprocessDLQ(ctx context.Context) (ReprocessResult, error) {
	res, err := k.parent.retryOpen(ctx, k, func(eventID string) { delete(k.open, eventID) })
	if err != nil {
		return res, err
	}
	// A resolved failure no longer holds the cursor back; the store clamps
	// the cursor to the failures still open.
	for tipo := range k.handlers {
		if !k.blocked[tipo] {
			k.done[tipo] = max(k.pos, k.done[tipo])
		}
	}
	return res, k.save(ctx)
}

// retryOpen runs the handlers again on k's open DLQ entries, with the
// redacted payload from the log; resolved is called for each that passed.
func (c *Consumers) retryOpen(ctx context.Context, k *consumer, resolved func(eventID string)) (ReprocessResult, error) {
	var res ReprocessResult
	entries, err := c.Store.DLQOpen(ctx, k.colonia, 1000)
	if err != nil {
		return res, err
	}
	for _, e := range entries {
		// retrying too: an entry left so by a crash mid-reprocess.
		sub, ok := k.handlers[e.Tipo]
		if !ok {
			continue
		}
		ev, err := c.Log.Event(ctx, e.EventID)
		if err != nil {
			return res, err
		}
		if err := c.Store.SetDLQStatus(ctx, e.EventID, k.colonia, DLQRetrying); err != nil {
			return res, err
		}
		res.Reprocessados++
		if err := c.guard(ctx, sub, ev); err != nil {
			res.Falharam++ // recorded again: one more attempt, failed_permanent at the limit
			continue
		}
		res.Resolvidos++
		resolved(e.EventID)
		if err := c.Store.SetDLQStatus(ctx, e.EventID, k.colonia, DLQResolved); err != nil {
			return res, err
		}
	}
	return res, nil
}

const replayPage = 1000

// errTimeout is what a handler that overran its deadline is recorded with;
// errAbandoned, one that then ignored the cancellation as long again.
var (
	errTimeout   = errors.New("handler timed out")
	errAbandoned = errors.New("handler timed out and ignored its cancellation: abandoned, still running")
)

// errUnrecorded marks a failure the DLQ could not record: the consumer must
// then not move that type's cursor past it.
var errUnrecorded = errors.New("failure not recorded in the DLQ")

// guard runs a handler so that its error, panic or timeout never reaches the
// caller or other handlers: it is logged and recorded in the DLQ instead. A
// handler that overruns its timeout gets its context cancelled and is given
// as long again to return, so that the colonia's next event does not run
// beside it. One that still has not returned is abandoned: its timeout is
// recorded and the colonia moves on, because a handler that ignores
// cancellation must not stall its colonia, and shutdown, for ever. Its
// goroutine is left running, and whatever it does when it wakes up may land
// after later events.
func (c *Consumers) guard(ctx context.Context, sub subscription, ev Event) error {
	hctx, cancel := context.WithTimeout(ctx, c.HandlerTimeout)
	defer cancel()
	type outcome struct {
		err   error
		stack string
	}
	done := make(chan outcome, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- outcome{fmt.Errorf("panic: %v", r), string(debug.Stack())}
			}
		}()
		err := sub.fn(hctx, ev)
		var detail string
		if err != nil {
			// An error carries no stack; %+v prints one for errors that
			// recorded it (and the full chain for the rest).
			detail = fmt.Sprintf("%+v", err)
		}
		done <- outcome{err, detail}
	}()
	var out outcome
	select {
	case out = <-done:
	case <-hctx.Done():
		grace := time.NewTimer(c.HandlerTimeout)
		defer grace.Stop()
		out = outcome{err: errTimeout}
		select {
		case <-done:
		case <-grace.C:
			out = outcome{err: errAbandoned}
		}
		if ctx.Err() != nil {
			// Shutting down: not the handler's fault, and not recorded.
			return ctx.Err()
		}
	}
	switch {
	case out.err == nil:
		c.Metrics.handled(sub.colonia, "ok")
		return nil
	case out.err == errAbandoned:
		c.Metrics.handled(sub.colonia, "abandonado")
	default:
		c.Metrics.handled(sub.colonia, "erro")
	}
	c.Logger.Error("event handler failed", "colonia", sub.colonia, "handler", sub.nome,
		"tipo", ev.Tipo, "event_id", ev.EventID, "sequence_number", ev.Sequence, "err", out.err)
	now := c.Now().UTC()
	entry := DLQEntry{EventID: ev.EventID, Sequence: ev.Sequence, Tipo: ev.Tipo, Colonia: sub.colonia,
		HandlerNome: sub.nome, MensagemErro: out.err.Error(), PilhaErro: out.stack,
		Tentativas: 1, UltimaTentativa: now, Status: DLQPendente, CriadoEm: now}
	// The DLQ write must outlive a cancelled request: the failure happened.
	if err := c.Store.RecordFailure(context.WithoutCancel(ctx), entry); err != nil {
		c.Logger.Error("record DLQ entry failed", "colonia", sub.colonia, "event_id", ev.EventID, "err", err)
		return fmt.Errorf("%w: %w", errUnrecorded, out.err)
	}
	return out.err
}
