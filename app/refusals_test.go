package app_test

import (
	"testing"
	"time"

	"geohub/app"
)

// Requests that are answered give their hold back, whatever the clock did
// meanwhile; requests in flight together cannot spend more refusals than
// the credential has; refusals come back at RefusalRate.
func TestRefusalsAreHeldWhileRunningAndSpentOnlyWhenRefused(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)}
	r := &app.Refusals{Now: clock.Now}
	for i := range 3 * app.RefusalBurst {
		done, wait := r.Reserve("token:a")
		if wait > 0 {
			t.Fatalf("answered request %d was refused: the holds are not given back", i+1)
		}
		clock.Add(10 * time.Millisecond) // a request takes time
		done(false)
	}

	var running []func(bool)
	for {
		done, wait := r.Reserve("token:b")
		if wait > 0 {
			break
		}
		running = append(running, done)
	}
	if len(running) != app.RefusalBurst {
		t.Fatalf("%d requests admitted together, want %d", len(running), app.RefusalBurst)
	}
	for _, done := range running {
		done(true)
	}
	if _, wait := r.Reserve("token:b"); wait <= 0 || wait > time.Duration(float64(time.Second)/app.RefusalRate) {
		t.Fatalf("after %d refusals: wait %v", app.RefusalBurst, wait)
	}
	if r.Wait("token:a") != 0 {
		t.Fatal("another credential is held back")
	}
	clock.Add(time.Duration(float64(time.Second) / app.RefusalRate))
	if done, wait := r.Reserve("token:b"); wait > 0 {
		t.Fatal("a refusal did not come back")
	} else {
		done(false)
	}
}
