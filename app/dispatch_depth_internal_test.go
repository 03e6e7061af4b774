package app

import (
	"testing"
	"time"
)

// The rows an integrator may hold cover what its requests take while a
// round commits: deep for a receiver that answers in a millisecond while a
// round takes twenty, the floor for one that answers in a second (its rows
// would wait here while another replica could send them), the floor too
// before anything is measured.
func TestQueueDepthFollowsRoundAndAnswerTimes(t *testing.T) {
	st := &dispatch{answerTook: map[string]time.Duration{}}
	if got := st.depth("a", 16); got != minPrefetch*16 {
		t.Fatalf("nothing measured: depth %d, want %d", got, minPrefetch*16)
	}
	st.roundTook = 20 * time.Millisecond
	st.answerTook["fast"] = time.Millisecond
	st.answerTook["slow"] = time.Second
	st.answerTook["mid"] = 4 * time.Millisecond
	for _, c := range []struct {
		id   string
		want int
	}{
		{"fast", maxPrefetch * 16},
		{"slow", minPrefetch * 16},
		{"mid", 6 * 16},                  // 1 + 20/4
		{"unmeasured", maxPrefetch * 16}, // an answer counts as 1 ms at least
	} {
		if got := st.depth(c.id, 16); got != c.want {
			t.Errorf("%s: depth %d, want %d", c.id, got, c.want)
		}
	}
	// Averages move a tenth of the way: one slow round does not empty
	// the queues.
	avg := average(10*time.Millisecond, 110*time.Millisecond)
	if avg != 20*time.Millisecond {
		t.Fatalf("average %v, want 20ms", avg)
	}
}
