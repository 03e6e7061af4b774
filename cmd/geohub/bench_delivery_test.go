package main

// BenchmarkDelivery measures webhook delivery (SPEC 6.4, 11). One run prints
// every figure:
//
//	go test -run '^$' -bench Delivery -benchtime 3s ./cmd/geohub
//
// Sub-benchmarks:
//
//	raw-signed-post  benchDelSenders goroutines each signing a ~400 B envelope
//	                 (fresh timestamp, app.Sign, the X-Geohub-* headers) and
//	                 POSTing it to a bare 204 receiver: the ceiling
//	deliveries       the real server (Main) with one integrator on a loopback
//	                 204 receiver; 64 HTTP publishers publish b.N jornada:iniciada
//	                 events as fast as they can; rate = b.N / (first publish →
//	                 last arrival)
//	drain            the dispatcher alone: b.N deliveries already in the outbox
//	                 when the real server starts; rate = b.N / (first → last
//	                 arrival), with no publishing to share the CPU with: the
//	                 sustained rate the delivery target is read from
//	latency-100      the same server, publishing at a steady 100 events/s for
//	                 max(b.N, 300) events; publish start → arrival at the
//	                 receiver (matched by X-Geohub-Evento-Id), p50/p99
//	one-aggregate    deliveries, with every event in one aggregate: one
//	                 request at a time (SPEC 6.4), each after the previous
//	                 one's outcome is committed
//	one-aggregate-100  latency-100 with every event in one aggregate
//	session-deliveries, session-latency-100  deliveries and latency-100 with
//	                 the integrator receiving over a session (SPEC 8d): a
//	                 websocket client on loopback that notes each message's
//	                 arrival and acks it at once, as the 204 receiver does
//
// A summary gives the ratios against the targets. It only reports: nothing
// here asserts on timing.

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"

	"geohub/app"
	"geohub/store"
	"geohub/store/storetest"
)

// benchDelSenders is the dispatcher's default MaxInFlight (app.defaultInFlight):
// the most requests it ever has on the wire at once.
const benchDelSenders = 32

// benchDelRate is the steady publish rate of latency-100, events per second.
const benchDelRate = 100

// benchDelMinPaced is the fewest events latency-100 publishes (3 s at 100/s).
const benchDelMinPaced = 300

// benchDelStall is how long the wait for arrivals tolerates no progress.
const benchDelStall = 30 * time.Second

// benchDelResult adds the delivery figures to a benchResult.
type benchDelResult struct {
	benchResult
	publishRate float64 // deliveries: publishes acknowledged per second
	tail        float64 // deliveries: ms from the last publish ack to the last arrival
	pubP99      float64 // publish (HTTP 201) latency p99, ms
	pubP50      float64 // latency-100: publish (HTTP 201) latency p50, ms
	bodyLen     int64   // deliveries: size of a delivered body, bytes
}

func BenchmarkDelivery(b *testing.B) {
	runs := map[string][]benchDelResult{}
	run := func(name string, fn func(b *testing.B) benchDelResult) {
		b.Run(name, func(b *testing.B) {
			// testing sets GOMAXPROCS before each sub-benchmark; the
			// server's settings go on top, for the baselines too.
			defer tuneRuntime()()
			keepRun(runs, name, b.N, fn(b))
		})
	}
	run("raw-signed-post", benchDelRawSignedPost)
	run("raw-insert", func(b *testing.B) benchDelResult { return benchDelResult{benchResult: benchRawBatchedInsert(b)} })
	run("raw-claim", benchDelRawClaim)
	run("deliveries", func(b *testing.B) benchDelResult { return benchDelDeliveries(b, benchDelOwnAggregate, false) })
	run("drain", benchDelDrain)
	run("latency-100", func(b *testing.B) benchDelResult { return benchDelLatency(b, benchDelOwnAggregate, false) })
	run("one-aggregate", func(b *testing.B) benchDelResult { return benchDelDeliveries(b, benchDelOneAggregate, false) })
	run("one-aggregate-100", func(b *testing.B) benchDelResult { return benchDelLatency(b, benchDelOneAggregate, false) })
	run("session-deliveries", func(b *testing.B) benchDelResult { return benchDelDeliveries(b, benchDelOwnAggregate, true) })
	run("session-latency-100", func(b *testing.B) benchDelResult { return benchDelLatency(b, benchDelOwnAggregate, true) })
	benchDelSummary(os.Stdout, medianRuns(runs, func(name string, r benchDelResult) float64 {
		if strings.HasSuffix(name, "-100") {
			return r.p99 // paced at 100/s: its target is the latency
		}
		return r.rate
	}))
}

