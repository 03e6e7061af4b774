package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"geohub/app"
	"geohub/app/callback"
	"geohub/store/storetest"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// BenchmarkReplicas is SPEC 12's benchmark: the publish and delivery arms
// on PostgreSQL with 1, 2 and 3 replicas of `geohub serve` on one database
// (run in this process, each its own Main: its own pools, writer,
// dispatcher and HTTP server), beside PostgreSQL's own ceilings for the
// same durable work, measured in the same run. It needs
// GEOHUB_TEST_BACKEND=postgres and GEOHUB_TEST_POSTGRES:
//
//	GEOHUB_TEST_BACKEND=postgres go test -run '^$' -bench Replicas -benchtime 4000x -count 3 ./cmd/geohub/
//
// Arms:
//
//	ceiling-insert   64 connections, each INSERTing one event row per transaction
//	ceiling-claim    one integrator's filled outbox drained by bare claims of 32
//	                 (UPDATE ... FOR UPDATE SKIP LOCKED) and one finishing UPDATE a batch,
//	                 4 connections
//	ceiling-post     32 senders of signed loopback POSTs to a 204 receiver
//	publish-rN       64 HTTP clients spread over the N replicas, each event in an
//	                 aggregate of its own and no integrator subscribed
//	drain-rN         the outbox of one integrator filled before the replicas start:
//	                 they only deliver (first arrival to last)
//	drain-analyzed   drain-r1 on an outbox ANALYZEd while empty, as an idle one is
//	drain-history    drain-r1 on an outbox that delivered 40,000 rows before
//	drain-backup     drain-history with a snapshot held throughout, as a pg_dump holds
//	                 one: no dead tuple can be vacuumed
//	flow-rN          64 HTTP clients publish for one integrator while the N replicas
//	                 deliver (first publish to last arrival)
//
// Each arm also reports PostgreSQL's CPU per operation (pg-cpu-us/op) when
// the server runs on this machine: the CPU of its processes, read from
// /proc, over the arm.
func BenchmarkReplicas(b *testing.B) {
	if storetest.Backend() != "postgres" {
		b.Skip("replicas share one PostgreSQL database: set GEOHUB_TEST_BACKEND=postgres")
	}
	runs := map[string][]benchResult{}
	arm := func(name string, fn func(*testing.B) benchResult) {
		b.Run(name, func(b *testing.B) {
			defer tuneRuntime()()
			keepRun(runs, name, b.N, fn(b))
		})
	}
	arm("ceiling-insert", benchCeilingInsert)
	arm("ceiling-claim", benchCeilingClaim)
	arm("ceiling-post", func(b *testing.B) benchResult { return benchDelRawSignedPost(b).benchResult })
	for _, n := range []int{1, 2, 3} {
		arm(fmt.Sprintf("publish-r%d", n), func(b *testing.B) benchResult { return benchReplicaPublish(b, n) })
		arm(fmt.Sprintf("drain-r%d", n), func(b *testing.B) benchResult { return benchReplicaDrain(b, n, drainFresh) })
	}
	arm("drain-analyzed", func(b *testing.B) benchResult { return benchReplicaDrain(b, 1, drainAnalyzed) })
	arm("drain-history", func(b *testing.B) benchResult { return benchReplicaDrain(b, 1, drainHistory) })
	arm("drain-backup", func(b *testing.B) benchResult { return benchReplicaDrain(b, 1, drainBackup) })
	for _, n := range []int{1, 3} {
		arm(fmt.Sprintf("flow-r%d", n), func(b *testing.B) benchResult { return benchReplicaFlow(b, n) })
	}
	benchReplicaSummary(os.Stdout, medianRuns(runs, func(_ string, r benchResult) float64 { return r.rate }))
}

