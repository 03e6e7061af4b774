//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"geohub/app"
)

// consumerEnv makes the test binary a geohub server with one in-process
// consumer (the binary itself subscribes none): colonia "auditoria" handles
// jornada:iniciada by appending "event_id sequence" to the file the variable
// names, and refuses every event whose id ends in 0, which the DLQ records.
const consumerEnv = "GEOHUB_TEST_SERVE_WITH_CONSUMER"

// readModelDelayEnv slows each fold of the ocorrências read model by the
// duration it holds (see launch.readModelDelay).
const readModelDelayEnv = "GEOHUB_TEST_READMODEL_DELAY"

const (
	auditColonia = "auditoria"
	auditTipo    = "jornada:iniciada"
)

// auditRefuses is the consumer's deterministic failure: one event in 16.
func auditRefuses(eventID string) bool { return strings.HasSuffix(eventID, "0") }

func init() {
	path := os.Getenv(consumerEnv)
	if path == "" {
		return
	}
	os.Exit(serveWithConsumer(path, os.Args[1:]))
}

// serveWithConsumer is geohub serve (args after "serve") with the consumer.
func serveWithConsumer(path string, args []string) int {
	if len(args) == 0 || args[0] != "serve" {
		fmt.Fprintln(os.Stderr, "consumer server: want serve and its flags")
		return 111
	}
	cfg, run, err := serveConfig(args[1:])
	if err != nil || !run {
		fmt.Fprintln(os.Stderr, "consumer server:", err)
		return 111
	}
	tuneRuntime()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "consumer log:", err)
		return 111
	}
	defer f.Close()
	var mu sync.Mutex
	handle := func(ctx context.Context, ev app.Event) error {
		if auditRefuses(ev.EventID) {
			return errors.New("recusado de propósito")
		}
		mu.Lock()
		defer mu.Unlock()
		// One write: a kill -9 loses no page-cache write, so a line that is
		// in the file was handled.
		_, err := fmt.Fprintf(f, "%s %d\n", ev.EventID, ev.Sequence)
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	m := &Main{Config: cfg, Stdout: os.Stdout,
		Subscribe: func(c *app.Consumers) { c.Subscribe(auditTipo, auditColonia, "registra", handle) }}
	if delay, _ := time.ParseDuration(os.Getenv(readModelDelayEnv)); delay > 0 {
		m.BeforeProject = func(ctx context.Context, ev app.Event) error {
			select {
			case <-time.After(delay):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	if err := m.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "geohub:", err)
		return 1
	}
	return 0
}

// TestConsumerAfterRepeatedKill9 is the consumers' side of the crash suite:
// an in-process consumer killed with the server mid-stream, again and
// again, must end with every event of its type either handled or recorded
// as an open failure in the DLQ, never lost, and its cursor just before its
// first open failure.
func TestConsumerAfterRepeatedKill9(t *testing.T) {
	sqliteOnly(t)
	const (
		kills      = 3
		publishers = 8
	)
	// Each restart replays the refused events after the first one, and each
	// such failure is an attempt: the entries must stay open to be checked.
	if kills+1 >= app.MaxDLQAttempts {
		t.Fatalf("kills (%d) must stay below MaxDLQAttempts-1 (%d)", kills, app.MaxDLQAttempts-1)
	}
	data := t.TempDir()
	handledPath := t.TempDir() + "/handled.log"
	start := func() *child {
		c := launch{data: data, consumerLog: handledPath}.start(t)
		if !c.alive() {
			t.Fatalf("geohub with a consumer did not start:\n%s", c.out)
		}
		return c
	}
	srv := start()
	bin, _ := plainBinary()
	out, err := cli(t, nil, bin, "token", "create", "--papel", "admin", "--data", data)
	if err != nil {
		t.Fatalf("token create: %v %s", err, out)
	}
	token := lastLine(out)
	client := &http.Client{Timeout: 15 * time.Second}
	l := newLedger()
	for cycle := 0; cycle <= kills; cycle++ {
		before := l.count()
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range publishers {
			wg.Go(func() { l.publishUntilGone(client, srv.addr, token, 3, stop) })
		}
		target := before + 50 + rand.IntN(300)
		if cycle == kills {
			target = before + 100
		}
		l.await(t, srv, 30*time.Second, fmt.Sprintf("cycle %d: %d publishes acknowledged", cycle, target-before), func() bool {
			return l.count() >= target && (cycle < kills || l.unresolved() == 0)
		})
		if cycle == kills {
			close(stop)
			wg.Wait()
			break
		}
		// Wall time on purpose: the kill lands at a random point of the load.
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
		srv.kill()
		wg.Wait()
		srv = start()
	}
	l.mu.Lock()
	for _, p := range l.problems {
		t.Error(p)
	}
	acked := len(l.acked)
	l.mu.Unlock()

	// Let the consumer catch up: every acknowledged event handled or in the
	// DLQ, as the API counts them.
	waitFor(t, 45*time.Second, fmt.Sprintf("the consumer to handle or fail %d events", acked), func() (bool, string) {
		handled := readHandled(t, handledPath)
		a, err := call(client, "GET", "http://"+srv.addr+"/api/events/dlq", token, "")
		if err != nil || a.status != http.StatusOK {
			t.Fatalf("GET /api/events/dlq: %v %d", err, a.status)
		}
		var st app.DLQStats
		if err := json.Unmarshal(a.body, &st); err != nil {
			t.Fatal(err)
		}
		return len(handled)+st.PendentesPorColonia[auditColonia] >= acked, fmt.Sprintf("handled %d, failed %d", len(handled), st.TotalPendentes)
	})
	srv.stop()

	db := openReadOnly(t, data)
	checkIntegrity(t, db)
	handled := readHandled(t, handledPath)
	type entry struct {
		seq        int64
		tipo       string
		status     string
		tentativas int
	}
	dlq := map[string]entry{}
	rows, err := db.Query(`SELECT event_id, sequence_number, tipo, status, tentativas FROM dead_letter_queue WHERE colonia = ?`, auditColonia)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var e entry
		if err := rows.Scan(&id, &e.seq, &e.tipo, &e.status, &e.tentativas); err != nil {
			t.Fatal(err)
		}
		dlq[id] = e
	}
	rows.Close()
	rows, err = db.Query(`SELECT event_id, sequence_number FROM event_log WHERE tipo = ? ORDER BY sequence_number`, auditTipo)
	if err != nil {
		t.Fatal(err)
	}
	var firstFailure, last int64
	logged := 0
	for rows.Next() {
		var id string
		var seq int64
		if err := rows.Scan(&id, &seq); err != nil {
			t.Fatal(err)
		}
		logged++
		last = seq
		e, failed := dlq[id]
		switch {
		case auditRefuses(id) && !failed:
			t.Errorf("event %s (#%d) was refused by the consumer but is not in the DLQ", id, seq)
		case auditRefuses(id) && (e.seq != seq || e.tipo != auditTipo || e.status != app.DLQPendente || e.tentativas < 1):
			t.Errorf("DLQ entry of %s (#%d): %+v", id, seq, e)
		case auditRefuses(id) && handled[id] > 0:
			t.Errorf("refused event %s is in the handled log", id)
		case !auditRefuses(id) && failed:
			t.Errorf("event %s is in the DLQ but the consumer never refuses it: %+v", id, e)
		case !auditRefuses(id) && handled[id] == 0:
			t.Errorf("event %s (#%d) was lost: neither handled nor in the DLQ", id, seq)
		}
		if auditRefuses(id) && firstFailure == 0 {
			firstFailure = seq
		}
	}
	rows.Close()
	if logged != acked || len(dlq) > logged {
		t.Errorf("%d events in the log, %d acknowledged, %d DLQ entries", logged, acked, len(dlq))
	}
	var cursor int64
	if err := db.QueryRow(`SELECT last_sequence FROM consumer_cursor WHERE colonia = ? AND tipo = ?`,
		auditColonia, auditTipo).Scan(&cursor); err != nil {
		t.Fatalf("the consumer's cursor: %v", err)
	}
	want := last
	if firstFailure > 0 {
		want = firstFailure - 1
	}
	if cursor != want {
		t.Errorf("cursor at %d; want %d (the last event is #%d, the first open failure #%d)", cursor, want, last, firstFailure)
	}
	again := 0
	for _, n := range handled {
		again += n - 1
	}
	t.Logf("%d events over %d kills: %d handled (%d handled again after a kill, as at-least-once allows), %d in the DLQ",
		logged, kills, len(handled), again, len(dlq))
}

// readHandled counts the lines the consumer wrote per event id.
func readHandled(t *testing.T, path string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if id, seq, ok := strings.Cut(line, " "); ok {
			if _, err := strconv.ParseInt(seq, 10, 64); err != nil {
				t.Fatalf("a torn line in the handled log: %q", line)
			}
			out[id]++
		}
	}
	return out
}
