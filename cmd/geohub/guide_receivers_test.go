package main

// TestReceiversWrittenFromTheGuide is SPEC 8a run for real: the server, and
// beside it the receivers a CAD vendor has: seed 000's own JavaScript code
// (its published snippets, only its missing helpers filled in), the
// JavaScript reference receiver (receiver/js) and the Go SDK (receiver/).
// Each sits behind a loopback proxy that records when every delivery was
// accepted and can make one event fail.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"geohub/app"
	"geohub/receiver"
)

// guideApplied is one event a receiver applied, with its delivery headers.
type guideApplied struct {
	ID        string `json:"id"`
	Tipo      string `json:"tipo"`
	Agregado  string `json:"agregado"`
	Sequencia int64  `json:"sequencia"`
}

type guideState struct {
	Aplicados []guideApplied `json:"aplicados"`
	Espera    int            `json:"espera"`
	Descartes []struct {
		EventoID string `json:"eventoId"`
		Motivo   string `json:"motivo"`
	} `json:"descartes"`
}

// guideReceiver is one receiver implementation under test.
type guideReceiver interface {
	url() string
	configure(t *testing.T, secret, integrador string)
	state(t *testing.T) guideState
}

// nodeReceiver runs receiver/js/testdata/servir.js.
type nodeReceiver struct {
	base string
}

func startNodeReceiver(t *testing.T, node, impl string) *nodeReceiver {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("..", "..", "receiver", "js", "testdata", "servir.js"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, script, "--implementacao", impl)
	stdin, _ := cmd.StdinPipe() // closed at cleanup: the harness exits
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("%s stderr:\n%s", impl, stderr.String())
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("%s did not start: %v\n%s", impl, err, stderr.String())
	}
	var hello struct {
		Porta int `json:"porta"`
	}
	if err := json.Unmarshal([]byte(line), &hello); err != nil || hello.Porta == 0 {
		t.Fatalf("%s said %q", impl, line)
	}
	go io.Copy(io.Discard, stdout)
	return &nodeReceiver{base: fmt.Sprintf("http://127.0.0.1:%d", hello.Porta)}
}

func (n *nodeReceiver) url() string { return n.base + "/geohub/eventos" }

func (n *nodeReceiver) configure(t *testing.T, secret, integrador string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"segredo": secret, "integradorId": integrador})
	res, err := http.Post(n.base+"/configurar", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode >= 300 {
		t.Fatalf("configurar: %d", res.StatusCode)
	}
}

func (n *nodeReceiver) state(t *testing.T) guideState {
	t.Helper()
	res, err := http.Get(n.base + "/estado")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var s guideState
	if err := json.NewDecoder(res.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// goReceiver is the Go SDK holding one secret at a time.
type goReceiver struct {
	srv *httptest.Server

	mu      sync.Mutex
	secret  []byte
	applied []guideApplied
	aggs    map[string]bool
	drops   []string
	rc      *receiver.Receiver
}

func startGoReceiver(t *testing.T) *goReceiver {
	g := &goReceiver{aggs: map[string]bool{}}
	g.rc = receiver.New(receiver.Config{
		Secrets: func() [][]byte { g.mu.Lock(); defer g.mu.Unlock(); return [][]byte{g.secret} },
		OnDiscard: func(id, motivo string) {
			g.mu.Lock()
			g.drops = append(g.drops, motivo)
			g.mu.Unlock()
		},
	}, receiver.HandlerFunc(func(ctx context.Context, d receiver.Delivery) error {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.applied = append(g.applied, guideApplied{ID: d.Envelope.ID, Tipo: d.Envelope.Tipo, Agregado: d.Agregado,
			Sequencia: d.Sequencia})
		return nil
	}))
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.aggs[r.Header.Get(receiver.HeaderAgregado)] = true
		g.mu.Unlock()
		g.rc.ServeHTTP(w, r)
	}))
	t.Cleanup(g.srv.Close)
	return g
}

func (g *goReceiver) url() string { return g.srv.URL + "/geohub/eventos" }

func (g *goReceiver) configure(t *testing.T, secret, integrador string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.secret = []byte(secret)
	// Self stays empty: nothing this test publishes is the CAD's echo.
}

