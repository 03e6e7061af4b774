package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// Delivery defaults (SPEC 6.4).
const (
	DefaultAutoDisable = 120 * time.Hour
	autoDisableSpread  = 12 * time.Hour
	breakerThreshold   = 5 // consecutive failures that open an integrator's breaker
	breakerCooldown    = 30 * time.Second
	breakerMaxCooldown = 10 * time.Minute
	DeliveryTimeout    = 5 * time.Second
	DefaultAttempts    = 10
	MaxQuedas          = 5 // leases lost before a row is poison
	DefaultSweep       = 15 * time.Second
	DefaultLease       = 30 * time.Second
	DefaultRetention   = 7 * 24 * time.Hour
	responseSnippet    = 512
	maxResponseDrain   = 64 << 10
	defaultInFlight    = 32
	defaultPerIntegr   = 16
	retryAfterCeiling  = time.Hour
)

// DefaultBackoff is the wait before attempt n+1 after attempt n fails:
// 1 min doubling up to 1 h, for 10 attempts in all.
func DefaultBackoff() []time.Duration {
	out := make([]time.Duration, 0, DefaultAttempts-1)
	d := time.Minute
	for range DefaultAttempts - 1 {
		out = append(out, d)
		d = min(2*d, time.Hour)
	}
	return out
}

// Dispatcher delivers the outbox: it claims due rows with a lease, signs and
// posts them, and hands the outcomes back to the store in batches. It is
// woken right after a commit that enqueued deliveries and sweeps every 15 s
// for anything missed (retries coming due, expired leases).
type Dispatcher struct {
	Store       OutboxStore
	Integrators *Integrators
	Policy      CallbackPolicy
	Now         func() time.Time
	Logger      *slog.Logger
	Metrics     *Metrics
	Version     string

	Timeout       time.Duration // one attempt's limit; default 5 s
	Worker        string        // lease owner id; default a fresh UUID
	Lease         time.Duration // default 30 s
	Sweep         time.Duration // default 15 s
	Retention     time.Duration // delivered bodies kept; default 7 days
	MaxInFlight   int           // default 32
	PerIntegrator int           // default 4
	Jitter        func() float64
	// ReapOnStart returns every leased row at start, counting a crash for
	// each: right when one node runs one dispatcher (SQLite), so any lease
	// found at start belonged to a process that died.
	ReapOnStart bool
	// AutoDisable sets an integrator inactive once it has failed
	// continuously this long (SPEC 6.4: 120 h); 0 turns it off.
	AutoDisable time.Duration
	// OnRecorded, when set, is called after a batch of attempts is
	// committed (the console's live tail of deliveries); it must not block.
	OnRecorded func()

	bmu      sync.Mutex
	breakers map[string]*breaker
	running  atomic.Bool
	turn     int // rotates who gets the first claim

	once   sync.Once
	wake   chan struct{}
	client *http.Client
}