func benchDelSummary(w io.Writer, r map[string]benchDelResult) {
	fmt.Fprintf(w, "\ndelivery summary (envelope %d B, %d raw senders = dispatcher MaxInFlight, %d HTTP publishers, "+
		"one integrator on a loopback 204 receiver):\n", len(benchDelEnvelope(0, uuid.NewString())), benchDelSenders,
		benchConcurrency)
	if res, ok := r["raw-signed-post"]; ok {
		fmt.Fprintf(w, "  %-16s %8.0f req/s         %6.0f cpu-us/op  (N=%d)  p50 %.2f ms  p99 %.2f ms\n",
			"raw-signed-post", res.rate, res.cpuUS, res.n, res.p50, res.p99)
	}
	if res, ok := r["deliveries"]; ok {
		fmt.Fprintf(w, "  %-16s %8.0f deliveries/s  %6.0f cpu-us/op  (N=%d)  publish %.0f events/s (p99 %.2f ms), "+
			"last publish → last arrival %.0f ms, delivered body %d B\n",
			"deliveries", res.rate, res.cpuUS, res.n, res.publishRate, res.pubP99, res.tail, res.bodyLen)
	}
	if res, ok := r["drain"]; ok {
		fmt.Fprintf(w, "  %-16s %8.0f deliveries/s  %6.0f cpu-us/op  (N=%d)  outbox filled before start, no publishing\n",
			"drain", res.rate, res.cpuUS, res.n)
	}
	if res, ok := r["latency-100"]; ok {
		fmt.Fprintf(w, "  %-16s %8.0f events/s      %6.0f cpu-us/op  (N=%d)  publish → arrival p50 %.2f ms  p95 %.2f ms  p99 %.2f ms "+
			"(publish → 201 alone: p50 %.2f ms  p99 %.2f ms)\n",
			"latency-100", res.rate, res.cpuUS, res.n, res.p50, res.p95, res.p99, res.pubP50, res.pubP99)
	}
	verdict := func(ok bool) string {
		if ok {
			return "MET"
		}
		return "MISSED"
	}
	if d, ok := r["drain"]; ok {
		if raw, ok := r["raw-signed-post"]; ok && raw.rate > 0 {
			q := d.rate / raw.rate
			fmt.Fprintf(w, "  drain (sustained deliveries) / raw-signed-post = %.2f (target >= 0.30) %s\n", q, verdict(q >= 0.30))
		}
	}
	if d, ok := r["deliveries"]; ok {
		if raw, ok := r["raw-signed-post"]; ok && raw.rate > 0 {
			fmt.Fprintf(w, "  deliveries while publishing / raw-signed-post = %.2f (bounded by HTTP publish on the same cores; no target)\n",
				d.rate/raw.rate)
		}
		ins, claim, post := r["raw-insert"], r["raw-claim"], r["raw-signed-post"]
		if ins.rate > 0 && claim.rate > 0 && post.rate > 0 {
			composed := 1 / (1/ins.rate + 1/claim.rate + 1/post.rate)
			q := d.rate / composed
			fmt.Fprintf(w, "  composed ceiling (raw-insert %.0f, raw-claim %.0f, raw-signed-post %.0f): %.0f events/s\n",
				ins.rate, claim.rate, post.rate, composed)
			fmt.Fprintf(w, "  deliveries (publish+delivery) / composed ceiling = %.2f (SPEC 12 goal >= 0.60) %s\n", q, verdict(q >= 0.60))
		}
	}
	if res, ok := r["one-aggregate"]; ok {
		fmt.Fprintf(w, "  %-16s %8.0f deliveries/s  %6.0f cpu-us/op  (N=%d)  every event in one aggregate: one request at a time\n",
			"one-aggregate", res.rate, res.cpuUS, res.n)
	}
	if res, ok := r["one-aggregate-100"]; ok {
		fmt.Fprintf(w, "  %-16s %8.0f events/s      %6.0f cpu-us/op  (N=%d)  publish → arrival p50 %.2f ms  p95 %.2f ms  p99 %.2f ms\n",
			"one-aggregate-100", res.rate, res.cpuUS, res.n, res.p50, res.p95, res.p99)
	}
	if l, ok := r["latency-100"]; ok {
		fmt.Fprintf(w, "  latency-100 p99 = %.2f ms (target < 20 ms) %s\n", l.p99, verdict(l.p99 < 20))
	}
	if l, ok := r["one-aggregate-100"]; ok {
		fmt.Fprintf(w, "  one-aggregate-100 p99 = %.2f ms (no target; reported)\n", l.p99)
	}
	if res, ok := r["session-deliveries"]; ok {
		fmt.Fprintf(w, "  %-19s %8.0f deliveries/s  %6.0f cpu-us/op  (N=%d)  publish %.0f events/s; callback arm %.0f deliveries/s\n",
			"session-deliveries", res.rate, res.cpuUS, res.n, res.publishRate, r["deliveries"].rate)
	}
	if res, ok := r["session-latency-100"]; ok {
		fmt.Fprintf(w, "  %-19s %8.0f events/s      %6.0f cpu-us/op  (N=%d)  publish → arrival p50 %.2f ms  p99 %.2f ms; callback arm p99 %.2f ms\n",
			"session-latency-100", res.rate, res.cpuUS, res.n, res.p50, res.p99, r["latency-100"].p99)
	}
	fmt.Fprintln(w)
}

