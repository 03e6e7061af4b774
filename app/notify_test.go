package app_test

import (
	"sync"
	"testing"
	"time"

	"geohub/app"
)

func TestNotifierWakesEverySubscriberWithoutBlocking(t *testing.T) {
	var n app.Notifier
	a, cancelA := n.Subscribe()
	b, cancelB := n.Subscribe()
	defer cancelB()

	// Many notifies with nobody reading: none blocks, and each subscriber
	// keeps one pending wake.
	done := make(chan struct{})
	go func() {
		for range 1000 {
			n.Notify()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Notify blocked on subscribers that do not read")
	}
	for name, ch := range map[string]<-chan struct{}{"a": a, "b": b} {
		select {
		case <-ch:
		default:
			t.Fatalf("subscriber %s was not woken", name)
		}
		select {
		case <-ch:
			t.Fatalf("subscriber %s got more than one pending wake", name)
		default:
		}
	}

	cancelA()
	if got := n.Subscribers(); got != 1 {
		t.Fatalf("%d subscribers after a cancel, want 1", got)
	}
	n.Notify()
	select {
	case <-a:
		t.Fatal("a cancelled subscription was woken")
	default:
	}
	<-b
}

func TestNilNotifierIsSilent(t *testing.T) {
	var n *app.Notifier
	n.Notify()
	ch, cancel := n.Subscribe()
	defer cancel()
	if ch != nil || n.Subscribers() != 0 {
		t.Fatal("a nil notifier must hand out a nil channel")
	}
}

// Subscribing, notifying and cancelling at once is safe (run with -race).
func TestNotifierConcurrentUse(t *testing.T) {
	var n app.Notifier
	var subs sync.WaitGroup
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			default:
				n.Notify()
			}
		}
	}()
	for range 8 {
		subs.Add(1)
		go func() {
			defer subs.Done()
			for range 200 {
				ch, cancel := n.Subscribe()
				select {
				case <-ch:
				case <-time.After(time.Second):
					t.Error("a subscriber was never woken while notifies ran")
				}
				cancel()
			}
		}()
	}
	subs.Wait()
	close(stop)
	<-stopped
}
