package web

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
// So their number is bounded: HeavyPerCredential at once per token, so no
// one token can take the others' share, and HeavyTotal for the server, a
// bound of a few hundred MB whatever the clients do.
const (
	HeavyTotal         = 64
	HeavyPerCredential = 8
	// heavyWait is how long a request waits for a free slot before the
	// server says it is busy.
	heavyWait = 5 * time.Second
)

// heavyLimit counts the responses in progress that carry stored records.
type heavyLimit struct {
	slots chan struct{}
	mu    sync.Mutex
	held  map[string]int
}

func newHeavyLimit(total int) *heavyLimit {
	return &heavyLimit{slots: make(chan struct{}, total), held: map[string]int{}}
}

// acquire takes a slot for key's credential, or answers why not: 429 when
// the credential has HeavyPerCredential in progress, 503 when the server
// has no slot free within heavyWait.
func (l *heavyLimit) acquire(ctx context.Context, key string) (release func(), err error) {
	l.mu.Lock()
	if l.held[key] >= HeavyPerCredential {
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

// heavy runs h inside a slot of the caller's credential (authed put its
// actor in the context).
func (s *Server) heavy(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		a := app.ActorOf(r.Context())
		release, err := s.heavyLimit.acquire(r.Context(), a.Tipo+" "+a.ID)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		defer release()
		h(w, r)
	}
}
