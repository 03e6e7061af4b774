package simulator

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
	"time"
)

type seenRequest struct {
	method, path, auth, sol, contentType string
	body                                 []byte
}

// scripted is an API whose n-th answer (from 0) is chosen by answer.
type scripted struct {
	mu     sync.Mutex
	reqs   []seenRequest
	answer func(n int, w http.ResponseWriter, r *http.Request)
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		panic(err)
	}
	s.mu.Lock()
	n := len(s.reqs)
	s.reqs = append(s.reqs, seenRequest{r.Method, r.URL.EscapedPath(), r.Header.Get("Authorization"),
		r.Header.Get(HeaderSolicitacao), r.Header.Get("Content-Type"), body})
	s.mu.Unlock()
	s.answer(n, w, r)
}

func (s *scripted) seen() []seenRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seenRequest(nil), s.reqs...)
}

// newTestCAD returns a CAD on srv whose waits are recorded, not slept.
func newTestCAD(t *testing.T, h http.Handler, mod func(*Config)) (*CAD, *[]time.Duration) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	cfg := Config{BaseURL: srv.URL + "/", APIKey: apiKey, Secret: secret, Self: self}
	if mod != nil {
		mod(&cfg)
	}
	c := New(cfg)
	var mu sync.Mutex
	waits := &[]time.Duration{}
	c.wait = func(ctx context.Context, d time.Duration) error {
		mu.Lock()
		*waits = append(*waits, d)
		mu.Unlock()
		return ctx.Err()
	}
	return c, waits
}

func TestRetrySameSolicitacao(t *testing.T) {
	created := oc("oc-1", "incendio", "aberta", 1)
	api := &scripted{answer: func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 0 {
			writeJSON(w, 503, errBody("indisponivel", "banco ocupado"))
			return
		}
		b, _ := json.Marshal(created)
		writeJSON(w, 201, b)
	}}
	c, waits := newTestCAD(t, api, nil)
	req := RegisterRequest{Natureza: "incendio", Descricao: "Fumaça no galpão", Endereco: "Rua A, 1", Local: &Local{Lat: -22.9, Lng: -47.06}}
	got, err := c.Register(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, created) {
		t.Errorf("Register = %+v, want %+v", got, created)
	}
	reqs := api.seen()
	if len(reqs) != 2 {
		t.Fatalf("%d attempts, want 2", len(reqs))
	}
	wantBody, _ := json.Marshal(req)
	for i, r := range reqs {
		if r.method != http.MethodPost || r.path != "/api/ocorrencias" {
			t.Errorf("attempt %d: %s %s", i, r.method, r.path)
		}
		if r.auth != "Bearer "+apiKey {
			t.Errorf("attempt %d: Authorization %q", i, r.auth)
		}
		if r.contentType != "application/json" {
			t.Errorf("attempt %d: Content-Type %q", i, r.contentType)
		}
		if !uuidRE.MatchString(r.sol) {
			t.Errorf("attempt %d: x-solicitacao-id %q is not a UUID", i, r.sol)
		}
		if string(r.body) != string(wantBody) {
			t.Errorf("attempt %d: body %s, want %s", i, r.body, wantBody)
		}
	}
	if reqs[1].sol != reqs[0].sol {
		t.Errorf("retry changed x-solicitacao-id: %s then %s", reqs[0].sol, reqs[1].sol)
	}
	if len(*waits) != 1 {
		t.Errorf("waits = %v", *waits)
	}
	// The response is the CAD's only view of its own command (the events
	// are its echo): it is in the projection, with the outcome.
	if p, ok := c.Projection().Ocorrencia("oc-1"); !ok || !reflect.DeepEqual(p, created) {
		t.Errorf("projection = %+v, %v", p, ok)
	}
	want := Outcome{Solicitacao: reqs[0].sol, Status: 201, Concluded: true, Metodo: "POST",
		Rota: "/api/ocorrencias", OcorrenciaID: "oc-1", FromResponse: true}
	if o, _ := c.Projection().Outcome(reqs[0].sol); !reflect.DeepEqual(o, want) {
		t.Errorf("outcome = %+v, want %+v", o, want)
	}

	// A second command gets a new id.
	if _, err := c.Register(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if reqs := api.seen(); reqs[2].sol == reqs[0].sol {
		t.Error("a new command reused the x-solicitacao-id")
	}
}

