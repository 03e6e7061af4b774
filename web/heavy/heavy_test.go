package heavy

import (
	"context"
	"testing"
	"time"

	"geohub/app"
)

func TestSlotsPerCredentialAndPerServer(t *testing.T) {
	l := New(PerCredential + 1)
	var releases []func()
	for range PerCredential {
		release, err := l.Acquire(t.Context(), "token a")
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, release)
	}
	if _, err := l.Acquire(t.Context(), "token a"); app.ErrorCode(err) != app.ERateLimited {
		t.Fatalf("one credential past its share: %v, want limite_de_taxa", err)
	}
	other, err := l.Acquire(t.Context(), "token b")
	if err != nil {
		t.Fatalf("another credential is refused while the server has a slot: %v", err)
	}
	// The server is full: a third credential waits, and is told the server
	// is busy when its wait ends (here its context's, sooner than heavyWait).
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := l.Acquire(ctx, "token c"); app.ErrorCode(err) != app.EUnavailable {
		t.Fatalf("a full server: %v, want indisponivel", err)
	}
	// A refused or timed-out request holds nothing: a freed slot serves
	// the next one at once.
	other()
	if release, err := l.Acquire(t.Context(), "token c"); err != nil {
		t.Fatalf("after a release: %v", err)
	} else {
		release()
	}
	for _, r := range releases {
		r()
	}
	if len(l.held) != 0 || len(l.slots) != 0 {
		t.Fatalf("after every release: %d credentials and %d slots still held", len(l.held), len(l.slots))
	}
}