func (d *Dispatcher) init() {
	d.once.Do(func() {
		d.wake = make(chan struct{}, 1)
		if d.Worker == "" {
			d.Worker = uuid.NewString()
		}
		if d.Lease == 0 {
			d.Lease = DefaultLease
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
		if d.MaxInFlight == 0 {
			d.MaxInFlight = defaultInFlight
		}
		if d.PerIntegrator == 0 {
			d.PerIntegrator = defaultPerIntegr
		}
		if d.Jitter == nil {
			d.Jitter = rand.Float64
		}
		d.breakers = map[string]*breaker{}
		dialer := d.Policy.Dialer(&net.Dialer{Timeout: d.Timeout})
		d.client = &http.Client{
			Timeout: d.Timeout,
			Transport: &http.Transport{
				DialContext:         dialer.DialContext,
				Proxy:               nil, // a proxy would dial on our behalf, past the address check
				TLSHandshakeTimeout: d.Timeout,
				MaxIdleConnsPerHost: d.PerIntegrator,
				IdleConnTimeout:     90 * time.Second,
			},
			// 3xx is a failure: following it would leave the allowlist.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
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

// prefetch is how many deliveries, per integrator and in all, a claim may
// hold counting those on the wire, as a multiple of the in-flight limits: a
// freed slot is refilled at once from what is held, while the outcomes that
// freed it are recorded and new rows claimed in the background.
const prefetch = 3

// Outcomes are recorded in rounds of at least half the in-flight limit, or
// after roundDelay, or at once when nothing is held to send: a commit costs
// about as much as twenty outcomes, so small rounds would halve throughput.
const roundDelay = 5 * time.Millisecond

// dispatch is the state of one Run: what is on the wire, what is claimed
// and waiting for a slot, and the outcomes not yet recorded.
type dispatch struct {
	inFlight map[string]int
	total    int
	queued   map[string][]heldRow
	nQueued  int
	outcomes []DeliveryResult // to record: attempts, and deferrals without one
	// recording is true while a FinishDeliveries (or a claim) runs in the
	// background; one at a time, so outcomes batch up behind it.
	recording bool
	wantClaim bool
	flush     *time.Timer // ends roundDelay after the first outcome waits
	flushing  bool        // flush is armed
	wakeAt    time.Time   // when the main timer fires
	paused    bool        // a round failed: the next waits for the timer
}

// heldRow is a claimed row waiting for a slot, with the end of its lease.
type heldRow struct {
	Delivery
	leaseEnd time.Time
}

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
	at      time.Time // the claim's now: its leases end Lease later
	asked   int
	claimed []Delivery
	failing map[string]time.Time
	err     error
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
	st := &dispatch{inFlight: map[string]int{}, queued: map[string][]heldRow{}, wantClaim: true,
		flush: time.NewTimer(roundDelay)}
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
			if len(st.outcomes) > 0 || len(quotas) > 0 {
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
			d.arm(timer, st, d.untilNext(ctx, st, true))
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
	if !r.Unsent {
		d.trip(r.Integrador, r.Falha, r.Attempt.Inicio.Add(time.Duration(r.Attempt.DuracaoMS)*time.Millisecond))
	}
	d.Metrics.delivered(r)
	st.outcomes = append(st.outcomes, r)
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
		st.outcomes = append(st.outcomes, DeliveryResult{ID: h.ID, Worker: d.Worker, Integrador: h.Integrador,
			Status: EntregaPendente, Proxima: until, Deferred: true})
	}
	for id, held := range st.queued {
		limit, _, reopen := d.limit(id, now)
		if !slices.Contains(active, id) {
			limit, reopen = 0, now
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
			if now.Add(d.Timeout + time.Second).After(h.leaseEnd) {
				// Waited too long for a slot: sent now, it could outlive its
				// lease and be taken for a crash.
				deferRow(h, now)
				continue
			}
			st.inFlight[id]++
			st.total++
			go func() { results <- d.deliver(ctx, h.Delivery) }()
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
	go func() {
		rec := round{batch: batch, at: d.Now(), asked: asked}
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
		// Nothing of the round was committed: its claims are not ours. Its
		// outcomes wait for the next round, a second from now (a full disk
		// must not spin the loop); on shutdown they are dropped, and the
		// rows, still leased, are returned at the next start.
		rec.claimed = nil
		if ctx.Err() == nil {
			st.outcomes = append(rec.batch, st.outcomes...)
			st.paused = true
			d.arm(timer, st, time.Second)
		}
		return
	}
	if len(rec.batch) > 0 && d.OnRecorded != nil {
		d.OnRecorded()
	}
	for _, del := range rec.claimed {
		st.queued[del.Integrador] = append(st.queued[del.Integrador], heldRow{del, rec.at.Add(d.Lease)})
		st.nQueued++
	}
	if ctx.Err() == nil {
		// Fewer rows than asked: nothing more is due now, so sleep until the
		// next retry comes due. In any case, wake when a circuit may probe.
		due := rec.asked == 0 || len(rec.claimed) < rec.asked
		if wait := d.untilNext(ctx, st, due); due || d.Now().Add(wait).Before(st.wakeAt) {
			d.arm(timer, st, wait)
		}
	}
	var now time.Time // the latest attempt's end: when the failures happened
	for _, r := range rec.batch {
		if at := r.Attempt.Inicio.Add(time.Duration(r.Attempt.DuracaoMS) * time.Millisecond); !r.Deferred && at.After(now) {
			now = at
		}
	}
	for id, since := range rec.failing {
		// Checked at a failure, so the last failure is now: both the 120 h
		// of failing and the 12 h spread between first and last hold.
		if d.AutoDisable <= 0 || now.Sub(since) < d.AutoDisable || now.Sub(since) < autoDisableSpread {
			continue
		}
		reason := fmt.Sprintf("desativado automaticamente: falhando sem interrupção desde %s",
			since.Format(time.RFC3339))
		if err := d.Integrators.Disable(context.WithoutCancel(ctx), id, reason); err != nil {
			d.Logger.Error("auto-disable integrator", "integrador", id, "err", err)
			continue
		}
		d.Logger.Warn("integrator auto-disabled", "integrador", id, "falhando_desde", since)
	}
}

// breaker is one integrator's circuit: after breakerThreshold consecutive
// failures it opens, and its deliveries wait without an attempt until the
// cooldown ends; then one probe goes out, and its success closes it.
type breaker struct {
	failures  int
	openUntil time.Time
	cooldown  time.Duration
}

func (d *Dispatcher) trip(id string, failed bool, now time.Time) {
	d.bmu.Lock()
	defer d.bmu.Unlock()
	b := d.breakers[id]
	if !failed {
		if b != nil && b.failures >= breakerThreshold {
			d.Logger.Info("circuit closed", "integrador", id)
			d.Metrics.breaker(id, false)
		}
		delete(d.breakers, id)
		return
	}
	if b == nil {
		b = &breaker{}
		d.breakers[id] = b
	}
	b.failures++
	// Open on reaching the threshold, and again when a probe fails; a
	// request that was already in flight when it opened changes nothing.
	if b.failures >= breakerThreshold && !now.Before(b.openUntil) {
		b.cooldown = min(max(2*b.cooldown, breakerCooldown), breakerMaxCooldown)
		b.openUntil = now.Add(b.cooldown)
		d.Logger.Warn("circuit open", "integrador", id, "falhas", b.failures, "ate", b.openUntil)
		d.Metrics.breaker(id, true)
	}
}

// limit is how many requests an integrator may have on the wire now: none
// while its circuit is open (reopen says until when), one probe once the
// cooldown ends, else PerIntegrator.
func (d *Dispatcher) limit(id string, now time.Time) (n int, probe bool, reopen time.Time) {
	d.bmu.Lock()
	defer d.bmu.Unlock()
	if b := d.breakers[id]; b != nil && b.failures >= breakerThreshold {
		if now.Before(b.openUntil) {
			return 0, false, b.openUntil
		}
		return 1, true, time.Time{}
	}
	return d.PerIntegrator, false, time.Time{}
}

// room is how many more rows an integrator may hold, on the wire or
// claimed ahead: prefetch times its limit, and a probe is one request.
func (d *Dispatcher) room(st *dispatch, id string, now time.Time) (int, time.Time) {
	n, probe, reopen := d.limit(id, now)
	held := st.inFlight[id] + len(st.queued[id])
	if probe {
		return 1 - held, reopen
	}
	return prefetch*n - held, reopen
}

// arm sets the loop's timer to fire after wait.
func (d *Dispatcher) arm(timer *time.Timer, st *dispatch, wait time.Duration) {
	st.wakeAt = d.Now().Add(wait)
	timer.Reset(wait)
}

// untilNext is how long to sleep: until an open circuit lets its probe go
// and, when due is set, until the next retry of an integrator with room
// comes due; at most a sweep. Rows of integrators at their limit wait for
// an outcome, which wakes the loop anyway.
func (d *Dispatcher) untilNext(ctx context.Context, st *dispatch, due bool) time.Duration {
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
	if next, ok, err := d.Store.NextDue(ctx, claimable); err == nil && ok {
		wait = min(wait, max(next.Sub(now), 10*time.Millisecond))
	}
	return wait
}

// quotas shares the room for claims among the active integrators that may
// be claimed now, one row each in turn (starting with a different one each
// time), so one backlog never takes them all. In all, at most prefetch times
// MaxInFlight rows are held.
func (d *Dispatcher) quotas(st *dispatch) []Quota {
	now := d.Now()
	ids := d.Integrators.activeIDs()
	free := prefetch*d.MaxInFlight - st.total - st.nQueued
	if len(ids) == 0 || free <= 0 {
		return nil
	}
	room := make([]int, len(ids))
	for i, id := range ids {
		room[i], _ = d.room(st, id, now)
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
	if n, err := d.Store.ReapDeliveries(ctx, now, MaxQuedas); err != nil {
		d.Logger.Error("reap expired leases", "err", err)
	} else if n > 0 {
		d.Logger.Warn("returned deliveries whose lease expired", "n", n)
	}
	if _, err := d.Store.PurgeDelivered(ctx, now.Add(-d.Retention)); err != nil {
		d.Logger.Error("purge delivered bodies", "err", err)
	}
}

// deliver makes one attempt and decides what follows it.
func (d *Dispatcher) deliver(ctx context.Context, del Delivery) DeliveryResult {
	res := DeliveryResult{ID: del.ID, Worker: d.Worker, Integrador: del.Integrador, Falha: true}
	start := d.Now()
	attempt := del.Tentativas + 1
	res.Attempt = Attempt{EntregaID: uuid.Must(uuid.NewV7()).String(), Tentativa: attempt, Inicio: start}
	in, err := d.Integrators.cached(del.Integrador)
	var status int
	var retryAfter time.Duration
	if err == nil {
		status, retryAfter, res.Attempt.Resposta, err = d.post(ctx, in, del, res.Attempt.EntregaID, attempt)
	}
	res.Attempt.DuracaoMS = d.Now().Sub(start).Milliseconds()
	res.Attempt.StatusCode = status
	switch {
	case err == nil && status >= 200 && status < 300:
		res.Status = EntregaEntregue
		res.Falha = false
		res.Proxima = start
		return res
	case errors.Is(err, errUnsendable):
		// No retry can change it: dead letter now, with the reason.
		res.Status = EntregaFalhou
		res.Unsent = true
		res.Attempt.Erro = err.Error()
		res.UltimoErr = err.Error() + ": não haverá nova tentativa"
		res.Proxima = start
		return res
	case err == nil && (status == http.StatusBadRequest || status == http.StatusUnauthorized):
		// The receiver's protocol answer: the body or signature is wrong,
		// and a retry would send the same bytes.
		res.Status = EntregaFalhou
		res.UltimoErr = fmt.Sprintf("o receptor respondeu %d: não haverá nova tentativa", status)
		res.Proxima = start
		return res
	case err != nil:
		res.Attempt.Erro = err.Error()
		res.UltimoErr = err.Error()
	default:
		res.UltimoErr = fmt.Sprintf("o receptor respondeu %d", status)
	}
	steps := integratorBackoff(in)
	if attempt > len(steps) {
		res.Status = EntregaFalhou
		res.UltimoErr += fmt.Sprintf("; tentativas esgotadas (%d)", attempt)
		res.Proxima = start
		return res
	}
	wait := steps[attempt-1]
	wait += time.Duration((d.Jitter()*0.2 - 0.1) * float64(wait)) // ±10%: spread retries of a burst
	wait = max(wait, min(retryAfter, retryAfterCeiling))
	res.Status = EntregaPendente
	res.Proxima = start.Add(wait)
	return res
}

// integratorBackoff is the integrator's override when well-formed, else the
// default schedule.
func integratorBackoff(in Integrator) []time.Duration {
	if len(in.Backoff) > 0 {
		if steps, err := ParseBackoff(in.Backoff); err == nil {
			return steps
		}
	}
	return DefaultBackoff()
}

// errUnsendable marks a delivery that cannot be sent as it stands.
var errUnsendable = errors.New("entrega impossível de enviar")

// headerSafe says whether s may be an HTTP header value (RFC 9110): no
// control byte but horizontal tab (CR and LF would split the header).
func headerSafe(s string) bool {
	return !strings.ContainsFunc(s, func(r rune) bool { return (r < ' ' && r != '\t') || r == 0x7f })
}

// post sends the signed request and reads the start of the answer.
func (d *Dispatcher) post(ctx context.Context, in Integrator, del Delivery, entregaID string, attempt int) (int, time.Duration, string, error) {
	if del.Corpo == nil {
		return 0, 0, "", fmt.Errorf("%w: o corpo da entrega foi expurgado", errUnsendable)
	}
	if !headerSafe(del.Agregado) {
		// Publish refuses such an agregado; one stored before it did would
		// otherwise fail every attempt and open the integrator's breaker.
		return 0, 0, "", fmt.Errorf("%w: o agregado tem caracteres que um cabeçalho HTTP não admite", errUnsendable)
	}
	current, previous, err := d.Integrators.Secrets(ctx, in.ID)
	if err != nil {
		return 0, 0, "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, in.CallbackURL, bytes.NewReader(del.Corpo))
	if err != nil {
		return 0, 0, "", err
	}
	ts := Timestamp(d.Now())
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "Geohub/"+d.Version)
	h.Set("X-Geohub-Evento-Id", del.EventID)
	h.Set("X-Geohub-Timestamp", strconv.FormatInt(ts, 10))
	h.Set("X-Geohub-Assinatura", Sign(current, ts, del.Corpo))
	if previous != nil {
		h.Set("X-Geohub-Assinatura-Anterior", Sign(previous, ts, del.Corpo))
	}
	h.Set("X-Geohub-Agregado", del.Agregado)
	h.Set("X-Geohub-Sequencia", strconv.FormatInt(del.Sequencia, 10))
	h.Set("X-Geohub-Entrega-Id", entregaID)
	h.Set("X-Geohub-Tentativa", strconv.Itoa(attempt))
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, 0, "", err
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, responseSnippet))
	io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseDrain)) // lets the connection be reused
	return resp.StatusCode, parseRetryAfter(resp.Header.Get("Retry-After"), d.Now()), string(snippet), nil
}

func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return t.Sub(now)
	}
	return 0
}
