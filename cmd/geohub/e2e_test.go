package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"geohub/receiver/simulator"
)

// e2eCAD is one simulated CAD: an integrator of the real server, its
// webhook listener on loopback, and a copy of every request it received.
type e2eCAD struct {
	*simulator.CAD
	ID, APIKey, Secret string

	mu       sync.Mutex
	received []*e2eRequest
}

type e2eRequest struct {
	header http.Header
	body   []byte
}

// newE2ECAD registers an integrator whose callback is a fresh loopback
// listener, then builds the simulator on the credentials it was given.
func newE2ECAD(t *testing.T, client *http.Client, addr, token, nome string) *e2eCAD {
	t.Helper()
	c := &e2eCAD{}
	var h atomic.Pointer[http.Handler]
	ln := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		c.mu.Lock()
		c.received = append(c.received, &e2eRequest{header: r.Header.Clone(), body: body})
		c.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		(*h.Load()).ServeHTTP(w, r)
	}))
	t.Cleanup(ln.Close)
	var created struct {
		ID      string `json:"id"`
		APIKey  string `json:"api_key"`
		Segredo string `json:"segredo"`
	}
	raw := apiCall(t, client, "POST", "http://"+addr+"/api/integradores", token,
		`{"nome":"`+nome+`","callback_url":"`+ln.URL+`/geohub/eventos","hosts_permitidos":["127.0.0.1"]}`)
	if err := json.Unmarshal(raw, &created); err != nil {
		t.Fatal(err)
	}
	c.ID, c.APIKey, c.Secret = created.ID, created.APIKey, created.Segredo
	c.CAD = simulator.New(simulator.Config{BaseURL: "http://" + addr, APIKey: c.APIKey, Secret: []byte(c.Secret), Self: c.ID})
	handler := http.Handler(c.CAD.Handler())
	h.Store(&handler)
	return c
}

func (c *e2eCAD) requests() []*e2eRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*e2eRequest(nil), c.received...)
}

// e2eDeliveries lists one integrator's outbox rows.
func e2eDeliveries(t *testing.T, client *http.Client, addr, token, integrador string) []struct {
	Tipo, Agregado, Status string
} {
	t.Helper()
	var page struct {
		Linhas []struct{ Tipo, Agregado, Status string }
	}
	raw := apiCall(t, client, "GET", "http://"+addr+"/api/entregas?limite=500&integrador="+integrador, token, "")
	if err := json.Unmarshal(raw, &page); err != nil {
		t.Fatal(err)
	}
	return page.Linhas
}

