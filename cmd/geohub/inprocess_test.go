package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"geohub/app"
	"geohub/web/heavy"
)

// runMain starts the server in this process on a fresh data directory,
// loopback callbacks allowed; stop ends it and returns what Run returned.
func runMain(tb testing.TB) (m *Main, dir string, stop func() error) {
	tb.Helper()
	dir = tb.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	m = &Main{Config: Config{Data: dir, DB: testDatabase(tb, dir).URL, MasterKeyFile: testDatabase(tb, dir).MasterKeyFile, Addr: "127.0.0.1:0", InsecureCallbacks: true, LogLevel: "error"},
		Stdout: io.Discard, Ready: make(chan struct{})}
	errc := make(chan error, 1)
	go func() { errc <- m.Run(ctx) }()
	select {
	case <-m.Ready:
	case err := <-errc:
		cancel()
		tb.Fatalf("server did not start: %v", err)
	}
	return m, dir, func() error { cancel(); return <-errc }
}

// mainToken creates an operator token on dir, as `geohub token create`
// does, and returns its secret.
func mainToken(tb testing.TB, dir string, papel app.Papel, nome string) string {
	tb.Helper()
	var out bytes.Buffer
	if err := createToken(context.Background(), &out, testDatabase(tb, dir), papel, nome); err != nil {
		tb.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// serve builds its edge through web.NewHandler, as the test kits do: one
// heavy-read limit of heavy.Total for the API and the console, and the
// flags' settings on both (web's TestNewHandlerSharesOneLimitAndOneProxyList
// checks a kit's edge the same way).
func TestServeBuildsTheEdgeTheKitsBuild(t *testing.T) {
	m, _, stop := runMain(t)
	defer stop()
	e := m.Edge
	if e == nil {
		t.Fatal("serve did not record its edge")
	}
	if e.API.Heavy != e.Console.Heavy || e.API.Heavy.Cap() != heavy.Total {
		t.Fatalf("serve's API and console limits: %p (%d) and %p (%d), want one of %d",
			e.API.Heavy, e.API.Heavy.Cap(), e.Console.Heavy, e.Console.Heavy.Cap(), heavy.Total)
	}
	if !e.Console.Insecure {
		t.Fatal("--insecure-callbacks did not reach the console")
	}
}

// The demo simulator's info lines go out at debug, and are counted for the
// minute's summary; its warnings stay warnings.
func TestTheDemoSimulatorLogsQuietly(t *testing.T) {
	var buf bytes.Buffer
	q := &quietLog{next: slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}), count: new(atomic.Int64)}
	log := slog.New(q).With("componente", "simulador")
	log.Info("dispatched", "recurso", "UR-1")
	log.Warn("scenario failed")
	if out := buf.String(); strings.Contains(out, "dispatched") || !strings.Contains(out, "scenario failed") {
		t.Errorf("at info level the server logged:\n%s", out)
	}
	if n := q.count.Load(); n != 2 {
		t.Errorf("%d records counted, want 2", n)
	}
}
