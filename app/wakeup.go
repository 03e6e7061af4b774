package app

// Wakeup is what another replica on the same database committed, as its
// notification tells (SPEC 12): no rows, only what to wake. A woken
// service reads what it has not seen from the database, as it does after a
// local commit, so a wake-up that is coalesced, or duplicated, loses
// nothing.
type Wakeup struct {
	// Sequence is the highest sequence number the commit gave; 0 when it
	// appended no events.
	Sequence int64
	// Deliveries: the commit enqueued deliveries.
	Deliveries bool
	// Attempts: the commit recorded delivery attempts.
	Attempts bool
	// Resigned: the leader resigned; a follower stands for election now.
	Resigned bool
	// Resync: the store (re)started listening and may have missed
	// notifications meanwhile, so this one wakes everything, up to the log's
	// head as Sequence.
	Resync bool
	// Err, alone in its Wakeup, says the store stopped listening and why;
	// it listens again and sends a Resync once it does.
	Err error
}

// Wakeups is how a store that several replicas share tells this one of
// the others' commits. A store that one process owns (SQLite) never calls
// the function: every commit is this process's, and OnCommit covers it.
type Wakeups interface {
	// OnRemote sets the one function called with each wake-up from other
	// replicas, never for this process's own commits. It must not block.
	OnRemote(fn func(Wakeup))
}

// Remote is who is woken when another replica commits: as Committed wakes
// them for this process's commits, but from the log, since a remote commit
// brings no rows. It never blocks. Before Start it does nothing: the
// services may still be adjusted then, and Start itself reads everything
// a wake-up would point to.
func (s *Services) Remote(w Wakeup) {
	if !s.started.Load() {
		return
	}
	if w.Err != nil {
		s.Logger.Warn("not listening to the other replicas' commits; retrying: until it listens again, "+
			"this replica learns of them only from its own commits and polls", "err", w.Err)
		return
	}
	if w.Resync && s.remoteSeen.Swap(true) {
		s.Logger.Info("listening to the other replicas' commits again")
	}
	if w.Sequence > 0 {
		s.Consumers.Remote(w.Sequence)
		s.EventsChanged.Notify()
	}
	if w.Deliveries {
		s.Dispatcher.Wake()
	}
	if w.Attempts {
		s.AttemptsChanged.Notify()
	}
	if w.Resigned {
		s.Leader.Wake()
	}
}
