//go:build race

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// raceBuild: this test binary runs under the race detector, so the server
// the end-to-end tests start is built with it too.
const raceBuild = true

// TestMain fails the run when a server the tests started reported a data
// race. The tests kill their servers, so a race cannot show in an exit
// status: each child writes its reports under GORACE's log_path instead,
// and they are read here once every test is done.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "geohub-race-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("GORACE", "log_path="+filepath.Join(dir, "report"))
	code := m.Run()
	reports, _ := filepath.Glob(filepath.Join(dir, "report*"))
	for _, r := range reports {
		b, _ := os.ReadFile(r)
		fmt.Fprintf(os.Stderr, "a geohub server started by the tests reported a data race (%s):\n%s\n", r, b)
		code = 1
	}
	os.RemoveAll(dir)
	os.Exit(code)
}
