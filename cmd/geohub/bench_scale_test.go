package main

// BenchmarkScale is the part of the benchmark suite (issue 6) that needs a
// big log. One run prints every figure and its ratio:
//
//	go test -run '^$' -bench Scale -benchtime 1x -timeout 30m ./cmd/geohub
//
//	fsync               write 4 KiB + fsync on the data disk, one at a time (fsyncs/s)
//	replay-http         GET /api/events/replay over the whole log, NDJSON (events/s)
//	raw-page-read       the same pages (1000 rows) read with database/sql (rows/s)
//	publish-empty       64 HTTP clients publishing to the real binary on an empty log
//	publish-1m          the same with 1,000,000 events already in the log
//	rss-1m              the server's resident memory after publish-1m (MB)
//
// The server is the real binary (a child process), so its memory is its own;
// the log is loaded with raw batched inserts of the rows a publish writes.
// Like BenchmarkPublish, it only reports.

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"geohub/app"
	"geohub/store"
)

// benchScaleEvents is the size of the big log; GEOHUB_BENCH_EVENTS overrides
// it for a quicker look.
func benchScaleEvents() int {
	if v, err := strconv.Atoi(os.Getenv("GEOHUB_BENCH_EVENTS")); err == nil && v > 0 {
		return v
	}
	return 1_000_000
}

// benchPublishN is how many events each publish-rate arm sends.
const benchPublishN = 20_000

func BenchmarkScale(b *testing.B) {
	defer tuneRuntime()() // the server's settings, for the baselines too
	if b.N > 1 {
		b.Skip("run with -benchtime 1x: each arm is a fixed, large workload")
	}
	r := map[string]benchResult{}
	var rssMB float64
	events := benchScaleEvents()

	r["fsync"] = benchFsync(b, 2000)

	empty := b.TempDir()
	benchPrepareDir(b, empty, 0)
	r["publish-empty"], _ = benchBinaryPublish(b, empty)

	big := b.TempDir()
	load := time.Now()
	benchPrepareDir(b, big, events)
	fmt.Printf("loaded %d events in %s\n", events, time.Since(load).Round(time.Second))
	r["publish-1m"], rssMB = benchBinaryPublish(b, big)
	r["replay-http"], r["raw-page-read"] = benchReplay(b, big, events)

	w := os.Stdout
	fmt.Fprintf(w, "\nsummary (driver %s, WAL, synchronous=FULL, %d events in the big log):\n", store.DriverName, events)
	for _, name := range []string{"fsync", "replay-http", "raw-page-read", "publish-empty", "publish-1m"} {
		res := r[name]
		fmt.Fprintf(w, "  %-14s %9.0f ops/s", name, res.rate)
		if res.p99 > 0 {
			fmt.Fprintf(w, "  p50 %.2f ms  p99 %.2f ms", res.p50, res.p99)
		}
		fmt.Fprintln(w)
	}
	verdict := func(ok bool) string {
		if ok {
			return "MET"
		}
		return "MISSED"
	}
	q := r["replay-http"].rate / r["raw-page-read"].rate
	fmt.Fprintf(w, "  replay-http / raw-page-read = %.2f (target >= 0.50) %s\n", q, verdict(q >= 0.5))
	q = r["publish-1m"].rate / r["publish-empty"].rate
	fmt.Fprintf(w, "  publish-1m / publish-empty = %.2f (target >= 0.80) %s\n", q, verdict(q >= 0.8))
	fmt.Fprintf(w, "  rss after %d events = %.0f MB (target < 150 MB) %s\n\n", events, rssMB, verdict(rssMB < 150))
}

// benchFsync measures what one durable commit costs the disk: a 4 KiB
// write and an fsync, n times, on the disk the data directory uses.
func benchFsync(b *testing.B, n int) benchResult {
	f, err := os.CreateTemp(b.TempDir(), "fsync")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	page := make([]byte, 4096)
	start := time.Now()
	for i := range n {
		if _, err := f.WriteAt(page, int64(i%256)*4096); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	return benchResult{n: n, rate: float64(n) / time.Since(start).Seconds()}
}

// benchPrepareDir makes a data directory with n events in its log, written
// as a publish writes them (same redacted payload shape, UUIDv7 ids).
func benchPrepareDir(b *testing.B, dir string, n int) {
	ctx := context.Background()
	path := filepath.Join(dir, store.FileName)
	sdb, err := store.Open(ctx, path, store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	stored := benchStoredPayload(b, ctx, sdb)
	if err := sdb.Close(); err != nil {
		b.Fatal(err)
	}
	if n == 0 {
		return
	}
	db, err := sql.Open(store.DriverName, store.DSN(path, false))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	jid0 := benchJornadaID(0)
	t0 := time.Now().Add(-time.Duration(n) * time.Millisecond).UnixMilli()
	for done := 0; done < n; {
		tx, err := db.Begin()
		if err != nil {
			b.Fatal(err)
		}
		st, err := tx.Prepare(`INSERT INTO event_log (event_id, tipo, versao_schema, timestamp, origem,
			correlacao_id, agregado, payload, criado_em) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`)
		if err != nil {
			b.Fatal(err)
		}
		for k := 0; k < 20_000 && done < n; k, done = k+1, done+1 {
			id := uuid.Must(uuid.NewV7()).String()
			// Offset from the ids the publish arms will use.
			jid := benchJornadaID(10_000_000 + done)
			ts := t0 + int64(done)
			if _, err := st.Exec(id, benchTipo, app.DefaultVersao, ts, "app-jornada", id, jid,
				strings.Replace(stored, jid0, jid, 1), ts); err != nil {
				b.Fatal(err)
			}
		}
		st.Close()
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := db.Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		b.Fatal(err)
	}
}

// benchServer runs the real binary on dir and returns its address, its pid
// and a producer token.
func benchServer(b *testing.B, dir string) (addr string, pid int, token string, stop func()) {
	bin, err := buildBinary()
	if err != nil {
		b.Fatal(err)
	}
	out, err := exec.Command(bin, "token", "create", "--papel", "produtor", "--data", dir).Output()
	if err != nil {
		b.Fatal(err)
	}
	token = lastLine(string(out))
	// Info level: the "listening" line gives the address.
	cmd := exec.Command(bin, "serve", "--data", dir, "--addr", "127.0.0.1:0", "--log-level", "info")
	cmd.Env = append(os.Environ(), "GEOHUB_ADMIN_PASSWORD=senha-de-bench-123")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
	}()
	select {
	case addr = <-found:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		b.Fatal("server did not start")
	}
	return addr, cmd.Process.Pid, token, func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	}
}