// benchDelEnvelope is the webhook body a publish of benchRequest(i) produces:
// compact JSON, keys sorted, the full payload (~400 B).
func benchDelEnvelope(i int, eventID string) []byte {
	var payload map[string]any
	if err := json.Unmarshal(benchPayload(i), &payload); err != nil {
		panic(err)
	}
	body, err := json.Marshal(map[string]any{
		"id":         eventID,
		"ocorridoEm": time.Now().UTC().Format(app.EnvelopeTime),
		"origem":     map[string]any{"plugin": "app-jornada", "versao": app.DefaultVersao},
		"payload":    payload,
		"tipo":       benchTipo,
	})
	if err != nil {
		panic(err)
	}
	return body
}

// benchDelSign sets the headers app.Dispatcher sets on a delivery, signing
// body with a fresh timestamp.
func benchDelSign(h http.Header, secret []byte, eventID, agregado string, seq int64, body []byte) {
	ts := app.Timestamp(time.Now())
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "Geohub/"+version)
	h.Set("X-Geohub-Evento-Id", eventID)
	h.Set("X-Geohub-Timestamp", strconv.FormatInt(ts, 10))
	h.Set("X-Geohub-Assinatura", app.Sign(secret, ts, body))
	h.Set("X-Geohub-Agregado", agregado)
	h.Set("X-Geohub-Sequencia", strconv.FormatInt(seq, 10))
	h.Set("X-Geohub-Entrega-Id", uuid.Must(uuid.NewV7()).String())
	h.Set("X-Geohub-Tentativa", "1")
}

func benchDelRawSignedPost(b *testing.B) benchDelResult {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	client := benchClient()
	defer client.CloseIdleConnections()
	u := srv.URL + "/webhook"
	secret := []byte("whsec_0123456789abcdefghijklmnopqrstuv")
	// Bodies are built before timing: the dispatcher reads them ready-made
	// from the outbox.
	bodies := make([][]byte, 256)
	ids := make([]string, len(bodies))
	for k := range bodies {
		ids[k] = uuid.Must(uuid.NewV7()).String()
		bodies[k] = benchDelEnvelope(k, ids[k])
	}

	elapsed, cpu, lat := benchRun(b, b.N, benchDelSenders, func(_, i int) error {
		k := i % len(bodies)
		req, err := http.NewRequest(http.MethodPost, u, bytes.NewReader(bodies[k]))
		if err != nil {
			return err
		}
		benchDelSign(req.Header, secret, ids[k], "jornada:"+benchJornadaID(k), 1, bodies[k])
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			return fmt.Errorf("POST %s: status %d", u, resp.StatusCode)
		}
		return nil
	})
	return benchDelResult{benchResult: benchReport(b, "req/s", elapsed, cpu, lat)}
}

// benchDelReceiver is a CAD receiver that answers 204 and notes when each
// event first arrived.
type benchDelReceiver struct {
	srv      *httptest.Server
	count    atomic.Int64 // distinct events arrived
	dups     atomic.Int64
	bodyLen  atomic.Int64 // size of the last body received
	mu       sync.Mutex
	arrivals map[string]time.Time
}

func benchDelNewReceiver() *benchDelReceiver {
	rc := &benchDelReceiver{arrivals: map[string]time.Time{}}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		size, _ := io.Copy(io.Discard, r.Body)
		rc.arrive(r.Header.Get("X-Geohub-Evento-Id"), size, time.Now())
		w.WriteHeader(http.StatusNoContent)
	}))
	return rc
}

