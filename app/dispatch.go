package app

import (
	"context"
	"errors"
	"fmt"
	"geohub/app/callback"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// Dispatcher defaults (SPEC 6.4).
const (
	DefaultAutoDisable = 120 * time.Hour
	autoDisableSpread  = 12 * time.Hour
	MaxQuedas          = 5 // leases lost before a row is poison
	DefaultSweep       = 15 * time.Second
	DefaultLease       = 30 * time.Second
	// ReplicaLease is the lease where several dispatchers share the outbox
	// (not ReapOnStart): short, so that a dead replica's aggregates go out
	// again within about ten seconds (issue 27), and renewed every quarter
	// of it while the row is held (renewEvery).
	ReplicaLease     = 6 * time.Second
	DefaultRetention = 7 * 24 * time.Hour
	defaultInFlight  = 32
	// DefaultPerIntegrator is how many requests one dispatcher has on the
	// wire to one integrator at most; MaxPerIntegrator the most it may be
	// set to (all of its in-flight slots).
	DefaultPerIntegrator = 16
	MaxPerIntegrator     = defaultInFlight
)

// DefaultDeadLetterRetention is how long a dead letter keeps its body,
// counted from when it dead-lettered: longer than a delivered one's, since
// an operator must notice the failure and fix the receiver before resending.
const DefaultDeadLetterRetention = 30 * 24 * time.Hour

// Dispatcher delivers the outbox: it claims due rows with a lease (at most
// one in flight per integrator and aggregate, in sequence order: the claim
// keeps that), posts them through its Sender, and hands the outcomes back to
// the store in batches. It is woken right after a commit that enqueued
// deliveries and sweeps every 15 s for anything missed (retries coming due);
// it renews its leases, and reaps any worker's that ended, every quarter of
// a lease. The attempt's outcome is decide's; the circuit breaker is the
// integrator's (breaker.go).
type Dispatcher struct {
	Store       OutboxStore
	Integrators *Integrators
	Policy      callback.Policy
	Now         func() time.Time
	// Monotonic is the clock leases are kept by here; default time.Now,
	// whose monotonic reading no step of the wall clock moves (Now may be
	// the database's clock, re-measured against the wall clock). Tests
	// that pause time give their own.
	Monotonic func() time.Time
	Logger    *slog.Logger
	Metrics   *Metrics
	Version   string

	Timeout time.Duration // one attempt's limit; default 5 s
	Worker  string        // lease owner id; default a fresh UUID
	// Lease is a claim's lease, renewed every quarter of it while the row
	// is held; default DefaultLease with ReapOnStart (one dispatcher, whose
	// restart takes every lease back), else ReplicaLease.
	Lease         time.Duration
	Sweep         time.Duration // default 15 s
	Retention     time.Duration // delivered bodies kept; default 7 days
	MaxInFlight   int           // default 32
	PerIntegrator int           // default 16
	Jitter        func() float64
	// DeadLetterRetention is how long a dead letter keeps its body, and so
	// can be resent; default 30 days.
	DeadLetterRetention time.Duration
	// ReapOnStart returns every leased row at start, counting a crash for
	// each: right when one node runs one dispatcher (SQLite), so any lease
	// found at start belonged to a process that died.
	ReapOnStart bool
	// AutoDisable sets an integrator inactive once it has failed
	// continuously this long (SPEC 6.4: 120 h); 0 turns it off.
	AutoDisable time.Duration
	// OnRecorded, when set, is called after a batch of attempts is
	// committed (the console's live tail of deliveries), and when a circuit
	// another replica changed is adopted (its incident badge); it must not
	// block.
	OnRecorded func()
	// Sender sends the deliveries; default a SessionSender: over the CAD's
	// session, or an HTTPSender's POST on Policy.
	Sender Sender
	// CADSessions are the sessions of CADs attached here (SPEC 8d);
	// SessionRecords their records shared by the replicas.
	CADSessions    *CADSessions
	SessionRecords CADSessionStore
	// Signals are test hooks; see DispatchSignals.
	Signals DispatchSignals
	// Leader, when set, keeps the periodic duties (the purges) to the
	// elected replica (SPEC 12); nil runs them here. Claims, sends, the
	// sweep for rows coming due, renewals and the reaper stay on every
	// replica: a dead leader's rows must not wait for the next one.
	Leader *Leader

	running atomic.Bool
	turn    int // rotates who gets the first claim

	once sync.Once
	wake chan struct{}
}

func (d *Dispatcher) init() {
	d.once.Do(func() {
		d.wake = make(chan struct{}, 1)
		if d.Worker == "" {
			d.Worker = uuid.NewString()
		}
		if d.Monotonic == nil {
			d.Monotonic = time.Now
		}
		if d.Lease == 0 {
			d.Lease = ReplicaLease
			if d.ReapOnStart {
				d.Lease = DefaultLease
			}
		}
		if d.Timeout == 0 {
			d.Timeout = DeliveryTimeout
		}
		if d.Sweep == 0 {
			d.Sweep = DefaultSweep
		}
		if d.Retention == 0 {
			d.Retention = DefaultRetention
		}
		if d.DeadLetterRetention == 0 {
			d.DeadLetterRetention = DefaultDeadLetterRetention
		}
		if d.MaxInFlight == 0 {
			d.MaxInFlight = defaultInFlight
		}
		if d.PerIntegrator == 0 {
			d.PerIntegrator = DefaultPerIntegrator
		}
		if d.Jitter == nil {
			d.Jitter = rand.Float64
		}
		if d.CADSessions == nil {
			d.CADSessions = &CADSessions{}
		}
		if d.Sender == nil {
			d.Sender = &SessionSender{CADSessions: d.CADSessions, Timeout: d.Timeout,
				Callback: NewHTTPSender(d.Integrators, d.Policy, d.Now, d.Version, d.Timeout, d.PerIntegrator)}
		}
	})
}

// Running reports whether Run is delivering: /readyz.
func (d *Dispatcher) Running() bool { return d.running.Load() }

// Wake asks for a claim now; it never blocks.
func (d *Dispatcher) Wake() {
	d.init()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// A freed slot is refilled at once from the rows a claim holds, while the
// outcomes that freed it are recorded and new rows claimed in the
// background. An integrator's rows held, counting those on the wire, are
// as many as its requests will take while a round commits, between
// minPrefetch and maxPrefetch times its in-flight limit (see depth): a
// fast receiver empties a shallow queue before the round is back, and
// the wire waits (SQLite's publish+delivery ran at 0.7 of what a queue
// ten deep gives, PostgreSQL's drain at 0.4 with 1 ms to the database),
// while a slow one would hold rows that another replica could be sending.
const (
	minPrefetch = 3
	maxPrefetch = 10
)

// Outcomes are recorded in rounds of at least half the in-flight limit, or
// after roundDelay, or at once when nothing is held to send: a commit costs
// about as much as twenty outcomes, so small rounds would halve throughput.
const roundDelay = 5 * time.Millisecond

// dispatch is the state of one Run: what is on the wire, what is claimed
// and waiting for a slot, and the outcomes not yet recorded.
type dispatch struct {
	inFlight map[string]int
	total    int
	sending  map[int64]bool // the rows on the wire
	queued   map[string][]heldRow
	nQueued  int
	// leases are the held rows' leases, queued or on the wire, which
	// renewals move.
	leases   map[int64]*lease
	renewing bool             // a renewal (and reap) runs in the background
	outcomes []DeliveryResult // to record: attempts, and deferrals without one
	// roundTook and answerTook are moving averages of how long a round
	// takes and, per integrator, an accepted attempt: they size the queues
	// (depth).
	roundTook  average
	answerTook map[string]average
	// recording is true while a FinishDeliveries (or a claim) runs in the
	// background; one at a time, so outcomes batch up behind it.
	recording bool
	wantClaim bool
	flush     *time.Timer // ends roundDelay after the first outcome waits
	flushing  bool        // flush is armed
	wakeAt    time.Time   // when the main timer fires
	paused    bool        // a round failed: the next waits for the timer
	// reconcile: a round failed, and its commit may have happened anyway,
	// leasing this worker rows it does not hold; the next round gives
	// them back first (ReconcileDeliveries).
	reconcile bool
}

// held is every row this worker has claimed and not yet finished: on the
// wire, waiting for a slot, or with an outcome not yet recorded (batch,
// the round's own).
func (st *dispatch) held(batch []DeliveryResult) []int64 {
	ids := make([]int64, 0, len(st.sending)+st.nQueued+len(st.outcomes)+len(batch))
	for id := range st.sending {
		ids = append(ids, id)
	}
	for _, rows := range st.queued {
		for _, h := range rows {
			ids = append(ids, h.ID)
		}
	}
	for _, r := range st.outcomes {
		ids = append(ids, r.ID)
	}
	for _, r := range batch {
		ids = append(ids, r.ID)
	}
	return ids
}

// heldRow is a claimed row waiting for a slot, with its lease.
type heldRow struct {
	Delivery
	lease *lease
}

// lease is a held row's lease as this worker knows it: its end by this
// process's monotonic clock (Dispatcher.Monotonic: a pause or a clock
// step cannot stretch it), moved by each renewal that kept the row. The database's lease ends
// no earlier: it is given and renewed after this end was read. Past this
// end the row may be another worker's, so nothing is sent, and no failure
// counted, on the strength of it (issue 27, B4).
type lease struct {
	token int64
	end   atomic.Pointer[time.Time]
}

func newLease(token int64, end time.Time) *lease {
	l := &lease{token: token}
	l.end.Store(&end)
	return l
}

// End is when the lease runs out by Dispatcher.Monotonic.
func (l *lease) End() time.Time { return *l.end.Load() }

// cancelAtEnd calls cancel when the lease runs out, following renewals;
// stop ends the watch.
func (l *lease) cancelAtEnd(now func() time.Time, cancel func()) (stop func()) {
	var mu sync.Mutex
	var t *time.Timer
	stopped := false
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(l.End().Sub(now()), func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		if left := l.End().Sub(now()); left > 0 {
			t.Reset(left)
			return
		}
		cancel()
	})
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}

// renewal is what a background RenewDeliveries hands back to Run.
type renewal struct {
	at     time.Time // Now, read before the renewal was sent
	from   time.Time // Monotonic, read before it too: the renewed leases end Lease later
	leased []Leased
	err    error
}

// renewEvery is how often a worker renews its leases (and reaps others'
// that ended): four times a lease, so one late renewal costs nothing.
func (d *Dispatcher) renewEvery() time.Duration { return d.Lease / 4 }

// roundDue says whether to start a background round now.
func (st *dispatch) roundDue(maxInFlight int, live bool) bool {
	switch {
	case st.recording:
		return false
	case !live:
		return true
	case st.paused:
		return false
	case st.wantClaim:
		return true
	case len(st.outcomes) == 0:
		return false
	case st.nQueued == 0 || len(st.outcomes) >= maxInFlight/2:
		return true
	}
	if !st.flushing {
		st.flush.Reset(roundDelay)
		st.flushing = true
	}
	return false
}

// round is what a background FinishDeliveries hands back to Run.
type round struct {
	batch   []DeliveryResult
	at      time.Time // the claim's now (Now): what is due
	from    time.Time // Monotonic before the claim: its leases end Lease later
	asked   int
	claimed []Delivery
	failing map[string]time.Time
	// reconciled: the round gave back the rows it did not hold first.
	reconciled bool
	err        error
}

// Run delivers until ctx ends, then waits for in-flight requests (bounded by
// the 5 s timeout), records their outcomes and releases its leases.
//
// The loop never waits for the database: outcomes are recorded, and new rows
// claimed, by one background transaction at a time, and meanwhile a freed
// slot takes a row already claimed. So the wire stays busy during commits.
func (d *Dispatcher) Run(ctx context.Context) error {
	d.init()
	d.running.Store(true)
	defer d.running.Store(false)
	if d.ReapOnStart {
		if n, err := d.Store.ReapDeliveries(ctx, d.Now().Add(d.Lease+time.Hour), MaxQuedas); err != nil {
			return fmt.Errorf("recover deliveries leased before the restart: %w", err)
		} else if n > 0 {
			d.Logger.Warn("resumed deliveries that were in flight when the last process stopped", "n", n)
		}
	}
	defer d.followShared(ctx)() // what other replicas change: circuits, the cadastro
	st := &dispatch{inFlight: map[string]int{}, sending: map[int64]bool{}, queued: map[string][]heldRow{},
		leases: map[int64]*lease{}, answerTook: map[string]average{}, wantClaim: true, flush: time.NewTimer(roundDelay)}
	st.flush.Stop()
	defer st.flush.Stop()
	results := make(chan DeliveryResult, d.MaxInFlight)
	done := make(chan round, 1)
	sendCtx := context.WithoutCancel(ctx) // in-flight requests finish on shutdown
	dbCtx := context.WithoutCancel(ctx)   // outcomes are recorded on shutdown too
	stopping := ctx.Done()
	var lastReap time.Time
	timer := time.NewTimer(0)
	defer timer.Stop()
	// Leases are renewed, and others' ended leases reaped, on every
	// replica: a dead replica's rows must not wait for a new leader.
	renew := time.NewTicker(d.renewEvery())
	defer renew.Stop()
	renewed := make(chan renewal, 1)
	for {
		live := ctx.Err() == nil
		if live {
			if now := d.Now(); now.Sub(lastReap) >= d.Sweep {
				lastReap = now
				d.housekeep(ctx, now)
			}
			d.pump(st, results, sendCtx)
		}
		if st.roundDue(d.MaxInFlight, live) {
			var quotas []Quota
			if live && (st.wantClaim || len(st.outcomes) > 0) {
				quotas = d.quotas(st)
			}
			st.wantClaim, st.flushing = false, false
			st.flush.Stop()
			if len(st.outcomes) > 0 || len(quotas) > 0 || live && st.reconcile {
				d.record(dbCtx, st, quotas, done)
			} else if !live && st.total == 0 {
				if err := d.Store.ReleaseDeliveries(dbCtx, d.Worker); err != nil {
					d.Logger.Error("release leases", "err", err)
				}
				return nil
			}
		}
		select {
		case <-d.wake:
			st.wantClaim = true
		case <-timer.C:
			st.wantClaim, st.paused = true, false
			d.arm(timer, st, d.untilNext(ctx, st, true, d.Now()))
		case <-stopping:
			stopping = nil
		case <-st.flush.C:
			st.wantClaim, st.flushing = true, false // a round records the waiting outcomes
		case r := <-results:
			d.landed(st, r)
			for more := true; more; {
				select {
				case r := <-results:
					d.landed(st, r)
				default:
					more = false
				}
			}
		case rec := <-done:
			st.recording = false
			d.settle(ctx, st, rec, timer)
		case <-renew.C:
			if !st.renewing {
				st.renewing = true
				d.renew(dbCtx, ctx.Err() == nil, renewed)
			}
		case r := <-renewed:
			st.renewing = false
			d.renewed(st, r)
		}
	}
}

// renew renews this worker's leases in the background, then (live) takes
// back every worker's leases that ended: on shutdown the attempts still on
// the wire keep theirs until they land.
func (d *Dispatcher) renew(ctx context.Context, live bool, out chan<- renewal) {
	go func() {
		r := renewal{from: d.Monotonic(), at: d.Now()}
		r.leased, r.err = d.Store.RenewDeliveries(ctx, d.Worker, r.at, d.Lease)
		if live {
			if n, err := d.Store.ReapDeliveries(ctx, r.at, MaxQuedas); err != nil {
				d.Logger.Error("reap expired leases", "err", err)
			} else if n > 0 {
				d.Logger.Warn("returned deliveries whose lease expired", "n", n)
			}
		}
		out <- r
	}()
}

// renewed moves the leases a renewal kept: those of the same claim, and
// only when the renewal began before the lease ran out here (one that ran
// out was given up: its attempt cancelled, its row deferred).
func (d *Dispatcher) renewed(st *dispatch, r renewal) {
	if r.err != nil {
		d.Logger.Warn("renew leases", "err", r.err)
		return
	}
	end := r.from.Add(d.Lease)
	for _, k := range r.leased {
		if l := st.leases[k.ID]; l != nil && l.token == k.Token && r.from.Before(l.End()) && end.After(l.End()) {
			l.end.Store(&end)
		}
	}
}

// landed takes one attempt's outcome: its slot is free at once, the breaker
// learns of it now, and the database when the next background round runs.
func (d *Dispatcher) landed(st *dispatch, r DeliveryResult) {
	if st.inFlight[r.Integrador]--; st.inFlight[r.Integrador] <= 0 {
		delete(st.inFlight, r.Integrador)
	}
	st.total--
	delete(st.sending, r.ID)
	if l := st.leases[r.ID]; l != nil && l.token == r.Token {
		delete(st.leases, r.ID)
	}
	if r.Kind.OfReceiver() {
		d.trip(r.Integrador, r.ID, r.Kind.Failed(), r.Kind == ResultNoAnswer, r.Attempt.Inicio.Add(time.Duration(r.Attempt.DuracaoMS)*time.Millisecond))
	}
	d.Metrics.delivered(r)
	if r.Status == EntregaEntregue {
		// Only accepted answers: a receiver that refuses at once is not a
		// fast one, and its breaker is about to defer what it holds.
		a := st.answerTook[r.Integrador]
		a.add(time.Duration(r.Attempt.DuracaoMS) * time.Millisecond)
		st.answerTook[r.Integrador] = a
	}
	st.outcomes = append(st.outcomes, r)
}

// average is a moving average of durations; each sample moves it a tenth
// of the way, the first one sets it.
type average struct {
	d  time.Duration
	ok bool // a sample was taken
}

func (a *average) add(sample time.Duration) {
	switch {
	case sample < 0: // a clock step
	case !a.ok:
		a.d, a.ok = sample, true
	default:
		a.d += (sample - a.d) / 10
	}
}

// depth is how many rows an integrator whose limit is n may hold: what its
// requests take while a round commits, past those on the wire, within
// minPrefetch and maxPrefetch times n; the floor until both are measured.
// An attempt is counted as 1 ms at least (loopback answers in less, and
// DuracaoMS rounds down).
func (st *dispatch) depth(id string, n int) int {
	k := minPrefetch
	if took := st.answerTook[id]; took.ok && st.roundTook.ok {
		k = max(k, min(maxPrefetch, 1+int(st.roundTook.d/max(took.d, time.Millisecond))))
	}
	return k * n
}

// pump sends held rows into free slots, integrators in turn. The rows of an
// integrator whose circuit opened, or that was disabled, since they were
// claimed go back to pendente without an attempt.
func (d *Dispatcher) pump(st *dispatch, results chan<- DeliveryResult, ctx context.Context) {
	if st.nQueued == 0 {
		return
	}
	now := d.Now()
	active := d.Integrators.activeIDs()
	deferRow := func(h heldRow, until time.Time) {
		st.outcomes = append(st.outcomes, DeliveryResult{ID: h.ID, Token: h.Token, Worker: d.Worker,
			Integrador: h.Integrador, Status: EntregaPendente, Proxima: until, Kind: ResultDeferred})
		if st.leases[h.ID] == h.lease {
			delete(st.leases, h.ID)
		}
	}
	for id, held := range st.queued {
		limit, _, reopen := d.limit(id, now)
		if !slices.Contains(active, id) {
			limit, reopen = 0, now
		} else if reopen.IsZero() {
			reopen = now // its session is not here: due again at once, for the next one
		}
		if limit == 0 {
			for _, h := range held {
				deferRow(h, reopen)
			}
			st.nQueued -= len(held)
			delete(st.queued, id)
			continue
		}
		n := 0
		for n < len(held) && st.inFlight[id] < limit && st.total < d.MaxInFlight {
			h := held[n]
			n++
			if d.Monotonic().Add(d.Lease/2).After(h.lease.End()) || st.sending[h.ID] {
				// Renewals keep a lease at least three quarters long: one
				// this short missed them (the database is slow or out of
				// reach, or this process was paused), and its attempt
				// could outlive it. Or the row is on the wire still, by an
				// earlier claim whose lease ran out and whose attempt this
				// one must not overlap.
				deferRow(h, now)
				continue
			}
			st.inFlight[id]++
			st.total++
			st.sending[h.ID] = true
			st.leases[h.ID] = h.lease // renewed while on the wire (claimed while an earlier claim's attempt was)
			go func() { results <- d.deliver(ctx, h.Delivery, h.lease) }()
		}
		st.nQueued -= n
		if n == len(held) {
			delete(st.queued, id)
		} else {
			st.queued[id] = held[n:]
		}
	}
}

// record starts the background round: the outcomes so far, and a claim by
// quotas, in one transaction.
func (d *Dispatcher) record(ctx context.Context, st *dispatch, quotas []Quota, done chan<- round) {
	batch := st.outcomes
	st.outcomes = nil
	st.recording = true
	asked := 0
	for _, q := range quotas {
		asked += q.N
	}
	var held []int64
	if st.reconcile {
		// Taken now, in the loop: until this round ends nothing is claimed,
		// and what leaves the wire or the queue joins the outcomes, still held.
		held = st.held(batch)
	}
	go func() {
		saved := d.saveCircuits(ctx) // beside the round: the writer usually commits both at once
		defer saved()
		rec := round{batch: batch, from: d.Monotonic(), at: d.Now(), asked: asked}
		if held != nil {
			n, err := d.Store.ReconcileDeliveries(ctx, d.Worker, held)
			if err != nil {
				rec.err = fmt.Errorf("reconcile leases: %w", err)
				done <- rec
				return
			}
			if n > 0 {
				d.Logger.Warn("gave back deliveries leased by a round whose commit was not confirmed", "n", n)
			}
			rec.reconciled = true
		}
		if len(batch) == 0 {
			rec.claimed, rec.err = d.Store.ClaimDeliveries(ctx, d.Worker, rec.at, d.Lease, quotas)
		} else {
			rec.failing, rec.claimed, rec.err = d.Store.FinishDeliveries(ctx, batch, d.Worker, rec.at, d.Lease, quotas)
		}
		done <- rec
	}()
}

// settle takes a background round's result: the claimed rows join the
// queue, and an integrator failing long enough is disabled.
func (d *Dispatcher) settle(ctx context.Context, st *dispatch, rec round, timer *time.Timer) {
	if rec.err != nil {
		d.Logger.Error("record delivery outcomes", "err", rec.err, "n", len(rec.batch))
		// Whether the round committed is not known (the link may have
		// broken during COMMIT, or the batch deadline ended it there): its
		// claims are not taken, and the next round first gives back what
		// a commit may have leased to this worker regardless, so those rows
		// wait a second, not for the lease to end and the reaper to count
		// a queda against each. Its outcomes wait for that round too, a
		// second from now (a full disk must not spin the loop). On shutdown
		// they are dropped, and the rows go back with ReleaseDeliveries.
		rec.claimed = nil
		st.reconcile = true
		if ctx.Err() == nil {
			st.outcomes = append(rec.batch, st.outcomes...)
			st.paused = true
			d.arm(timer, st, time.Second)
		}
		return
	}
	st.roundTook.add(d.Monotonic().Sub(rec.from)) // a failed round's time says nothing of the next
	if rec.reconciled {
		st.reconcile = false
	}
	for _, r := range rec.batch {
		if r.Kind.OfReceiver() {
			end := r.Attempt.Inicio.Add(time.Duration(r.Attempt.DuracaoMS) * time.Millisecond)
			d.Integrators.healths.record(r.Integrador, r.Status == EntregaEntregue, r.Attempt.StatusCode != 0,
				r.Attempt.DuracaoMS, end)
		}
		// Committed: from now on only an operator's resend sends it again.
		if r.Status == EntregaFalhou {
			d.Logger.Warn("delivery dead-lettered", "entrega", r.ID, "integrador", r.Integrador,
				"tentativa", r.Attempt.Tentativa, "motivo", r.UltimoErr)
		}
	}
	if len(rec.batch) > 0 {
		if d.OnRecorded != nil {
			d.OnRecorded()
		}
		d.Signals.Recorded.raise(len(rec.batch))
	}
	if len(rec.claimed) > 0 {
		d.Signals.Claimed.raise(rec.claimed)
	}
	for _, del := range rec.claimed {
		l := newLease(del.Token, rec.from.Add(d.Lease))
		st.queued[del.Integrador] = append(st.queued[del.Integrador], heldRow{del, l})
		st.nQueued++
		if !st.sending[del.ID] {
			st.leases[del.ID] = l
		}
	}
	if ctx.Err() == nil {
		// Fewer rows than asked: nothing more is due now, so sleep until the
		// next retry comes due. In any case, wake when a circuit may probe.
		due := rec.asked == 0 || len(rec.claimed) < rec.asked
		if wait := d.untilNext(ctx, st, due, rec.at); due || d.Now().Add(wait).Before(st.wakeAt) {
			d.arm(timer, st, wait)
		}
	}
	var now time.Time // the latest attempt's end: when the failures happened
	for _, r := range rec.batch {
		if at := r.Attempt.Inicio.Add(time.Duration(r.Attempt.DuracaoMS) * time.Millisecond); r.Kind != ResultDeferred && at.After(now) {
			now = at
		}
	}
	// Any replica whose finishes show the failing period disables (issue
	// 27): the leader alone missed the failures only followers saw.
	// Disable re-reads the integrator and leaves one already inactive.
	for id, since := range rec.failing {
		// Checked at a failure, so the last failure is now: both the 120 h
		// of failing and the 12 h spread between first and last hold.
		if d.AutoDisable <= 0 || now.Sub(since) < d.AutoDisable || now.Sub(since) < autoDisableSpread {
			continue
		}
		reason := fmt.Sprintf("%s: falhando sem interrupção desde %s", autoDisabled, brasiliaTime(since))
		if err := d.Integrators.Disable(context.WithoutCancel(ctx), id, reason); err != nil {
			d.Logger.Error("auto-disable integrator", "integrador", id, "err", err)
			continue
		}
		d.Logger.Warn("integrator auto-disabled", "integrador", id, "falhando_desde", since)
	}
}

// autoDisabled begins the reason of an integrator the dispatcher disabled:
// Incidents keeps naming it, where one an operator disabled is a choice.
const autoDisabled = "desativado automaticamente"

// send posts req through the dispatcher's Sender: its attempts and the
// "verificar" ping go out alike.
func (d *Dispatcher) send(ctx context.Context, in Integrator, req Request) SendResult {
	d.init()
	return d.Sender.Send(ctx, in, req)
}

// CloseCircuit closes id's circuit as a success would: an operator's
// "Tentar agora", or a "verificar" the receiver accepted.
func (d *Dispatcher) CloseCircuit(id string) {
	d.init()
	d.trip(id, 0, false, false, d.Now())
	if d.OnRecorded != nil {
		d.OnRecorded() // no attempt recorded, but the incident badge changed
	}
}

// trip tells the integrator's breaker of an attempt of row that ended at now.
func (d *Dispatcher) trip(id string, row int64, failed, transport bool, now time.Time) {
	opened, closed, failures := d.Integrators.circuits.record(id, row, failed, transport, now)
	switch {
	case opened:
		d.Logger.Warn("circuit open", "integrador", id, "falhas", failures)
		d.Metrics.breaker(id, true)
		d.Signals.Circuit.raise(CircuitChange{Integrador: id, Open: true})
	case closed:
		d.Logger.Info("circuit closed", "integrador", id)
		d.Metrics.breaker(id, false)
		d.Signals.Circuit.raise(CircuitChange{Integrador: id, Open: false})
	}
}

// limit is how many requests an integrator may have on the wire now: none
// while its circuit is open (reopen says until when), one probe once the
// cooldown ends, else PerIntegrator.
func (d *Dispatcher) limit(id string, now time.Time) (n int, probe bool, reopen time.Time) {
	if in, err := d.Integrators.cached(id); err == nil && in.Entrega == EntregaSessao && d.CADSessions.Get(id) == nil {
		// Its session is elsewhere, or nowhere: nothing goes out from
		// here, and nothing is claimed (SPEC 8d).
		return 0, false, time.Time{}
	}
	return d.Integrators.circuits.limit(id, now, d.PerIntegrator)
}

// room is how many more rows an integrator may hold, on the wire or
// claimed ahead: its depth, and a probe is one request.
func (d *Dispatcher) room(st *dispatch, id string, now time.Time) (int, time.Time) {
	n, probe, reopen := d.limit(id, now)
	held := st.inFlight[id] + len(st.queued[id])
	if probe {
		return 1 - held, reopen
	}
	return st.depth(id, n) - held, reopen
}

// arm sets the loop's timer to fire after wait.
func (d *Dispatcher) arm(timer *time.Timer, st *dispatch, wait time.Duration) {
	st.wakeAt = d.Now().Add(wait)
	timer.Reset(wait)
}

// untilNext is how long to sleep: until an open circuit lets its probe go
// and, when due is set, until the next row of an integrator with room comes
// due after claimed, the time of the last claim; at most a sweep. Rows of
// integrators at their limit wait for an outcome, which wakes the loop
// anyway.
func (d *Dispatcher) untilNext(ctx context.Context, st *dispatch, due bool, claimed time.Time) time.Duration {
	now := d.Now()
	wait := d.Sweep
	var claimable []string
	for _, id := range d.Integrators.activeIDs() {
		room, reopen := d.room(st, id, now)
		if !reopen.IsZero() {
			wait = min(wait, max(reopen.Sub(now), 10*time.Millisecond))
		} else if room > 0 {
			claimable = append(claimable, id)
		}
	}
	if !due || len(claimable) == 0 {
		return wait
	}
	// Rows that were due at the claim and that it left are waiting behind
	// another row of their aggregate: on the wire (its outcome wakes the
	// loop) or not due before a later time (which this finds). So only rows
	// due after the claim count; one that came due since is due now.
	if next, ok, err := d.Store.NextDue(ctx, claimable, claimed); err == nil && ok {
		wait = min(wait, max(next.Sub(now), 10*time.Millisecond))
	}
	return wait
}

// quotas shares the room for claims among the active integrators that may
// be claimed now, one row each in turn (starting with a different one each
// time), so one backlog never takes them all. In all, at most minPrefetch
// times MaxInFlight rows are held, and what the deeper queues of fast
// receivers add, up to maxPrefetch times: many slow receivers together
// hold no more than before.
func (d *Dispatcher) quotas(st *dispatch) []Quota {
	now := d.Now()
	ids := d.Integrators.activeIDs()
	if len(ids) == 0 {
		return nil
	}
	room := make([]int, len(ids))
	extra := 0 // what the fast receivers' deeper queues add to the floor
	for i, id := range ids {
		room[i], _ = d.room(st, id, now)
		if n, probe, _ := d.limit(id, now); !probe {
			extra += st.depth(id, n) - minPrefetch*n
		}
	}
	free := min(minPrefetch*d.MaxInFlight+extra, maxPrefetch*d.MaxInFlight) - st.total - st.nQueued
	if free <= 0 {
		return nil
	}
	d.turn++
	given := make([]int, len(ids))
	for free > 0 {
		gave := false
		for k := range ids {
			i := (k + d.turn) % len(ids)
			if free > 0 && given[i] < room[i] {
				given[i]++
				free--
				gave = true
			}
		}
		if !gave {
			break
		}
	}
	var quotas []Quota
	for k := range ids {
		i := (k + d.turn) % len(ids)
		if given[i] > 0 {
			quotas = append(quotas, Quota{Integrador: ids[i], N: given[i]})
		}
	}
	return quotas
}

func (d *Dispatcher) housekeep(ctx context.Context, now time.Time) {
	// Only the leader's, and only while it leads: losing the term ends ctx.
	ctx, release, ok := d.Leader.duty(ctx)
	defer release()
	if !ok {
		return
	}
	if _, err := d.Store.PurgeDelivered(ctx, now.Add(-d.Retention)); err != nil {
		d.Logger.Error("purge delivered bodies", "err", err)
	}
	if n, err := d.Store.PurgeDeadLetters(ctx, now.Add(-d.DeadLetterRetention)); err != nil {
		d.Logger.Error("purge dead-lettered bodies", "err", err)
	} else if n > 0 {
		d.Logger.Info("purged the bodies of dead letters past their retention: they can no longer be resent", "n", n)
	}
	d.disableAbsentSessions(ctx, now)
}

// disableAbsentSessions is a session integrator's auto-disable (SPEC 8d):
// with no session, nothing is attempted and nothing fails, so the 120 h
// of failures never start. What counts instead is 120 h with deliveries
// waiting and no session: since the last one was seen alive, or since the
// integrator was registered if it never had one, or since an admin last
// changed it (reactivated it, say). The cadastro snapshot narrows it to
// the integrators old enough to qualify, so a sweep without any reads
// nothing from the store.
func (d *Dispatcher) disableAbsentSessions(ctx context.Context, now time.Time) {
	if d.AutoDisable <= 0 {
		return
	}
	for _, in := range d.Integrators.sessionIntegrators() {
		// An admin's change of the cadastro (a reactivation above all)
		// starts the count again: the CAD has just been told to connect.
		since := in.CriadoEm
		if in.AtualizadoEm.After(since) {
			since = in.AtualizadoEm
		}
		if now.Sub(since) < d.AutoDisable || d.CADSessions.Get(in.ID) != nil {
			continue
		}
		r, ok, err := d.SessionRecords.CADSessionRecord(ctx, in.ID)
		if err != nil {
			d.Logger.Error("read a CAD session for the auto-disable", "integrador", in.ID, "err", err)
			continue
		}
		if ok && sessionStatus(r, nil, now, 0).Conectada {
			continue
		}
		if ok && r.VistoEm.After(since) {
			since = r.VistoEm
		}
		if now.Sub(since) < d.AutoDisable {
			continue
		}
		backlogs, err := d.Integrators.Store.Backlogs(ctx, in.ID)
		if err != nil {
			d.Logger.Error("count a session integrator's backlog for the auto-disable", "integrador", in.ID, "err", err)
			continue
		}
		if backlogs[in.ID] == 0 {
			continue
		}
		reason := fmt.Sprintf("%s: sem sessão desde %s, com entregas esperando", autoDisabled, brasiliaTime(since))
		if err := d.Integrators.Disable(context.WithoutCancel(ctx), in.ID, reason); err != nil {
			d.Logger.Error("auto-disable integrator", "integrador", in.ID, "err", err)
			continue
		}
		d.Logger.Warn("integrator auto-disabled: no session", "integrador", in.ID, "sem_sessao_desde", since)
	}
}

// openBody decrypts a claimed row's body for its one attempt: the clear
// envelope lives only in this attempt's memory. A purged body (nil) is the
// Sender's to refuse; one that does not open (another master key sealed it,
// or it was altered or moved) is never sent, and a retry cannot change that.
func (d *Dispatcher) openBody(del Delivery) ([]byte, error) {
	if del.Corpo == nil {
		return nil, nil
	}
	body, err := d.Integrators.Sealer.OpenBody(del.Corpo, del.EventID)
	if err != nil {
		return nil, fmt.Errorf("%w: %w (outra master.key o cifrou, ou ele foi alterado)", errUnsendable, err)
	}
	return body, nil
}

// deliver makes one attempt and decides what follows it.
func (d *Dispatcher) deliver(ctx context.Context, del Delivery, l *lease) DeliveryResult {
	res := DeliveryResult{ID: del.ID, Token: del.Token, Worker: d.Worker, Integrador: del.Integrador}
	// The request ends when the lease runs out, if renewals stop meanwhile:
	// the row may be another worker's from then on.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer l.cancelAtEnd(d.Monotonic, cancel)()
	start := d.Now()
	// The attempt's number counts every attempt the row had, across resends;
	// its budget counts from the last resend.
	attempt := del.Tentativas + 1
	res.Attempt = Attempt{EntregaID: uuid.Must(uuid.NewV7()).String(), Tentativa: attempt, Inicio: start}
	in, err := d.Integrators.cached(del.Integrador)
	r := SendResult{Err: err}
	if err == nil {
		var body []byte
		if body, r.Err = d.openBody(del); r.Err == nil {
			r = d.Sender.Send(ctx, in, Request{EventID: del.EventID, Agregado: del.Agregado, Sequencia: del.Sequencia,
				Corpo: body, EntregaID: res.Attempt.EntregaID, Tentativa: attempt})
		}
	}
	end := d.Now()
	res.Attempt.DuracaoMS = end.Sub(start).Milliseconds()
	res.Attempt.StatusCode = r.Status
	res.Attempt.RespostaSelada = d.Integrators.Sealer.SealResponse(r.Snippet, res.Attempt.EntregaID)
	if r.Err != nil {
		res.Attempt.Erro = r.Err.Error()
	}
	if errors.Is(r.Err, errSessionGone) {
		// The CAD's session ended, or moved to another replica: the row
		// waits for it, uncounted (see errSessionGone).
		return DeliveryResult{ID: del.ID, Token: del.Token, Worker: d.Worker, Integrador: del.Integrador,
			Status: EntregaPendente, Proxima: end, Kind: ResultDeferred}
	}
	if !r.Succeeded() && d.Monotonic().After(l.End()) {
		// The lease ran out during the attempt, by this process's own
		// (monotonic) clock: it was paused (SIGSTOP, a VM pause) or starved,
		// and a failure now says more of the pause than of the receiver (a
		// 204 read 40 s late is "não respondeu a tempo"). The row may be
		// another worker's already: nothing is recorded as this attempt's
		// outcome; the row goes back to pendente at once, uncounted, if it
		// is still this worker's (issue 27, B4).
		return DeliveryResult{ID: del.ID, Token: del.Token, Worker: d.Worker, Integrador: del.Integrador,
			Status: EntregaPendente, Proxima: end, Kind: ResultDeferred}
	}
	out := decide(integratorBackoff(in), attempt-del.TentativasAntes, r, end, d.Jitter())
	res.Proxima, res.UltimoErr = out.Proxima, out.Reason
	switch {
	case out.Kind == Unsent:
		res.Kind = ResultUnsent
	case out.Kind == Delivered:
		res.Kind = ResultAccepted
	case r.Transport:
		res.Kind = ResultNoAnswer
	default:
		res.Kind = ResultRefused
	}
	switch out.Kind {
	case Delivered:
		res.Status = EntregaEntregue
	case Retry:
		res.Status = EntregaPendente
	default:
		res.Status = EntregaFalhou
	}
	return res
}