func TestEndToEndCommandsReachTheRightCADs(t *testing.T) {
	alongside(t)
	data := t.TempDir()
	srv := startServer(t, data, "--insecure-callbacks")
	admin := lastLine(runCLI(t, "token", "create", "--papel", "admin", "--data", data))
	produtor := lastLine(runCLI(t, "token", "create", "--papel", "produtor", "--data", data))
	client := &http.Client{Timeout: 10 * time.Second}
	a := newE2ECAD(t, client, srv.addr, admin, "CAD Bombeiros")
	b := newE2ECAD(t, client, srv.addr, admin, "CAD SAMU")
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	// A producer publishes a jornada: every CAD receives it.
	jornadaID := "0199bb3e-0000-7000-8000-00000000e2e0"
	if status, _, err := publish(client, srv.addr, produtor, `{"tipo":"jornada:iniciada","origem":"escala","agregado":"jornada:`+jornadaID+
		`","payload":{"jornadaId":"`+jornadaID+`","inicio":"2026-11-30T12:00:00Z","servidor":{"nome":"Ana","cpf":"12345678901"}}}`); err != nil || status != 201 {
		t.Fatalf("publish jornada: %d %v", status, err)
	}

	// CAD A runs a whole ocorrência; B only watches.
	oc, err := a.Register(ctx, simulator.RegisterRequest{Natureza: "incendio", Descricao: "galpão", Endereco: "Rua A, 1",
		Local: &simulator.Local{Lat: -22.9, Lng: -47.06}})
	if err != nil {
		t.Fatal(err)
	}
	ur, err := a.Dispatch(ctx, oc.ID, "UR-12")
	if err != nil {
		t.Fatal(err)
	}
	abt, err := a.Dispatch(ctx, oc.ID, "ABT-03")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.SetDispatchStatus(ctx, oc.ID, ur.Despacho.ID, "no_local"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.SetDispatchStatus(ctx, oc.ID, abt.Despacho.ID, "cancelado"); err != nil {
		t.Fatal(err)
	}
	// A refused command: its refusal is an outcome too.
	if _, err := a.SetDispatchStatus(ctx, oc.ID, abt.Despacho.ID, "no_local"); err == nil {
		t.Fatal("a cancelled despacho arrived")
	}
	if _, err := a.SetDispatchStatus(ctx, oc.ID, ur.Despacho.ID, "liberado"); err != nil {
		t.Fatal(err)
	}

	// A retried command (same x-solicitacao-id) changes nothing.
	count := func() int {
		var page struct{ Total int }
		json.Unmarshal(apiCall(t, client, "GET", "http://"+srv.addr+"/api/events?limite=1", admin, ""), &page)
		return page.Total
	}
	sol := simulator.NewSolicitacaoID()
	route := "/api/ocorrencias/" + oc.ID + "/status"
	st1, body1, err := a.Do(ctx, "POST", route, sol, map[string]string{"para": "encerrada"})
	if err != nil || st1 != 200 {
		t.Fatalf("encerrar: %d %s %v", st1, body1, err)
	}
	before := count()
	st2, body2, err := a.Do(ctx, "POST", route, sol, map[string]string{"para": "encerrada"})
	if err != nil || st2 != st1 || !bytes.Equal(body1, body2) {
		t.Fatalf("retry answered %d %s, first %d %s", st2, body2, st1, body1)
	}
	if after := count(); after != before {
		t.Fatalf("a retried command published %d events", after-before)
	}

	// Wait for every outcome of A to arrive by webhook too, and the jornada at both.
	outcomes := a.Projection().Outcomes()
	if err := a.Projection().WaitUntil(ctx, func(p *simulator.Projection) bool {
		for s := range outcomes {
			if o, _ := p.Outcome(s); !o.FromEvent {
				return false
			}
		}
		o, _ := p.Outcome(sol)
		return o.FromEvent && p.Jornadas()[jornadaID] != ""
	}); err != nil {
		t.Fatalf("outcomes not delivered to the requester: %v\n%v", err, a.Projection().Outcomes())
	}
	if err := b.Projection().WaitUntil(ctx, func(p *simulator.Projection) bool { return p.Jornadas()[jornadaID] != "" }); err != nil {
		t.Fatal("CAD B never received the jornada")
	}
	if n := len(a.Projection().Outcomes()); n != 8 {
		t.Fatalf("A knows %d outcomes, want 8 (7 commands and the retried one)", n)
	}

	t.Run("only the originator receives ocorrencia:*, both receive jornada:*", func(t *testing.T) {
		for _, d := range e2eDeliveries(t, client, srv.addr, admin, b.ID) {
			if !strings.HasPrefix(d.Tipo, "jornada:") {
				t.Errorf("CAD B received %s (%s)", d.Tipo, d.Agregado)
			}
		}
		kinds := map[string]int{}
		for _, d := range e2eDeliveries(t, client, srv.addr, admin, a.ID) {
			kinds[d.Tipo]++
		}
		// 1 registrada, 2 despachada, 4 despacho-mudou-status, 2 mudou-status (first arrival, encerrada).
		want := map[string]int{"jornada:iniciada": 1, "ocorrencia:registrada": 1, "ocorrencia:despachada": 2,
			"ocorrencia:despacho-mudou-status": 3, "ocorrencia:mudou-status": 2,
			"integracao:comando-concluido": 7, "integracao:comando-recusado": 1}
		if !reflect.DeepEqual(kinds, want) {
			t.Fatalf("CAD A received %v, want %v", kinds, want)
		}
	})

	t.Run("the simulator's projection equals GET /api/ocorrencias/{id}", func(t *testing.T) {
		raw := apiCall(t, client, "GET", "http://"+srv.addr+"/api/ocorrencias/"+oc.ID, a.APIKey, "")
		server, err := simulator.DecodeOcorrencia(raw)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := a.Projection().Ocorrencia(oc.ID)
		if !ok || !reflect.DeepEqual(got, server) {
			t.Fatalf("simulator %+v\nserver    %+v", got, server)
		}
		if server.Status != "encerrada" || len(server.Despachos) != 2 {
			t.Fatalf("server projection %+v", server)
		}
		// B may not read it.
		req, _ := http.NewRequest("GET", "http://"+srv.addr+"/api/ocorrencias/"+oc.ID, nil)
		req.Header.Set("Authorization", "Bearer "+b.APIKey)
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 404 {
			t.Fatalf("CAD B reading A's ocorrência: %d, want 404", res.StatusCode)
		}
	})

	t.Run("the same deliveries, shuffled and duplicated, converge to the same state", func(t *testing.T) {
		reqs := a.requests()
		want, ok := a.Projection().Ocorrencia(oc.ID)
		if !ok {
			t.Fatal("no projection")
		}
		for seed := range uint64(5) {
			rng := rand.New(rand.NewPCG(seed, 42))
			feed := append(append([]*e2eRequest(nil), reqs...), reqs...)
			rng.Shuffle(len(feed), func(i, j int) { feed[i], feed[j] = feed[j], feed[i] })
			fresh := simulator.New(simulator.Config{Secret: []byte(a.Secret), Self: a.ID})
			h := fresh.Handler()
			for _, r := range feed {
				req := httptest.NewRequest("POST", "/geohub/eventos", bytes.NewReader(r.body))
				req.Header = r.header.Clone()
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusNoContent {
					t.Fatalf("seed %d: replayed delivery answered %d", seed, w.Code)
				}
			}
			got, ok := fresh.Projection().Ocorrencia(oc.ID)
			if !ok || !reflect.DeepEqual(got, want) {
				t.Fatalf("seed %d: converged to %+v\nwant %+v", seed, got, want)
			}
			if fresh.Projection().Jornadas()[jornadaID] == "" {
				t.Fatalf("seed %d: the jornada is missing", seed)
			}
		}
	})
}

func TestDemoShowsEventsFlowingAndSurvivesARestart(t *testing.T) {
	alongside(t)
	data := t.TempDir()
	admin := ""
	client := &http.Client{Timeout: 10 * time.Second}
	concluded := 0 // command outcomes delivered by the end of the first run
	for run := range 2 {
		srv := startServer(t, data, "--demo")
		if admin == "" {
			admin = lastLine(runCLI(t, "token", "create", "--papel", "admin", "--data", data))
		}
		// Within seconds the simulator has registered an ocorrência, and its
		// outcome has been delivered back to it. After the restart, its
		// commands work again although its API key was replaced in between.
		waitFor(t, 30*time.Second, fmt.Sprintf("run %d: demo events delivered", run), func() (bool, string) {
			var page struct {
				Linhas []struct{ Tipo, Status string }
			}
			json.Unmarshal(apiCall(t, client, "GET", "http://"+srv.addr+"/api/entregas?limite=500&status=entregue", admin, ""), &page)
			seen := map[string]int{}
			for _, d := range page.Linhas {
				seen[d.Tipo]++
			}
			if seen["ocorrencia:registrada"] > 0 && seen["integracao:comando-concluido"] > concluded {
				concluded = seen["integracao:comando-concluido"]
				return true, ""
			}
			return false, fmt.Sprintf("%+v\n%s", page.Linhas, srv.out)
		})
		var list struct{ Integradores []struct{ ID, Nome string } }
		json.Unmarshal(apiCall(t, client, "GET", "http://"+srv.addr+"/api/integradores", admin, ""), &list)
		if len(list.Integradores) != 1 {
			t.Fatalf("run %d: %d integrators, want the one demo integrator reused", run, len(list.Integradores))
		}
		if run == 0 {
			// An admin replaces the demo integrator's key on the console.
			apiCall(t, client, "POST", "http://"+srv.addr+"/api/integradores/"+list.Integradores[0].ID+"/api_key/rotacionar", admin, "")
		}
		srv.cmd.Process.Signal(os.Interrupt)
		if err := srv.cmd.Wait(); err != nil {
			t.Fatalf("run %d: demo server did not exit cleanly: %v\n%s", run, err, srv.out)
		}
	}

	// Without --demo nothing receives at the demo integrator's callback: it
	// is paused, so its deliveries do not fail as an incident on every
	// page; the next --demo resumes it.
	demoState := func(srv *proc) (bool, string) {
		var list struct {
			Linhas []struct {
				Ativo         bool
				MotivoInativo string `json:"motivo_inativo"`
			}
		}
		json.Unmarshal(apiCall(t, client, "GET", "http://"+srv.addr+"/api/integradores", admin, ""), &list)
		if len(list.Linhas) != 1 {
			t.Fatalf("%d integrators", len(list.Linhas))
		}
		return list.Linhas[0].Ativo, list.Linhas[0].MotivoInativo
	}
	for _, args := range [][]string{nil, {"--demo"}} {
		srv := startServer(t, data, args...)
		if args == nil {
			if on, why := demoState(srv); on || !strings.Contains(why, "serve --demo") {
				t.Fatalf("serve without --demo: the demo integrator is active=%v (%q)\n%s", on, why, srv.out)
			}
		} else {
			// The demo starts beside the listener: its integrator a moment later.
			waitFor(t, 10*time.Second, "--demo resumes the demo integrator", func() (bool, string) {
				on, why := demoState(srv)
				return on && strings.Contains(srv.out.String(), "demo running"), why
			})
		}
		srv.cmd.Process.Signal(os.Interrupt)
		if err := srv.cmd.Wait(); err != nil {
			t.Fatalf("serve %v did not exit cleanly: %v\n%s", args, err, srv.out)
		}
	}
}
