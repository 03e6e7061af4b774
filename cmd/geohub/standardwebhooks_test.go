package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"geohub/app"
)

// standardWebhooksNode returns node and the NODE_PATH under which the npm
// package standardwebhooks is installed (scripts/test installs it, since
// tests reach no network), or skips saying why.
func standardWebhooksNode(t *testing.T) (node, nodePath string) {
	t.Helper()
	node, err := exec.LookPath("node")
	nodePath = os.Getenv("GEOHUB_NODE_PATH")
	missing := ""
	switch {
	case err != nil:
		missing = "node not found"
	case nodePath == "":
		missing = "GEOHUB_NODE_PATH is not set (scripts/test installs standardwebhooks with npm and sets it)"
	default:
		if _, err := os.Stat(filepath.Join(nodePath, "standardwebhooks", "package.json")); err != nil {
			missing = "standardwebhooks is not installed under GEOHUB_NODE_PATH: " + err.Error()
		}
	}
	if missing != "" {
		if os.Getenv("GEOHUB_REQUIRE_NODE") == "1" {
			t.Fatal(missing)
		}
		t.Skip(missing)
	}
	return node, nodePath
}

// TestDeliveriesVerifyWithTheNpmStandardWebhooksLibrary: a CAD vendor who
// knows Standard Webhooks verifies real deliveries with the npm package,
// given the secret exactly as the cadastro showed it; during a rotation's
// grace period, with either secret; and the library refuses a delivery
// verified with a secret that did not sign it.
func TestDeliveriesVerifyWithTheNpmStandardWebhooksLibrary(t *testing.T) {
	node, nodePath := standardWebhooksNode(t)
	alongside(t)
	type delivery struct {
		Segredo    string            `json:"segredo"`
		Corpo      string            `json:"corpo"`
		Cabecalhos map[string]string `json:"cabecalhos"`
	}
	var mu sync.Mutex
	var got []delivery
	arrived := newBell()
	cad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h := map[string]string{}
		for k := range r.Header {
			h[strings.ToLower(k)] = r.Header.Get(k)
		}
		mu.Lock()
		got = append(got, delivery{Corpo: string(body), Cabecalhos: h})
		mu.Unlock()
		arrived.ring()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer cad.Close()
	received := func(n int) []delivery {
		t.Helper()
		arrived.await(t, 30*time.Second, "deliveries", func() (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			return len(got) >= n, ""
		})
		mu.Lock()
		defer mu.Unlock()
		return append([]delivery(nil), got...)
	}

	m, dir, stop := runMain(t)
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	})
	base := "http://" + m.Addr
	client := &http.Client{Timeout: 10 * time.Second}
	admin, producer := mainToken(t, dir, app.PapelAdmin, "sw-admin"), mainToken(t, dir, app.PapelProdutor, "sw-produtor")
	var created struct {
		ID      string `json:"id"`
		Segredo string `json:"segredo"`
	}
	json.Unmarshal(apiCall(t, client, "POST", base+"/api/integradores", admin, `{"nome":"CAD npm","callback_url":"`+
		cad.URL+`/eventos","hosts_permitidos":["127.0.0.1"],"eventos":["jornada:*"]}`), &created)
	publish := func(agregado string) {
		t.Helper()
		req := benchRequest(0)
		req.Agregado = agregado
		body, _ := json.Marshal(req)
		if err := benchPost(client, base+"/api/events", producer, body, http.StatusCreated); err != nil {
			t.Fatal(err)
		}
	}
	publish("jornada:npm-1")
	publish("jornada:npm-1")
	before := received(2)
	var rot struct {
		Segredo string `json:"segredo"`
	}
	json.Unmarshal(apiCall(t, client, "POST", base+"/api/integradores/"+created.ID+"/segredo/rotacionar", admin, ""), &rot)
	publish("jornada:npm-2")
	during := received(3)[2]

	var cases []delivery
	var names []string
	for i, d := range before {
		d.Segredo = created.Segredo
		cases, names = append(cases, d), append(names, "delivery "+string(rune('1'+i)))
	}
	for name, secret := range map[string]string{"the previous secret": created.Segredo, "the new secret": rot.Segredo} {
		d := during
		d.Segredo = secret
		cases, names = append(cases, d), append(names, "during the rotation, with "+name)
	}
	forged := before[0]
	forged.Segredo = app.NewSecret()
	cases = append(cases, forged)

	in, _ := json.Marshal(cases)
	cmd := exec.Command(node, filepath.Join("testdata", "standardwebhooks.js"))
	cmd.Env = append(os.Environ(), "NODE_PATH="+nodePath)
	cmd.Stdin = bytes.NewReader(in)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(cases) {
		t.Fatalf("%d answers for %d deliveries:\n%s", len(lines), len(cases), out)
	}
	for i, name := range names {
		if lines[i] != "ok" {
			t.Errorf("%s: standardwebhooks refuses it: %s (headers %v)", name, lines[i], cases[i].Cabecalhos)
		}
	}
	if lines[len(lines)-1] == "ok" {
		t.Error("standardwebhooks accepts a delivery with a secret that did not sign it")
	}
}
