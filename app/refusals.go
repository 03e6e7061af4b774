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
	m  map[string]*rate.Limiter
}

// Wait is how long key must wait before its next request is served: 0
// while it has refusals left. It takes none: for requests that cannot be
// refused once they run (a live view's socket).
func (r *Refusals) Wait(key string) time.Duration {
	if r == nil {
		return 0
	}
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.m[key]
	if l == nil {
		return 0
	}
	if tokens := l.TokensAt(now); tokens < 1 {
		return time.Duration((1 - tokens) / RefusalRate * float64(time.Second))
	}
	return 0
}

// Reserve takes one of key's refusals as a request of that credential
// arrives, before it runs: requests sent together cannot all pass a check
// made before any of them is refused. wait > 0 says it has none left (the
// request is to be answered 429); otherwise done must be called once the
// request is answered, and gives the refusal back unless it refused.
func (r *Refusals) Reserve(key string) (done func(refused bool), wait time.Duration) {
	if r == nil {
		return func(bool) {}, 0
	}
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]*rate.Limiter{}
	}
	if len(r.m) >= 4096 {
		// Many credentials refused: forget those refilled to the full burst.
		for k, l := range r.m {
			if l.TokensAt(now) >= RefusalBurst {
				delete(r.m, k)
			}
		}
	}
	l := r.m[key]
	if l == nil {
		l = rate.NewLimiter(RefusalRate, RefusalBurst)
		r.m[key] = l
	}
	res := l.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return nil, d
	}
	return func(refused bool) {
		if !refused {
			res.CancelAt(r.now())
		}
	}, 0
}

func (r *Refusals) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}
