package storetest

import (
	"testing"
	"time"

	"geohub/app"
)

// AwaitTimeout is how long Await waits before it fails the test: it only
// matters when the awaited thing never happens, so it is generous enough
// for a loaded 2-core machine.
const AwaitTimeout = 30 * time.Second

// Await re-checks cond each time one of signals (at most three, each
// Init'ed before its service started) is raised, until cond holds; after
// AwaitTimeout it fails the test, saying what it waited for. The tests of
// the services wait so on what the services do, not on a clock.
func Await[T any](tb testing.TB, what string, cond func() bool, signals ...*app.Signal[T]) {
	tb.Helper()
	if len(signals) > 3 {
		panic("storetest.Await: at most three signals")
	}
	var on [3]<-chan T
	for i, s := range signals {
		if on[i] = s.C(); on[i] == nil {
			panic("storetest.Await: a signal that was not Init'ed")
		}
	}
	timeout := time.NewTimer(AwaitTimeout)
	defer timeout.Stop()
	for !cond() {
		select {
		case <-on[0]:
		case <-on[1]:
		case <-on[2]:
		case <-timeout.C:
			tb.Fatalf("timed out after %v waiting for %s", AwaitTimeout, what)
		}
	}
}

// Eventually re-checks cond until it holds (Poll), failing the test after
// AwaitTimeout. It is for what raises no signal: the database server's own
// state (its listeners, its lock waits), a queue's length, a connection the
// server lets go of.
func Eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	if !Poll(AwaitTimeout, cond) {
		tb.Fatalf("timed out after %v waiting for %s", AwaitTimeout, what)
	}
}

// Poll re-checks cond until it holds (true) or within has passed (false),
// at a pace that starts at 1 ms and slows to 50 ms: the one poll of the
// tests, for what lives where no signal reaches (another process, the
// database server).
func Poll(within time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	pace := time.Millisecond
	for !cond() {
		select {
		case <-deadline.C:
			return cond()
		case <-time.After(pace):
			pace = min(2*pace, 50*time.Millisecond)
		}
	}
	return true
}
