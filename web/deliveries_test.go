package web_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"geohub/app"
	"geohub/app/callback"
	"geohub/store/storetest"
	"geohub/web"
)

// delEnv is a Geohub whose outbox runs: apiEnv plus a dispatcher on the
// test's clock, delivering to loopback receivers.
type delEnv struct {
	*apiEnv
	Dispatcher *app.Dispatcher
}

// apiSetupWithDispatcher starts a fresh Geohub wired as cmd/geohub/serve.go
// wires it, dispatcher included. Its callback policy is insecure so that
// httptest receivers (http://127.0.0.1) are allowed; the store, the cadastro
// and the dispatcher all read the apiClock, so tests move time by hand.
func apiSetupWithDispatcher(t *testing.T) *delEnv {
	t.Helper()
	clock := &apiClock{now: apiStart}
	k := storetest.New(t, storetest.Options{
		Deps: app.Deps{MasterKey: apiMasterKey, Now: clock.Now,
			Logger:  slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError})),
			Policy:  callback.Policy{Insecure: true, Resolver: apiResolver},
			Version: "teste", AutoDisable: app.DefaultAutoDisable, ReapOnStart: true},
		// A fixed jitter (0.5 adds nothing) makes the backoff exact.
		Tune: func(s *app.Services) {
			s.Dispatcher.Jitter = func() float64 { return 0.5 }
			s.Dispatcher.Signals.Recorded.Init()
		},
	})
	db, auth, integrators, dispatcher := k.DB, k.Auth, k.Integrators, k.Dispatcher

	hs := httptest.NewServer(web.NewHandler(k.Services, web.Options{Ocorrencias: k.Ocorrencias, Gatherer: k.Gatherer}))
	t.Cleanup(hs.Close)

	env := &apiEnv{URL: hs.URL, DB: db, Clock: clock, Tokens: map[app.Papel]string{}, client: hs.Client(),
		Integrators: integrators, Registry: k.Registry}
	for _, p := range []app.Papel{app.PapelAdmin, app.PapelOperador, app.PapelLeitor, app.PapelProdutor} {
		secret, _, err := auth.CreateToken(t.Context(), p, "teste-"+string(p))
		if err != nil {
			t.Fatal(err)
		}
		env.Tokens[p] = secret
	}
	return &delEnv{apiEnv: env, Dispatcher: dispatcher}
}

// delRequest is one request a receiver got.
type delRequest struct {
	Header http.Header
	Body   []byte
}

// delReceiver is a loopback CAD endpoint: it records every request and
// answers with the status and body set last. When clock is set, each request
// moves it by took, so recorded durations are exact.
type delReceiver struct {
	*httptest.Server
	mu     sync.Mutex
	got    []delRequest
	status int
	answer string
	clock  *apiClock
	took   time.Duration
}

func delNewReceiver(t *testing.T, status int) *delReceiver {
	t.Helper()
	rc := &delReceiver{status: status}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.got = append(rc.got, delRequest{r.Header.Clone(), body})
		status, answer, clock, took := rc.status, rc.answer, rc.clock, rc.took
		rc.mu.Unlock()
		if clock != nil {
			clock.Advance(took)
		}
		if status >= 300 && status < 400 {
			w.Header().Set("Location", "http://127.0.0.1:1/elsewhere")
		}
		w.WriteHeader(status)
		io.WriteString(w, answer)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *delReceiver) delSet(status int, answer string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.status, rc.answer = status, answer
}

func (rc *delReceiver) delRequests() []delRequest {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]delRequest(nil), rc.got...)
}

// delFor returns the requests that carried eventID.
func (rc *delReceiver) delFor(eventID string) []delRequest {
	var out []delRequest
	for _, r := range rc.delRequests() {
		if r.Header.Get("X-Geohub-Evento-Id") == eventID {
			out = append(out, r)
		}
	}
	return out
}

// delCheckSigned verifies a request as a receiver must: the signature over
// "<timestamp>.<raw body>" with the integrator's secret, and the headers.
func delCheckSigned(t *testing.T, r delRequest, secret string) {
	t.Helper()
	ts, err := strconv.ParseInt(r.Header.Get("X-Geohub-Timestamp"), 10, 64)
	if err != nil {
		t.Fatalf("X-Geohub-Timestamp %q", r.Header.Get("X-Geohub-Timestamp"))
	}
	if got, want := r.Header.Get("X-Geohub-Assinatura"), app.Sign([]byte(secret), ts, r.Body); got != want {
		t.Fatalf("X-Geohub-Assinatura %q, want %q", got, want)
	}
	for _, h := range []string{"X-Geohub-Evento-Id", "X-Geohub-Agregado", "X-Geohub-Sequencia", "X-Geohub-Entrega-Id", "X-Geohub-Tentativa"} {
		if r.Header.Get(h) == "" {
			t.Fatalf("missing header %s: %v", h, r.Header)
		}
	}
	if r.Header.Get("Content-Type") != "application/json" || !strings.HasPrefix(r.Header.Get("User-Agent"), "Geohub/") {
		t.Fatalf("headers %v", r.Header)
	}
}

