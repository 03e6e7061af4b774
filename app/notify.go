package app

import (
	"context"
	"sync"
)

// Notifier wakes the console's live tails when something they show was
// committed. It carries no data: a woken tail reads what it has not shown
// yet from the database, after its own cursor, so a wake that is coalesced
// or missed loses nothing. Notify never blocks, so a slow or stuck tail can
// never slow the commit that notifies. A nil *Notifier is valid and silent.
type Notifier struct {
	mu   sync.Mutex
	subs map[chan struct{}]struct{}
}

// Subscribe returns a channel that receives a value after each Notify
// (several notifies before a receive collapse into one) and the function
// that ends the subscription.
func (n *Notifier) Subscribe() (<-chan struct{}, func()) {
	if n == nil {
		return nil, func() {}
	}
	ch := make(chan struct{}, 1)
	n.mu.Lock()
	if n.subs == nil {
		n.subs = map[chan struct{}]struct{}{}
	}
	n.subs[ch] = struct{}{}
	n.mu.Unlock()
	return ch, func() {
		n.mu.Lock()
		delete(n.subs, ch)
		n.mu.Unlock()
	}
}

// Notify wakes every subscriber.
func (n *Notifier) Notify() {
	if n == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for ch := range n.subs {
		select {
		case ch <- struct{}{}:
		default: // already has a wake pending
		}
	}
}

// Subscribers is how many tails listen now (tests, metrics).
func (n *Notifier) Subscribers() int {
	if n == nil {
		return 0
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.subs)
}

// RecordedAttempt is one row of delivery_attempt with the delivery it
// belongs to: a line of the deliveries' live tail. ID orders attempts in
// the order they were recorded, so it is the tail's cursor.
type RecordedAttempt struct {
	ID       int64
	Delivery Delivery // without its body
	Attempt  Attempt
}

// AttemptFilter narrows the deliveries' live tail; zero values mean "any".
type AttemptFilter struct {
	Integrador, Tipo, Agregado string
}

// AttemptLog is the store's read side of recorded attempts, for the tail.
type AttemptLog interface {
	// AttemptsAfter returns up to limit attempts with id > after that match
	// f, in id order, and the cursor to continue from: past every attempt
	// it examined, matching or not, so that a filter matching little does
	// not make each read start again from the same old cursor.
	AttemptsAfter(ctx context.Context, after int64, f AttemptFilter, limit int) ([]RecordedAttempt, int64, error)
	// MaxAttemptID is the id of the latest recorded attempt (0 for none).
	MaxAttemptID(ctx context.Context) (int64, error)
}

// Succeeded says the receiver accepted the attempt.
func (a Attempt) Succeeded() bool { return a.Erro == "" && accepted(a.StatusCode) }
