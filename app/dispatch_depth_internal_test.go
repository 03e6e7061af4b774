package app

import (
	"testing"
	"time"
)

// The rows an integrator may hold cover what its requests take while a
// round commits: deep for a receiver that answers in a millisecond while a
// round takes twenty, the floor for one that answers in a second (its rows
// would wait here while another replica could send them), and the floor
// until both times are measured.
func TestQueueDepthFollowsRoundAndAnswerTimes(t *testing.T) {
	st := &dispatch{answerTook: map[string]average{}}
	took := func(id string, d time.Duration) {
		a := st.answerTook[id]
		a.add(d)
		st.answerTook[id] = a
	}
	took("fast", 0) // loopback: DuracaoMS rounds down to 0, counted as 1 ms
	if got := st.depth("fast", 16); got != minPrefetch*16 {
		t.Fatalf("no round measured: depth %d, want %d", got, minPrefetch*16)
	}
	st.roundTook.add(20 * time.Millisecond)
	took("slow", time.Second)
	took("mid", 4*time.Millisecond)
	for _, c := range []struct {
		id   string
		want int
	}{
		{"fast", maxPrefetch * 16},
		{"slow", minPrefetch * 16},
		{"mid", 6 * 16}, // 1 + 20/4
		{"unmeasured", minPrefetch * 16},
	} {
		if got := st.depth(c.id, 16); got != c.want {
			t.Errorf("%s: depth %d, want %d", c.id, got, c.want)
		}
	}
	// A sample moves the average a tenth of the way, from 0 too; a clock
	// step (a negative sample) is ignored.
	took("fast", 10*time.Millisecond)
	took("fast", -time.Hour)
	if got := st.answerTook["fast"].d; got != time.Millisecond {
		t.Fatalf("average %v, want 1ms", got)
	}
}