func (g *goReceiver) state(t *testing.T) guideState {
	g.mu.Lock()
	var s guideState
	s.Aplicados = slices.Clone(g.applied)
	aggs := make([]string, 0, len(g.aggs))
	for a := range g.aggs {
		aggs = append(aggs, a)
	}
	for _, m := range g.drops {
		s.Descartes = append(s.Descartes, struct {
			EventoID string `json:"eventoId"`
			Motivo   string `json:"motivo"`
		}{Motivo: m})
	}
	g.mu.Unlock()
	for _, a := range aggs {
		s.Espera += g.rc.Held(a)
	}
	return s
}

// guideProxy stands between Geohub and a receiver: it notes when each event
// was first accepted (2xx) and answers 500 for the poison event until a time.
type guideProxy struct {
	srv    *httptest.Server
	target string

	mu          sync.Mutex
	accepted    map[string]time.Time
	statuses    map[int]int
	poison      string
	poisonUntil time.Time
	refusals    int // of the poison event
	// SPEC 6.4 as it arrives: one request per aggregate at a time, and
	// none before the previous sequence was accepted.
	inFlight  map[string]int
	lastOK    map[string]int64
	disorders []string
	// answered rings after each answer of the receiver passed through: a
	// receiver applies an event before it answers.
	answered bell
}

func newGuideProxy(t *testing.T, target string) *guideProxy {
	p := &guideProxy{target: target, accepted: map[string]time.Time{}, statuses: map[int]int{},
		inFlight: map[string]int{}, lastOK: map[string]int64{}, answered: newBell()}
	client := &http.Client{Timeout: 10 * time.Second}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Geohub-Evento-Id")
		agg := r.Header.Get("X-Geohub-Agregado")
		seq, _ := strconv.ParseInt(r.Header.Get("X-Geohub-Sequencia"), 10, 64)
		p.mu.Lock()
		poisoned := id == p.poison && time.Now().Before(p.poisonUntil)
		p.inFlight[agg]++
		if p.inFlight[agg] > 1 {
			p.disorders = append(p.disorders, fmt.Sprintf("%s #%d while another request of it was in flight", agg, seq))
		}
		if seq > p.lastOK[agg]+1 {
			p.disorders = append(p.disorders, fmt.Sprintf("%s #%d before #%d was accepted", agg, seq, p.lastOK[agg]+1))
		}
		p.mu.Unlock()
		defer func() {
			p.mu.Lock()
			p.inFlight[agg]--
			p.mu.Unlock()
		}()
		if poisoned {
			w.WriteHeader(http.StatusInternalServerError)
			p.mu.Lock()
			p.refusals++
			p.mu.Unlock()
			p.answered.ring()
			return
		}
		body, _ := io.ReadAll(r.Body)
		req, _ := http.NewRequest(http.MethodPost, p.target, bytes.NewReader(body))
		req.Header = r.Header.Clone()
		res, err := client.Do(req)
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		p.mu.Lock()
		p.statuses[res.StatusCode]++
		if res.StatusCode/100 == 2 {
			if _, seen := p.accepted[id]; !seen {
				p.accepted[id] = time.Now()
			}
			p.lastOK[agg] = max(p.lastOK[agg], seq)
		}
		p.mu.Unlock()
		p.answered.ring()
		w.WriteHeader(res.StatusCode)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// refusedPoison waits until the proxy has refused the poison event n times.
func (p *guideProxy) refusedPoison(t *testing.T, name string, n int) {
	t.Helper()
	p.answered.await(t, 10*time.Second, fmt.Sprintf("%s: the poison event refused %d times", name, n), func() (bool, string) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.refusals >= n, fmt.Sprintf("%d refusals", p.refusals)
	})
}

func (p *guideProxy) acceptedAt(id string) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	at, ok := p.accepted[id]
	return at, ok
}

