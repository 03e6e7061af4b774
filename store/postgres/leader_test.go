package postgres_test

import (
	"testing"
	"time"

	"geohub/app"
	"geohub/store/storetest"
)

// The terms at the store: one at a time, named by replica and number, so
// that a replica holding an old number renews and resigns nothing.
func TestLeaderTerms(t *testing.T) {
	url := freshDatabase(t)
	a, b := open(t, url), open(t, url)
	ctx := t.Context()
	const long = time.Hour

	t1, err := a.Elect(ctx, "A", long)
	if err != nil || t1 == 0 {
		t.Fatalf("the first candidate: term %d, %v", t1, err)
	}
	if got, err := b.Elect(ctx, "B", long); err != nil || got != 0 {
		t.Fatalf("a second candidate while A's term runs: term %d, %v", got, err)
	}
	if ok, err := a.Renew(ctx, "A", t1, long); err != nil || !ok {
		t.Fatalf("the leader renews: %v %v", ok, err)
	}
	if ok, err := b.Renew(ctx, "B", t1, long); err != nil || ok {
		t.Fatalf("another replica renewed A's term: %v %v", ok, err)
	}
	if err := b.Resign(ctx, "B", t1); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.Elect(ctx, "B", long); got != 0 {
		t.Fatal("another replica's resignation ended A's term")
	}

	// A clean stop: the next candidate is elected at once, with a later term.
	if err := a.Resign(ctx, "A", t1); err != nil {
		t.Fatal(err)
	}
	t2, err := b.Elect(ctx, "B", long)
	if err != nil || t2 <= t1 {
		t.Fatalf("after A resigned: term %d (A's was %d), %v", t2, t1, err)
	}
	// A stale leader: its term ended, so it can neither renew it nor, by
	// resigning it, end B's.
	if ok, err := a.Renew(ctx, "A", t1, long); err != nil || ok {
		t.Fatalf("a stale leader renewed: %v %v", ok, err)
	}
	if err := a.Resign(ctx, "A", t1); err != nil {
		t.Fatal(err)
	}
	if ok, _ := b.Renew(ctx, "B", t2, long); !ok {
		t.Fatal("a stale leader's resignation ended the running term")
	}

	// Expiry, by the database's clock: a term renewed for nothing has
	// expired by the next statement, and another replica takes over.
	if ok, err := b.Renew(ctx, "B", t2, 0); err != nil || !ok {
		t.Fatalf("renew to expire: %v %v", ok, err)
	}
	t3, err := a.Elect(ctx, "A", long)
	if err != nil || t3 <= t2 {
		t.Fatalf("after B's term expired: term %d (B's was %d), %v", t3, t2, err)
	}
	if ok, _ := b.Renew(ctx, "B", t2, long); ok {
		t.Fatal("an expired term, taken over, was renewed")
	}

	// A replica that stepped down unsure of its last renewal stands again
	// while its own term runs: it gets a new one, and the old number is dead.
	t4, err := a.Elect(ctx, "A", long)
	if err != nil || t4 <= t3 {
		t.Fatalf("standing again while leading: term %d (was %d), %v", t4, t3, err)
	}
	if ok, _ := a.Renew(ctx, "A", t3, long); ok {
		t.Fatal("the replaced term of the same replica was renewed")
	}
}

// leaderKit is a replica whose elector's transitions are recorded.
func leaderKit(t *testing.T, url string, tune func(*app.Services)) *storetest.Kit {
	t.Helper()
	return storetest.New(t, storetest.Options{Postgres: url, Tune: func(s *app.Services) {
		s.Leader.Signals.Changed.Init()
		s.Leader.Signals.Duties.Init()
		if tune != nil {
			tune(s)
		}
	}})
}

func leaders(ks ...*storetest.Kit) []int {
	var out []int
	for i, k := range ks {
		if k.Leader.Leading() {
			out = append(out, i)
		}
	}
	return out
}

