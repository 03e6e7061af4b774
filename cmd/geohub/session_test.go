package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/gorilla/websocket"

	"geohub/receiver"
	"geohub/receiver/session"
)

// sessionCAD is a CAD behind NAT: the SDK's session client in front of the
// SDK's receiver, recording what it applies.
type sessionCAD struct {
	arrived bell
	cancel  context.CancelFunc
	ended   chan error

	mu       sync.Mutex
	applied  map[string][]int64             // sequences applied per aggregate, in order
	ids      map[string]int                 // applications per envelope id
	discards []string                       // "motivo eventoID"
	conns    []net.Conn                     // the session's connections, newest last
	hold     func(d receiver.Delivery) bool // whose Apply waits for release
	release  chan struct{}
}

type sessionIntegrator struct {
	ID      string `json:"id"`
	Segredo string `json:"segredo"`
	APIKey  string `json:"api_key"`
}

func createSessionIntegrator(t *testing.T, client *http.Client, addr, token, nome, eventos string) sessionIntegrator {
	t.Helper()
	var in sessionIntegrator
	json.Unmarshal(apiCall(t, client, "POST", "http://"+addr+"/api/integradores", token,
		`{"nome":"`+nome+`","entrega":"sessao","eventos":[`+eventos+`]}`), &in)
	if in.APIKey == "" || in.Segredo == "" {
		t.Fatalf("created %+v", in)
	}
	return in
}

// startSessionCAD runs session.Run for in against addr until the test ends.
func startSessionCAD(t *testing.T, addr string, in sessionIntegrator) *sessionCAD {
	t.Helper()
	c := &sessionCAD{arrived: newBell(), ended: make(chan error, 1), applied: map[string][]int64{}, ids: map[string]int{},
		release: make(chan struct{})}
	rcv := receiver.New(receiver.Config{
		Secrets: func() [][]byte { return [][]byte{[]byte(in.Segredo)} },
		Self:    in.ID,
		OnDiscard: func(id, motivo string) {
			c.mu.Lock()
			c.discards = append(c.discards, motivo+" "+id)
			c.mu.Unlock()
			c.arrived.ring()
		},
	}, receiver.HandlerFunc(func(ctx context.Context, d receiver.Delivery) error {
		c.mu.Lock()
		hold := c.hold != nil && c.hold(d)
		c.mu.Unlock()
		if hold {
			<-c.release
		}
		c.mu.Lock()
		c.applied[d.Agregado] = append(c.applied[d.Agregado], d.Sequencia)
		c.ids[d.Envelope.ID]++
		c.mu.Unlock()
		c.arrived.ring()
		return nil
	}))
	dialer := &websocket.Dialer{HandshakeTimeout: 5 * time.Second,
		NetDialContext: func(ctx context.Context, network, address string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, address)
			if err == nil {
				c.mu.Lock()
				c.conns = append(c.conns, conn)
				c.mu.Unlock()
			}
			return conn, err
		}}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go func() {
		c.ended <- session.Run(ctx, session.Config{URL: "http://" + addr, APIKey: in.APIKey, Receiver: rcv,
			Dialer: dialer, MinWait: 20 * time.Millisecond, MaxWait: 200 * time.Millisecond})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-c.ended:
		case <-time.After(10 * time.Second):
			t.Error("session.Run did not return after its context ended")
		}
	})
	return c
}

// drop cuts the session's connection under it, as a NAT forgetting it does.
func (c *sessionCAD) drop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.conns[len(c.conns)-1].Close()
}

// ordered reports whether every aggregate in want was applied as 1..n,
// and what was applied.
func (c *sessionCAD) ordered(want map[string]int) (bool, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ok := true
	for agg, n := range want {
		got := c.applied[agg]
		if len(got) != n {
			ok = false
			continue
		}
		for i, seq := range got {
			if seq != int64(i+1) {
				return false, fmt.Sprintf("%s applied out of order: %v", agg, got)
			}
		}
	}
	return ok, fmt.Sprintf("applied %v, discards %v", c.applied, c.discards)
}

func publishTo(t *testing.T, client *http.Client, addr, token, agregado string) string {
	t.Helper()
	id := newEventID()
	a, err := call(client, "POST", "http://"+addr+"/api/events", token, eventBody(id, agregado))
	if err != nil || a.status != http.StatusCreated {
		t.Fatalf("publish: %v %d %s", err, a.status, a.body)
	}
	return id
}

