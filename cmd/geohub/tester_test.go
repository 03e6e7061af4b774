package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"geohub/app"
)

// TestReceiverTesterCommand runs `geohub receptor testar` as a CAD vendor
// would, before any cadastro: the guide's code (seed 000 as corrected), the
// JavaScript reference receiver and the Go SDK pass it; a receiver that
// answers 204 to everything fails it, on recusa-assinatura, with exit
// status 1; and the secret is refused on the command line.
func TestReceiverTesterCommand(t *testing.T) {
	alongside(t)
	bin, err := plainBinary()
	if err != nil {
		t.Fatal(err)
	}
	secret := app.NewSecret()
	secretFile := filepath.Join(t.TempDir(), "segredo")
	if err := os.WriteFile(secretFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	testar := func(t *testing.T, url string) (app.TestReport, int, string) {
		t.Helper()
		cmd := exec.Command(bin, "receptor", "testar", "--url", url, "--segredo-file", secretFile, "--json", "--insecure-callbacks")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		code := 0
		if exit, ok := err.(*exec.ExitError); ok {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		var rep app.TestReport
		if err := json.Unmarshal(out, &rep); err != nil {
			t.Fatalf("not a report (%v):\n%s\n%s", err, out, stderr.String())
		}
		return rep, code, string(out)
	}

	var receivers []struct {
		name string
		url  string
	}
	node, err := exec.LookPath("node")
	switch {
	case err == nil:
		for _, impl := range []string{"seed000", "referencia"} {
			rc := startNodeReceiver(t, node, impl)
			rc.configure(t, secret, "integrador-do-testador")
			receivers = append(receivers, struct{ name, url string }{impl, rc.url()})
		}
	case os.Getenv("GEOHUB_REQUIRE_NODE") == "1":
		t.Fatal("node is required (GEOHUB_REQUIRE_NODE=1) but not found")
	default:
		t.Log("node not found: only the Go SDK is tested")
	}
	g := startGoReceiver(t)
	g.configure(t, secret, "integrador-do-testador")
	receivers = append(receivers, struct{ name, url string }{"go-sdk", g.url()})
	for _, rc := range receivers {
		t.Run(rc.name, func(t *testing.T) {
			rep, code, out := testar(t, rc.url)
			if !rep.Aprovado || code != 0 || len(rep.Verificacoes) != len(app.TestChecks) {
				t.Fatalf("exit %d:\n%s", code, out)
			}
			for _, c := range rep.Verificacoes {
				if c.Resultado == app.TesteAviso {
					t.Logf("%s: aviso: %s", c.ID, c.Detalhe)
				}
			}
		})
	}

	t.Run("a receiver that accepts everything", func(t *testing.T) {
		yes := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }))
		defer yes.Close()
		rep, code, out := testar(t, yes.URL)
		if rep.Aprovado || code != 1 || rep.Verificacoes[1].ID != "recusa-assinatura" || rep.Verificacoes[1].Resultado != app.TesteFalhou {
			t.Fatalf("exit %d:\n%s", code, out)
		}
	})

	t.Run("the secret on the command line", func(t *testing.T) {
		out, err := exec.Command(bin, "receptor", "testar", "--url", "http://127.0.0.1:1/", "--segredo", secret).CombinedOutput()
		if err == nil || strings.Contains(string(out), "aprovado") || !strings.Contains(string(out), "--segredo-file") {
			t.Fatalf("--segredo on the command line: %v\n%s", err, out)
		}
	})
}
