package store

import (
	"encoding/json"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"geohub/app"
)

// While the writer is busy, publishes that arrive queue up and then share
// one transaction, each caller still getting its own result: that is the
// group commit every publish rate rests on.
func TestAppendsWaitingForTheWriterShareOneCommit(t *testing.T) {
	db, err := Open(t.Context(), filepath.Join(t.TempDir(), FileName), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var mu sync.Mutex
	var commits [][]app.Appended
	db.OnCommit(func(b []app.Appended) {
		mu.Lock()
		commits = append(commits, b)
		mu.Unlock()
	})

	entered, release := make(chan struct{}), make(chan struct{})
	busy := make(chan error, 1)
	go func() {
		busy <- db.do(t.Context(), func(*wtx) error { close(entered); <-release; return nil })
	}()
	<-entered
	const n = 10
	results := make(chan app.Stored, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			id := uuid.Must(uuid.NewV7()).String()
			stored, err := db.Append(t.Context(), []app.Pending{{Event: app.Event{EventID: id, Tipo: "a:b",
				VersaoSchema: "1.0.0", Timestamp: time.Now(), Origem: "teste", CorrelacaoID: id,
				Payload: json.RawMessage(`{"a":1}`)}}})
			if err != nil {
				t.Error(err)
				return
			}
			results <- stored[0]
		})
	}
	// All ten are queued behind the busy writer: a queue's length raises
	// no signal, and this package's tests cannot import storetest, so
	// yield until it is full.
	for len(db.ops) < n {
		runtime.Gosched()
	}
	close(release)
	wg.Wait()
	close(results)
	if err := <-busy; err != nil {
		t.Fatal(err)
	}
	seqs := map[int64]bool{}
	for r := range results {
		if !r.Created || seqs[r.Event.Sequence] {
			t.Fatalf("result %+v: each caller needs its own new row", r)
		}
		seqs[r.Event.Sequence] = true
	}
	mu.Lock()
	defer mu.Unlock()
	if len(commits) != 1 || len(commits[0]) != n {
		sizes := []int{}
		for _, c := range commits {
			sizes = append(sizes, len(c))
		}
		t.Fatalf("commits of %v events, want one of %d", sizes, n)
	}
}