// waitRecorded re-checks cond each time the dispatcher commits a round's
// outcomes, until it holds.
func (e *delEnv) waitRecorded(t *testing.T, what string, cond func() bool) {
	t.Helper()
	storetest.Await(t, what, cond, &e.Dispatcher.Signals.Recorded)
}

// delRegisterTypes registers the fixtures, teste:livre and teste:todos (a
// free type every active integrator receives).
func (e *delEnv) delRegisterTypes(t *testing.T) {
	t.Helper()
	e.registerTypes(t)
	todos := apiFreeType("teste:todos", "1.0.0")
	todos["audiencia"] = app.AudienciaTodos
	e.do(t, http.MethodPost, "/api/registro", app.PapelAdmin, todos).want(t, http.StatusCreated)
}

// delCreateIntegrator registers an integrator whose callback is rc.
func (e *delEnv) delCreateIntegrator(t *testing.T, rc *delReceiver, nome string) app.CreatedIntegrator {
	t.Helper()
	var c app.CreatedIntegrator
	e.do(t, http.MethodPost, "/api/integradores", app.PapelAdmin, map[string]any{"nome": nome,
		"callback_url": rc.URL + "/geohub/eventos", "hosts_permitidos": []string{"127.0.0.1"}}).
		want(t, http.StatusCreated).decode(t, &c)
	return c
}

func (e *delEnv) delSetActive(t *testing.T, id string, ativo bool) {
	t.Helper()
	var in app.Integrator
	e.do(t, http.MethodPatch, "/api/integradores/"+id, app.PapelAdmin, map[string]any{"ativo": ativo}).
		want(t, http.StatusOK).decode(t, &in)
	if in.Ativo != ativo {
		t.Fatalf("PATCH ativo=%v answered %+v", ativo, in)
	}
}

func (e *delEnv) delIntegrator(t *testing.T, id string) app.Integrator {
	t.Helper()
	var in app.Integrator
	e.do(t, http.MethodGet, "/api/integradores/"+id, app.PapelLeitor, nil).want(t, http.StatusOK).decode(t, &in)
	return in
}

// delPublish publishes a teste:todos event on agregado.
func (e *delEnv) delPublish(t *testing.T, agregado string, n int) app.Event {
	t.Helper()
	return e.publish(t, map[string]any{"tipo": "teste:todos", "origem": "teste", "agregado": agregado,
		"payload": map[string]any{"n": n}})
}

// delList reads one page of GET /api/entregas as leitor.
func (e *delEnv) delList(t *testing.T, query string) app.Page[app.Delivery] {
	t.Helper()
	var p app.Page[app.Delivery]
	e.do(t, http.MethodGet, "/api/entregas?"+query, app.PapelLeitor, nil).want(t, http.StatusOK).decode(t, &p)
	return p
}

// delOne returns the delivery of eventID to integrador.
func (e *delEnv) delOne(t *testing.T, eventID, integrador string) app.Delivery {
	t.Helper()
	p := e.delList(t, "event_id="+eventID+"&integrador="+integrador)
	if p.Total != 1 || len(p.Linhas) != 1 {
		t.Fatalf("deliveries of %s to %s: %+v", eventID, integrador, p)
	}
	return p.Linhas[0]
}

func (e *delEnv) delWaitStatus(t *testing.T, eventID, integrador, status string) app.Delivery {
	t.Helper()
	var d app.Delivery
	e.waitRecorded(t, fmt.Sprintf("delivery of %s to %s to be %s", eventID, integrador, status), func() bool {
		d = e.delOne(t, eventID, integrador)
		return d.Status == status
	})
	return d
}

// delDetail is the body of GET /api/entregas/{id}.
type delDetail struct {
	app.Delivery
	Registradas []app.Attempt `json:"tentativas_registradas"`
}

func (e *delEnv) delGet(t *testing.T, id int64) (delDetail, map[string]json.RawMessage) {
	t.Helper()
	res := e.do(t, http.MethodGet, fmt.Sprintf("/api/entregas/%d", id), app.PapelLeitor, nil).want(t, http.StatusOK)
	var d delDetail
	res.decode(t, &d)
	var raw map[string]json.RawMessage
	res.decode(t, &raw)
	return d, raw
}

// delRowKeys are the fields SPEC 6.4 lists for every row of /api/entregas.
var delRowKeys = []string{"id", "event_id", "integrador", "tipo", "agregado", "sequencia", "status", "tentativas",
	"proxima_tentativa", "ultimo_status", "ultimo_erro", "entregue_em"}

// delCheckKeys checks that row has every field of SPEC 6.4. A field whose
// value is empty (no error yet, not delivered yet) may be left out; the
// envelope itself never appears.
func delCheckKeys(t *testing.T, row map[string]json.RawMessage, mayOmit ...string) {
	t.Helper()
	for _, k := range delRowKeys {
		if _, ok := row[k]; !ok && !slices.Contains(mayOmit, k) {
			t.Errorf("row lacks %q: %v", k, row)
		}
	}
	for _, k := range []string{"corpo", "body", "quedas", "worker", "lease_ate"} {
		if _, ok := row[k]; ok {
			t.Errorf("row exposes %q", k)
		}
	}
}