// benchReplicaSummary prints each arm and SPEC 12's goals beside their
// ceilings. The composed ceiling is the rate at which one machine could
// insert, claim and finish, and post each event if each part ran at its
// bare ceiling in turn: 1 / (1/insert + 1/claim + 1/post).
func benchReplicaSummary(w io.Writer, med map[string]benchResult) {
	fmt.Fprintln(w, "\nsummary (PostgreSQL, synchronous_commit=on; replicas in one process on this machine):")
	names := []string{"ceiling-insert", "ceiling-claim", "ceiling-post", "publish-r1", "publish-r2", "publish-r3",
		"drain-r1", "drain-r2", "drain-r3", "drain-analyzed", "drain-history", "drain-backup", "flow-r1", "flow-r3"}
	for _, name := range names {
		if r, ok := med[name]; ok {
			fmt.Fprintf(w, "  %-15s %8.0f ops/s  %6.0f cpu-us/op  %6.0f pg-cpu-us/op  (N=%d)\n", name, r.rate, r.cpuUS, r.pgUS, r.n)
		}
	}
	goal := func(what string, got, want float64, atMost bool) {
		met := got >= want
		cmp := ">="
		if atMost {
			met, cmp = got <= want, "<="
		}
		verdict := "MISSED"
		if met {
			verdict = "MET"
		}
		fmt.Fprintf(w, "  %-52s = %5.2f (goal %s %.2f) %s\n", what, got, cmp, want, verdict)
	}
	has := func(names ...string) bool {
		for _, n := range names {
			if med[n].rate == 0 {
				return false
			}
		}
		return true
	}
	if has("publish-r1", "ceiling-insert") {
		goal("publish-r1 / ceiling-insert", med["publish-r1"].rate/med["ceiling-insert"].rate, 0.7, false)
	}
	if has("flow-r1", "ceiling-insert", "ceiling-claim", "ceiling-post") {
		composed := 1 / (1/med["ceiling-insert"].rate + 1/med["ceiling-claim"].rate + 1/med["ceiling-post"].rate)
		fmt.Fprintf(w, "  %-52s   %5.0f events/s\n", "composed ceiling (insert, claim+finish, post)", composed)
		goal("flow-r1 / composed ceiling", med["flow-r1"].rate/composed, 0.5, false)
	}
	if has("flow-r1", "publish-r1", "ceiling-claim", "ceiling-post") {
		// The composed ceiling has no HTTP edge, which flow's publishes
		// pay on the same cores: this one puts publish-r1 in its place.
		withHTTP := 1 / (1/med["publish-r1"].rate + 1/med["ceiling-claim"].rate + 1/med["ceiling-post"].rate)
		fmt.Fprintf(w, "  %-52s = %5.2f (of %.0f events/s; no goal)\n", "flow-r1 / composed with publish-r1 for the insert",
			med["flow-r1"].rate/withHTTP, withHTTP)
	}
	for _, a := range []string{"publish", "drain", "flow"} {
		if has(a+"-r1", a+"-r3") {
			goal(a+"-r3 / "+a+"-r1", med[a+"-r3"].rate/med[a+"-r1"].rate, 0.9, false)
		}
	}
	if has("drain-r1", "publish-r1") && med["publish-r1"].pgUS > 0 {
		goal("PostgreSQL CPU: a delivered (drain-r1) / a published", med["drain-r1"].pgUS/med["publish-r1"].pgUS, 3, true)
	}
	if has("flow-r1", "publish-r1") && med["publish-r1"].pgUS > 0 {
		goal("PostgreSQL CPU: published+delivered (flow-r1) / published", med["flow-r1"].pgUS/med["publish-r1"].pgUS, 4, true)
	}
	if has("drain-analyzed", "drain-r1") {
		goal("drain-analyzed / drain-r1", med["drain-analyzed"].rate/med["drain-r1"].rate, 0.8, false)
	}
	for _, a := range []string{"drain-history", "drain-backup"} {
		if has(a, "drain-r1") {
			fmt.Fprintf(w, "  %-52s = %5.2f\n", a+" / drain-r1", med[a].rate/med["drain-r1"].rate)
		}
	}
}

// benchPGCPU is the CPU time the PostgreSQL cluster whose postmaster is
// pid has used on this machine: the postmaster's and its live children's
// own, and its exited children's as the postmaster collected them. A child
// that exits between the listing and the reading of the postmaster is
// counted in neither, so a sample during which the processes changed is
// taken again; false when none held still or the cluster is not here.
func benchPGCPU(postmaster int) (time.Duration, bool) {
	list := func() []string {
		f, _ := filepath.Glob("/proc/[0-9]*/stat")
		return f
	}
	for range 10 {
		files := list()
		var ticks int64
		found := false
		for _, f := range files {
			raw, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			s := string(raw)
			pid, _ := strconv.Atoi(s[:max(strings.IndexByte(s, ' '), 0)])
			end := strings.LastIndexByte(s, ')')
			if end < 0 {
				continue
			}
			// After the name: state, ppid, ...; utime, stime, cutime,
			// cstime are fields 14-17 of the line.
			fields := strings.Fields(s[end+1:])
			if len(fields) < 15 {
				continue
			}
			if ppid, _ := strconv.Atoi(fields[1]); pid != postmaster && ppid != postmaster {
				continue
			}
			found = found || pid == postmaster
			for _, v := range fields[11:15] {
				n, _ := strconv.ParseInt(v, 10, 64)
				ticks += n
			}
		}
		if !found {
			return 0, false
		}
		if slices.Equal(files, list()) {
			return time.Duration(ticks) * (time.Second / 100), true // USER_HZ
		}
	}
	return 0, false
}

