// Package refused bounds, at the API and the console alike, what one
// credential's refused requests cost (app.Refusals): a credential out of
// refusals is answered 429 before its request is read, run or recorded.
package refused

import (
	"fmt"
	"net/http"

	"geohub/app"
)

// Limit runs next for the credential key unless it was refused too often;
// then fail answers 429 with Retry-After. Every 4xx next answers (but a
// 429) spends one of the credential's refusals.
func Limit(rs *app.Refusals, key string, w http.ResponseWriter, r *http.Request, next http.HandlerFunc,
	fail func(http.ResponseWriter, *http.Request, error)) {
	if wait := rs.Wait(key); wait > 0 {
		fail(w, r, &app.Error{Code: app.ERateLimited, RetryAfter: wait,
			Message: fmt.Sprintf("recusas demais com esta credencial: corrija as requisições recusadas e tente de novo em %d s", int(wait.Seconds())+1)})
		return
	}
	rec := &recorder{ResponseWriter: w}
	next(rec, r)
	if rec.status >= 400 && rec.status < 500 && rec.status != http.StatusTooManyRequests {
		rs.Count(key)
	}
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
