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
	"strconv"
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
	turn     int // rotates who gets the first free slot

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

// Run delivers until ctx ends, then waits for in-flight requests (bounded by
// the 5 s timeout), records their outcomes and releases its leases.
func (d *Dispatcher) Run(ctx context.Context) error {
	d.init()
	d.running.Store(true)
	defer d.running.Store(false)
	results := make(chan DeliveryResult, d.MaxInFlight)
	inFlight := map[string]int{}
	total := 0
	sendCtx := context.WithoutCancel(ctx) // in-flight requests finish on shutdown
	var lastReap time.Time
	if d.ReapOnStart {
		if n, err := d.Store.ReapDeliveries(ctx, d.Now().Add(d.Lease+time.Hour), MaxQuedas); err != nil {
			return fmt.Errorf("recover deliveries leased before the restart: %w", err)
		} else if n > 0 {
			d.Logger.Warn("resumed deliveries that were in flight when the last process stopped", "n", n)
		}
	}
	send := func(del Delivery) {
		inFlight[del.Integrador]++
		total++
		go func() { results <- d.deliver(sendCtx, del) }()
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	// Claims happen when woken (a commit, the timer) and, in the same
	// transaction as their outcomes, when deliveries finish.
	claimNow := true
	for {
		if ctx.Err() == nil {
			if now := d.Now(); now.Sub(lastReap) >= d.Sweep {
				lastReap = now
				d.housekeep(ctx, now)
			}
			for claimNow && total < d.MaxInFlight {
				quotas, _, _ := d.quotas(inFlight, d.MaxInFlight-total)
				if len(quotas) == 0 {
					break
				}
				claimed, err := d.Store.ClaimDeliveries(ctx, d.Worker, d.Now(), d.Lease, quotas)
				if err != nil {
					if ctx.Err() == nil {
						d.Logger.Error("claim deliveries", "err", err)
					}
					break
				}
				for _, del := range claimed {
					send(del)
				}
				if len(claimed) == 0 {
					break
				}
			}
			timer.Reset(d.untilNext(ctx, inFlight))
		} else if total == 0 {
			if err := d.Store.ReleaseDeliveries(context.WithoutCancel(ctx), d.Worker); err != nil {
				d.Logger.Error("release leases", "err", err)
			}
			return nil
		}
		claimNow = false
		select {
		case <-d.wake:
			claimNow = true
		case <-timer.C:
			claimNow = true
		case <-ctx.Done():
			if total == 0 {
				continue
			}
			r := <-results
			d.finish(context.WithoutCancel(ctx), d.drain(r, results), inFlight, &total, false, send)
		case r := <-results:
			d.finish(context.WithoutCancel(ctx), d.drain(r, results), inFlight, &total, ctx.Err() == nil, send)
		}
	}
}

// drain gathers every outcome already waiting, so one transaction records them.
func (d *Dispatcher) drain(first DeliveryResult, results chan DeliveryResult) []DeliveryResult {
	batch := []DeliveryResult{first}
	for {
		select {
		case r := <-results:
			batch = append(batch, r)
		default:
			return batch
		}
	}
}

// finish records a batch of outcomes and, in the same transaction, claims
// what the freed slots can take (unless shutting down), which it sends.
func (d *Dispatcher) finish(ctx context.Context, batch []DeliveryResult, inFlight map[string]int, total *int,
	claim bool, send func(Delivery)) {
	var now time.Time // the latest attempt's end: when the failures happened
	for _, r := range batch {
		in := r.Integrador
		if inFlight[in]--; inFlight[in] <= 0 {
			delete(inFlight, in)
		}
		*total--
		at := r.Attempt.Inicio.Add(time.Duration(r.Attempt.DuracaoMS) * time.Millisecond)
		if at.After(now) {
			now = at
		}
		d.trip(in, r.Falha, at)
		d.Metrics.delivered(r)
	}
	var quotas []Quota
	if claim {
		quotas, _, _ = d.quotas(inFlight, d.MaxInFlight-*total)
	}
	failing, claimed, err := d.Store.FinishDeliveries(ctx, batch, d.Worker, d.Now(), d.Lease, quotas)
	if err != nil {
		// The leases expire and the reaper hands the rows out again:
		// at-least-once holds, at the cost of a repeat.
		d.Logger.Error("record delivery outcomes", "err", err, "n", len(batch))
	} else if d.OnRecorded != nil {
		d.OnRecorded()
	}
	for _, del := range claimed {
		send(del)
	}
	for id, since := range failing {
		// Checked at a failure, so the last failure is now: both the 120 h
		// of failing and the 12 h spread between first and last hold.
		if d.AutoDisable <= 0 || now.Sub(since) < d.AutoDisable || now.Sub(since) < autoDisableSpread {
			continue
		}
		reason := fmt.Sprintf("desativado automaticamente: falhando sem interrupção desde %s",
			since.Format(time.RFC3339))
		if err := d.Integrators.Disable(ctx, id, reason); err != nil {
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

// untilNext is how long to sleep: until the next retry of an integrator
// that may be claimed is due, or an open circuit lets its probe go, at most
// a sweep. Rows of integrators at their limit wait for an outcome, which
// wakes the loop anyway.
func (d *Dispatcher) untilNext(ctx context.Context, inFlight map[string]int) time.Duration {
	_, claimable, reopen := d.quotas(inFlight, d.MaxInFlight)
	now := d.Now()
	wait := d.Sweep
	if !reopen.IsZero() {
		wait = min(wait, max(reopen.Sub(now), 10*time.Millisecond))
	}
	if next, ok, err := d.Store.NextDue(ctx, claimable); err == nil && ok {
		wait = min(wait, max(next.Sub(now), 10*time.Millisecond))
	}
	return wait
}

// quotas shares free in-flight slots among the active integrators that may
// be claimed now, one slot each in turn (starting with a different one each
// time), so one backlog never takes them all. An open circuit takes none
// until its cooldown ends (reopen is the earliest end), then one: its probe.
func (d *Dispatcher) quotas(inFlight map[string]int, free int) (quotas []Quota, claimable []string, reopen time.Time) {
	now := d.Now()
	ids := d.Integrators.activeIDs()
	if len(ids) == 0 {
		return nil, nil, reopen
	}
	room := make([]int, len(ids))
	d.bmu.Lock()
	defer d.bmu.Unlock()
	for i, id := range ids {
		limit := d.PerIntegrator
		if b := d.breakers[id]; b != nil && b.failures >= breakerThreshold {
			if now.Before(b.openUntil) {
				if reopen.IsZero() || b.openUntil.Before(reopen) {
					reopen = b.openUntil
				}
				continue
			}
			limit = 1
		}
		if room[i] = limit - inFlight[id]; room[i] > 0 {
			claimable = append(claimable, id)
		}
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
	for k := range ids {
		i := (k + d.turn) % len(ids)
		if given[i] > 0 {
			quotas = append(quotas, Quota{Integrador: ids[i], N: given[i]})
		}
	}
	return quotas, claimable, reopen
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

// post sends the signed request and reads the start of the answer.
func (d *Dispatcher) post(ctx context.Context, in Integrator, del Delivery, entregaID string, attempt int) (int, time.Duration, string, error) {
	if del.Corpo == nil {
		return 0, 0, "", errors.New("o corpo da entrega foi expurgado")
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
