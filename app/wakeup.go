package app

import "context"

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
	// Consumed: the leader's in-process consumers took in events, so the
	// read models they keep in the database (the ocorrências list) changed.
	Consumed bool
	// Shared: a process changed what every replica keeps in memory (the
	// integrators' cadastro, the registry, the API tokens, the circuits):
	// read it again now, not at the next poll.
	Shared bool
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

// ConsumedAnnouncer is implemented by a store several replicas share: the
// in-process consumers run on the leader only (SPEC 12), so the others
// learn from it that the read models changed, and wake the console pages
// that show them (Wakeup.Consumed). A store one process owns has no one
// to tell.
type ConsumedAnnouncer interface {
	// AnnounceConsumed tells the other replicas, after the read models'
	// writes committed, that they changed.
	AnnounceConsumed(ctx context.Context) error
}

// Remote is who is woken when another replica commits: as Committed wakes
// them for this process's commits, but from the log, since a remote commit
// brings no rows. It never blocks. Before Start it does nothing: the
// services may still be adjusted then, and Start itself reads everything
// a wake-up would point to.
//
// Every wake-up also wakes the dispatcher, not only one whose commit
// enqueued deliveries: an attempt recorded elsewhere may have freed an
// aggregate whose next row waits behind it, a release or a reap gave rows
// back, a leader that resigned gave its held rows back. A row blocked
// behind another replica's in-flight row is then claimed at once rather
// than at the next sweep; a claim that finds nothing costs one query.
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
	s.Dispatcher.Wake()
	if w.Attempts {
		s.AttemptsChanged.Notify()
	}
	if w.Consumed || w.Resync {
		s.ConsumedChanged.Notify()
	}
	if w.Shared || w.Resync {
		select {
		case s.sharedChanged <- struct{}{}:
		default: // a read is due already, and sees this change
		}
	}
	if w.Resigned {
		s.Leader.Wake()
	}
}
