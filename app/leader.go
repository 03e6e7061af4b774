package app

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
)

// LeaderStore elects one replica among those sharing a database to run the
// periodic duties (SPEC 12). A term is a number that grows with every
// election and an expiry the database's clock sets, so no replica's clock
// decides who leads. Every method is one short statement: nothing is held
// on a connection between calls, which a transaction-pooling proxy would
// not keep.
type LeaderStore interface {
	// Elect makes replica the leader for ttl when no term is running (none
	// was ever held, the last expired or its holder resigned) and returns
	// the new term; 0 when another replica's term runs.
	Elect(ctx context.Context, replica string, ttl time.Duration) (term int64, err error)
	// Renew extends replica's term to ttl from now, unless it already
	// ended: false then, and the replica no longer leads.
	Renew(ctx context.Context, replica string, term int64, ttl time.Duration) (bool, error)
	// Resign ends replica's term at once, so another replica is elected
	// without waiting for its expiry. A term that already ended is left
	// as it is.
	Resign(ctx context.Context, replica string, term int64) error
}

// Leader defaults: a term lasts DefaultLeaderTTL and is renewed every third
// of it; a follower stands again every third too, and at once when the
// leader announces its resignation (Wake).
const DefaultLeaderTTL = 15 * time.Second

// Leader runs this replica's side of the election, as River's elector does:
// a follower stands for election now and then; once elected it renews its
// term well before it expires, and resigns when it stops. It trusts its
// term only until TTL (minus a margin) after the start of the last
// statement that granted or renewed it, by this process's monotonic clock:
// a leader that cannot reach the database steps down before the database
// would let another replica take over, so two replicas never both believe
// they lead. Losing the term (expired, taken over, or not renewed in time)
// ends the context Term hands out, which stops the duties at once. The
// trust deadline ends it too, by its own timer and in Leading and Term: a
// process paused past it (a stopped VM, a long GC or swap) must not act on
// the term when it resumes, before the elector's goroutine runs and finds
// the renewal late.
//
// A nil *Leader always leads: a process that is alone on its database.
type Leader struct {
	Store LeaderStore
	// ID names this replica in the leader row and the log; default a fresh
	// random id, so a restarted process is a new candidate.
	ID     string
	TTL    time.Duration // default DefaultLeaderTTL
	Retry  time.Duration // how often a follower stands; default TTL/3
	Logger *slog.Logger
	// Signals are test hooks; see LeaderSignals.
	Signals LeaderSignals

	once sync.Once
	wake chan struct{}

	mu      sync.Mutex
	term    int64
	trusted time.Time // the term is not trusted past this (monotonic)
	current *termRun  // the running term's context; nil when not leading
	gained  chan struct{}
}

// termRun is one term's context and who holds it: a resignation waits for
// the holders to let go (see resign), so that the next leader starts from
// what they saved.
type termRun struct {
	ctx     context.Context
	end     context.CancelFunc
	expiry  *time.Timer
	holders sync.WaitGroup
}

// LeaderSignals are the elector's test hooks.
type LeaderSignals struct {
	// Changed: this replica became the leader (true) or stopped being it.
	Changed Signal[bool]
	// Duties: the dispatcher's periodic duties came due, and whether this
	// replica ran them (it leads) or left them to the leader.
	Duties Signal[bool]
}

func (l *Leader) init() {
	l.once.Do(func() {
		l.wake = make(chan struct{}, 1)
		l.gained = make(chan struct{})
		if l.ID == "" {
			l.ID = uuid.NewString()
		}
		if l.TTL <= 0 {
			l.TTL = DefaultLeaderTTL
		}
		if l.Retry <= 0 {
			l.Retry = l.TTL / 3
		}
		if l.Logger == nil {
			l.Logger = slog.New(slog.DiscardHandler)
		}
	})
}