// benchPostmaster is the pid of the postmaster of d's cluster, 0 when it
// does not run on this machine: the parent of a backend serving us.
func benchPostmaster(b *testing.B, d Database) int {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, d.URL)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(ctx)
	var backend int
	if err := c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		b.Fatal(err)
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", backend))
	if err != nil {
		return 0 // another machine's
	}
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}

// benchPG measures d's cluster's CPU over fn and sets it per operation on
// r, when the cluster runs here and both samples held.
func benchPG(b *testing.B, d Database, r *benchResult, fn func()) {
	pm := benchPostmaster(b, d)
	pg0, ok0 := benchPGCPU(pm)
	fn()
	pg1, ok1 := benchPGCPU(pm)
	if pg := pg1 - pg0; ok0 && ok1 && pg > 0 && r.n > 0 {
		r.pgUS = benchPerOpUS(pg, r.n)
		b.ReportMetric(r.pgUS, "pg-cpu-us/op")
	}
}

// benchCeilingInsert is the ceiling of publish: PostgreSQL's rate of
// one-row transactions from 64 connections into the event log, as
// store/postgres's raw-autocommit-64 arm.
func benchCeilingInsert(b *testing.B) benchResult {
	d := testDatabase(b, b.TempDir())
	benchMigrate(b, d)
	ctx := context.Background()
	conns := make(chan *pgx.Conn, benchConcurrency)
	for k := range benchConcurrency {
		c, err := pgx.Connect(ctx, d.URL)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close(ctx)
		if k == 0 {
			if _, err := c.Exec(ctx, "CREATE SEQUENCE bench_seq"); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := c.Prepare(ctx, "ins", `INSERT INTO event_log (sequence_number, event_id, tipo, versao_schema,
			timestamp, origem, correlacao_id, agregado, payload, criado_em)
			VALUES (nextval('bench_seq'), $1, $2, '1.0.0', $3, 'app-jornada', $1, $4, $5, $3)`); err != nil {
			b.Fatal(err)
		}
		conns <- c
	}
	payloads := make([]string, b.N)
	for i := range payloads {
		payloads[i] = string(benchPayload(i))
	}
	var r benchResult
	benchPG(b, d, &r, func() {
		elapsed, cpu, lat := benchRun(b, b.N, benchConcurrency, func(_, i int) error {
			c := <-conns
			defer func() { conns <- c }()
			id := uuid.Must(uuid.NewV7()).String()
			_, err := c.Exec(ctx, "ins", id, benchTipo, time.Now().UnixMilli(), "jornada:"+id, payloads[i])
			return err
		})
		r = benchReport(b, "rows/s", elapsed, cpu, lat)
	})
	return r
}

// benchCeilingClaim is the ceiling of a delivery's database work: the
// outbox of one integrator filled as for drain, then emptied by bare
// claims of 32 rows (the oldest due first, SKIP LOCKED) with their bodies,
// each batch finished by one UPDATE, from 4 connections. No order per
// aggregate, no leases renewed, no attempts recorded.
func benchCeilingClaim(b *testing.B) benchResult {
	rc := benchDelNewReceiver()
	defer rc.srv.Close()
	d := testDatabase(b, b.TempDir())
	benchFillOutbox(b, d, rc, 0, b.N)
	ctx := context.Background()
	const workers, batch = 4, 32
	var conns []*pgx.Conn
	for range workers {
		c, err := pgx.Connect(ctx, d.URL)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close(ctx)
		conns = append(conns, c)
	}
	var done atomic.Int64
	var r benchResult
	benchPG(b, d, &r, func() {
		cpu0, start := benchCPU(), time.Now()
		var wg sync.WaitGroup
		for _, c := range conns {
			wg.Go(func() {
				for {
					rows, err := c.Query(ctx, `UPDATE outbox SET status = 'processando', worker = 'bench', lease_ate = $1
						WHERE id IN (SELECT id FROM outbox WHERE integrador_id = (SELECT id FROM integrator LIMIT 1)
							AND status = 'pendente' ORDER BY proxima_tentativa, id LIMIT $2 FOR UPDATE SKIP LOCKED)
						RETURNING id, (SELECT corpo FROM outbox_corpo WHERE outbox_id = outbox.id)`, time.Now().UnixMilli(), batch)
					if err != nil {
						b.Error(err)
						return
					}
					var ids []int64
					var id int64
					var corpo []byte
					if _, err := pgx.ForEachRow(rows, []any{&id, &corpo}, func() error { ids = append(ids, id); return nil }); err != nil {
						b.Error(err)
						return
					}
					if len(ids) == 0 {
						return
					}
					if _, err := c.Exec(ctx, `UPDATE outbox SET status = 'entregue', tentativas = tentativas + 1,
						worker = NULL, lease_ate = NULL, ultimo_status = 204, entregue_em = $2 WHERE id = ANY($1)`,
						ids, time.Now().UnixMilli()); err != nil {
						b.Error(err)
						return
					}
					done.Add(int64(len(ids)))
				}
			})
		}
		wg.Wait()
		elapsed, cpu := time.Since(start), benchCPU()-cpu0
		b.StopTimer()
		if got := done.Load(); got != int64(b.N) {
			b.Fatalf("the bare claims finished %d rows of %d", got, b.N)
		}
		r = benchResult{n: b.N, rate: float64(b.N) / elapsed.Seconds(), cpuUS: benchPerOpUS(cpu, b.N)}
		b.ReportMetric(r.rate, "rows/s")
		b.ReportMetric(r.cpuUS, "cpu-us/op")
	})
	return r
}

// benchMigrate opens d's database once, so that its tables exist.
func benchMigrate(b *testing.B, d Database) {
	b.Helper()
	db, _, err := d.open(context.Background(), cliLogger(), false)
	if err != nil {
		b.Fatal(err)
	}
	if err := db.Close(); err != nil {
		b.Fatal(err)
	}
}

// benchReplicas starts n replicas on d's database and returns their
// addresses and a stop that waits for each to shut down.
func benchReplicas(b *testing.B, d Database, n int) ([]string, func()) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var addrs []string
	var errcs []chan error
	stop := func() {
		cancel()
		for _, errc := range errcs {
			if err := <-errc; err != nil {
				b.Error(err)
			}
		}
	}
	for range n {
		m := &Main{Config: Config{Data: b.TempDir(), DB: d.URL, MasterKeyFile: d.MasterKeyFile,
			Addr: "127.0.0.1:0", InsecureCallbacks: true, LogLevel: "error"},
			Stdout: io.Discard, Ready: make(chan struct{})}
		errc := make(chan error, 1)
		errcs = append(errcs, errc)
		go func() { errc <- m.Run(ctx) }()
		select {
		case <-m.Ready:
			addrs = append(addrs, m.Addr)
		case err := <-errc:
			errc <- err
			stop()
			b.Fatalf("replica did not start: %v", err)
		}
	}
	return addrs, stop
}