// arrive notes that event id arrived at `at` with a body of size bytes.
func (rc *benchDelReceiver) arrive(id string, size int64, at time.Time) {
	rc.bodyLen.Store(size)
	rc.mu.Lock()
	_, seen := rc.arrivals[id]
	if !seen {
		rc.arrivals[id] = at
	}
	rc.mu.Unlock()
	if seen {
		rc.dups.Add(1)
	} else {
		rc.count.Add(1)
	}
}

// session receives the integrator's deliveries over GET /api/sessao until
// the connection closes: each message noted as an arrival and acked at
// once, as the 204 receiver answers.
func (rc *benchDelReceiver) session(b *testing.B, addr, key string) (stop func()) {
	conn, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/api/sessao", http.Header{"Authorization": {"Bearer " + key}})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			_, msg, err := conn.ReadMessage()
			if err != nil {
				return
			}
			at := time.Now()
			var m map[string]string
			if err := json.Unmarshal(msg, &m); err != nil {
				return
			}
			rc.arrive(m["x-geohub-evento-id"], int64(len(m["corpo"])), at)
			ack, _ := json.Marshal(map[string]string{"ack": m["x-geohub-entrega-id"]})
			if err := conn.WriteMessage(websocket.TextMessage, ack); err != nil {
				return
			}
		}
	}()
	return func() { conn.Close(); <-done }
}

// wait blocks until n distinct events arrived, failing the benchmark when
// arrivals stop for benchDelStall.
func (rc *benchDelReceiver) wait(b *testing.B, n int) {
	// Arrival times come from the receiver, not from this poll.
	for c := rc.count.Load(); c < int64(n); c = rc.count.Load() {
		if !storetest.Poll(benchDelStall, func() bool { return rc.count.Load() != c }) {
			b.Fatalf("only %d of %d events arrived at the receiver (no progress for %s)", c, n, benchDelStall)
		}
	}
}

// reset forgets every arrival.
func (rc *benchDelReceiver) reset() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.arrivals = map[string]time.Time{}
	rc.count.Store(0)
	rc.dups.Store(0)
}

// lastArrival is the latest first-arrival time.
func (rc *benchDelReceiver) lastArrival() time.Time {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var last time.Time
	for _, t := range rc.arrivals {
		if t.After(last) {
			last = t
		}
	}
	return last
}

// benchDelEnv is a running server with one integrator whose callback is rc.
type benchDelEnv struct {
	m        *Main
	rc       *benchDelReceiver
	client   *http.Client
	producer string // produtor token
	stop     func()
}

// benchDelStart starts the server with one integrator receiving at rc:
// over a session when session is set, else at its callback.
func benchDelStart(b *testing.B, session bool) *benchDelEnv {
	m, dir, stopMain := runMain(b)
	rc := benchDelNewReceiver()
	env := &benchDelEnv{m: m, rc: rc, client: benchClient()}
	env.stop = func() {
		env.client.CloseIdleConnections()
		if err := stopMain(); err != nil {
			b.Error(err)
		}
		rc.srv.Close()
	}
	admin := mainToken(b, dir, app.PapelAdmin, "bench-admin")
	env.producer = mainToken(b, dir, app.PapelProdutor, "bench-produtor")
	in := app.NewIntegrator{Nome: "bench-cad", CallbackURL: rc.srv.URL + "/geohub/webhook",
		HostsPermitidos: []string{"127.0.0.1"}, Eventos: []string{"jornada:*"}}
	if session {
		in = app.NewIntegrator{Nome: "bench-cad", Entrega: app.EntregaSessao, Eventos: []string{"jornada:*"}}
	}
	body, _ := json.Marshal(in)
	created, err := benchPostRead(env.client, "http://"+m.Addr+"/api/integradores", admin, body, http.StatusCreated)
	if err != nil {
		env.stop()
		b.Fatal(err)
	}
	if session {
		var c app.CreatedIntegrator
		if err := json.Unmarshal(created, &c); err != nil {
			env.stop()
			b.Fatal(err)
		}
		stopSession, stopAll := rc.session(b, m.Addr, c.APIKey), env.stop
		env.stop = func() { stopSession(); stopAll() }
	}
	return env
}

// benchDelOwnAggregate gives operation i an aggregate of its own (its
// jornada); benchDelOneAggregate puts every operation in the same one.
func benchDelOwnAggregate(i int) string { return benchJornadaID(i) }
func benchDelOneAggregate(int) string   { return "jornada:" + benchJornadaID(0) }