// benchBinaryPublish measures publishes over HTTP by 64 clients to the real
// binary on dir, and the server's resident memory afterwards.
func benchBinaryPublish(b *testing.B, dir string) (benchResult, float64) {
	addr, pid, token, stop := benchServer(b, dir)
	defer stop()
	client := benchClient()
	defer client.CloseIdleConnections()
	u := "http://" + addr + "/api/events"
	elapsed, cpu, lat := benchRun(b, benchPublishN, benchConcurrency, func(_, i int) error {
		return benchPost(client, u, token, benchBody(i), http.StatusCreated)
	})
	_ = cpu // the client's CPU only: the server is another process
	res := benchReport(b, "events/s", elapsed, 0, lat)
	return res, benchRSSMB(b, pid)
}

// benchRSSMB reads a process's resident set size.
func benchRSSMB(b *testing.B, pid int) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Logf("no /proc: %v", err)
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// benchReplay reads the whole log twice: through GET /api/events/replay
// (NDJSON, continuing from the last sequence until an empty answer), and
// with database/sql pages of the replay's size, as the raw ceiling.
func benchReplay(b *testing.B, dir string, events int) (replay, raw benchResult) {
	addr, _, _, stop := benchServer(b, dir)
	reader, err := exec.Command(mustBinary(b), "token", "create", "--papel", "leitor", "--data", dir).Output()
	if err != nil {
		stop()
		b.Fatal(err)
	}
	token := lastLine(string(reader))
	client := benchClient()
	var last int64
	n := 0
	start := time.Now()
	for {
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://%s/api/events/replay?de_sequence=%d", addr, last), nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := client.Do(req)
		if err != nil {
			stop()
			b.Fatal(err)
		}
		got := 0
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			// The sequence is the first field: {"sequence_number":"123",...
			if i := strings.Index(string(line[:min(len(line), 64)]), `"sequence_number":"`); i >= 0 {
				rest := line[i+len(`"sequence_number":"`):]
				if j := strings.IndexByte(string(rest[:min(len(rest), 24)]), '"'); j > 0 {
					last, _ = strconv.ParseInt(string(rest[:j]), 10, 64)
				}
			}
			got++
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		n += got
		if got == 0 {
			break
		}
	}
	replay = benchResult{n: n, rate: float64(n) / time.Since(start).Seconds()}
	stop()
	if n < events {
		b.Fatalf("replay returned %d of %d events", n, events)
	}

	db, err := sql.Open(store.DriverName, store.DSN(filepath.Join(dir, store.FileName), true))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	n, last = 0, 0
	start = time.Now()
	for {
		rows, err := db.Query(`SELECT sequence_number, event_id, tipo, versao_schema, timestamp, origem,
			correlacao_id, agregado, autoria_id, autoria_tipo, solicitacao, payload, criado_em
			FROM event_log WHERE sequence_number > ? ORDER BY sequence_number LIMIT ?`, last, app.ReplayBatch)
		if err != nil {
			b.Fatal(err)
		}
		got := 0
		for rows.Next() {
			var seq, ts, criado int64
			var id, tipo, versao, origem, corr, payload string
			var agregado, aid, atipo, sol sql.NullString
			if err := rows.Scan(&seq, &id, &tipo, &versao, &ts, &origem, &corr, &agregado, &aid, &atipo, &sol, &payload, &criado); err != nil {
				b.Fatal(err)
			}
			last = seq
			got++
		}
		rows.Close()
		n += got
		if got == 0 {
			break
		}
	}
	raw = benchResult{n: n, rate: float64(n) / time.Since(start).Seconds()}
	return replay, raw
}

func mustBinary(b *testing.B) string {
	bin, err := buildBinary()
	if err != nil {
		b.Fatal(err)
	}
	return bin
}
