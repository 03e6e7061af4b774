package app

import (
	"testing"
	"time"
)

func TestHealthWindowAndPercentiles(t *testing.T) {
	var h healths
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	h.started = start
	// 100 answered attempts of 1..100 ms over 50 minutes, every tenth failed,
	// and 5 without an answer.
	for i := 1; i <= 100; i++ {
		h.record("a", i%10 != 0, true, int64(i), start.Add(time.Duration(i)*30*time.Second))
	}
	for i := range 5 {
		h.record("a", false, false, 10_000, start.Add(time.Duration(i)*time.Minute))
	}
	now := start.Add(50 * time.Minute)
	got := h.health("a", now)
	if got.Tentativas != 105 || got.Sucessos != 90 || *got.TaxaSucesso != 90.0/105 {
		t.Fatalf("counts: %+v", got)
	}
	if *got.LatenciaP50MS != 50 || *got.LatenciaP95MS != 95 {
		t.Fatalf("percentiles of 1..100: p50 %d p95 %d (attempts without an answer have no latency)", *got.LatenciaP50MS, *got.LatenciaP95MS)
	}
	if !got.Desde.Equal(start) {
		t.Fatalf("the window starts at the server's start: %v", got.Desde)
	}
	// 40 minutes later the window holds minutes 31 to 90: the current
	// minute and the 59 before it.
	later := h.health("a", now.Add(40*time.Minute))
	if later.Tentativas != 39 || !later.Desde.Equal(now.Add(-20*time.Minute)) {
		t.Fatalf("after 40 more minutes: %+v", later)
	}
	// A minute reused an hour later starts empty.
	h.record("a", true, true, 7, start.Add(2*time.Hour))
	if g := h.health("a", start.Add(2*time.Hour)); g.Tentativas != 1 || *g.LatenciaP50MS != 7 {
		t.Fatalf("a reused bucket kept its old counts: %+v", g)
	}
	if g := h.health("nobody", now); g.Tentativas != 0 || g.TaxaSucesso != nil {
		t.Fatalf("an integrator without attempts: %+v", g)
	}
}

func TestHealthSamplesABusyMinute(t *testing.T) {
	var h healths
	at := time.Date(2026, 12, 1, 10, 0, 30, 0, time.UTC)
	for i := range 10 * healthSamples {
		h.record("a", true, true, int64(i%100), at)
	}
	b := h.by["a"][at.Unix()/60%60]
	if b.tries != 10*healthSamples || len(b.latenciesMS) != healthSamples {
		t.Fatalf("%d tries, %d samples", b.tries, len(b.latenciesMS))
	}
}
