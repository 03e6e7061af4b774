package main

import (
	"bytes"
	"context"
	"io"
	"strings"
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