func benchReplicaPublish(b *testing.B, n int) benchResult {
	dir := b.TempDir()
	d := testDatabase(b, dir)
	addrs, stop := benchReplicas(b, d, n)
	defer stop()
	publish := benchPublisher(b, dir, addrs)
	var r benchResult
	benchPG(b, d, &r, func() {
		elapsed, cpu, lat := benchRun(b, b.N, benchConcurrency, func(w, i int) error {
			return publish(w, i)
		})
		r = benchReport(b, "events/s", elapsed, cpu, lat)
	})
	return r
}

// drainOutbox is what the outbox holds before the drain arms fill it.
type drainOutbox int

const (
	drainFresh    drainOutbox = iota // nothing
	drainAnalyzed                    // nothing, with statistics taken while empty, as an idle outbox's are
	// drainHistory: drainHistoryRows rows delivered before, with their
	// attempts and the dead tuples their claims and finishes left.
	drainHistory
	// drainBackup: drainHistory's, with a REPEATABLE READ snapshot held
	// from before the history was delivered to the end of the drain, as a
	// pg_dump holds one: no dead tuple of the history or of the drain
	// itself can be vacuumed, the worst case for SKIP LOCKED's scans.
	drainBackup
)

// drainHistoryRows is how many delivered rows drainHistory starts with:
// ten times the benchmark's 4,000.
const drainHistoryRows = 40_000