// Leading reports whether this replica leads now (/healthz, the log).
func (l *Leader) Leading() bool {
	if l == nil {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.term != 0 && time.Now().Before(l.trusted)
}

// Term returns a context that ends with ctx or with this replica's term,
// whichever ends first, for a duty only the leader runs; ok is false when
// this replica does not lead now. The context outlives renewals: it ends
// when the term is lost, resigned, or left unrenewed past its trust
// deadline. Call release once the duty is done (a resignation waits for
// it, up to that deadline).
func (l *Leader) Term(ctx context.Context) (_ context.Context, release func(), ok bool) {
	if l == nil {
		return ctx, func() {}, true
	}
	l.mu.Lock()
	run := l.current
	if run == nil || run.ctx.Err() != nil || !time.Now().Before(l.trusted) {
		l.mu.Unlock()
		return ctx, func() {}, false
	}
	// Under mu: resign clears run under it before waiting, so no holder
	// joins a term whose resignation is waiting.
	run.holders.Add(1)
	l.mu.Unlock()
	c, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(run.ctx, cancel)
	var once sync.Once
	return c, func() { once.Do(func() { stop(); cancel(); run.holders.Done() }) }, true
}

// Await waits until this replica leads, then returns Term's context; ok
// is false when ctx ended first.
func (l *Leader) Await(ctx context.Context) (_ context.Context, release func(), ok bool) {
	if l == nil {
		return ctx, func() {}, ctx.Err() == nil
	}
	l.init()
	for {
		l.mu.Lock()
		gained := l.gained
		l.mu.Unlock()
		if c, release, ok := l.Term(ctx); ok {
			return c, release, true
		}
		select {
		case <-gained:
		case <-ctx.Done():
			return ctx, func() {}, false
		}
	}
}

// duty gates one pass of the periodic duties: the pass runs with the
// context Term returns when ok, bounded by the trust deadline as it stands
// at the start, since a pass is short.
func (l *Leader) duty(ctx context.Context) (_ context.Context, release func(), ok bool) {
	c, held, ok := l.Term(ctx)
	if l != nil {
		l.Signals.Duties.raise(ok)
	}
	if !ok || l == nil {
		return c, held, ok
	}
	l.mu.Lock()
	trusted := l.trusted
	l.mu.Unlock()
	c, cancel := context.WithDeadline(c, trusted)
	return c, func() { cancel(); held() }, true
}

// Wake makes a follower stand for election now: the leader announced it
// resigned. It never blocks.
func (l *Leader) Wake() {
	if l == nil {
		return
	}
	l.init()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Start stands for election once, so that a replica alone on its database
// leads as soon as Start returns, then keeps electing in the background
// until ctx ends, when it resigns; done is closed after that.
func (l *Leader) Start(ctx context.Context) (done <-chan struct{}) {
	l.init()
	failures := 0
	wait := l.attempt(ctx, 0)
	if wait < 0 {
		failures, wait = 1, l.backoff(1)
	}
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		l.run(ctx, wait, failures)
	}()
	return ch
}

// maxElectBackoff bounds the wait after failed statements.
const maxElectBackoff = 5 * time.Second

// backoff is the wait after the nth failed statement in a row.
func (l *Leader) backoff(n int) time.Duration {
	return min(maxElectBackoff, (100*time.Millisecond)<<min(n, 6))
}

func (l *Leader) run(ctx context.Context, wait time.Duration, failures int) {
	defer l.resign(ctx)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.wake:
			if l.Leading() {
				continue // the announcement was another replica's stale term
			}
			timer.Stop()
		case <-timer.C:
		}
		wait := l.attempt(ctx, failures)
		if wait < 0 {
			failures++
			wait = l.backoff(failures)
			l.mu.Lock()
			if l.term != 0 {
				// A leader retries a failing renewal while it still trusts
				// its term, and steps down when it no longer does.
				wait = max(0, min(wait, time.Until(l.trusted)))
			}
			l.mu.Unlock()
		} else {
			failures = 0
		}
		timer.Reset(wait)
	}
}