func TestConflictIsFinal(t *testing.T) {
	api := &scripted{answer: func(n int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(409)
		w.Write([]byte(`{"erro":"transição inválida","codigo":"transicao-invalida","detalhes":[{"caminho":"/para","mensagem":"liberado → no_local"}]}`))
	}}
	c, waits := newTestCAD(t, api, nil)
	_, err := c.SetDispatchStatus(context.Background(), "oc 1", "de/2", DespachoNoLocal)
	var apiErr *APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("err = %v, want *APIError", err)
	}
	reqs := api.seen()
	if len(reqs) != 1 || len(*waits) != 0 {
		t.Fatalf("%d attempts, waits %v: a 409 must not be retried", len(reqs), *waits)
	}
	if reqs[0].path != "/api/ocorrencias/oc%201/despachos/de%2F2/status" || string(reqs[0].body) != `{"para":"no_local"}` {
		t.Errorf("sent %s %s", reqs[0].path, reqs[0].body)
	}
	want := Motivo{Erro: "transição inválida", Codigo: "transicao-invalida", Detalhes: []Detalhe{{Caminho: "/para", Mensagem: "liberado → no_local"}}}
	if apiErr.Status != 409 || apiErr.Solicitacao != reqs[0].sol || !reflect.DeepEqual(apiErr.Motivo, want) {
		t.Errorf("APIError = %+v", apiErr)
	}
	o, ok := c.Projection().Outcome(reqs[0].sol)
	if !ok || o.Concluded || o.Status != 409 || o.Motivo == nil || o.Motivo.Codigo != "transicao-invalida" {
		t.Errorf("outcome = %+v, %v", o, ok)
	}
	if len(c.Projection().Ocorrencias()) != 0 {
		t.Error("a refusal changed the projection")
	}
}

func TestRetryAfter(t *testing.T) {
	res := oc("oc-1", "resgate", "encerrada", 4)
	api := &scripted{answer: func(n int, w http.ResponseWriter, r *http.Request) {
		switch n {
		case 0:
			w.Header().Set("Retry-After", "1")
			writeJSON(w, 429, errBody("limite", "devagar"))
		case 1:
			w.Header().Set("Retry-After", "3600")
			writeJSON(w, 503, errBody("indisponivel", "manutenção"))
		default:
			b, _ := json.Marshal(res)
			writeJSON(w, 200, b)
		}
	}}
	c, waits := newTestCAD(t, api, func(cfg *Config) { cfg.MaxRetryWait = 2 * time.Second })
	if _, err := c.SetStatus(context.Background(), "oc-1", StatusEncerrada); err != nil {
		t.Fatal(err)
	}
	if want := []time.Duration{time.Second, 2 * time.Second}; !reflect.DeepEqual(*waits, want) {
		t.Errorf("waits = %v, want %v (Retry-After, capped)", *waits, want)
	}
	reqs := api.seen()
	if len(reqs) != 3 || reqs[1].sol != reqs[0].sol || reqs[2].sol != reqs[0].sol {
		t.Errorf("attempts: %+v", reqs)
	}
}

func TestTransportErrorRetried(t *testing.T) {
	api := &scripted{answer: func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 0 { // the connection drops before any answer
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(err)
			}
			conn.Close()
			return
		}
		writeJSON(w, 201, []byte(`{"id":"oc-9","natureza":"alagamento","status":"aberta","versao":1}`))
	}}
	c, _ := newTestCAD(t, api, nil)
	o, err := c.Register(context.Background(), RegisterRequest{Natureza: "alagamento"})
	if err != nil {
		t.Fatal(err)
	}
	if o.ID != "oc-9" || o.Despachos == nil {
		t.Errorf("Register = %+v", o)
	}
	reqs := api.seen()
	if len(reqs) < 2 {
		t.Fatalf("%d attempts", len(reqs))
	}
	for _, r := range reqs[1:] {
		if r.sol != reqs[0].sol {
			t.Errorf("x-solicitacao-id changed: %s, %s", reqs[0].sol, r.sol)
		}
	}
}

func TestRetriesBounded(t *testing.T) {
	api := &scripted{answer: func(n int, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 502, errBody("gateway", "fora"))
	}}
	c, waits := newTestCAD(t, api, func(cfg *Config) { cfg.MaxAttempts = 3 })
	_, err := c.Dispatch(context.Background(), "oc-1", "UR-12")
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 502 {
		t.Fatalf("err = %v", err)
	}
	if n := len(api.seen()); n != 3 || len(*waits) != 2 {
		t.Errorf("%d attempts, waits %v", n, *waits)
	}
	for _, w := range *waits {
		if w <= 0 || w > DefaultMaxRetryWait {
			t.Errorf("backoff %v", w)
		}
	}
	if _, ok := c.Projection().Outcome(apiErr.Solicitacao); ok {
		t.Error("a command without a final answer has an outcome")
	}
}

func TestRetryStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	api := &scripted{answer: func(n int, w http.ResponseWriter, r *http.Request) {
		cancel()
		w.Header().Set("Retry-After", "30")
		writeJSON(w, 503, errBody("indisponivel", "x"))
	}}
	c, _ := newTestCAD(t, api, nil)
	c.wait = sleep // the real one: it must return on cancel, not after 30 s
	_, err := c.SetStatus(ctx, "oc-1", StatusEncerrada)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestNewSolicitacaoID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := NewSolicitacaoID()
		if !uuidRE.MatchString(id) || id[14] != '4' {
			t.Fatalf("%q is not a UUID v4", id)
		}
		if seen[id] {
			t.Fatalf("repeated %s", id)
		}
		seen[id] = true
	}
}

// TestDoRepeat: the same x-solicitacao-id and body again returns the first
// outcome and executes nothing; another body with it is a 409. Get never
// touches the CAD's projection.
func TestDoRepeat(t *testing.T) {
	var c *CAD
	api := newFakeAPI(t, nil)
	c, _ = newTestCAD(t, api, nil)
	ctx := context.Background()
	sol := NewSolicitacaoID()
	body := RegisterRequest{Natureza: "queda_arvore"}
	st1, b1, err := c.Do(ctx, http.MethodPost, "/api/ocorrencias", sol, body)
	if err != nil || st1 != 201 {
		t.Fatalf("first: %d %s %v", st1, b1, err)
	}
	st2, b2, err := c.Do(ctx, http.MethodPost, "/api/ocorrencias", sol, body)
	if err != nil || st2 != st1 || string(b2) != string(b1) {
		t.Fatalf("repeat: %d %s %v, want %d %s", st2, b2, err, st1, b1)
	}
	if n := api.executed(); n != 1 {
		t.Fatalf("%d commands executed", n)
	}
	st3, _, err := c.Do(ctx, http.MethodPost, "/api/ocorrencias", sol, RegisterRequest{Natureza: "incendio"})
	if err != nil || st3 != 409 {
		t.Fatalf("other body: %d %v", st3, err)
	}
	if o, _ := c.Projection().Outcome(sol); o.Status != 201 || !o.Concluded {
		t.Errorf("outcome = %+v: the first one stands", o)
	}
	// Malformed JSON passes through as raw bytes.
	if st, _, _ := c.Do(ctx, http.MethodPost, "/api/ocorrencias", NewSolicitacaoID(), []byte(`{`)); st != 400 {
		t.Errorf("malformed: %d", st)
	}

	first, _ := DecodeOcorrencia(b1)
	c2, _ := newTestCAD(t, api, nil)
	got, err := c2.Get(ctx, first.ID)
	if err != nil || !reflect.DeepEqual(got, first) {
		t.Fatalf("Get = %+v, %v; want %+v", got, err, first)
	}
	if len(c2.Projection().Ocorrencias()) != 0 {
		t.Error("Get changed the projection")
	}
	if _, err := c2.Get(ctx, "nope"); !isStatus(err, 404) {
		t.Errorf("Get(nope) = %v", err)
	}
}

func isStatus(err error, status int) bool {
	var e *APIError
	return errors.As(err, &e) && e.Status == status
}

// TestRegisterShortAnswer: SPEC 7 promises only {"id", "status"} in the
// 201; the natureza sent fills the gap.
func TestRegisterShortAnswer(t *testing.T) {
	api := &scripted{answer: func(n int, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 201, []byte(`{"id":"oc-5","status":"aberta"}`))
	}}
	c, _ := newTestCAD(t, api, nil)
	o, err := c.Register(context.Background(), RegisterRequest{Natureza: "resgate"})
	if err != nil {
		t.Fatal(err)
	}
	want := oc("oc-5", "resgate", "aberta", 0)
	if !reflect.DeepEqual(o, want) {
		t.Errorf("Register = %+v", o)
	}
	if p, _ := c.Projection().Ocorrencia("oc-5"); !reflect.DeepEqual(p, want) {
		t.Errorf("projection = %+v", p)
	}
}