// benchReplicaDrain fills the outbox, then times n replicas delivering it.
func benchReplicaDrain(b *testing.B, n int, before drainOutbox) benchResult {
	rc := benchDelNewReceiver()
	defer rc.srv.Close()
	d := testDatabase(b, b.TempDir())
	ctx := context.Background()
	from := 0
	switch before {
	case drainAnalyzed:
		benchMigrate(b, d)
		benchPGExec(b, d, "ANALYZE")
	case drainHistory, drainBackup:
		benchMigrate(b, d)
		if before == drainBackup {
			c, err := pgx.Connect(ctx, d.URL)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close(ctx)
			if _, err := c.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM outbox"); err != nil {
				b.Fatal(err)
			}
		}
		benchFillOutbox(b, d, rc, 0, drainHistoryRows)
		_, stop := benchReplicas(b, d, 1)
		rc.wait(b, drainHistoryRows)
		stop()
		rc.reset()
		from = drainHistoryRows
	}
	benchFillOutbox(b, d, rc, from, b.N)
	r := benchResult{n: b.N}
	var stop func()
	benchPG(b, d, &r, func() {
		cpu0 := benchCPU()
		b.StartTimer()
		_, stop = benchReplicas(b, d, n)
		rc.wait(b, b.N)
		b.StopTimer()
		cpu := benchCPU() - cpu0
		elapsed := rc.lastArrival().Sub(rc.firstArrival())
		r.rate, r.cpuUS = float64(b.N-1)/elapsed.Seconds(), benchPerOpUS(cpu, b.N)
	})
	stop()
	b.ReportMetric(r.rate, "deliveries/s")
	b.ReportMetric(r.cpuUS, "cpu-us/op")
	return r
}

// benchPGExec runs sql on d's database.
func benchPGExec(b *testing.B, d Database, sql string) {
	b.Helper()
	c, err := pgx.Connect(context.Background(), d.URL)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(context.Background(), sql); err != nil {
		b.Fatal(err)
	}
}

// benchPublisher publishes event i as worker w of 64 HTTP clients, spread
// over the replicas at addrs, with a produtor token of dir's database; the
// bodies are built before it returns.
func benchPublisher(b *testing.B, dir string, addrs []string) func(w, i int) error {
	token := mainToken(b, dir, app.PapelProdutor, "bench")
	client := benchClient()
	b.Cleanup(client.CloseIdleConnections)
	bodies := make([][]byte, b.N)
	for i := range bodies {
		bodies[i] = benchBody(i)
	}
	return func(w, i int) error {
		return benchPost(client, "http://"+addrs[w%len(addrs)]+"/api/events", token, bodies[i], http.StatusCreated)
	}
}

// benchReplicaFlow publishes b.N events for one integrator from 64 HTTP
// clients spread over n replicas while they deliver them: the rate is
// from the first publish to the last arrival.
func benchReplicaFlow(b *testing.B, n int) benchResult {
	rc := benchDelNewReceiver()
	defer rc.srv.Close()
	dir := b.TempDir()
	d := testDatabase(b, dir)
	benchFillOutbox(b, d, rc, 0, 0)
	addrs, stop := benchReplicas(b, d, n)
	defer stop()
	publish := benchPublisher(b, dir, addrs)
	r := benchResult{n: b.N}
	benchPG(b, d, &r, func() {
		cpu0, start := benchCPU(), time.Now()
		benchRun(b, b.N, benchConcurrency, func(w, i int) error {
			return publish(w, i)
		})
		b.StartTimer()
		rc.wait(b, b.N)
		b.StopTimer()
		r.rate = float64(b.N) / rc.lastArrival().Sub(start).Seconds()
		r.cpuUS = benchPerOpUS(benchCPU()-cpu0, b.N)
	})
	b.ReportMetric(r.rate, "deliveries/s")
	b.ReportMetric(r.cpuUS, "cpu-us/op")
	return r
}

// benchFillOutbox publishes events from to from+n-1, each in an aggregate of
// its own, for one integrator whose callback is rc (created when from is 0), through the service graph serve
// builds with its dispatcher left stopped: the outbox holds n pending
// deliveries when it returns. The timer is stopped.
func benchFillOutbox(b *testing.B, d Database, rc *benchDelReceiver, from, n int) {
	b.Helper()
	b.StopTimer()
	ctx := context.Background()
	db, key, err := d.open(ctx, cliLogger(), false)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := db.Close(); err != nil {
			b.Fatal(err)
		}
	}()
	svc, err := app.New(ctx, app.Deps{Store: db, MasterKey: key, Policy: callback.Policy{Insecure: true}, NoDispatch: true})
	if err != nil {
		b.Fatal(err)
	}
	if _, _, err := app.RegisterBuiltinTypes(ctx, svc.Registry); err != nil {
		b.Fatal(err)
	}
	if from == 0 {
		if _, err := svc.Integrators.Create(ctx, app.NewIntegrator{Nome: "bench-cad", CallbackURL: rc.srv.URL + "/geohub/webhook",
			HostsPermitidos: []string{"127.0.0.1"}, Eventos: []string{"jornada:*"}}); err != nil {
			b.Fatal(err)
		}
	}
	benchRun(b, n, benchConcurrency, func(_, i int) error {
		_, _, err := svc.Publisher.Publish(ctx, benchRequest(from+i))
		return err
	})
	b.StopTimer()
}