// The Go SDK's session client against the real server, as a CAD behind a
// municipal firewall would run it (SPEC 8d): every delivery verified by
// the receiver and applied 1..10 per aggregate; one left unacknowledged
// holds its aggregate only, and after a dropped connection comes again
// (acknowledged as a repeat, not applied twice) before the rest; another
// integrator's session sees none of it; acknowledged deliveries are
// entregue.
func TestGoSessionClientReceivesInOrderAcrossADrop(t *testing.T) {
	alongside(t)
	data := t.TempDir()
	srv := startServer(t, data)
	token := lastLine(runCLI(t, "token", "create", "--papel", "admin", "--data", data))
	client := &http.Client{Timeout: 10 * time.Second}
	a := createSessionIntegrator(t, client, srv.addr, token, "CAD atrás de NAT", `"jornada:*"`)
	b := createSessionIntegrator(t, client, srv.addr, token, "Outro CAD", `"ocorrencia:*"`)
	cad := startSessionCAD(t, srv.addr, a)
	other := startSessionCAD(t, srv.addr, b)

	aggs := []string{"jornada:turno-a", "jornada:turno-b", "jornada:turno-c"}
	want := map[string]int{}
	for range 10 {
		for _, agg := range aggs {
			publishTo(t, client, srv.addr, token, agg)
			want[agg]++
		}
	}
	cad.arrived.await(t, time.Minute, "3 aggregates × 10 in order", func() (bool, string) { return cad.ordered(want) })
	// The acks are recorded in the writer's next batch.
	waitFor(t, 30*time.Second, "30 deliveries entregue", func() (bool, string) {
		var page struct {
			Total int `json:"total"`
		}
		json.Unmarshal(apiCall(t, client, "GET", "http://"+srv.addr+"/api/entregas?status=entregue&limite=1&integrador="+a.ID, token, ""), &page)
		return page.Total == 30, fmt.Sprintf("%d entregue", page.Total)
	})

	// The 11th of turno-b waits in Apply: unacknowledged, it holds turno-b
	// and nothing else.
	held := newEventID()
	cad.mu.Lock()
	cad.hold = func(d receiver.Delivery) bool { return d.Envelope.ID == held }
	cad.mu.Unlock()
	a2, err := call(client, "POST", "http://"+srv.addr+"/api/events", token, eventBody(held, "jornada:turno-b"))
	if err != nil || a2.status != http.StatusCreated {
		t.Fatalf("publish: %v %d", err, a2.status)
	}
	want["jornada:turno-b"]++
	for range 3 {
		for _, agg := range aggs {
			publishTo(t, client, srv.addr, token, agg)
		}
	}
	want["jornada:turno-a"] += 3
	want["jornada:turno-c"] += 3
	cad.arrived.await(t, time.Minute, "the other aggregates to go on", func() (bool, string) {
		ok, last := cad.ordered(map[string]int{"jornada:turno-a": want["jornada:turno-a"], "jornada:turno-c": want["jornada:turno-c"]})
		return ok, last
	})
	cad.mu.Lock()
	stuck := len(cad.applied["jornada:turno-b"])
	cad.mu.Unlock()
	if stuck != 10 {
		t.Fatalf("turno-b applied %d while its 11th is unacknowledged, want 10", stuck)
	}

	// The connection drops with the 11th unanswered; the client dials
	// again, the 11th comes again first (the receiver sees a repeat once
	// the first Apply ends), then the rest of turno-b in order.
	cad.drop()
	close(cad.release)
	want["jornada:turno-b"] += 3
	cad.arrived.await(t, time.Minute, "turno-b to catch up after the drop", func() (bool, string) { return cad.ordered(want) })
	cad.mu.Lock()
	if n := cad.ids[held]; n != 1 {
		t.Errorf("the held event was applied %d times", n)
	}
	repeated := slices.Contains(cad.discards, receiver.MotivoRepetido+" "+held)
	conns := len(cad.conns)
	cad.mu.Unlock()
	if conns < 2 {
		t.Errorf("the client dialled %d times, want a new session after the drop", conns)
	}
	if !repeated {
		// The first Apply may end before the new session asks again;
		// then nothing is repeated. Say so, but this is not a failure.
		t.Logf("the held event was not delivered again (its ack made it before the drop)")
	}

	other.mu.Lock()
	defer other.mu.Unlock()
	if len(other.ids) != 0 || len(other.discards) != 0 {
		t.Errorf("another integrator's session saw %v, discards %v", other.ids, other.discards)
	}
}

