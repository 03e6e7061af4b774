package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"geohub/app"
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