func TestDeliveriesListFiltersAndPages(t *testing.T) {
	t.Parallel()
	env := apiSetupWithDispatcher(t)
	env.delRegisterTypes(t)
	ra, rb := delNewReceiver(t, http.StatusNoContent), delNewReceiver(t, http.StatusNoContent)
	a := env.delCreateIntegrator(t, ra, "CAD Polícia")
	b := env.delCreateIntegrator(t, rb, "CAD Bombeiros")

	// 5 jornada:iniciada and 250 teste:todos over five aggregates: 255
	// events to two integrators, 510 deliveries.
	var jornadas []app.Event
	for i := range 5 {
		body := apiPublishBody("jornada:iniciada", apiJornada())
		body["agregado"] = fmt.Sprintf("jornada:%d", i)
		jornadas = append(jornadas, env.publish(t, body))
	}
	const n, workers = 250, 10
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				raw, _ := json.Marshal(map[string]any{"tipo": "teste:todos", "origem": "teste",
					"agregado": fmt.Sprintf("lote:%d", i%5), "payload": map[string]any{"n": i}})
				req, _ := http.NewRequest(http.MethodPost, env.URL+"/api/events", bytes.NewReader(raw))
				req.Header.Set("Authorization", "Bearer "+env.Tokens[app.PapelProdutor])
				res, err := env.client.Do(req)
				if err != nil {
					errs <- err
					continue
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusCreated {
					errs <- fmt.Errorf("publish %d: status %d", i, res.StatusCode)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	const total = 2 * (n + 5)
	env.waitRecorded(t, "every delivery", func() bool { return env.delList(t, "status=entregue&limite=1").Total == total })
	if len(ra.delRequests()) != n+5 || len(rb.delRequests()) != n+5 {
		t.Fatalf("receivers got %d and %d requests, want %d each", len(ra.delRequests()), len(rb.delRequests()), n+5)
	}

	t.Run("a row has the fields of SPEC 6.4", func(t *testing.T) {
		ev := jornadas[2]
		res := env.do(t, http.MethodGet, "/api/entregas?event_id="+ev.EventID+"&integrador="+a.ID, app.PapelLeitor, nil).
			want(t, http.StatusOK)
		var raw app.Page[map[string]json.RawMessage]
		res.decode(t, &raw)
		if len(raw.Linhas) != 1 {
			t.Fatalf("rows: %s", res.Body)
		}
		delCheckKeys(t, raw.Linhas[0], "ultimo_erro") // delivered: no error to report
		var d app.Page[app.Delivery]
		res.decode(t, &d)
		row := d.Linhas[0]
		if row.ID <= 0 || row.EventID != ev.EventID || row.Integrador != a.ID || row.Tipo != "jornada:iniciada" ||
			row.Agregado != "jornada:2" || row.Sequencia != 1 || row.Status != app.EntregaEntregue || row.Tentativas != 1 ||
			row.UltimoStatus != http.StatusNoContent || row.UltimoErro != "" || row.EntregueEm == nil ||
			!row.EntregueEm.Equal(apiStart) || !row.ProximaTentativa.Equal(apiStart) {
			t.Errorf("row %+v", row)
		}
		// The id is a decimal string, the one GET /api/entregas/{id} takes.
		var id string
		if err := json.Unmarshal(raw.Linhas[0]["id"], &id); err != nil || id != strconv.FormatInt(row.ID, 10) {
			t.Errorf("id %s, want the decimal string %d", raw.Linhas[0]["id"], row.ID)
		}
	})

	filters := []struct {
		name  string
		query string
		total int
		match func(app.Delivery) bool
	}{
		{"integrador", "integrador=" + a.ID, n + 5, func(d app.Delivery) bool { return d.Integrador == a.ID }},
		{"status entregue", "status=entregue", total, func(d app.Delivery) bool { return d.Status == app.EntregaEntregue }},
		{"status pendente", "status=pendente", 0, nil},
		{"status falhou", "status=falhou", 0, nil},
		{"tipo", "tipo=jornada:iniciada", 10, func(d app.Delivery) bool { return d.Tipo == "jornada:iniciada" }},
		{"tipo and integrador", "tipo=teste:todos&integrador=" + b.ID, n,
			func(d app.Delivery) bool { return d.Tipo == "teste:todos" && d.Integrador == b.ID }},
		{"agregado", "agregado=lote:3", 2 * n / 5, func(d app.Delivery) bool { return d.Agregado == "lote:3" }},
		{"event_id", "event_id=" + jornadas[0].EventID, 2, func(d app.Delivery) bool {
			return d.EventID == jornadas[0].EventID && d.Tipo == "jornada:iniciada" && d.Agregado == "jornada:0"
		}},
		{"an unknown integrator", "integrador=nenhum", 0, nil},
		{"filters combine with AND", "tipo=jornada:iniciada&agregado=lote:1", 0, nil},
	}
	for _, f := range filters {
		t.Run("filter by "+f.name, func(t *testing.T) {
			p := env.delList(t, f.query+"&limite=500")
			if p.Total != f.total || len(p.Linhas) != min(f.total, 500) {
				t.Fatalf("total %d, %d rows; want %d", p.Total, len(p.Linhas), f.total)
			}
			for _, d := range p.Linhas {
				if !f.match(d) {
					t.Fatalf("row does not match %s: %+v", f.query, d)
				}
			}
		})
	}
	t.Run("event_id finds one delivery per recipient", func(t *testing.T) {
		p := env.delList(t, "event_id="+jornadas[0].EventID)
		got := map[string]bool{}
		for _, d := range p.Linhas {
			got[d.Integrador] = true
		}
		if len(got) != 2 || !got[a.ID] || !got[b.ID] {
			t.Errorf("recipients %v, want %s and %s", got, a.ID, b.ID)
		}
	})
	t.Run("sequences count 1..n per integrator and aggregate", func(t *testing.T) {
		p := env.delList(t, "agregado=lote:3&integrador="+a.ID+"&limite=500")
		if len(p.Linhas) != n/5 {
			t.Fatalf("%d rows, want %d", len(p.Linhas), n/5)
		}
		for i, d := range p.Linhas {
			if d.Sequencia != int64(i+1) {
				t.Fatalf("row %d has sequencia %d", i, d.Sequencia)
			}
		}
	})

	pages := []struct {
		name                 string
		query                string
		linhas, limite, desl int
	}{
		{"limite over the cap gets 500", "limite=1000", 500, 500, 0},
		{"limite defaults to 100", "", 100, 100, 0},
		{"limite at the cap", "limite=500", 500, 500, 0},
		{"the last page holds the rest", "limite=1000&deslocamento=500", total - 500, 500, 500},
		{"a page past the end is empty", "deslocamento=600", 0, 100, 600},
	}
	for _, p := range pages {
		t.Run(p.name, func(t *testing.T) {
			page := env.delList(t, p.query)
			if len(page.Linhas) != p.linhas || page.Total != total || page.Limite != p.limite || page.Deslocamento != p.desl {
				t.Errorf("got %d linhas, total %d, limite %d, deslocamento %d; want %d, %d, %d, %d",
					len(page.Linhas), page.Total, page.Limite, page.Deslocamento, p.linhas, total, p.limite, p.desl)
			}
		})
	}
	t.Run("pages are ordered by id and do not overlap", func(t *testing.T) {
		first, rest := env.delList(t, "limite=1000"), env.delList(t, "limite=500&deslocamento=500")
		all := append(first.Linhas, rest.Linhas...)
		if len(all) != total {
			t.Fatalf("%d rows over two pages, want %d", len(all), total)
		}
		for i := 1; i < len(all); i++ {
			if all[i].ID <= all[i-1].ID {
				t.Fatalf("row %d: id %d after %d", i, all[i].ID, all[i-1].ID)
			}
		}
		mid := env.delList(t, "limite=7&deslocamento=3")
		for i, d := range mid.Linhas {
			if d.ID != first.Linhas[3+i].ID {
				t.Fatalf("limite=7&deslocamento=3 row %d is %d, want %d", i, d.ID, first.Linhas[3+i].ID)
			}
		}
	})

	refused := []apiScenario{
		{name: "an unknown status", route: "/api/entregas?status=entregando", role: app.PapelLeitor,
			status: 422, codigo: app.EInvalid, caminhos: []string{"/status"}},
		{name: "an unknown parameter", route: "/api/entregas?integrador=" + a.ID + "&pagina=2", role: app.PapelLeitor,
			status: 422, codigo: app.EInvalid, caminhos: []string{"/pagina"}},
		{name: "a negative limite", route: "/api/entregas?limite=-1", role: app.PapelLeitor,
			status: 422, codigo: app.EInvalid, caminhos: []string{"/limite"}},
		{name: "non-numeric paging", route: "/api/entregas?limite=dez&deslocamento=-2", role: app.PapelLeitor,
			status: 422, codigo: app.EInvalid, caminhos: []string{"/limite", "/deslocamento"}},
		{name: "produtor cannot list", route: "/api/entregas", role: app.PapelProdutor, status: 403, codigo: app.EForbidden},
		{name: "produtor cannot read one", route: "/api/entregas/1", role: app.PapelProdutor, status: 403, codigo: app.EForbidden},
		{name: "no token", route: "/api/entregas", status: 401, codigo: app.EUnauthorized},
		{name: "leitor lists", route: "/api/entregas?limite=1", role: app.PapelLeitor, status: 200},
		{name: "operador lists", route: "/api/entregas?limite=1", role: app.PapelOperador, status: 200},
		{name: "admin lists", route: "/api/entregas?limite=1", role: app.PapelAdmin, status: 200},
	}
	for _, sc := range refused {
		sc.method = http.MethodGet
		t.Run(sc.name, func(t *testing.T) { env.run(t, sc) })
	}
}

func TestDeliveryDeadLetterIsResentWithItsSequenceAndBody(t *testing.T) {
	t.Parallel()
	env := apiSetupWithDispatcher(t)
	env.delRegisterTypes(t)
	rc := delNewReceiver(t, http.StatusBadRequest)
	answer := "assinatura recusada: " + strings.Repeat("x", 4000)
	rc.delSet(http.StatusBadRequest, answer)
	rc.clock, rc.took = env.Clock, 250*time.Millisecond
	in := env.delCreateIntegrator(t, rc, "CAD Samu")

	// Two events on one aggregate, one after the other: sequences 1 and 2,
	// both dead-lettered at once by the protocol answer 400.
	e1 := env.delPublish(t, "guarnicao:42", 1)
	env.delWaitStatus(t, e1.EventID, in.ID, app.EntregaFalhou)
	start := env.Clock.Now()
	e2 := env.delPublish(t, "guarnicao:42", 2)
	d2 := env.delWaitStatus(t, e2.EventID, in.ID, app.EntregaFalhou)
	if d2.Sequencia != 2 || d2.Tentativas != 1 || d2.UltimoStatus != http.StatusBadRequest ||
		!strings.Contains(d2.UltimoErro, "400") || d2.EntregueEm != nil {
		t.Fatalf("dead letter %+v", d2)
	}
	first := rc.delFor(e2.EventID)
	if len(first) != 1 {
		t.Fatalf("%d requests for the second event, want 1: a 400 is not retried", len(first))
	}
	delCheckSigned(t, first[0], in.Segredo)
	if first[0].Header.Get("X-Geohub-Sequencia") != "2" || first[0].Header.Get("X-Geohub-Agregado") != "guarnicao:42" {
		t.Fatalf("headers %v", first[0].Header)
	}

	t.Run("the dead letter lists with its reason", func(t *testing.T) {
		res := env.do(t, http.MethodGet, "/api/entregas?status=falhou&event_id="+e2.EventID, app.PapelLeitor, nil).want(t, http.StatusOK)
		var raw app.Page[map[string]json.RawMessage]
		res.decode(t, &raw)
		if raw.Total != 1 {
			t.Fatalf("%s", res.Body)
		}
		delCheckKeys(t, raw.Linhas[0], "entregue_em") // not delivered
	})
	t.Run("GET /api/entregas/{id} shows every attempt", func(t *testing.T) {
		d, raw := env.delGet(t, d2.ID)
		delCheckKeys(t, raw, "entregue_em")
		if d.ID != d2.ID || d.Status != app.EntregaFalhou || d.Sequencia != 2 || d.EventID != e2.EventID {
			t.Errorf("detail %+v", d.Delivery)
		}
		if len(d.Registradas) != 1 {
			t.Fatalf("attempts %+v", d.Registradas)
		}
		a := d.Registradas[0]
		if a.EntregaID != first[0].Header.Get("X-Geohub-Entrega-Id") || a.Tentativa != 1 || a.StatusCode != http.StatusBadRequest ||
			a.DuracaoMS != 250 || !a.Inicio.Equal(start) || a.Erro != "" {
			t.Errorf("attempt %+v", a)
		}
		if a.Resposta == "" || len(a.Resposta) >= len(answer) || !strings.HasPrefix(answer, a.Resposta) ||
			!strings.HasPrefix(a.Resposta, "assinatura recusada") {
			t.Errorf("resposta (%d bytes) must be the first bytes of the answer", len(a.Resposta))
		}
	})

	for _, sc := range []apiScenario{
		{name: "an unknown id", method: http.MethodGet, route: "/api/entregas/999999", status: 404, codigo: app.ENotFound},
		{name: "a non-numeric id", method: http.MethodGet, route: "/api/entregas/abc", status: 404, codigo: app.ENotFound},
		{name: "id zero", method: http.MethodGet, route: "/api/entregas/0", status: 404, codigo: app.ENotFound},
		{name: "resend of an unknown id", method: http.MethodPost, route: "/api/entregas/999999/reenviar", status: 404, codigo: app.ENotFound},
		{name: "resend of a non-numeric id", method: http.MethodPost, route: "/api/entregas/abc/reenviar", status: 404, codigo: app.ENotFound},
		{name: "leitor cannot resend", method: http.MethodPost, route: fmt.Sprintf("/api/entregas/%d/reenviar", d2.ID),
			role: app.PapelLeitor, status: 403, codigo: app.EForbidden},
		{name: "produtor cannot resend", method: http.MethodPost, route: fmt.Sprintf("/api/entregas/%d/reenviar", d2.ID),
			role: app.PapelProdutor, status: 403, codigo: app.EForbidden},
	} {
		if sc.role == "" {
			sc.role = app.PapelOperador
		}
		t.Run(sc.name, func(t *testing.T) { env.run(t, sc) })
	}
	if d := env.delOne(t, e2.EventID, in.ID); d.Status != app.EntregaFalhou || len(rc.delFor(e2.EventID)) != 1 {
		t.Fatalf("a refused resend changed the delivery: %+v", d)
	}

	// The receiver heals; an operador resends the second event only.
	rc.delSet(http.StatusNoContent, "")
	env.run(t, apiScenario{method: http.MethodPost, route: fmt.Sprintf("/api/entregas/%d/reenviar", d2.ID),
		role: app.PapelOperador, status: 200, contains: []string{`"reenviadas":1`}})
	d := env.delWaitStatus(t, e2.EventID, in.ID, app.EntregaEntregue)
	got := rc.delFor(e2.EventID)
	if len(got) != 2 {
		t.Fatalf("%d requests for the second event, want 2", len(got))
	}
	delCheckSigned(t, got[1], in.Segredo)
	if got[1].Header.Get("X-Geohub-Sequencia") != "2" || !bytes.Equal(got[1].Body, got[0].Body) {
		t.Fatalf("the resend changed the sequence (%s) or the body:\n%s\n%s",
			got[1].Header.Get("X-Geohub-Sequencia"), got[0].Body, got[1].Body)
	}
	if got[1].Header.Get("X-Geohub-Entrega-Id") == got[0].Header.Get("X-Geohub-Entrega-Id") {
		t.Fatal("every attempt needs its own X-Geohub-Entrega-Id")
	}
	if d.Sequencia != 2 || d.UltimoStatus != http.StatusNoContent || d.UltimoErro != "" || d.EntregueEm == nil {
		t.Fatalf("delivered %+v", d)
	}
	detail, _ := env.delGet(t, d.ID)
	if len(detail.Registradas) != 2 || detail.Registradas[1].StatusCode != http.StatusNoContent ||
		detail.Registradas[1].EntregaID != got[1].Header.Get("X-Geohub-Entrega-Id") ||
		!d.EntregueEm.Equal(detail.Registradas[1].Inicio.Add(250*time.Millisecond)) {
		t.Fatalf("after the resend: %+v, entregue_em %v", detail.Registradas, d.EntregueEm)
	}
	if d1 := env.delOne(t, e1.EventID, in.ID); d1.Status != app.EntregaFalhou || len(rc.delFor(e1.EventID)) != 1 {
		t.Fatalf("resending one delivery touched another: %+v", d1)
	}

	env.run(t, apiScenario{name: "a delivered row cannot be resent", method: http.MethodPost,
		route: fmt.Sprintf("/api/entregas/%d/reenviar", d.ID), role: app.PapelOperador, status: 409, codigo: app.EConflict})
	if n := len(rc.delFor(e2.EventID)); n != 2 {
		t.Fatalf("a refused resend was sent: %d requests", n)
	}
}

func TestDeliveriesBulkResend(t *testing.T) {
	t.Parallel()
	env := apiSetupWithDispatcher(t)
	env.delRegisterTypes(t)
	ra, rb := delNewReceiver(t, http.StatusBadRequest), delNewReceiver(t, http.StatusNoContent)
	a := env.delCreateIntegrator(t, ra, "CAD Polícia")
	b := env.delCreateIntegrator(t, rb, "CAD Bombeiros")
	evs := []app.Event{env.delPublish(t, "lote:1", 1), env.delPublish(t, "lote:1", 2), env.delPublish(t, "lote:2", 3)}
	env.waitRecorded(t, "dead letters and deliveries", func() bool {
		return env.delList(t, "status=falhou&integrador="+a.ID).Total == 3 &&
			env.delList(t, "status=entregue&integrador="+b.ID).Total == 3
	})

	route := "/api/entregas/reenviar"
	for _, sc := range []apiScenario{
		{name: "leitor cannot resend in bulk", role: app.PapelLeitor, body: map[string]any{"integrador": a.ID, "status": "falhou"},
			status: 403, codigo: app.EForbidden},
		{name: "produtor cannot resend in bulk", role: app.PapelProdutor, body: map[string]any{"integrador": a.ID, "status": "falhou"},
			status: 403, codigo: app.EForbidden},
		{name: "only falhou can be resent", body: map[string]any{"integrador": a.ID, "status": "entregue"},
			status: 422, codigo: app.EInvalid, caminhos: []string{"/status"}},
		{name: "the integrator is required", body: map[string]any{"status": "falhou"},
			status: 422, codigo: app.EInvalid, caminhos: []string{"/integrador"}},
		{name: "unknown fields are refused", body: map[string]any{"integrador": a.ID, "status": "falhou", "todos": true},
			status: 422, codigo: app.EInvalid, caminhos: []string{"/todos"}},
		{name: "malformed JSON", body: `{"integrador":`, status: 400, codigo: app.EMalformed},
	} {
		sc.method, sc.route = http.MethodPost, route
		if sc.role == "" {
			sc.role = app.PapelOperador
		}
		t.Run(sc.name, func(t *testing.T) { env.run(t, sc) })
	}
	if p := env.delList(t, "status=falhou&integrador="+a.ID); p.Total != 3 || len(ra.delRequests()) != 3 {
		t.Fatalf("a refused bulk resend changed something: %d falhou, %d requests", p.Total, len(ra.delRequests()))
	}

	ra.delSet(http.StatusNoContent, "")
	env.run(t, apiScenario{method: http.MethodPost, route: route, role: app.PapelOperador,
		body: map[string]any{"integrador": a.ID, "status": "falhou"}, status: 200, contains: []string{`"reenviadas":3`}})
	env.waitRecorded(t, "the resent deliveries", func() bool {
		return env.delList(t, "status=entregue&integrador="+a.ID).Total == 3
	})
	if p := env.delList(t, "status=falhou"); p.Total != 0 {
		t.Fatalf("%d deliveries still falhou", p.Total)
	}
	for _, ev := range evs {
		got := ra.delFor(ev.EventID)
		if len(got) != 2 {
			t.Fatalf("%d requests for %s, want 2", len(got), ev.EventID)
		}
		delCheckSigned(t, got[1], a.Segredo)
		if got[0].Header.Get("X-Geohub-Sequencia") != got[1].Header.Get("X-Geohub-Sequencia") || !bytes.Equal(got[0].Body, got[1].Body) {
			t.Fatalf("the bulk resend changed the sequence or body of %s", ev.EventID)
		}
		if want := strconv.FormatInt(env.delOne(t, ev.EventID, a.ID).Sequencia, 10); got[1].Header.Get("X-Geohub-Sequencia") != want {
			t.Fatalf("X-Geohub-Sequencia %s, want the row's %s", got[1].Header.Get("X-Geohub-Sequencia"), want)
		}
	}
	for _, sc := range []apiScenario{
		{name: "nothing left to resend", role: app.PapelOperador, body: map[string]any{"integrador": a.ID, "status": "falhou"}},
		{name: "a healthy integrator has nothing to resend", role: app.PapelAdmin, body: map[string]any{"integrador": b.ID, "status": "falhou"}},
		{name: "an unknown integrator has nothing to resend", role: app.PapelAdmin, body: map[string]any{"integrador": "nenhum", "status": "falhou"}},
	} {
		sc.method, sc.route, sc.status, sc.contains = http.MethodPost, route, 200, []string{`"reenviadas":0`}
		t.Run(sc.name, func(t *testing.T) { env.run(t, sc) })
	}
	if len(rb.delRequests()) != 3 {
		t.Fatalf("the healthy integrator got %d requests, want 3", len(rb.delRequests()))
	}
}

// delVerifyAnswer is the body of POST /api/integradores/{id}/verificar.
type delVerifyAnswer struct {
	Verificado bool        `json:"verificado"`
	Tentativa  app.Attempt `json:"tentativa"`
}

func (e *delEnv) delVerify(t *testing.T, id string) delVerifyAnswer {
	t.Helper()
	var v delVerifyAnswer
	e.do(t, http.MethodPost, "/api/integradores/"+id+"/verificar", app.PapelAdmin, nil).want(t, http.StatusOK).decode(t, &v)
	return v
}

func TestIntegratorVerification(t *testing.T) {
	t.Parallel()
	env := apiSetupWithDispatcher(t)

	t.Run("a signed ping reactivates a healthy integrator", func(t *testing.T) {
		rc := delNewReceiver(t, http.StatusNoContent)
		in := env.delCreateIntegrator(t, rc, "CAD Polícia")
		env.delSetActive(t, in.ID, false)
		if got := env.delIntegrator(t, in.ID); got.Ativo || got.MotivoInativo == "" {
			t.Fatalf("after PATCH ativo=false: %+v", got)
		}
		env.run(t, apiScenario{method: http.MethodPost, route: "/api/integradores/" + in.ID + "/verificar",
			role: app.PapelLeitor, status: 403, codigo: app.EForbidden})
		if len(rc.delRequests()) != 0 {
			t.Fatal("a refused verification sent a ping")
		}

		v := env.delVerify(t, in.ID)
		if !v.Verificado || v.Tentativa.StatusCode != http.StatusNoContent || v.Tentativa.Erro != "" || v.Tentativa.EntregaID == "" {
			t.Fatalf("answer %+v", v)
		}
		got := rc.delRequests()
		if len(got) != 1 {
			t.Fatalf("%d pings, want 1", len(got))
		}
		ping := got[0]
		delCheckSigned(t, ping, in.Segredo)
		if ts := ping.Header.Get("X-Geohub-Timestamp"); ts != strconv.FormatInt(env.Clock.Now().Unix(), 10) {
			t.Errorf("X-Geohub-Timestamp %s, want the clock's %d", ts, env.Clock.Now().Unix())
		}
		if ping.Header.Get("X-Geohub-Entrega-Id") != v.Tentativa.EntregaID || ping.Header.Get("X-Geohub-Tentativa") != "1" {
			t.Errorf("headers %v, answer %+v", ping.Header, v.Tentativa)
		}
		var envelope struct {
			ID      string `json:"id"`
			Tipo    string `json:"tipo"`
			Payload struct {
				Integrador string `json:"integrador"`
			} `json:"payload"`
		}
		if err := json.Unmarshal(ping.Body, &envelope); err != nil {
			t.Fatalf("ping body %s: %v", ping.Body, err)
		}
		if envelope.Tipo != "integracao:verificacao" || envelope.Payload.Integrador != in.ID ||
			envelope.ID != ping.Header.Get("X-Geohub-Evento-Id") {
			t.Errorf("ping %s, headers %v", ping.Body, ping.Header)
		}
		if got := env.delIntegrator(t, in.ID); !got.Ativo || got.MotivoInativo != "" {
			t.Fatalf("after a successful verification: %+v", got)
		}
		if p := env.delList(t, "integrador="+in.ID); p.Total != 0 {
			t.Errorf("the ping goes around the outbox, yet it left %d rows", p.Total)
		}
	})

	failing := []struct {
		name  string
		setup func(t *testing.T) *delReceiver
		check func(t *testing.T, a app.Attempt)
	}{
		{"a receiver answering 503", func(t *testing.T) *delReceiver {
			rc := delNewReceiver(t, http.StatusServiceUnavailable)
			rc.delSet(http.StatusServiceUnavailable, "em manutenção")
			return rc
		}, func(t *testing.T, a app.Attempt) {
			if a.StatusCode != http.StatusServiceUnavailable || a.Resposta != "em manutenção" {
				t.Errorf("attempt %+v", a)
			}
		}},
		{"a redirect, which is not followed", func(t *testing.T) *delReceiver {
			return delNewReceiver(t, http.StatusFound)
		}, func(t *testing.T, a app.Attempt) {
			if a.StatusCode != http.StatusFound {
				t.Errorf("attempt %+v", a)
			}
		}},
		{"a receiver that is down", func(t *testing.T) *delReceiver {
			rc := delNewReceiver(t, http.StatusNoContent)
			rc.Close()
			return rc
		}, func(t *testing.T, a app.Attempt) {
			if a.Erro == "" || a.StatusCode != 0 {
				t.Errorf("attempt %+v", a)
			}
		}},
	}
	for _, f := range failing {
		t.Run(f.name+" leaves the integrator inactive", func(t *testing.T) {
			rc := f.setup(t)
			in := env.delCreateIntegrator(t, rc, "CAD "+f.name)
			env.delSetActive(t, in.ID, false)
			v := env.delVerify(t, in.ID)
			if v.Verificado {
				t.Fatalf("answer %+v", v)
			}
			f.check(t, v.Tentativa)
			if got := env.delIntegrator(t, in.ID); got.Ativo || got.MotivoInativo == "" {
				t.Fatalf("after a failed verification: %+v", got)
			}
		})
	}
	env.run(t, apiScenario{name: "an unknown integrator", method: http.MethodPost, route: "/api/integradores/nenhum/verificar",
		role: app.PapelAdmin, status: 404, codigo: app.ENotFound})
}

func TestAnInactiveIntegratorReceivesNothingUntilReactivated(t *testing.T) {
	t.Parallel()
	env := apiSetupWithDispatcher(t)
	env.delRegisterTypes(t)
	ra, rb := delNewReceiver(t, http.StatusNoContent), delNewReceiver(t, http.StatusNoContent)
	a := env.delCreateIntegrator(t, ra, "CAD Polícia")
	b := env.delCreateIntegrator(t, rb, "CAD Bombeiros") // the witness: it always receives

	// Inactive, a is no recipient: an event published meanwhile has no row
	// for it, and is not sent to it after it comes back either.
	env.delSetActive(t, a.ID, false)
	e1 := env.delPublish(t, "lote:1", 1)
	env.delWaitStatus(t, e1.EventID, b.ID, app.EntregaEntregue)
	if p := env.delList(t, "event_id="+e1.EventID); p.Total != 1 || p.Linhas[0].Integrador != b.ID {
		t.Fatalf("deliveries of an event published while a was inactive: %+v", p.Linhas)
	}
	env.delSetActive(t, a.ID, true)
	e2 := env.delPublish(t, "lote:1", 2)
	env.delWaitStatus(t, e2.EventID, a.ID, app.EntregaEntregue)
	if got := ra.delRequests(); len(got) != 1 || got[0].Header.Get("X-Geohub-Evento-Id") != e2.EventID {
		t.Fatalf("a got %d requests, want only the event published after its reactivation", len(got))
	}

	// A retry already queued waits while a is inactive, even when due.
	ra.delSet(http.StatusServiceUnavailable, "")
	e3 := env.delPublish(t, "lote:1", 3)
	published := env.Clock.Now()
	env.waitRecorded(t, "the failed first attempt", func() bool { return env.delOne(t, e3.EventID, a.ID).Tentativas == 1 })
	d3 := env.delOne(t, e3.EventID, a.ID)
	if d3.Status != app.EntregaPendente || !d3.ProximaTentativa.Equal(published.Add(time.Minute)) || d3.UltimoStatus != 503 {
		t.Fatalf("after a 503: %+v (want a retry one minute later)", d3)
	}
	env.delSetActive(t, a.ID, false)
	ra.delSet(http.StatusNoContent, "")
	env.Clock.Advance(2 * time.Minute)
	// The witness's delivery is claimed in the same round that would have
	// claimed a's due retry.
	e4 := env.delPublish(t, "lote:1", 4)
	env.delWaitStatus(t, e4.EventID, b.ID, app.EntregaEntregue)
	if d := env.delOne(t, e3.EventID, a.ID); d.Status != app.EntregaPendente || d.Tentativas != 1 {
		t.Fatalf("a due retry went out to an inactive integrator: %+v", d)
	}
	if n := len(ra.delRequests()); n != 2 {
		t.Fatalf("a got %d requests while inactive, want none after the 2 before", n)
	}

	// A successful verification reactivates a; the held retry goes out.
	if v := env.delVerify(t, a.ID); !v.Verificado {
		t.Fatalf("verification %+v", v)
	}
	d := env.delWaitStatus(t, e3.EventID, a.ID, app.EntregaEntregue)
	if d.Tentativas != 2 || d.Sequencia != 2 { // a's second event on lote:1
		t.Fatalf("the held retry: %+v", d)
	}
	for _, ev := range []app.Event{e1, e4} {
		if n := len(ra.delFor(ev.EventID)); n != 0 {
			t.Fatalf("an event published while a was inactive reached it (%d requests)", n)
		}
	}
	if got := ra.delFor(e3.EventID); len(got) != 2 || !bytes.Equal(got[0].Body, got[1].Body) ||
		got[1].Header.Get("X-Geohub-Sequencia") != "2" || got[1].Header.Get("X-Geohub-Tentativa") != "2" {
		t.Fatalf("the held retry: %d requests", len(got))
	}
}