func TestReceiversWrittenFromTheGuide(t *testing.T) {
	type subject struct {
		name       string
		rc         guideReceiver
		proxy      *guideProxy
		id, secret string
	}
	var subjects []*subject
	node, err := exec.LookPath("node")
	switch {
	case err == nil:
		for _, impl := range []string{"seed000", "referencia"} {
			subjects = append(subjects, &subject{name: impl, rc: startNodeReceiver(t, node, impl)})
		}
	case os.Getenv("GEOHUB_REQUIRE_NODE") == "1":
		t.Fatal("node is required (GEOHUB_REQUIRE_NODE=1) but not found")
	default:
		t.Log("node not found: only the Go SDK runs (install nodejs for the JavaScript receivers)")
	}
	subjects = append(subjects, &subject{name: "go-sdk", rc: startGoReceiver(t)})

	m, dir, stop := runMain(t)
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	})
	base := "http://" + m.Addr
	client := &http.Client{Timeout: 10 * time.Second}
	admin, producer := mainToken(t, dir, app.PapelAdmin, "guia-admin"), mainToken(t, dir, app.PapelProdutor, "guia-produtor")

	// Register each receiver, with retries a second apart so the poison
	// event is retried within its 8 s.
	steps := `["1s","1s","1s","1s","1s","1s","1s","1s","1s","1s","1s","1s"]`
	for _, s := range subjects {
		s.proxy = newGuideProxy(t, s.rc.url())
		var created struct {
			ID      string `json:"id"`
			Segredo string `json:"segredo"`
		}
		raw := apiCall(t, client, "POST", base+"/api/integradores", admin, `{"nome":"CAD `+s.name+`","callback_url":"`+
			s.proxy.srv.URL+`/geohub/eventos","hosts_permitidos":["127.0.0.1"],"backoff":`+steps+`}`)
		if err := json.Unmarshal(raw, &created); err != nil {
			t.Fatal(err)
		}
		s.id, s.secret = created.ID, created.Segredo
		s.rc.configure(t, s.secret, s.id)
	}

	// verificar: the ping parses as an envelope everywhere.
	for _, s := range subjects {
		var v struct {
			Tentativa  app.Attempt `json:"tentativa"`
			Verificado bool        `json:"verificado"`
		}
		raw := apiCall(t, client, "POST", base+"/api/integradores/"+s.id+"/verificar", admin, "")
		if err := json.Unmarshal(raw, &v); err != nil || !v.Verificado || v.Tentativa.StatusCode/100 != 2 {
			t.Fatalf("%s: verificar answered %s", s.name, raw)
		}
	}

	publish := func(agregado, eventID string) {
		t.Helper()
		req := benchRequest(0)
		req.Agregado, req.EventID = agregado, eventID
		body, _ := json.Marshal(req)
		if err := benchPost(client, base+"/api/events", producer, body, http.StatusCreated); err != nil {
			t.Error(err)
		}
	}
	// applied waits until every receiver applied want events of aggregates
	// with prefix, and returns them by receiver.
	applied := func(prefix string, want int) map[string][]guideApplied {
		t.Helper()
		out := map[string][]guideApplied{}
		for _, s := range subjects {
			s.proxy.answered.await(t, 30*time.Second, fmt.Sprintf("%s to apply %d events of %s*", s.name, want, prefix), func() (bool, string) {
				var mine []guideApplied
				for _, a := range s.rc.state(t).Aplicados {
					if strings.HasPrefix(a.Agregado, prefix) {
						mine = append(mine, a)
					}
				}
				out[s.name] = mine
				return len(mine) >= want, fmt.Sprintf("%d applied", len(mine))
			})
		}
		return out
	}

	t.Run("a burst of 20 aggregates × 10 events is applied in order", func(t *testing.T) {
		var wg sync.WaitGroup
		for a := range 20 {
			wg.Go(func() {
				for range 10 {
					publish(fmt.Sprintf("jornada:rajada-%02d", a), "")
				}
			})
		}
		wg.Wait()
		for name, got := range applied("jornada:rajada-", 200) {
			next := map[string]int64{}
			for _, a := range got {
				if a.Sequencia != next[a.Agregado]+1 {
					t.Errorf("%s applied %s #%d after #%d", name, a.Agregado, a.Sequencia, next[a.Agregado])
				}
				next[a.Agregado] = a.Sequencia
			}
		}
		for _, s := range subjects {
			if held := s.rc.state(t).Espera; held != 0 {
				t.Errorf("%s holds %d events after the burst", s.name, held)
			}
		}
	})

	t.Run("a rotation dead-letters nothing", func(t *testing.T) {
		newSecret := map[string]string{}
		for _, s := range subjects {
			var rot app.RotatedSecret
			raw := apiCall(t, client, "POST", base+"/api/integradores/"+s.id+"/segredo/rotacionar", admin, "")
			if err := json.Unmarshal(raw, &rot); err != nil || rot.Segredo == "" {
				t.Fatalf("rotate: %s %v", raw, err)
			}
			newSecret[s.id] = rot.Segredo
		}
		for i := range 10 { // the receivers still hold the old secret
			publish(fmt.Sprintf("jornada:rotacao-%d", i%5), "")
		}
		applied("jornada:rotacao-", 10)
		for _, s := range subjects { // now they switch to the new one
			s.rc.configure(t, newSecret[s.id], s.id)
		}
		for i := range 10 {
			publish(fmt.Sprintf("jornada:rotacao-%d", i%5), "")
		}
		applied("jornada:rotacao-", 20)
		for _, s := range subjects {
			var page struct {
				Total int `json:"total"`
			}
			raw := apiCall(t, client, "GET", base+"/api/entregas?status=falhou&integrador="+s.id, admin, "")
			if err := json.Unmarshal(raw, &page); err != nil || page.Total != 0 {
				t.Errorf("%s: %d dead letters after the rotation (%s)", s.name, page.Total, raw)
			}
		}
	})

	t.Run("one event failing for 8 s delays no other aggregate", func(t *testing.T) {
		poison := uuid.Must(uuid.NewV7()).String()
		for _, s := range subjects {
			s.proxy.mu.Lock()
			s.proxy.poison, s.proxy.poisonUntil = poison, time.Now().Add(8*time.Second)
			s.proxy.mu.Unlock()
		}
		publish("jornada:veneno", poison)
		// Alone in the queue, it fails five times in a row first: a breaker
		// counting consecutive failures would open now.
		for _, s := range subjects {
			s.proxy.refusedPoison(t, s.name, 5)
		}
		for i := range 5 {
			id := uuid.Must(uuid.NewV7()).String()
			start := time.Now()
			publish(fmt.Sprintf("jornada:vizinha-%d", i), id)
			for _, s := range subjects {
				var at time.Time
				s.proxy.answered.await(t, 5*time.Second, s.name+": another aggregate's event to arrive", func() (bool, string) {
					var ok bool
					at, ok = s.proxy.acceptedAt(id)
					return ok, "not yet"
				})
				if d := at.Sub(start); d > time.Second {
					t.Errorf("%s: another aggregate's event arrived %v after its publish", s.name, d)
				}
			}
			// The five neighbours spread over the poison's next retry: the
			// last two go after it.
			if i == 2 {
				for _, s := range subjects {
					s.proxy.refusedPoison(t, s.name, 6)
				}
			}
		}
		applied("jornada:veneno", 1) // delivered once the receiver stops failing
		for _, s := range subjects {
			var in app.Integrator
			raw := apiCall(t, client, "GET", base+"/api/integradores/"+s.id, admin, "")
			if err := json.Unmarshal(raw, &in); err != nil || in.Circuito == nil || in.Circuito.Estado != app.CircuitoFechado {
				t.Errorf("%s: circuit %+v after one poison event (%s)", s.name, in.Circuito, raw)
			}
		}
	})

	for _, s := range subjects {
		st := s.rc.state(t)
		for _, d := range st.Descartes {
			// A repeat is fine, and so is the 401 that makes Geohub ask
			// again with the other secret during the rotation, and the
			// admin's verification, which carries no fact (guide 12.6).
			if d.Motivo != "repetido" && d.Motivo != "assinatura-invalida" && d.Motivo != "teste" {
				t.Errorf("%s discarded a delivery: %s %s", s.name, d.EventoID, d.Motivo)
			}
		}
		if st.Espera != 0 {
			t.Errorf("%s holds %d events at the end", s.name, st.Espera)
		}
		var page struct {
			Total int `json:"total"`
		}
		raw := apiCall(t, client, "GET", base+"/api/entregas?status=falhou&integrador="+s.id, admin, "")
		if err := json.Unmarshal(raw, &page); err != nil || page.Total != 0 {
			t.Errorf("%s: %d dead letters (%s)", s.name, page.Total, raw)
		}
		s.proxy.mu.Lock()
		if n := s.proxy.statuses[400]; n > 0 {
			t.Errorf("%s answered 400 to %d envelopes", s.name, n)
		}
		if len(s.proxy.disorders) > 0 {
			t.Errorf("%s got deliveries out of order: %v", s.name, s.proxy.disorders)
		}
		s.proxy.mu.Unlock()
	}
}