// Three replicas elect one; the leader's clean stop hands over at once.
// Terms last an hour and followers stand only every hour, so only the
// resignation's notification can explain another replica leading within
// the test.
func TestOneLeaderAmongReplicasAndACleanStopHandsOver(t *testing.T) {
	url := freshDatabase(t)
	slow := func(s *app.Services) { s.Leader.TTL, s.Leader.Retry = time.Hour, time.Hour }
	ks := []*storetest.Kit{leaderKit(t, url, slow), leaderKit(t, url, slow), leaderKit(t, url, slow)}
	// The first replica's Start stood first, on a free row.
	if got := leaders(ks...); len(got) != 1 || got[0] != 0 {
		t.Fatalf("leaders %v, want exactly the first replica", got)
	}
	if gained, ok := ks[0].Leader.Signals.Changed.Wait(time.Second); !ok || !gained {
		t.Fatal("the leader did not signal its election")
	}

	ks[0].Stop()
	if got := leaders(ks...); len(got) != 1 || got[0] == 0 {
		// Stop returns after the resignation committed; the followers
		// take a moment to hear of it.
		waitSignal(t, "a follower elected after the leader resigned", ks[1], ks[2])
	}
	got := leaders(ks...)
	if len(got) != 1 || got[0] == 0 {
		t.Fatalf("leaders %v after the clean stop, want one of the others", got)
	}
}

// waitSignal waits until one of ks gains the leadership.
func waitSignal(t *testing.T, what string, ks ...*storetest.Kit) *storetest.Kit {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, k := range ks {
			if gained, ok := k.Leader.Signals.Changed.Wait(10 * time.Millisecond); ok && gained {
				return k
			}
		}
	}
	t.Fatalf("%s: no replica became the leader", what)
	return nil
}

// A leader that dies without resigning (its pools closed under it) stops
// leading once it cannot renew, and another replica is elected once the
// term expires in the database.
func TestAKilledLeaderIsReplacedAfterItsTermExpires(t *testing.T) {
	url := freshDatabase(t)
	fast := func(s *app.Services) { s.Leader.TTL = time.Second }
	a, b := leaderKit(t, url, fast), leaderKit(t, url, fast)
	if got := leaders(a, b); len(got) != 1 || got[0] != 0 {
		t.Fatalf("leaders %v, want the first replica", got)
	}
	a.DB.Close()
	if k := waitSignal(t, "after the leader was killed", b); k != b {
		t.Fatal("unreachable")
	}
	for deadline := time.Now().Add(30 * time.Second); a.Leader.Leading(); {
		if time.Now().After(deadline) {
			t.Fatal("the killed leader still believes it leads")
		}
		a.Leader.Signals.Changed.Wait(100 * time.Millisecond)
	}
	if !b.Leader.Leading() {
		t.Fatal("the new leader lost its term")
	}
}

// The dispatcher's periodic duties (reaper, purges) run on the leader
// only: every replica's dispatcher comes to them each sweep, and only the
// leader's goes on. After a handover, the new leader runs them.
func TestHousekeepingRunsOnTheLeaderOnly(t *testing.T) {
	url := freshDatabase(t)
	tune := func(s *app.Services) {
		s.Leader.TTL, s.Leader.Retry = time.Hour, time.Hour
		s.Dispatcher.Sweep = 20 * time.Millisecond
	}
	ks := []*storetest.Kit{leaderKit(t, url, tune), leaderKit(t, url, tune), leaderKit(t, url, tune)}
	duties := func(k *storetest.Kit, n int) []bool {
		t.Helper()
		var out []bool
		for range n {
			ran, ok := k.Leader.Signals.Duties.Wait(30 * time.Second)
			if !ok {
				t.Fatal("the dispatcher never came to its periodic duties")
			}
			out = append(out, ran)
		}
		return out
	}
	for i, k := range ks {
		for _, ran := range duties(k, 3) {
			if ran != (i == 0) {
				t.Fatalf("replica %d (leading: %v) ran its duties: %v", i, i == 0, ran)
			}
		}
	}

	ks[0].Stop()
	next := waitSignal(t, "after the leader stopped", ks[1], ks[2])
	other := ks[1]
	if next == ks[1] {
		other = ks[2]
	}
	// Passes that began before the election may still say no; then yes.
	for ran := false; !ran; {
		ran = duties(next, 1)[0]
	}
	for _, ran := range duties(other, 3) {
		if ran {
			t.Fatal("a follower ran the duties after the handover")
		}
	}
}
