package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"testing"

	"geohub/app"
	"geohub/app/callback"
	"geohub/store/storetest"
)

// BenchmarkReplicas is SPEC 12's benchmark: the publish and delivery arms
// on PostgreSQL with 1, 2 and 3 replicas of `geohub serve` on one database
// (run in this process, each its own Main: its own pools, writer,
// dispatcher and HTTP server). PostgreSQL's own insert rate, the ceiling,
// is store/postgres's BenchmarkAppend raw-* arms. It needs
// GEOHUB_TEST_BACKEND=postgres and GEOHUB_TEST_POSTGRES:
//
//	GEOHUB_TEST_BACKEND=postgres go test -run '^$' -bench Replicas -benchtime 3000x ./cmd/geohub/
//
// publish-rN spreads 64 HTTP clients over the N replicas, each event in
// an aggregate of its own and no integrator subscribed; drain-rN fills the
// outbox of one integrator before the replicas start, so they only
// deliver, and counts from the first arrival to the last.
func BenchmarkReplicas(b *testing.B) {
	if storetest.Backend() != "postgres" {
		b.Skip("replicas share one PostgreSQL database: set GEOHUB_TEST_BACKEND=postgres")
	}
	runs := map[string][]benchResult{}
	for _, n := range []int{1, 2, 3} {
		for _, arm := range []struct {
			name string
			fn   func(*testing.B, int) benchResult
		}{{"publish", benchReplicaPublish}, {"drain", benchReplicaDrain}} {
			name := fmt.Sprintf("%s-r%d", arm.name, n)
			b.Run(name, func(b *testing.B) {
				defer tuneRuntime()()
				keepRun(runs, name, b.N, arm.fn(b, n))
			})
		}
	}
	med := medianRuns(runs, func(_ string, r benchResult) float64 { return r.rate })
	fmt.Fprintln(os.Stdout, "\nsummary (PostgreSQL, synchronous_commit=on; replicas in one process on this machine):")
	for _, name := range []string{"publish-r1", "publish-r2", "publish-r3", "drain-r1", "drain-r2", "drain-r3"} {
		if r, ok := med[name]; ok {
			fmt.Fprintf(os.Stdout, "  %-11s %8.0f ops/s  %6.0f cpu-us/op  (N=%d)\n", name, r.rate, r.cpuUS, r.n)
		}
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
	token := mainToken(b, dir, app.PapelProdutor, "bench")
	client := benchClient()
	defer client.CloseIdleConnections()
	bodies := make([][]byte, b.N)
	for i := range bodies {
		bodies[i] = benchBody(i)
	}
	elapsed, cpu, lat := benchRun(b, b.N, benchConcurrency, func(w, i int) error {
		return benchPost(client, "http://"+addrs[w%n]+"/api/events", token, bodies[i], http.StatusCreated)
	})
	return benchReport(b, "events/s", elapsed, cpu, lat)
}

func benchReplicaDrain(b *testing.B, n int) benchResult {
	rc := benchDelNewReceiver()
	defer rc.srv.Close()
	d := testDatabase(b, b.TempDir())
	benchFillOutbox(b, d, rc, b.N)
	cpu0 := benchCPU()
	b.StartTimer()
	_, stop := benchReplicas(b, d, n)
	rc.wait(b, b.N)
	b.StopTimer()
	cpu := benchCPU() - cpu0
	stop()
	elapsed := rc.lastArrival().Sub(rc.firstArrival())
	r := benchResult{n: b.N, rate: float64(b.N-1) / elapsed.Seconds(), cpuUS: benchPerOpUS(cpu, b.N)}
	b.ReportMetric(r.rate, "deliveries/s")
	b.ReportMetric(r.cpuUS, "cpu-us/op")
	return r
}

// benchFillOutbox publishes n events, each in an aggregate of its own, for
// one integrator whose callback is rc, through the service graph serve
// builds with its dispatcher left stopped: the outbox holds n pending
// deliveries when it returns. The timer is stopped.
func benchFillOutbox(b *testing.B, d Database, rc *benchDelReceiver, n int) {
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
	if _, err := svc.Integrators.Create(ctx, app.NewIntegrator{Nome: "bench-cad", CallbackURL: rc.srv.URL + "/geohub/webhook",
		HostsPermitidos: []string{"127.0.0.1"}, Eventos: []string{"jornada:*"}}); err != nil {
		b.Fatal(err)
	}
	benchRun(b, n, benchConcurrency, func(_, i int) error {
		_, _, err := svc.Publisher.Publish(ctx, benchRequest(i))
		return err
	})
	b.StopTimer()
}
