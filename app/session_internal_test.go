package app

import (
	"fmt"
	"testing"
	"time"
)

// A flood of fresh addresses fills the limiter's table; eviction must not
// take the lock off the account being guessed at with it.
func TestEvictionKeepsLockedLogins(t *testing.T) {
	s := &Sessions{}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for range loginMaxFailures {
		s.reserve([]string{"ip:10.0.0.1", "login:admin"}, now)
	}
	for i := range maxLoginKeys {
		s.reserve([]string{fmt.Sprintf("ip:2001:db8::%x", i)}, now.Add(time.Second))
	}
	if len(s.failures) >= maxLoginKeys {
		t.Fatalf("%d keys: nothing was evicted", len(s.failures))
	}
	if wait := s.reserve([]string{"ip:203.0.113.1", "login:admin"}, now.Add(2*time.Second)); wait <= 0 {
		t.Fatal("the flood wiped the lock on login:admin")
	}
}

// Nor the count of a login one guess short of its lock.
func TestEvictionKeepsCountsShortOfALock(t *testing.T) {
	s := &Sessions{}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for i := range loginMaxFailures - 1 {
		s.reserve([]string{fmt.Sprintf("ip:10.0.0.%d", i), "login:admin"}, now)
	}
	for i := range maxLoginKeys {
		s.reserve([]string{fmt.Sprintf("ip:2001:db8::%x", i)}, now.Add(time.Second))
	}
	for i := range maxLoginKeys / 2 { // new logins too
		s.reserve([]string{fmt.Sprintf("login:x%d", i)}, now.Add(time.Second))
	}
	if wait := s.reserve([]string{"ip:203.0.113.1", "login:admin"}, now.Add(2*time.Second)); wait > 0 {
		t.Fatal("the fifth guess was refused")
	}
	if wait := s.reserve([]string{"ip:203.0.113.2", "login:admin"}, now.Add(3*time.Second)); wait <= 0 {
		t.Fatal("a sixth guess within the window was allowed: the flood reset the count")
	}
}
