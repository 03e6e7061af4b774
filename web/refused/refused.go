// Package refused bounds, at the API and the console alike, what one
// credential's refused requests cost (app.Refusals): a credential out of
// refusals is answered 429 before its request is read, run or recorded.
package refused

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"geohub/app"
)

// Limit runs next for the credential key unless it was refused too often;
// then fail answers 429 with Retry-After. Each request holds one of the
// credential's refusals while it runs, and keeps it spent if next answers
// a 4xx (but a 429).
func Limit(rs *app.Refusals, key string, w http.ResponseWriter, r *http.Request, next http.HandlerFunc,
	fail func(http.ResponseWriter, *http.Request, error)) {
	if liveSocket(r) {
		// A live view's socket holds its request for as long as it is
		// open, and refuses nothing once upgraded: checked, not held.
		if wait := rs.Wait(key); wait > 0 {
			fail(w, r, tooMany(wait))
			return
		}
		next(w, r)
		return
	}
	done, wait := rs.Reserve(key)
	if wait > 0 {
		fail(w, r, tooMany(wait))
		return
	}
	rec := &recorder{ResponseWriter: w}
	defer func() {
		if p := recover(); p != nil {
			done(false) // the server's fault (a stream it aborted), not the client's
			panic(p)
		}
	}()
	next(rec, r)
	done(rec.status >= 400 && rec.status < 500 && rec.status != http.StatusTooManyRequests)
}

// liveSocket says whether r opens one of the console's live views: a
// websocket handshake on /ws/. Any other request with an Upgrade header is
// an ordinary one (a proxy may forward the header on every request).
func liveSocket(r *http.Request) bool {
	return r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/ws/") &&
		strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

func tooMany(wait time.Duration) error {
	return &app.Error{Code: app.ERateLimited, RetryAfter: wait,
		Message: fmt.Sprintf("recusas demais com esta credencial: corrija as requisições recusadas e tente de novo em %d s", int(wait.Seconds())+1)}
}

// recorder keeps the status next answered.
type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection: streams flush
// through it and the console's live views hijack it.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