// benchDelBody is the POST /api/events body of operation i in aggregate agg(i).
func benchDelBody(b *testing.B, i int, eventID string, agg func(int) string) []byte {
	req := benchRequest(i)
	req.EventID, req.Agregado = eventID, agg(i)
	body, err := json.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	return body
}

func benchDelDeliveries(b *testing.B, agg func(int) string, session bool) benchDelResult {
	env := benchDelStart(b, session)
	defer env.stop()
	u := "http://" + env.m.Addr + "/api/events"
	bodies := make([][]byte, b.N)
	for i := range bodies {
		bodies[i] = benchDelBody(b, i, "", agg)
	}

	cpu0, start := benchCPU(), time.Now()
	pubElapsed, _, pubLat := benchRun(b, b.N, benchConcurrency, func(_, i int) error {
		return benchPost(env.client, u, env.producer, bodies[i], http.StatusCreated)
	})
	pubDone := time.Now()
	b.StartTimer() // benchRun stopped it after the last publish: the wait for arrivals counts too
	env.rc.wait(b, b.N)
	b.StopTimer()
	last := env.rc.lastArrival()
	elapsed, cpu := last.Sub(start), benchCPU()-cpu0

	r := benchDelResult{benchResult: benchResult{n: b.N, rate: float64(b.N) / elapsed.Seconds(),
		cpuUS: benchPerOpUS(cpu, b.N)}}
	r.publishRate = float64(b.N) / pubElapsed.Seconds()
	r.tail = float64(max(last.Sub(pubDone), 0)) / float64(time.Millisecond)
	pub := benchReportQuiet(pubLat)
	r.pubP99 = pub.p99
	b.ReportMetric(r.rate, "deliveries/s")
	b.ReportMetric(r.cpuUS, "cpu-us/op")
	b.ReportMetric(r.publishRate, "publish/s")
	b.ReportMetric(r.tail, "tail-ms")
	r.bodyLen = env.rc.bodyLen.Load()
	if d := env.rc.dups.Load(); d > 0 {
		b.ReportMetric(float64(d), "duplicates")
	}
	return r
}

// benchReportQuiet computes percentiles without reporting them.
func benchReportQuiet(lat []time.Duration) benchResult {
	s := slices.Clone(lat)
	slices.Sort(s)
	pct := func(p float64) float64 {
		return float64(s[min(len(s)-1, int(p*float64(len(s))))]) / float64(time.Millisecond)
	}
	return benchResult{n: len(s), p50: pct(0.50), p95: pct(0.95), p99: pct(0.99)}
}

