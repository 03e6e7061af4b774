// Package heavy bounds how many responses that carry stored records are
// written at once, per credential and per server.
package heavy

import (
	"context"
	"net/http"
	"sync"
	"time"

	"geohub/app"
)

// Each response that carries stored records (event pages, traces, replay,
// the audit export) holds up to a chunk and a record in memory while it is
// written, about 2 MB with 1 MiB events, and a stalled reader holds them
// until its write deadline; a stream read slowly, for as long as it lasts.
// So their number is bounded: PerCredential at once per token, so no
// one token can take the others' share, and Total for the server, a
// bound of about 130 MB whatever the clients do. The API and the console
// share one Limit.
const (
	Total         = 64
	PerCredential = 8
	// heavyWait is how long a request waits for a free slot before the
	// server says it is busy.
	heavyWait = 5 * time.Second
)

// Limit counts the responses in progress that carry stored records.
type Limit struct {
	slots chan struct{}
	mu    sync.Mutex
	held  map[string]int
}

func New(total int) *Limit {
	return &Limit{slots: make(chan struct{}, total), held: map[string]int{}}
}

// Acquire takes a slot for key's credential, or answers why not: 429 when
// the credential has PerCredential in progress, 503 when the server
// has no slot free within heavyWait.
func (l *Limit) Acquire(ctx context.Context, key string) (release func(), err error) {
	l.mu.Lock()
	if l.held[key] >= PerCredential {
		l.mu.Unlock()
		return nil, &app.Error{Code: app.ERateLimited, RetryAfter: time.Second,
			Message: "leituras simultâneas demais com esta credencial: termine uma antes de abrir outra"}
	}
	l.held[key]++
	l.mu.Unlock()
	undo := func() {
		l.mu.Lock()
		if l.held[key]--; l.held[key] == 0 {
			delete(l.held, key)
		}
		l.mu.Unlock()
	}
	wait, cancel := context.WithTimeout(ctx, heavyWait)
	defer cancel()
	select {
	case l.slots <- struct{}{}:
		return func() { <-l.slots; undo() }, nil
	case <-wait.Done():
		undo()
		return nil, &app.Error{Code: app.EUnavailable, RetryAfter: time.Second,
			Message: "servidor ocupado com leituras grandes: tente de novo em instantes"}
	}
}

// Wrap runs h inside a slot of the credential of the request's actor (the
// edge's authentication put it in the context); a refusal goes to fail,
// which answers it in the edge's own shape.
func (l *Limit) Wrap(h http.HandlerFunc, fail func(http.ResponseWriter, *http.Request, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		a := app.ActorOf(r.Context())
		release, err := l.Acquire(r.Context(), a.Tipo+" "+a.ID)
		if err != nil {
			fail(w, r, err)
			return
		}
		defer release()
		h(w, r)
	}
}

// Cap is how many slots the whole server has.
func (l *Limit) Cap() int { return cap(l.slots) }
