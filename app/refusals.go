package app

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// A credential's refused requests are bounded before anything records them
// (SPEC 10, issue 26 M3): each refusal (a 4xx answer) spends one of its
// RefusalBurst, which come back at RefusalRate a second, and while it has
// none left every request of that credential is answered 429 at once,
// before its body is read, its command run or its refusal recorded. A
// client that is refused a hundred times a second otherwise writes an
// audit row and a comando-recusado event each time, rows that are never
// deleted; bounded so, a credential refused without pause adds about 12
// a minute. A CAD that works is refused a few times a day. Each request
// holds one while it runs (Reserve), so the burst leaves room for a
// producer's many concurrent publishes.
const (
	RefusalBurst = 200
	RefusalRate  = 0.2 // 12 a minute
)

// Refusals counts refusals per credential ("token:<id>", "integrador:<id>",
// "operador:<id>"), in this process: on PostgreSQL each replica bounds what
// reaches it. A nil *Refusals limits nothing.
type Refusals struct {
	Now func() time.Time

	mu sync.Mutex
	m  map[string]*refusals
}

// refusals are one credential's: the refusals it has left (the limiter's
// tokens) and its requests running now, each of which may yet be refused.
type refusals struct {
	left     *rate.Limiter
	inflight int
}

// Wait is how long key must wait before its next request is served: 0
// while it has refusals left. It holds none: for requests that cannot be
// refused once they run (a live view's socket).
func (r *Refusals) Wait(key string) time.Duration {
	if r == nil {
		return 0
	}
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.wait(r.m[key], now)
}

func (r *Refusals) wait(c *refusals, now time.Time) time.Duration {
	if c == nil {
		return 0
	}
	if free := c.left.TokensAt(now) - float64(c.inflight); free < 1 {
		return time.Duration((1 - free) / RefusalRate * float64(time.Second))
	}
	return 0
}

// Reserve admits a request of key if it has a refusal left beside those
// its running requests may yet spend: requests sent together cannot all
// pass a check made before any of them is refused. wait > 0 says it has
// none (the request is to be answered 429); otherwise done must be called
// once the request is answered, and spends a refusal if it refused.
func (r *Refusals) Reserve(key string) (done func(refused bool), wait time.Duration) {
	if r == nil {
		return func(bool) {}, 0
	}
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]*refusals{}
	}
	c := r.m[key]
	if c == nil {
		if len(r.m) >= 4096 {
			// Many credentials: forget the idle ones refilled to the full
			// burst, once per new credential rather than per request.
			for k, c := range r.m {
				if c.inflight == 0 && c.left.TokensAt(now) >= RefusalBurst {
					delete(r.m, k)
				}
			}
		}
		c = &refusals{left: rate.NewLimiter(RefusalRate, RefusalBurst)}
		r.m[key] = c
	}
	if wait := r.wait(c, now); wait > 0 {
		return nil, wait
	}
	c.inflight++
	return func(refused bool) {
		r.mu.Lock()
		defer r.mu.Unlock()
		c.inflight--
		if refused {
			c.left.AllowN(r.now(), 1)
		}
	}, 0
}

func (r *Refusals) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}
