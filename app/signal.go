package app

import "time"

// Signal is a hook a service raises at a point tests wait on (River's
// testsignal): until a test calls Init it is a nil check and nothing else,
// so production pays nothing for it.
type Signal[T any] struct{ ch chan T }

// Init makes the signal record what is raised; call it before the service
// starts.
func (s *Signal[T]) Init() { s.ch = make(chan T, 10_000) }

// raise records v for a waiting test; it never blocks the service (a test
// that lets ten thousand signals pile up loses the newest).
func (s *Signal[T]) raise(v T) {
	if s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
	}
}

// C is the channel values are raised on (nil before Init), for a test
// that waits on several signals at once.
func (s *Signal[T]) C() <-chan T { return s.ch }

// Wait returns the next value raised, or false after timeout.
func (s *Signal[T]) Wait(timeout time.Duration) (T, bool) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case v := <-s.ch:
		return v, true
	case <-t.C:
		var zero T
		return zero, false
	}
}

// DispatchSignals are the dispatcher's test hooks.
type DispatchSignals struct {
	// Recorded: a round's outcomes committed (how many).
	Recorded Signal[int]
	// Claimed: the rows a round leased.
	Claimed Signal[[]Delivery]
	// Circuit: an integrator's breaker opened or closed.
	Circuit Signal[CircuitChange]
}

// ConsumerSignals are the in-process consumers' test hooks.
type ConsumerSignals struct {
	// Handled: a handler returned nil for an event.
	Handled Signal[Consumed]
	// DeadLettered: a handler's failure was recorded in the DLQ.
	DeadLettered Signal[Consumed]
	// Saved: a colonia's cursor of one type was written, up to Sequence.
	Saved Signal[Consumed]
}

// Consumed is what a consumer did with one event of a colonia (for Saved,
// the type's cursor: no EventID).
type Consumed struct {
	Colonia, Tipo, EventID string
	Sequence               int64
}

// Init records all three.
func (s *ConsumerSignals) Init() {
	s.Handled.Init()
	s.DeadLettered.Init()
	s.Saved.Init()
}

// CircuitChange is a breaker opening or closing.
type CircuitChange struct {
	Integrador string
	Open       bool
}
