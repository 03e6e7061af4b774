package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"geohub/app"
)

// TestASecondServeOnABusyAddressTouchesNothing is SPEC 10's "Start
// safely": with a server delivering (three requests held by the receiver,
// their leases live), a second serve on the same data directory and
// address exits non-zero at once, naming the address, before it opens the
// database: the first server's deliveries each complete with one attempt,
// none recovered as a crash.
func TestASecondServeOnABusyAddressTouchesNothing(t *testing.T) {
	data := t.TempDir()
	var mu sync.Mutex
	inFlight := 0
	release := make(chan struct{})
	arrived := newBell()
	cad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		inFlight++
		mu.Unlock()
		arrived.ring()
		<-release
		w.WriteHeader(http.StatusNoContent)
	}))
	defer cad.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()

	first := launch{data: data, flags: []string{"--insecure-callbacks"}}.start(t)
	if !first.alive() {
		t.Fatalf("the first server did not start:\n%s", first.out)
	}
	bin, _ := plainBinary()
	out, err := cli(t, nil, bin, "token", "create", "--papel", "admin", "--data", data)
	if err != nil {
		t.Fatalf("token create: %v %s", err, out)
	}
	token := lastLine(out)
	client := &http.Client{Timeout: 10 * time.Second}
	base := "http://" + first.addr
	var in app.CreatedIntegrator
	json.Unmarshal(apiCall(t, client, "POST", base+"/api/integradores", token, `{"nome":"CAD","callback_url":"`+
		cad.URL+`/eventos","hosts_permitidos":["127.0.0.1"]}`), &in)
	for _, agg := range []string{"jornada:a", "jornada:b", "jornada:c"} {
		if a, err := call(client, "POST", base+"/api/events", token, eventBody(newEventID(), agg)); err != nil || a.status != http.StatusCreated {
			t.Fatalf("publish: %v %d %s", err, a.status, a.body)
		}
	}
	arrived.await(t, 30*time.Second, "three deliveries in flight", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return inFlight >= 3, ""
	})

	start := time.Now()
	second := launch{data: data, flags: []string{"--insecure-callbacks", "--addr", first.addr}}.start(t)
	said := second.refused("a second serve on a busy address")
	if !strings.Contains(said, first.addr) || strings.Contains(said, "geohub listening") {
		t.Errorf("the second serve's output does not name %s, or it listened:\n%s", first.addr, said)
	}
	t.Logf("the second serve exited in %v: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(said))

	close(release)
	waitFor(t, 30*time.Second, "the three delivered", func() (bool, string) {
		var p app.Page[app.Delivery]
		json.Unmarshal(apiCall(t, client, "GET", base+"/api/entregas?status=entregue", token, ""), &p)
		return p.Total == 3, ""
	})
	var p app.Page[app.Delivery]
	json.Unmarshal(apiCall(t, client, "GET", base+"/api/entregas", token, ""), &p)
	for _, d := range p.Linhas {
		if d.Tentativas != 1 {
			t.Errorf("delivery %d took %d attempts: its lease was recovered while it was in flight", d.ID, d.Tentativas)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if inFlight != 3 {
		t.Errorf("the receiver got %d requests for 3 deliveries", inFlight)
	}
	if !first.alive() {
		t.Errorf("the first server died:\n%s", first.out)
	}
}
