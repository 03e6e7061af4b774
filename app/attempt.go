package app

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Delivery defaults (SPEC 6.4).
const (
	DeliveryTimeout   = 5 * time.Second
	DefaultAttempts   = 10
	retryAfterCeiling = time.Hour
	responseSnippet   = 512
	maxResponseDrain  = 64 << 10
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

// AttemptKind is what an attempt makes of its row.
type AttemptKind int

const (
	Delivered AttemptKind = iota // entregue
	Retry                        // pendente again, at Proxima
	Dead                         // falhou: the receiver's protocol answer, or the budget is spent
	Unsent                       // falhou without reaching the receiver: nothing a retry can change
)

// AttemptOutcome is the decision after one attempt.
type AttemptOutcome struct {
	Kind    AttemptKind
	Proxima time.Time // the retry's time; the attempt's end otherwise
	Reason  string    // ultimo_erro
}

// decide is what follows an attempt that ended at end: steps is the backoff
// schedule, n the attempt's number within its budget (1 for the first after
// a resend), jitter a draw in [0, 1). Any 2xx delivers; 400 and 401 are the
// receiver's protocol answers (the body or the signature is wrong, and a
// retry would send the same bytes); everything else retries after its step
// ±10% (so a burst's retries spread), or after Retry-After when longer (up
// to an hour), counted from the end of the attempt, until the steps run out.
func decide(steps []time.Duration, n int, r SendResult, end time.Time, jitter float64) AttemptOutcome {
	switch {
	case r.Succeeded():
		return AttemptOutcome{Kind: Delivered, Proxima: end}
	case errors.Is(r.Err, errUnsendable):
		return AttemptOutcome{Kind: Unsent, Proxima: end, Reason: r.Err.Error() + ": não haverá nova tentativa"}
	case r.Err == nil && (r.Status == http.StatusBadRequest || r.Status == http.StatusUnauthorized):
		return AttemptOutcome{Kind: Dead, Proxima: end,
			Reason: fmt.Sprintf("o receptor respondeu %d: não haverá nova tentativa", r.Status)}
	}
	reason := fmt.Sprintf("o receptor respondeu %d", r.Status)
	switch {
	case r.Err != nil:
		reason = r.Err.Error()
	case r.Nack:
		reason = "o CAD respondeu nack: " + r.Snippet
	}
	if n > len(steps) {
		return AttemptOutcome{Kind: Dead, Proxima: end, Reason: reason + fmt.Sprintf("; tentativas esgotadas (%d)", n)}
	}
	wait := steps[n-1]
	wait += time.Duration((jitter*0.2 - 0.1) * float64(wait))
	wait = max(wait, min(r.RetryAfter, retryAfterCeiling))
	return AttemptOutcome{Kind: Retry, Proxima: end.Add(wait), Reason: reason}
}
