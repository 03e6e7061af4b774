package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestJavaScriptSessionClient runs the suite of the JavaScript reference
// session client (receiver/js/sessao.js, SPEC 8d) against the real server:
// the client and the reference Receptor behind it, over GET /api/sessao,
// with deliveries published through the API and read back from
// /api/entregas. The suite's own part without a server runs too; the one
// against the server is the point, so a skip of it fails here.
//
// It stays serial: the suite proves that an unanswered delivery holds its
// aggregate within the 5 s before it times out.
func TestJavaScriptSessionClient(t *testing.T) {
	node, err := exec.LookPath("node")
	switch {
	case err == nil:
	case os.Getenv("GEOHUB_REQUIRE_NODE") == "1":
		t.Fatal("node is required (GEOHUB_REQUIRE_NODE=1) but not found")
	default:
		t.Skip("node not found: install nodejs to run the JavaScript session client against the server")
	}
	suite, err := filepath.Abs(filepath.Join("..", "..", "receiver", "js", "sessao.test.js"))
	if err != nil {
		t.Fatal(err)
	}

	data := t.TempDir()
	// The suite's 4001 case registers a callback integrator on loopback.
	srv := startServer(t, data, "--insecure-callbacks")
	token := lastLine(runCLI(t, "token", "create", "--papel", "admin", "--data", data))

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := append(jsWebSocketFlags(t, node), "--test", "--test-reporter=tap", suite)
	cmd := exec.CommandContext(ctx, node, args...)
	cmd.Env = append(os.Environ(), "GEOHUB_SESSAO_URL=http://"+srv.addr, "GEOHUB_SESSAO_TOKEN="+token)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node %s: %v after %s\n%s\nserver log:\n%s", strings.Join(args, " "), err,
			time.Since(start).Round(time.Millisecond), out, srv.out)
	}
	if strings.Contains(string(out), "# SKIP") {
		t.Fatalf("the suite skipped its part against the server:\n%s", out)
	}
	t.Logf("node --test %s: passed in %s", filepath.Base(suite), time.Since(start).Round(time.Millisecond))
}

// jsWebSocketFlags are the node flags that give it globalThis.WebSocket:
// none from Node 22 on, --experimental-websocket on Node 20.
func jsWebSocketFlags(t *testing.T, node string) []string {
	t.Helper()
	if exec.Command(node, "-e", "process.exit(typeof WebSocket === 'function' ? 0 : 1)").Run() == nil {
		return nil
	}
	return []string{"--experimental-websocket"}
}