// The close codes a person must act on stop the client, with the reason:
// a callback integrator's key (4001), and a session replaced by another
// with the same key (4000).
func TestGoSessionClientStopsWhenAPersonMustAct(t *testing.T) {
	alongside(t)
	data := t.TempDir()
	srv := startServer(t, data, "--insecure-callbacks")
	token := lastLine(runCLI(t, "token", "create", "--papel", "admin", "--data", data))
	client := &http.Client{Timeout: 10 * time.Second}
	var callback sessionIntegrator
	json.Unmarshal(apiCall(t, client, "POST", "http://"+srv.addr+"/api/integradores", token,
		`{"nome":"CAD por callback","callback_url":"http://127.0.0.1:9/eventos","hosts_permitidos":["127.0.0.1"]}`), &callback)
	first := startSessionCAD(t, srv.addr, callback)
	var closed *session.CloseError
	select {
	case err := <-first.ended:
		if !errors.As(err, &closed) || closed.Code != session.CloseNotSession {
			t.Errorf("a callback integrator's session ended with %v, want close 4001", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a callback integrator's session did not end")
	}
	first.ended <- nil // for its cleanup

	in := createSessionIntegrator(t, client, srv.addr, token, "CAD duplicado", `"jornada:*"`)
	one := startSessionCAD(t, srv.addr, in)
	waitFor(t, 30*time.Second, "the first session to attach", func() (bool, string) {
		metrics := string(apiCall(t, client, "GET", "http://"+srv.addr+"/metrics", token, ""))
		return strings.Contains(metrics, "geohub_sessions_connected 1"), "not attached yet"
	})
	two := startSessionCAD(t, srv.addr, in)
	select {
	case err := <-one.ended:
		if !errors.As(err, &closed) || closed.Code != session.CloseReplaced || closed.Reason == "" {
			t.Errorf("the replaced session ended with %v, want close 4000 with its reason", err)
		}
		one.ended <- nil
	case <-time.After(30 * time.Second):
		t.Fatal("the first session was not replaced")
	}
	publishTo(t, client, srv.addr, token, "jornada:depois")
	two.arrived.await(t, 30*time.Second, "the second session to receive", func() (bool, string) {
		return two.ordered(map[string]int{"jornada:depois": 1})
	})
	select {
	case err := <-two.ended:
		t.Errorf("the session that took over ended: %v", err)
	default:
	}
}

// SPEC 8d: after a kill -9 of the server mid-stream, nothing is lost. The
// client dials again with its waits until the server is back at the same
// address, and every acknowledged publish is applied once, in order.
func TestSessionDeliveriesSurviveKill9(t *testing.T) {
	// Alongside the others: on PostgreSQL most of its time is the killed
	// server's leases running out, and it asserts no timing.
	alongside(t)
	data := t.TempDir()
	srv := startServer(t, data)
	token := lastLine(runCLI(t, "token", "create", "--papel", "admin", "--data", data))
	client := &http.Client{Timeout: 10 * time.Second}
	in := createSessionIntegrator(t, client, srv.addr, token, "CAD atrás de NAT", `"jornada:*"`)
	cad := startSessionCAD(t, srv.addr, in)
	// From the 31st on, Applies wait: the kill finds deliveries sent and
	// unanswered, and others not yet sent.
	cad.mu.Lock()
	cad.hold = func(receiver.Delivery) bool { return len(cad.ids) >= 30 }
	cad.mu.Unlock()

	want := map[string]int{}
	var ids []string
	for i := range 300 {
		agg := fmt.Sprintf("jornada:turno-%d", i%5)
		ids = append(ids, publishTo(t, client, srv.addr, token, agg))
		want[agg]++
	}
	cad.arrived.await(t, time.Minute, "30 deliveries before the kill", func() (bool, string) {
		cad.mu.Lock()
		defer cad.mu.Unlock()
		return len(cad.ids) >= 30, fmt.Sprintf("%d applied", len(cad.ids))
	})
	srv.cmd.Process.Signal(syscall.SIGKILL) // mid-stream: leases held, acks unrecorded
	srv.cmd.Wait()
	cad.mu.Lock()
	before := len(cad.ids)
	cad.mu.Unlock()
	close(cad.release)

	startServer(t, data, "--addr", srv.addr)
	cad.arrived.await(t, 2*time.Minute, "every event after the restart", func() (bool, string) { return cad.ordered(want) })
	cad.mu.Lock()
	defer cad.mu.Unlock()
	for _, id := range ids {
		if cad.ids[id] != 1 {
			t.Fatalf("event %s applied %d times", id, cad.ids[id])
		}
	}
	t.Logf("%d applied before the kill, all %d once and in order after it, over %d sessions", before, len(ids), len(cad.conns))
}

// SPEC 8d on PostgreSQL: a session may attach to any replica, one session
// per integrator holds across them (a second one on another replica
// replaces the first, with 4000), and the integrator's deliveries, even of
// events published through the other replica, go out through the one
// that holds its session, in order. Every replica's API shows where the
// session is.
func TestOneSessionPerIntegratorAcrossReplicas(t *testing.T) {
	rs := newReplicaSet(t, 2)
	a, b := rs.nodes[0], rs.nodes[1]
	token := lastLine(runCLI(t, "token", "create", "--papel", "admin", "--data", rs.dirs[0]))
	client := &http.Client{Timeout: 10 * time.Second}
	in := createSessionIntegrator(t, client, a.addr, token, "CAD atrás de NAT", `"jornada:*"`)
	first := startSessionCAD(t, a.addr, in)
	waitFor(t, 30*time.Second, "the session to attach to the first replica", func() (bool, string) {
		metrics := string(apiCall(t, client, "GET", "http://"+a.addr+"/metrics", token, ""))
		return strings.Contains(metrics, "geohub_sessions_connected 1"), "not attached"
	})
	second := startSessionCAD(t, b.addr, in)
	select {
	case err := <-first.ended:
		var closed *session.CloseError
		if !errors.As(err, &closed) || closed.Code != session.CloseReplaced {
			t.Errorf("the session on the first replica ended with %v, want 4000", err)
		}
		first.ended <- nil
	case <-time.After(30 * time.Second):
		t.Fatal("a second session on another replica did not replace the first")
	}

	want := map[string]int{}
	for range 10 {
		for _, agg := range []string{"jornada:turno-a", "jornada:turno-b", "jornada:turno-c"} {
			publishTo(t, client, a.addr, token, agg)
			want[agg]++
		}
	}
	second.arrived.await(t, time.Minute, "the events published on the first replica, through the second", func() (bool, string) {
		return second.ordered(want)
	})
	var got struct {
		Sessao struct {
			Conectada bool   `json:"conectada"`
			Replica   string `json:"replica"`
		} `json:"sessao"`
	}
	json.Unmarshal(apiCall(t, client, "GET", "http://"+a.addr+"/api/integradores/"+in.ID, token, ""), &got)
	if !got.Sessao.Conectada || !strings.HasSuffix(got.Sessao.Replica, fmt.Sprintf(":%d", b.cmd.Process.Pid)) {
		t.Errorf("the first replica's API shows the session as %+v, want connected on pid %d", got.Sessao, b.cmd.Process.Pid)
	}
}

// --demo-sessao runs the demo with its CAD simulator behind "NAT": no
// callback, its deliveries (the ocorrências it registers, its commands'
// outcomes) come over the session it dials. A later serve --demo pauses
// that integrator, as it pauses the callback one without --demo.
func TestDemoSessaoDeliversOverASession(t *testing.T) {
	alongside(t)
	data := t.TempDir()
	client := &http.Client{Timeout: 10 * time.Second}
	srv := startServer(t, data, "--demo-sessao")
	admin := lastLine(runCLI(t, "token", "create", "--papel", "admin", "--data", data))
	type integrators struct {
		Linhas []struct {
			ID, Entrega   string
			Ativo         bool
			MotivoInativo string `json:"motivo_inativo"`
			Sessao        *struct {
				Conectada bool   `json:"conectada"`
				Motivo    string `json:"motivo"`
			} `json:"sessao"`
		}
	}
	waitFor(t, 30*time.Second, "demo events delivered over the session", func() (bool, string) {
		var list integrators
		json.Unmarshal(apiCall(t, client, "GET", "http://"+srv.addr+"/api/integradores", admin, ""), &list)
		if len(list.Linhas) != 1 || list.Linhas[0].Entrega != "sessao" || list.Linhas[0].Sessao == nil || !list.Linhas[0].Sessao.Conectada {
			return false, fmt.Sprintf("integrators %+v", list)
		}
		var page struct {
			Linhas []struct{ Tipo, Status string }
		}
		json.Unmarshal(apiCall(t, client, "GET", "http://"+srv.addr+"/api/entregas?limite=500&status=entregue&integrador="+list.Linhas[0].ID, admin, ""), &page)
		seen := map[string]int{}
		for _, d := range page.Linhas {
			seen[d.Tipo]++
		}
		return seen["ocorrencia:registrada"] > 0 && seen["integracao:comando-concluido"] > 0, fmt.Sprintf("%v\n%s", seen, srv.out)
	})
	srv.cmd.Process.Signal(os.Interrupt)
	if err := srv.cmd.Wait(); err != nil {
		t.Fatalf("the demo did not exit cleanly: %v\n%s", err, srv.out)
	}

	srv = startServer(t, data, "--demo")
	waitFor(t, 30*time.Second, "--demo pauses the session demo and runs the callback one", func() (bool, string) {
		var list integrators
		json.Unmarshal(apiCall(t, client, "GET", "http://"+srv.addr+"/api/integradores", admin, ""), &list)
		paused, running := 0, 0
		for _, in := range list.Linhas {
			// The shutdown recorded the session's end before the
			// database closed.
			if in.Entrega == "sessao" && !in.Ativo && strings.Contains(in.MotivoInativo, "serve --demo") &&
				in.Sessao != nil && !in.Sessao.Conectada && in.Sessao.Motivo != "" {
				paused++
			}
			if in.Entrega == "callback" && in.Ativo {
				running++
			}
		}
		return paused == 1 && running == 1, fmt.Sprintf("%+v", list)
	})
}

// An operator registers a CAD behind NAT in a real browser, choosing
// delivery by session, and watches its page say so once the CAD's client
// dials in (SPEC 8d). A browser enforces the form's required fields, as
// the in-process console tests cannot.
func TestConsoleRegistersASessionIntegratorInABrowser(t *testing.T) {
	data := t.TempDir()
	srv := startServer(t, data)
	ctx := browser(t)
	base := "http://" + srv.addr
	login(t, ctx, base, "admin", adminPassword)

	do(t, ctx, "create a session integrator",
		chromedp.Navigate(base+"/integradores/novo"), chromedp.WaitVisible(css(`input[name=nome]`)),
		fill(map[string]string{"nome": "CAD da Guarda", "eventos": "jornada:*"}),
		chromedp.Click(css(`input[name=entrega][value=sessao]`)),
		chromedp.Click(css(`main button[type=submit]`)), chromedp.WaitVisible(css(`#api-key`)))
	in := sessionIntegrator{Segredo: text(t, ctx, `#segredo`), APIKey: text(t, ctx, `#api-key`)}
	screenshot(t, ctx, "integrador-sessao-criado")
	do(t, ctx, "go to the integrator", chromedp.Click(css(`main a.botao.primario`)), chromedp.WaitVisible(css(`[data-sessao]`)))
	if got := get(t, ctx, "the session's state", chromedp.AttributeValue(css(`dd[data-sessao]`), "data-sessao")).Value; got != "nunca" {
		t.Fatalf("before the CAD dials in, the session is %q", got)
	}
	if n := count(t, ctx, `main form[action$="/testar"]`); n != 0 {
		t.Errorf("a session integrator's page offers the receiver tester")
	}
	page := get(t, ctx, "the page's address", chromedp.Location())
	in.ID = page[strings.LastIndex(page, "/")+1:]

	// The page is live: it shows the session connected without a reload.
	cad := startSessionCAD(t, srv.addr, in)
	do(t, ctx, "the page to show the session connected", chromedp.WaitVisible(css(`dd[data-sessao="conectada"]`)))
	if got := text(t, ctx, `dd[data-sessao]`); !strings.Contains(got, "127.0.0.1") || !strings.Contains(got, "de 16") {
		t.Errorf("the connected session says %q", got)
	}
	screenshot(t, ctx, "integrador-sessao-conectada")
	publishTo(t, &http.Client{Timeout: 10 * time.Second}, srv.addr, lastLine(runCLI(t, "token", "create", "--papel", "produtor",
		"--data", data)), "jornada:turno")
	cad.arrived.await(t, 30*time.Second, "the event over the session", func() (bool, string) {
		return cad.ordered(map[string]int{"jornada:turno": 1})
	})
}