func benchDelLatency(b *testing.B, agg func(int) string, session bool) benchDelResult {
	env := benchDelStart(b, session)
	defer env.stop()
	u := "http://" + env.m.Addr + "/api/events"
	n := max(b.N, benchDelMinPaced)
	// Warm-up: one delivery opens the publisher's and the dispatcher's
	// connections, so the figures are the steady state.
	if err := benchPost(env.client, u, env.producer, benchDelBody(b, n, "", agg), http.StatusCreated); err != nil {
		b.Fatal(err)
	}
	env.rc.wait(b, 1)

	ids := make([]string, n)
	bodies := make([][]byte, n)
	for i := range n {
		ids[i] = uuid.Must(uuid.NewV7()).String()
		bodies[i] = benchDelBody(b, i, ids[i], agg)
	}
	starts := make([]time.Time, n)
	acked := make([]time.Duration, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / benchDelRate)
	defer tick.Stop()

	b.ResetTimer()
	cpu0, begin := benchCPU(), time.Now()
	for i := range n {
		<-tick.C
		wg.Add(1)
		go func() {
			defer wg.Done()
			starts[i] = time.Now()
			if err := benchPost(env.client, u, env.producer, bodies[i], http.StatusCreated); err != nil {
				errs <- err
			}
			acked[i] = time.Since(starts[i])
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	env.rc.wait(b, n+1)
	elapsed, cpu := time.Since(begin), benchCPU()-cpu0
	b.StopTimer()

	lat := make([]time.Duration, n)
	env.rc.mu.Lock()
	for i, id := range ids {
		lat[i] = env.rc.arrivals[id].Sub(starts[i])
	}
	env.rc.mu.Unlock()
	r := benchDelResult{benchResult: benchReport(b, "events/s", elapsed, cpu, lat)}
	pub := benchReportQuiet(acked)
	r.pubP50, r.pubP99 = pub.p50, pub.p99
	b.ReportMetric(r.pubP99, "publish-p99-ms")
	return r
}

// benchDelFirstArrival is the earliest first-arrival time.
func (rc *benchDelReceiver) firstArrival() time.Time {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var first time.Time
	for _, t := range rc.arrivals {
		if first.IsZero() || t.Before(first) {
			first = t
		}
	}
	return first
}

// benchDelRawClaim is the ceiling of a delivery's database work on
// SQLite: the outbox filled as for drain, then emptied by bare claims of
// 32 rows (the oldest due first, with their bodies) and one finishing
// UPDATE a batch, each its own durable transaction on one connection. No
// order per aggregate, no leases, no attempts recorded.
func benchDelRawClaim(b *testing.B) benchDelResult {
	rc := benchDelNewReceiver()
	defer rc.srv.Close()
	dir := b.TempDir()
	benchFillOutbox(b, testDatabase(b, dir), rc, 0, b.N)
	db, err := sql.Open(store.DriverName, store.DSN(filepath.Join(dir, store.FileName), false))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	const batch = 32
	ids := make([]any, 0, batch)
	cpu0, start := benchCPU(), time.Now()
	b.StartTimer()
	for done := 0; done < b.N; done += len(ids) {
		rows, err := db.Query(`UPDATE outbox SET status = 'processando', worker = 'bench', lease_ate = ?
			WHERE id IN (SELECT id FROM outbox WHERE integrador_id = (SELECT id FROM integrator LIMIT 1)
				AND status = 'pendente' ORDER BY proxima_tentativa, id LIMIT ?)
			RETURNING id, (SELECT corpo FROM outbox_corpo WHERE outbox_id = outbox.id)`, time.Now().UnixMilli(), batch)
		if err != nil {
			b.Fatal(err)
		}
		ids = ids[:0]
		for rows.Next() {
			var id int64
			var corpo []byte
			if err := rows.Scan(&id, &corpo); err != nil {
				b.Fatal(err)
			}
			ids = append(ids, id)
		}
		if err := rows.Err(); err != nil {
			b.Fatal(err)
		}
		if len(ids) == 0 {
			b.Fatalf("the bare claims found %d rows of %d", done, b.N)
		}
		if _, err := db.Exec(`UPDATE outbox SET status = 'entregue', tentativas = tentativas + 1, worker = NULL,
			lease_ate = NULL, ultimo_status = 204, entregue_em = ? WHERE id IN (?`+strings.Repeat(", ?", len(ids)-1)+`)`,
			append([]any{time.Now().UnixMilli()}, ids...)...); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	elapsed, cpu := time.Since(start), benchCPU()-cpu0
	r := benchDelResult{benchResult: benchResult{n: b.N, rate: float64(b.N) / elapsed.Seconds(), cpuUS: benchPerOpUS(cpu, b.N)}}
	b.ReportMetric(r.rate, "rows/s")
	b.ReportMetric(r.cpuUS, "cpu-us/op")
	return r
}

// benchDelDrain measures the dispatcher's own capacity: the outbox is
// filled before the server starts (by the same publisher, in-process), so
// the server only delivers.
func benchDelDrain(b *testing.B) benchDelResult {
	rc := benchDelNewReceiver()
	defer rc.srv.Close()
	dir := b.TempDir()
	ctx := context.Background()
	benchFillOutbox(b, testDatabase(b, dir), rc, 0, b.N)

	runCtx, cancel := context.WithCancel(ctx)
	m := &Main{Config: Config{Data: dir, DB: testDatabase(b, dir).URL, MasterKeyFile: testDatabase(b, dir).MasterKeyFile, Addr: "127.0.0.1:0", InsecureCallbacks: true, LogLevel: "error"},
		Stdout: io.Discard, Ready: make(chan struct{})}
	errc := make(chan error, 1)
	cpu0 := benchCPU()
	b.StartTimer()
	go func() { errc <- m.Run(runCtx) }()
	rc.wait(b, b.N)
	b.StopTimer()
	cpu := benchCPU() - cpu0
	cancel()
	if err := <-errc; err != nil {
		b.Error(err)
	}
	elapsed := rc.lastArrival().Sub(rc.firstArrival())
	r := benchDelResult{benchResult: benchResult{n: b.N, rate: float64(b.N-1) / elapsed.Seconds(), cpuUS: benchPerOpUS(cpu, b.N)}}
	b.ReportMetric(r.rate, "deliveries/s")
	b.ReportMetric(r.cpuUS, "cpu-us/op")
	return r
}