// attempt stands for election, or renews the term this replica holds, and
// says how long until the next attempt: negative after a failed statement
// (the caller backs off).
func (l *Leader) attempt(ctx context.Context, failures int) time.Duration {
	l.mu.Lock()
	term, trusted := l.term, l.trusted
	l.mu.Unlock()
	// The trust window counts from before the statement: a slow answer
	// must not stretch it.
	start := time.Now()
	if term == 0 {
		actx, cancel := context.WithTimeout(ctx, l.Retry)
		got, err := l.Store.Elect(actx, l.ID, l.TTL)
		cancel()
		switch {
		case err != nil:
			if ctx.Err() == nil && failures == 0 {
				l.Logger.Error("leader election failed; retrying", "replica", l.ID, "err", err)
			}
			return -1
		case got == 0:
			return l.Retry
		}
		l.gain(got, start.Add(l.trust()))
		return l.TTL / 3
	}
	if !start.Before(trusted) {
		l.lose(term, "its term was not renewed in time")
		return 0
	}
	actx, cancel := context.WithDeadline(ctx, trusted)
	ok, err := l.Store.Renew(actx, l.ID, term, l.TTL)
	cancel()
	switch {
	case err != nil && ctx.Err() == nil:
		if !time.Now().Before(trusted) {
			l.lose(term, "its term could not be renewed in time")
			return 0
		}
		if failures == 0 {
			l.Logger.Error("renewing the leader's term failed; retrying", "replica", l.ID, "mandato", term, "err", err)
		}
		return -1
	case err != nil:
		return 0 // stopping: run resigns
	case !ok:
		l.lose(term, "its term ended: another replica took over")
		return l.Retry
	}
	l.mu.Lock()
	l.trusted = start.Add(l.trust())
	l.mu.Unlock()
	return l.TTL / 3
}

// trust is how long after a granting statement began the term is trusted:
// the margin covers the clocks of the database and this process ticking at
// slightly different rates.
func (l *Leader) trust() time.Duration { return l.TTL - l.TTL/10 }

func (l *Leader) gain(term int64, trusted time.Time) {
	l.mu.Lock()
	l.term, l.trusted = term, trusted
	run := &termRun{}
	run.ctx, run.end = context.WithCancel(context.Background())
	run.expiry = time.AfterFunc(time.Until(trusted), func() { l.expire(run) })
	l.current = run
	close(l.gained)
	l.gained = make(chan struct{})
	l.mu.Unlock()
	l.Logger.Info("this replica leads the periodic duties", "replica", l.ID, "mandato", term)
	l.Signals.Changed.raise(true)
}

// expire is the trust deadline's timer: it ends the term's context unless
// a renewal moved the deadline meanwhile, when it waits for the new one.
// The elector's goroutine finds the term lost on its next attempt.
func (l *Leader) expire(run *termRun) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.current != run {
		return
	}
	if left := time.Until(l.trusted); left > 0 {
		run.expiry.Reset(left)
		return
	}
	run.end()
}

// lose ends the term locally: the duties' contexts end before this returns.
func (l *Leader) lose(term int64, why string) bool {
	l.mu.Lock()
	if l.term != term || term == 0 {
		l.mu.Unlock()
		return false
	}
	l.term = 0
	l.current.expiry.Stop()
	l.current.end()
	l.current = nil
	l.mu.Unlock()
	l.Logger.Warn("this replica no longer leads the periodic duties: "+why, "replica", l.ID, "mandato", term)
	l.Signals.Changed.raise(false)
	return true
}

// resign gives the term up on shutdown, so that another replica takes
// over at once rather than after the expiry; if the statement fails, the
// expiry still hands over. It first ends the term's context and waits for
// its holders to let go (the consumers save their cursors), but not past
// the trust deadline: the next leader then goes on from where they
// stopped rather than handling again what they had handled.
func (l *Leader) resign(ctx context.Context) {
	l.mu.Lock()
	term, run, trusted := l.term, l.current, l.trusted
	if term != 0 {
		l.term = 0
		run.expiry.Stop()
		run.end()
		l.current = nil
	}
	l.mu.Unlock()
	if term == 0 {
		return
	}
	released := make(chan struct{})
	go func() {
		run.holders.Wait()
		close(released)
	}()
	wait := time.NewTimer(time.Until(trusted))
	select {
	case <-released:
	case <-wait.C:
	}
	wait.Stop()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := l.Store.Resign(rctx, l.ID, term); err != nil && !errors.Is(err, context.Canceled) {
		l.Logger.Error("resigning the leader's term failed: another replica takes over when it expires",
			"replica", l.ID, "mandato", term, "err", err)
	} else {
		l.Logger.Info("this replica resigned as leader", "replica", l.ID, "mandato", term)
	}
	l.Signals.Changed.raise(false)
}
