package web_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"geohub/app"
	"geohub/app/callback"
	"geohub/app/keys"
	"geohub/app/ocorrencia"
	"geohub/store/storetest"
	"geohub/web"
)

// apiMasterKey is the fixed master key the suite derives its redaction key
// from, so hashed fields have values the tests can compute.
var apiMasterKey = bytes.Repeat([]byte{0x5a}, 32)

// apiStart is where every test's clock starts: a whole millisecond, so times
// survive the store's millisecond precision unchanged.
var apiStart = time.Date(2026, 10, 31, 12, 0, 0, 0, time.UTC)

// apiClock is a clock the tests move by hand.
type apiClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *apiClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *apiClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// apiEnv is one running Geohub: a real SQLite file, the services wired as
// cmd/geohub/serve.go wires them, an HTTP server and a token per role.
type apiEnv struct {
	URL    string
	DB     storetest.Store
	Clock  *apiClock
	Tokens map[app.Papel]string
	client *http.Client

	Integrators *app.Integrators
	Registry    *app.Registry
	Ocorrencias *ocorrencia.Service
	// Consumers' signals are Init'ed: a test awaits what they handle.
	Consumers *app.Consumers
	// projectHook, when set, runs before each fold of the read model: a
	// test makes the ocorrências consumer fail through it.
	projectHook atomic.Pointer[func(context.Context, app.Event) error]
}

// apiSetup starts a fresh Geohub for one test. subscribe, when given,
// registers in-process consumers before they start.
func apiSetup(t *testing.T, subscribe ...func(*app.Consumers)) *apiEnv {
	t.Helper()
	clock := &apiClock{now: apiStart}
	env := &apiEnv{}
	// No dispatcher runs: deliveries stay pending where the tests look at
	// them (apiSetupWithDispatcher runs one).
	k := storetest.New(t, storetest.Options{
		Deps: app.Deps{MasterKey: apiMasterKey, Now: clock.Now, NoDispatch: true,
			Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
			Policy: callback.Policy{Resolver: apiResolver}},
		Subscribe: func(c *app.Consumers) {
			for _, s := range subscribe {
				s(c)
			}
		},
		BeforeProject: func(ctx context.Context, ev app.Event) error {
			if hook := env.projectHook.Load(); hook != nil {
				return (*hook)(ctx, ev)
			}
			return nil
		},
		Tune: func(s *app.Services) { s.Consumers.Signals.Init() },
	})
	db, auth, integrators, registry, ocorrencias := k.DB, k.Auth, k.Integrators, k.Registry, k.Ocorrencias

	hs := httptest.NewServer(web.NewHandler(k.Services, web.Options{Ocorrencias: ocorrencias, Gatherer: k.Gatherer}))
	t.Cleanup(hs.Close)

	*env = apiEnv{URL: hs.URL, DB: db, Clock: clock, Tokens: map[app.Papel]string{}, client: hs.Client(),
		Integrators: integrators, Registry: registry, Ocorrencias: ocorrencias, Consumers: k.Consumers}
	for _, p := range []app.Papel{app.PapelAdmin, app.PapelOperador, app.PapelLeitor, app.PapelProdutor} {
		secret, _, err := auth.CreateToken(t.Context(), p, "teste-"+string(p))
		if err != nil {
			t.Fatal(err)
		}
		env.Tokens[p] = secret
	}
	return env
}

// apiResponse is a response read whole.
type apiResponse struct {
	Status int
	Header http.Header
	Body   []byte
}

// do sends body (nil, a string or []byte sent verbatim, or a value encoded
// as JSON) with the token of role ("" sends none).
func (e *apiEnv) do(t *testing.T, method, route string, role app.Papel, body any) apiResponse {
	t.Helper()
	auth := ""
	if role != "" {
		auth = "Bearer " + e.Tokens[role]
	}
	return e.doAuth(t, method, route, auth, body)
}

// doAuth is do with a literal Authorization header ("" sends none).
func (e *apiEnv) doAuth(t *testing.T, method, route, auth string, body any) apiResponse {
	t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	case []byte:
		r = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, e.URL+route, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	res, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return apiResponse{Status: res.StatusCode, Header: res.Header, Body: raw}
}

func (r apiResponse) want(t *testing.T, status int) apiResponse {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d; body: %s", r.Status, status, apiShort(r.Body))
	}
	return r
}

func (r apiResponse) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decode %T: %v; body: %s", v, err, apiShort(r.Body))
	}
}

func apiShort(b []byte) string {
	if len(b) > 600 {
		return string(b[:600]) + "…"
	}
	return string(b)
}

// apiErrorBody is the API's one error shape.
type apiErrorBody struct {
	Erro     string       `json:"erro"`
	Codigo   app.Code     `json:"codigo"`
	Detalhes []app.Detail `json:"detalhes"`
}

// apiDecodeError checks that r is a JSON error in the API's shape, with no
// other field at any level, and returns it.
func apiDecodeError(t *testing.T, r apiResponse) apiErrorBody {
	t.Helper()
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("error Content-Type = %q, want application/json", ct)
	}
	var raw map[string]json.RawMessage
	r.decode(t, &raw)
	for k := range raw {
		if k != "erro" && k != "codigo" && k != "detalhes" {
			t.Errorf("error body has unexpected field %q: %s", k, r.Body)
		}
	}
	if d, ok := raw["detalhes"]; ok {
		var items []map[string]json.RawMessage
		if err := json.Unmarshal(d, &items); err != nil {
			t.Fatalf("detalhes is not a list of objects: %s", d)
		}
		for _, it := range items {
			if len(it) != 2 || it["caminho"] == nil || it["mensagem"] == nil {
				t.Errorf("detalhe %v must have exactly caminho and mensagem", it)
			}
		}
	}
	var e apiErrorBody
	r.decode(t, &e)
	if e.Erro == "" || e.Codigo == "" {
		t.Errorf("error body lacks erro or codigo: %s", r.Body)
	}
	for _, d := range e.Detalhes {
		if !strings.HasPrefix(d.Caminho, "/") || d.Mensagem == "" {
			t.Errorf("detalhe %+v: caminho must be a JSON pointer and mensagem non-empty", d)
		}
	}
	return e
}

// apiScenario is one row of an HTTP scenario table.
type apiScenario struct {
	name   string
	method string
	route  string
	role   app.Papel
	auth   string // literal Authorization header; overrides role
	body   any
	status int

	codigo   app.Code          // for errors: the expected codigo
	caminhos []string          // for errors: every detalhe's caminho, in any order
	contains []string          // substrings of the body
	header   map[string]string // headers that must have exactly the given value
}

func (e *apiEnv) run(t *testing.T, sc apiScenario) apiResponse {
	t.Helper()
	var res apiResponse
	if sc.auth != "" {
		res = e.doAuth(t, sc.method, sc.route, sc.auth, sc.body)
	} else {
		res = e.do(t, sc.method, sc.route, sc.role, sc.body)
	}
	res.want(t, sc.status)
	if sc.status >= 400 {
		got := apiDecodeError(t, res)
		if sc.codigo != "" && got.Codigo != sc.codigo {
			t.Errorf("codigo = %q, want %q", got.Codigo, sc.codigo)
		}
		if sc.caminhos != nil {
			apiSamePaths(t, got.Detalhes, sc.caminhos)
		}
	}
	for _, s := range sc.contains {
		if !bytes.Contains(res.Body, []byte(s)) {
			t.Errorf("body lacks %q: %s", s, apiShort(res.Body))
		}
	}
	for k, v := range sc.header {
		if got := res.Header.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	return res
}

// apiSamePaths checks that details name exactly the want paths, in any order.
func apiSamePaths(t *testing.T, details []app.Detail, want []string) {
	t.Helper()
	var got []string
	for _, d := range details {
		got = append(got, d.Caminho)
	}
	slices.Sort(got)
	want = slices.Sorted(slices.Values(want))
	if !slices.Equal(got, want) {
		t.Errorf("detalhes caminhos = %q, want %q (detalhes: %+v)", got, want, details)
	}
}

// count returns the size of the log, read both through GET /api/events and
// from the store, which must agree.
func (e *apiEnv) count(t *testing.T) int {
	t.Helper()
	var page app.Page[app.Event]
	e.do(t, http.MethodGet, "/api/events?limite=1", app.PapelAdmin, nil).want(t, http.StatusOK).decode(t, &page)
	n, err := e.DB.CountEvents(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if int64(page.Total) != n {
		t.Fatalf("GET /api/events total %d, store counts %d", page.Total, n)
	}
	return page.Total
}

// apiFixture returns a built-in type definition, in the body shape of
// POST /api/registro.
func apiFixture(t *testing.T, name string) map[string]any {
	t.Helper()
	raw, err := fs.ReadFile(app.BuiltinTypeFiles, "tipos/"+name+".json")
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// apiFreeType is a small type of our own whose payload carries no personal
// data, so it is kept whole.
func apiFreeType(tipo, versao string) map[string]any {
	return map[string]any{
		"tipo": tipo, "versao": versao, "audiencia": "originador",
		"schema":  map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer"}}},
		"redacao": map[string]any{"manter": []string{""}},
	}
}

// registerTypes registers both fixtures and teste:livre through the API.
func (e *apiEnv) registerTypes(t *testing.T) {
	t.Helper()
	for _, name := range []string{"jornada-iniciada", "jornada-encerrada"} {
		e.do(t, http.MethodPost, "/api/registro", app.PapelAdmin, apiFixture(t, name)).want(t, http.StatusCreated)
	}
	e.do(t, http.MethodPost, "/api/registro", app.PapelAdmin, apiFreeType("teste:livre", "1.0.0")).want(t, http.StatusCreated)
}

// publish publishes req as a producer and returns the stored record.
func (e *apiEnv) publish(t *testing.T, req map[string]any) app.Event {
	t.Helper()
	var ev app.Event
	e.do(t, http.MethodPost, "/api/events", app.PapelProdutor, req).want(t, http.StatusCreated).decode(t, &ev)
	return ev
}

// apiJornada is a valid jornada:iniciada payload with personal data in it.
func apiJornada() map[string]any {
	return map[string]any{
		"jornadaId": "0192f0b4-8a3c-7d41-9c2e-5b6a7c8d9e0f",
		"inicio":    "2026-10-31T08:00:00Z",
		"servidor":  map[string]any{"nome": "Maria da Silva", "cpf": "12345678901"},
		"unidade":   "UBS Centro",
		"local":     map[string]any{"lat": -23.55052, "lng": -46.633309},
		"telefone":  "11999990000",
	}
}

func apiPublishBody(tipo string, payload any) map[string]any {
	return map[string]any{"tipo": tipo, "origem": "rh", "payload": payload}
}

func apiHMAC(value string) string {
	m := hmac.New(sha256.New, keys.Redaction(apiMasterKey))
	m.Write([]byte(value))
	return "hmac-sha256:" + hex.EncodeToString(m.Sum(nil))
}

// apiJSONEqual reports whether two JSON texts hold the same value, comparing
// numbers by their literal text.
func apiJSONEqual(t *testing.T, got, want []byte) bool {
	t.Helper()
	var a, b any
	for _, x := range []struct {
		raw []byte
		dst *any
	}{{got, &a}, {want, &b}} {
		d := json.NewDecoder(bytes.NewReader(x.raw))
		d.UseNumber()
		if err := d.Decode(x.dst); err != nil {
			t.Fatalf("decode %s: %v", x.raw, err)
		}
	}
	ra, _ := json.Marshal(a)
	rb, _ := json.Marshal(b)
	return bytes.Equal(ra, rb)
}

func apiIDs(evs []app.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.EventID
	}
	return out
}

func apiCheckAscending(t *testing.T, evs []app.Event) {
	t.Helper()
	for i := 1; i < len(evs); i++ {
		if evs[i].Sequence <= evs[i-1].Sequence {
			t.Fatalf("records out of order: sequence %d after %d", evs[i].Sequence, evs[i-1].Sequence)
		}
	}
}

func TestPublishRefusesBadInputAndLeavesTheLogUnchanged(t *testing.T) {
	t.Parallel()
	env := apiSetup(t)
	env.registerTypes(t)
	env.do(t, http.MethodPost, "/api/registro", app.PapelAdmin, apiFreeType("teste:antigo", "1.0.0")).want(t, http.StatusCreated)
	env.do(t, http.MethodPatch, "/api/registro/teste:antigo/1.0.0", app.PapelAdmin,
		map[string]string{"status": "deprecado"}).want(t, http.StatusOK)
	env.publish(t, apiPublishBody("teste:livre", map[string]any{"n": 1}))

	valid := func(edit func(map[string]any)) map[string]any {
		b := apiPublishBody("jornada:iniciada", apiJornada())
		edit(b)
		return b
	}
	huge := `{"tipo":"teste:livre","origem":"rh","payload":{"x":"` + strings.Repeat("a", web.MaxBodyBytes) + `"}}`

	tests := []struct {
		name     string
		body     any
		status   int
		codigo   app.Code
		caminhos []string
	}{
		{"malformed JSON is a bad request", `{"tipo": "teste:livre", "payload": {`, 400, app.EMalformed, nil},
		{"invalid JSON syntax is a bad request", `{"tipo" "teste:livre"}`, 400, app.EMalformed, nil},
		{"an empty body is a bad request", ``, 400, app.EMalformed, nil},
		{"data after the object is a bad request", `{"tipo":"teste:livre","origem":"rh","payload":{}} {}`, 400, app.EMalformed, nil},
		{"a body over 1 MiB is too large", huge, 413, app.ETooLarge, nil},
		{"a null payload is refused", `{"tipo":"teste:livre","origem":"rh","payload":null}`, 422, app.EInvalid, []string{"/payload"}},
		{"an array payload is refused", `{"tipo":"teste:livre","origem":"rh","payload":[{"n":1}]}`, 422, app.EInvalid, []string{"/payload"}},
		{"a string payload is refused", `{"tipo":"teste:livre","origem":"rh","payload":"{}"}`, 422, app.EInvalid, []string{"/payload"}},
		{"a missing payload is refused", `{"tipo":"teste:livre","origem":"rh"}`, 422, app.EInvalid, []string{"/payload"}},
		{"missing tipo and origem are both named", `{"payload":{}}`, 422, app.EInvalid, []string{"/tipo", "/origem"}},
		{"a bad event_id is named", valid(func(b map[string]any) { b["event_id"] = "not-a-uuid" }), 422, app.EInvalid, []string{"/event_id"}},
		{"an event_id without hyphens is refused", valid(func(b map[string]any) { b["event_id"] = "0192f0b48a3c7d419c2e5b6a7c8d9e0f" }), 422, app.EInvalid, []string{"/event_id"}},
		{"a bad correlacao_id is named", valid(func(b map[string]any) { b["correlacao_id"] = "corr-1" }), 422, app.EInvalid, []string{"/correlacao_id"}},
		{"a bad timestamp is named", valid(func(b map[string]any) { b["timestamp"] = "31/10/2026 12:00" }), 422, app.EInvalid, []string{"/timestamp"}},
		{"every bad format is named at once", valid(func(b map[string]any) {
			b["event_id"], b["correlacao_id"], b["timestamp"] = "x", "y", "z"
		}), 422, app.EInvalid, []string{"/event_id", "/correlacao_id", "/timestamp"}},
		{"a bad autoria is named", valid(func(b map[string]any) { b["autoria"] = map[string]any{"id": "u1", "tipo": "robo"} }), 422, app.EInvalid, []string{"/autoria/tipo"}},
		{"an unknown tipo is refused", apiPublishBody("jornada:desconhecida", map[string]any{}), 422, app.EInvalid, []string{"/tipo"}},
		{"a deprecated version is refused", apiPublishBody("teste:antigo", map[string]any{"n": 1}), 422, app.EInvalid, []string{"/versao_schema"}},
		{"a version without schema is refused", valid(func(b map[string]any) { b["versao_schema"] = "9.9.9" }), 422, app.EInvalid, []string{"/versao_schema"}},
		{"two schema violations give two detalhes", valid(func(b map[string]any) {
			p := b["payload"].(map[string]any)
			p["jornadaId"] = "nao-e-uuid"
			p["servidor"] = map[string]any{"nome": "Maria", "cpf": "123"}
		}), 422, app.EInvalid, []string{"/payload/jornadaId", "/payload/servidor/cpf"}},
		{"every schema violation is listed with its path", apiPublishBody("jornada:iniciada", map[string]any{
			"inicio":   "ontem",
			"servidor": map[string]any{"nome": "", "cpf": "123"},
			"local":    map[string]any{"lat": "norte", "lng": 1},
		}), 422, app.EInvalid, []string{"/payload", "/payload/inicio", "/payload/servidor/nome", "/payload/servidor/cpf", "/payload/local/lat"}},
		{"findings of every step come at once", valid(func(b map[string]any) {
			b["timestamp"], b["origem"] = "ontem", ""
			b["payload"].(map[string]any)["jornadaId"] = "nao-e-uuid"
		}), 422, app.EInvalid, []string{"/origem", "/timestamp", "/payload/jornadaId"}},
		{"a bad id and an unknown type both", `{"tipo":"jornada:desconhecida","origem":"rh","event_id":"x","payload":{}}`,
			422, app.EInvalid, []string{"/event_id", "/tipo"}},
		{"a bad payload and a missing origem both", `{"tipo":"jornada:iniciada","payload":[1]}`, 422, app.EInvalid, []string{"/payload", "/origem"}},
		{"an unknown top-level field is refused", valid(func(b map[string]any) { b["prioridade"] = "alta" }), 422, app.EInvalid, []string{"/prioridade"}},
		{"a wrongly typed field is refused", `{"tipo":5,"origem":"rh","payload":{}}`, 422, app.EInvalid, []string{"/tipo"}},
		{"a body that is not an object is refused at /", `[1]`, 422, app.EInvalid, []string{"/"}},
		{"an agregado with a line break is refused (it travels in a header)", valid(func(b map[string]any) { b["agregado"] = "x\r\nX-Injetado: 1" }),
			422, app.EInvalid, []string{"/agregado"}},
		{"a wrongly typed nested field is refused", valid(func(b map[string]any) { b["autoria"] = map[string]any{"id": 7, "tipo": "usuario"} }), 422, app.EInvalid, []string{"/autoria/id"}},
		{"an unknown nested field is named with its path", valid(func(b map[string]any) {
			b["autoria"] = map[string]any{"id": "u1", "tipo": "usuario", "cargo": "chefe"}
		}), 422, app.EInvalid, []string{"/autoria/cargo"}},
		{"a nested object of the wrong type is named", valid(func(b map[string]any) { b["autoria"] = "u1" }), 422, app.EInvalid, []string{"/autoria"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := env.count(t)
			env.run(t, apiScenario{method: http.MethodPost, route: "/api/events", role: app.PapelProdutor,
				body: tt.body, status: tt.status, codigo: tt.codigo, caminhos: tt.caminhos})
			if after := env.count(t); after != before {
				t.Errorf("the log went from %d to %d events", before, after)
			}
		})
	}
}

func TestErrorsHaveOneShape(t *testing.T) {
	t.Parallel()
	env := apiSetup(t)
	env.registerTypes(t)

	res := env.do(t, http.MethodPost, "/api/events", app.PapelProdutor,
		apiPublishBody("jornada:iniciada", map[string]any{"jornadaId": "x"})).want(t, http.StatusUnprocessableEntity)
	var raw map[string]any
	res.decode(t, &raw)
	if _, ok := raw["erro"].(string); !ok {
		t.Errorf("erro must be a string: %s", res.Body)
	}
	if raw["codigo"] != string(app.EInvalid) {
		t.Errorf("codigo = %v, want %s", raw["codigo"], app.EInvalid)
	}
	detalhes, ok := raw["detalhes"].([]any)
	if !ok || len(detalhes) == 0 {
		t.Fatalf("detalhes must be a non-empty list: %s", res.Body)
	}
	for _, d := range detalhes {
		m, ok := d.(map[string]any)
		if !ok || len(m) != 2 {
			t.Fatalf("detalhe %v must be {caminho, mensagem}", d)
		}
		if _, ok := m["caminho"].(string); !ok {
			t.Errorf("caminho must be a string: %v", d)
		}
		if _, ok := m["mensagem"].(string); !ok {
			t.Errorf("mensagem must be a string: %v", d)
		}
	}

	for _, sc := range []apiScenario{
		{name: "an unknown route answers in the same shape", method: http.MethodGet, route: "/api/nada", status: 404, codigo: app.ENotFound},
		{name: "a missing record answers in the same shape", method: http.MethodGet, route: "/api/events/" + uuid.NewString(), role: app.PapelLeitor, status: 404, codigo: app.ENotFound},
		{name: "a missing token answers in the same shape", method: http.MethodGet, route: "/api/events", status: 401, codigo: app.EUnauthorized},
		{name: "a wrong role answers in the same shape", method: http.MethodGet, route: "/api/events", role: app.PapelProdutor, status: 403, codigo: app.EForbidden},
		{name: "a conflict answers in the same shape", method: http.MethodPost, route: "/api/registro", role: app.PapelAdmin,
			body: func() map[string]any {
				f := apiFixture(t, "jornada-encerrada")
				f["audiencia"] = "originador"
				return f
			}(), status: 409, codigo: app.EConflict},
	} {
		t.Run(sc.name, func(t *testing.T) { env.run(t, sc) })
	}
}

func TestAuthAdmitsEachRoleOnlyWhereItBelongs(t *testing.T) {
	t.Parallel()
	env := apiSetup(t)
	env.registerTypes(t)
	event := apiPublishBody("teste:livre", map[string]any{"n": 1})
	colonia := map[string]string{"colonia": "nenhuma"}
	newType := func(tipo string) map[string]any { return apiFreeType(tipo, "1.0.0") }

	tests := []apiScenario{
		{name: "no token is challenged", method: http.MethodGet, route: "/api/events", status: 401,
			codigo: app.EUnauthorized, header: map[string]string{"WWW-Authenticate": `Bearer realm="geohub"`}},
		{name: "no token cannot publish", method: http.MethodPost, route: "/api/events", body: event, status: 401,
			codigo: app.EUnauthorized, header: map[string]string{"WWW-Authenticate": `Bearer realm="geohub"`}},
		{name: "a garbage token is challenged as invalid", method: http.MethodGet, route: "/api/events", auth: "Bearer lixo", status: 401,
			codigo: app.EUnauthorized, header: map[string]string{"WWW-Authenticate": `Bearer realm="geohub", error="invalid_token"`}},
		{name: "a forged token with the right prefix is challenged", method: http.MethodGet, route: "/api/events", auth: "Bearer gh_forjado", status: 401,
			codigo: app.EUnauthorized, header: map[string]string{"WWW-Authenticate": `Bearer realm="geohub", error="invalid_token"`}},
		{name: "another scheme is challenged", method: http.MethodGet, route: "/api/events", auth: "Basic YWRtaW46YWRtaW4=", status: 401,
			codigo: app.EUnauthorized, header: map[string]string{"WWW-Authenticate": `Bearer realm="geohub"`}},
		{name: "leitor cannot publish", method: http.MethodPost, route: "/api/events", role: app.PapelLeitor, body: event, status: 403, codigo: app.EForbidden},
		{name: "operador cannot publish", method: http.MethodPost, route: "/api/events", role: app.PapelOperador, body: event, status: 403, codigo: app.EForbidden},
		{name: "produtor publishes", method: http.MethodPost, route: "/api/events", role: app.PapelProdutor, body: event, status: 201},
		{name: "admin publishes", method: http.MethodPost, route: "/api/events", role: app.PapelAdmin, body: event, status: 201},
		{name: "produtor cannot read the log", method: http.MethodGet, route: "/api/events", role: app.PapelProdutor, status: 403, codigo: app.EForbidden},
		{name: "produtor cannot replay", method: http.MethodGet, route: "/api/events/replay", role: app.PapelProdutor, status: 403, codigo: app.EForbidden},
		{name: "produtor cannot read the DLQ", method: http.MethodGet, route: "/api/events/dlq", role: app.PapelProdutor, status: 403, codigo: app.EForbidden},
		{name: "leitor reads the log", method: http.MethodGet, route: "/api/events", role: app.PapelLeitor, status: 200},
		{name: "operador reads the log", method: http.MethodGet, route: "/api/events", role: app.PapelOperador, status: 200},
		{name: "admin reads the log", method: http.MethodGet, route: "/api/events", role: app.PapelAdmin, status: 200},
		{name: "leitor reads the DLQ", method: http.MethodGet, route: "/api/events/dlq", role: app.PapelLeitor, status: 200},
		// An unknown colonia answers 404 only to a role the route admits.
		{name: "operador may reprocess the DLQ", method: http.MethodPost, route: "/api/events/dlq/reprocessar", role: app.PapelOperador, body: colonia, status: 404, codigo: app.ENotFound},
		{name: "admin may reprocess the DLQ", method: http.MethodPost, route: "/api/events/dlq/reprocessar", role: app.PapelAdmin, body: colonia, status: 404, codigo: app.ENotFound},
		{name: "leitor cannot reprocess the DLQ", method: http.MethodPost, route: "/api/events/dlq/reprocessar", role: app.PapelLeitor, body: colonia, status: 403, codigo: app.EForbidden},
		{name: "produtor cannot reprocess the DLQ", method: http.MethodPost, route: "/api/events/dlq/reprocessar", role: app.PapelProdutor, body: colonia, status: 403, codigo: app.EForbidden},
		{name: "admin registers a type", method: http.MethodPost, route: "/api/registro", role: app.PapelAdmin, body: newType("teste:admin"), status: 201},
		{name: "operador cannot register a type", method: http.MethodPost, route: "/api/registro", role: app.PapelOperador, body: newType("teste:operador"), status: 403, codigo: app.EForbidden},
		{name: "leitor cannot register a type", method: http.MethodPost, route: "/api/registro", role: app.PapelLeitor, body: newType("teste:leitor"), status: 403, codigo: app.EForbidden},
		{name: "produtor cannot register a type", method: http.MethodPost, route: "/api/registro", role: app.PapelProdutor, body: newType("teste:produtor"), status: 403, codigo: app.EForbidden},
		{name: "operador cannot change a type's status", method: http.MethodPatch, route: "/api/registro/teste:livre/1.0.0", role: app.PapelOperador,
			body: map[string]string{"status": "deprecado"}, status: 403, codigo: app.EForbidden},
		{name: "produtor reads the registry", method: http.MethodGet, route: "/api/registro", role: app.PapelProdutor, status: 200},
		{name: "health needs no token", method: http.MethodGet, route: "/healthz", status: 200},
	}
	for _, sc := range tests {
		t.Run(sc.name, func(t *testing.T) { env.run(t, sc) })
	}

	t.Run("refused requests leave no trace", func(t *testing.T) {
		if n := env.count(t); n != 2 {
			t.Errorf("the log has %d events, want the 2 admitted publishes", n)
		}
		var reg struct{ Tipos []app.TypeVersion }
		env.do(t, http.MethodGet, "/api/registro", app.PapelLeitor, nil).want(t, http.StatusOK).decode(t, &reg)
		var got []string
		for _, tv := range reg.Tipos {
			got = append(got, tv.Tipo)
		}
		if want := []string{"jornada:encerrada", "jornada:iniciada", "teste:admin", "teste:livre"}; !slices.Equal(got, want) {
			t.Errorf("registry holds %v, want %v", got, want)
		}
		var tv struct{ Versoes []app.TypeVersion }
		env.do(t, http.MethodGet, "/api/registro/teste:livre", app.PapelLeitor, nil).want(t, http.StatusOK).decode(t, &tv)
		if tv.Versoes[0].Status != app.StatusAtivo {
			t.Errorf("refused PATCH changed the status to %s", tv.Versoes[0].Status)
		}
	})
}

func TestPublishStoresTheRedactedRecord(t *testing.T) {
	t.Parallel()
	env := apiSetup(t)
	env.registerTypes(t)

	eventID := "0192f0b4-0000-7000-8000-000000000001"
	corr := "0192f0b4-0000-7000-8000-0000000000c1"
	body := apiPublishBody("jornada:iniciada", apiJornada())
	body["event_id"] = eventID
	body["correlacao_id"] = corr
	body["timestamp"] = "2026-10-31T08:00:00.123Z"
	body["agregado"] = "jornada:42"
	body["autoria"] = map[string]string{"id": "srv-7", "tipo": "usuario"}
	body["solicitacao"] = "0199bb3e-0000-7000-8000-0000000000bb"

	res := env.do(t, http.MethodPost, "/api/events", app.PapelProdutor, body).want(t, http.StatusCreated)
	if loc := res.Header.Get("Location"); loc != "/api/events/"+eventID {
		t.Errorf("Location = %q, want /api/events/%s", loc, eventID)
	}
	var raw map[string]json.RawMessage
	res.decode(t, &raw)
	if seq := raw["sequence_number"]; len(seq) == 0 || seq[0] != '"' {
		t.Errorf("sequence_number must be a JSON string, got %s", seq)
	}
	var ev app.Event
	res.decode(t, &ev)

	t.Run("the record holds what was published", func(t *testing.T) {
		if ev.Sequence < 1 || ev.EventID != eventID || ev.Tipo != "jornada:iniciada" || ev.VersaoSchema != "1.0.0" ||
			ev.Origem != "rh" || ev.CorrelacaoID != corr || ev.Agregado != "jornada:42" || ev.Solicitacao != "0199bb3e-0000-7000-8000-0000000000bb" ||
			ev.Autoria == nil || *ev.Autoria != (app.Autoria{ID: "srv-7", Tipo: "usuario"}) {
			t.Errorf("record = %+v", ev)
		}
		if want := time.Date(2026, 10, 31, 8, 0, 0, 123e6, time.UTC); !ev.Timestamp.Equal(want) {
			t.Errorf("timestamp = %v, want %v", ev.Timestamp, want)
		}
		if !ev.CriadoEm.Equal(apiStart) {
			t.Errorf("criado_em = %v, want the clock's %v", ev.CriadoEm, apiStart)
		}
	})

	t.Run("the payload is redacted by the type's rules", func(t *testing.T) {
		want := fmt.Sprintf(`{"jornadaId":"0192f0b4-8a3c-7d41-9c2e-5b6a7c8d9e0f","inicio":"2026-10-31T08:00:00Z",
			"unidade":"UBS Centro","servidor":{"cpf":%q},"local":{"lat":-23.551,"lng":-46.633}}`, apiHMAC("12345678901"))
		if !apiJSONEqual(t, ev.Payload, []byte(want)) {
			t.Errorf("payload = %s\nwant      %s", ev.Payload, want)
		}
		for _, personal := range []string{"Maria", "12345678901", "11999990000", "55052", "633309"} {
			if bytes.Contains(ev.Payload, []byte(personal)) {
				t.Errorf("payload keeps %q: %s", personal, ev.Payload)
			}
		}
	})

	t.Run("the stored record is what publish answered", func(t *testing.T) {
		var got app.Event
		env.do(t, http.MethodGet, res.Header.Get("Location"), app.PapelLeitor, nil).want(t, http.StatusOK).decode(t, &got)
		if !apiJSONEqual(t, apiMustJSON(t, got), apiMustJSON(t, ev)) {
			t.Errorf("GET = %+v\npublish = %+v", got, ev)
		}
	})

	t.Run("the same event_id again answers the stored record", func(t *testing.T) {
		again := apiPublishBody("jornada:iniciada", apiJornada())
		again["event_id"] = strings.ToUpper(eventID)
		again["payload"].(map[string]any)["unidade"] = "outra"
		before := env.count(t)
		res := env.do(t, http.MethodPost, "/api/events", app.PapelProdutor, again).want(t, http.StatusOK)
		if loc := res.Header.Get("Location"); loc != "" {
			t.Errorf("a repeat must not answer Location, got %q", loc)
		}
		var dup app.Event
		res.decode(t, &dup)
		if dup.Sequence != ev.Sequence || dup.EventID != eventID || !apiJSONEqual(t, dup.Payload, ev.Payload) {
			t.Errorf("repeat answered %+v, want the stored %+v", dup, ev)
		}
		if after := env.count(t); after != before {
			t.Errorf("the log went from %d to %d events", before, after)
		}
	})

	t.Run("another producer's event_id shows nothing of that event", func(t *testing.T) {
		for name, body := range map[string]any{
			"a valid publish of another type": map[string]any{"tipo": "teste:livre", "origem": "rh", "event_id": eventID, "payload": map[string]any{"n": 1}},
			"a valid publish from another origem": map[string]any{"tipo": "jornada:iniciada", "origem": "outro", "event_id": eventID,
				"payload": apiJornada()},
		} {
			res := env.do(t, http.MethodPost, "/api/events", app.PapelProdutor, body)
			if res.Status != http.StatusConflict || strings.Contains(string(res.Body), ev.CorrelacaoID) {
				t.Errorf("%s: %d %s", name, res.Status, res.Body)
			}
		}
		res := env.do(t, http.MethodPost, "/api/events", app.PapelProdutor,
			map[string]any{"tipo": "nao:existe", "origem": "rh", "event_id": eventID, "payload": map[string]any{}})
		if res.Status != http.StatusUnprocessableEntity || strings.Contains(string(res.Body), ev.CorrelacaoID) {
			t.Errorf("an invalid publish with a stored id: %d %s", res.Status, res.Body)
		}
	})

	t.Run("defaults fill what was left out", func(t *testing.T) {
		env.Clock.Advance(1500 * time.Millisecond)
		res := env.do(t, http.MethodPost, "/api/events", app.PapelProdutor,
			apiPublishBody("teste:livre", map[string]any{"n": 2, "extra": []any{"kept"}})).want(t, http.StatusCreated)
		var def app.Event
		res.decode(t, &def)
		id, err := uuid.Parse(def.EventID)
		if err != nil || id.Version() != 7 || id.String() != def.EventID {
			t.Errorf("event_id = %q, want a canonical UUIDv7", def.EventID)
		}
		if def.VersaoSchema != "1.0.0" {
			t.Errorf("versao_schema = %q, want 1.0.0", def.VersaoSchema)
		}
		if def.CorrelacaoID != def.EventID {
			t.Errorf("correlacao_id = %q, want the event_id %q", def.CorrelacaoID, def.EventID)
		}
		if want := apiStart.Add(1500 * time.Millisecond); !def.Timestamp.Equal(want) {
			t.Errorf("timestamp = %v, want now %v", def.Timestamp, want)
		}
		if def.Sequence <= ev.Sequence {
			t.Errorf("sequence %d does not follow %d", def.Sequence, ev.Sequence)
		}
		if !apiJSONEqual(t, def.Payload, []byte(`{"n":2,"extra":["kept"]}`)) {
			t.Errorf("manter \"\" must keep the whole payload, got %s", def.Payload)
		}
		if loc := res.Header.Get("Location"); loc != "/api/events/"+def.EventID {
			t.Errorf("Location = %q", loc)
		}
		if bytes.Contains(res.Body, []byte(`"agregado"`)) || bytes.Contains(res.Body, []byte(`"solicitacao"`)) {
			t.Errorf("absent optional fields must be omitted: %s", res.Body)
		}
		// SPEC 6.3: without autoria, the system that published it: the
		// token's name.
		if a := def.Autoria; a == nil || a.Tipo != "sistema" || a.ID != "teste-produtor" {
			t.Errorf("autoria = %+v, want sistema teste-produtor", a)
		}
	})

	t.Run("concurrent publishes of one event_id store it once", func(t *testing.T) {
		before := env.count(t)
		body := apiPublishBody("teste:livre", map[string]any{"n": 3})
		body["event_id"] = uuid.NewString()
		const n = 8
		statuses := make([]int, n)
		seqs := make([]int64, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				raw, _ := json.Marshal(body)
				req, _ := http.NewRequest(http.MethodPost, env.URL+"/api/events", bytes.NewReader(raw))
				req.Header.Set("Authorization", "Bearer "+env.Tokens[app.PapelProdutor])
				res, err := env.client.Do(req)
				if err != nil {
					return
				}
				defer res.Body.Close()
				var ev app.Event
				json.NewDecoder(res.Body).Decode(&ev)
				statuses[i], seqs[i] = res.StatusCode, ev.Sequence
			})
		}
		wg.Wait()
		created := 0
		for i := range n {
			switch statuses[i] {
			case http.StatusCreated:
				created++
			case http.StatusOK:
			default:
				t.Errorf("publish %d answered %d", i, statuses[i])
			}
			if seqs[i] != seqs[0] {
				t.Errorf("publish %d got sequence %d, publish 0 got %d", i, seqs[i], seqs[0])
			}
		}
		if created != 1 {
			t.Errorf("%d publishes answered 201, want exactly 1", created)
		}
		if after := env.count(t); after != before+1 {
			t.Errorf("the log went from %d to %d events, want one more", before, after)
		}
	})
}

func apiMustJSON(t *testing.T, v any) []byte {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestQueryFiltersPagesAndOrders(t *testing.T) {
	t.Parallel()
	env := apiSetup(t)
	env.registerTypes(t)

	c1 := "0192f0b4-0000-7000-8000-0000000000c1"
	pub := func(tipo, origem, agregado, corr, ts string, payload map[string]any) app.Event {
		b := apiPublishBody(tipo, payload)
		b["origem"], b["timestamp"] = origem, ts
		if agregado != "" {
			b["agregado"] = agregado
		}
		if corr != "" {
			b["correlacao_id"] = corr
		}
		return env.publish(t, b)
	}
	encerrada := map[string]any{"jornadaId": "0192f0b4-8a3c-7d41-9c2e-5b6a7c8d9e0f", "fim": "2026-10-31T17:00:00Z"}
	e1 := pub("jornada:iniciada", "rh", "jornada:1", c1, "2026-10-31T08:00:00Z", apiJornada())
	e2 := pub("teste:livre", "outro", "x:2", "", "2026-10-31T09:00:00Z", map[string]any{"n": 1})
	e3 := pub("jornada:encerrada", "rh", "jornada:1", strings.ToUpper(c1), "2026-10-31T10:00:00Z", encerrada)
	e4 := pub("jornada:iniciada", "outro", "jornada:3", "", "2026-10-31T11:00:00Z", apiJornada())
	all := []app.Event{e1, e2, e3, e4}
	ids := func(evs ...app.Event) []string { return apiIDs(evs) }

	tests := []struct {
		name  string
		query string
		want  []string
		total int
	}{
		{"no filter lists everything in order", "", ids(all...), 4},
		{"tipo selects one type", "tipo=jornada:iniciada", ids(e1, e4), 2},
		{"origem selects one source", "origem=rh", ids(e1, e3), 2},
		{"correlacao_id selects one flow, in any case", "correlacao_id=" + strings.ToUpper(c1), ids(e1, e3), 2},
		{"agregado selects one aggregate", "agregado=jornada:1", ids(e1, e3), 2},
		{"filters combine", "origem=outro&tipo=jornada:iniciada", ids(e4), 1},
		{"sequence_inicio is inclusive", fmt.Sprintf("sequence_inicio=%d", e2.Sequence), ids(e2, e3, e4), 3},
		{"sequence_fim is inclusive", fmt.Sprintf("sequence_fim=%d", e2.Sequence), ids(e1, e2), 2},
		{"a sequence range", fmt.Sprintf("sequence_inicio=%d&sequence_fim=%d", e2.Sequence, e3.Sequence), ids(e2, e3), 2},
		{"timestamp_inicio is inclusive", "timestamp_inicio=2026-10-31T09:00:00Z", ids(e2, e3, e4), 3},
		{"timestamp_fim is inclusive", "timestamp_fim=" + url.QueryEscape("2026-10-31T06:00:00-03:00"), ids(e1, e2), 2},
		{"a timestamp range", "timestamp_inicio=2026-10-31T08:30:00Z&timestamp_fim=2026-10-31T10:30:00Z", ids(e2, e3), 2},
		{"limite pages", "limite=2", ids(e1, e2), 4},
		{"deslocamento skips", "limite=2&deslocamento=1", ids(e2, e3), 4},
		{"deslocamento past the end is empty", "deslocamento=10", []string{}, 4},
		{"a filter matching nothing is empty", "tipo=jornada:nada", []string{}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var page app.Page[app.Event]
			env.do(t, http.MethodGet, "/api/events?"+tt.query, app.PapelLeitor, nil).want(t, http.StatusOK).decode(t, &page)
			if got := apiIDs(page.Linhas); !slices.Equal(got, tt.want) {
				t.Errorf("linhas = %v, want %v", got, tt.want)
			}
			if page.Total != tt.total {
				t.Errorf("total = %d, want %d", page.Total, tt.total)
			}
		})
	}

	t.Run("the page echoes limite and deslocamento", func(t *testing.T) {
		res := env.do(t, http.MethodGet, "/api/events?limite=2&deslocamento=1", app.PapelLeitor, nil).want(t, http.StatusOK)
		var raw map[string]json.RawMessage
		res.decode(t, &raw)
		if string(raw["limite"]) != "2" || string(raw["deslocamento"]) != "1" || string(raw["total"]) != "4" {
			t.Errorf("page = %s", res.Body)
		}
		res = env.do(t, http.MethodGet, "/api/events?tipo=nada", app.PapelLeitor, nil).want(t, http.StatusOK)
		res.decode(t, &raw)
		if string(raw["linhas"]) != "[]" || string(raw["limite"]) != "100" || string(raw["deslocamento"]) != "0" {
			t.Errorf("an empty page must be {linhas: [], limite: 100, deslocamento: 0}: %s", res.Body)
		}
	})

	for _, sc := range []apiScenario{
		{name: "a non-numeric limite is refused", route: "/api/events?limite=abc", status: 422, caminhos: []string{"/limite"}},
		{name: "a negative deslocamento is refused", route: "/api/events?deslocamento=-1", status: 422, caminhos: []string{"/deslocamento"}},
		{name: "a bad sequence is refused", route: "/api/events?sequence_inicio=1e3", status: 422, caminhos: []string{"/sequence_inicio"}},
		{name: "a bad timestamp is refused", route: "/api/events?timestamp_inicio=ontem", status: 422, caminhos: []string{"/timestamp_inicio"}},
		{name: "every bad filter is named", route: "/api/events?limite=x&sequence_fim=y&timestamp_fim=z", status: 422,
			caminhos: []string{"/limite", "/sequence_fim", "/timestamp_fim"}},
		{name: "one record by id", route: "/api/events/" + e3.EventID, status: 200, contains: []string{`"event_id":"` + e3.EventID + `"`}},
		{name: "one record by an upper-case id", route: "/api/events/" + strings.ToUpper(e3.EventID), status: 200, contains: []string{e3.EventID}},
		{name: "an unknown id is not found", route: "/api/events/" + uuid.NewString(), status: 404, codigo: app.ENotFound},
		{name: "a non-UUID id is not found", route: "/api/events/nao-e-uuid", status: 404, codigo: app.ENotFound},
		{name: "a bad correlation id is refused", route: "/api/events/trace/nao-e-uuid", status: 422, caminhos: []string{"/correlacaoId"}},
		{name: "an unknown flow is empty", route: "/api/events/trace/" + uuid.NewString(), status: 200, contains: []string{`"linhas":[]`, `"total":0`}},
	} {
		sc.method, sc.role = http.MethodGet, app.PapelLeitor
		if sc.status == 422 {
			sc.codigo = app.EInvalid
		}
		t.Run(sc.name, func(t *testing.T) { env.run(t, sc) })
	}

	t.Run("a trace is the flow in order", func(t *testing.T) {
		e5 := pub("teste:livre", "outro", "", c1, "2026-10-31T07:00:00Z", map[string]any{"n": 5})
		var page app.Page[app.Event]
		env.do(t, http.MethodGet, "/api/events/trace/"+c1, app.PapelLeitor, nil).want(t, http.StatusOK).decode(t, &page)
		if got, want := apiIDs(page.Linhas), ids(e1, e3, e5); !slices.Equal(got, want) {
			t.Errorf("trace = %v, want %v (by sequence, not timestamp)", got, want)
		}
		if page.Total != 3 {
			t.Errorf("total = %d, want 3", page.Total)
		}
	})
}

func TestQueryCapsLimiteAt500(t *testing.T) {
	t.Parallel()
	env := apiSetup(t)
	env.registerTypes(t)

	const n, workers = 510, 10
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				raw, _ := json.Marshal(apiPublishBody("teste:livre", map[string]any{"n": i}))
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

	tests := []struct {
		name                 string
		query                string
		linhas, limite, desl int
	}{
		{"limite over the cap gets 500", "limite=1000", 500, 500, 0},
		{"limite defaults to 100", "", 100, 100, 0},
		{"the last page holds the rest", "limite=1000&deslocamento=500", 10, 500, 500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var page app.Page[app.Event]
			env.do(t, http.MethodGet, "/api/events?"+tt.query, app.PapelLeitor, nil).want(t, http.StatusOK).decode(t, &page)
			if len(page.Linhas) != tt.linhas || page.Total != n || page.Limite != tt.limite || page.Deslocamento != tt.desl {
				t.Errorf("got %d linhas, total %d, limite %d, deslocamento %d; want %d, %d, %d, %d",
					len(page.Linhas), page.Total, page.Limite, page.Deslocamento, tt.linhas, n, tt.limite, tt.desl)
			}
			apiCheckAscending(t, page.Linhas)
		})
	}
}

// apiReplay reads a replay stream, one record per line.
func apiReplay(t *testing.T, env *apiEnv, query string) []app.Event {
	t.Helper()
	res := env.do(t, http.MethodGet, "/api/events/replay?"+query, app.PapelLeitor, nil).want(t, http.StatusOK)
	if ct := res.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Errorf("Content-Type = %q, want application/x-ndjson", ct)
	}
	var out []app.Event
	sc := bufio.NewScanner(bytes.NewReader(res.Body))
	sc.Buffer(nil, 2<<20)
	for sc.Scan() {
		var ev app.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("line %d is not one record: %v: %s", len(out)+1, err, sc.Bytes())
		}
		out = append(out, ev)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(res.Body) > 0 && res.Body[len(res.Body)-1] != '\n' {
		t.Errorf("the stream must end with a newline")
	}
	return out
}

func TestReplayStreamsNDJSON(t *testing.T) {
	t.Parallel()
	env := apiSetup(t)
	env.registerTypes(t)
	encerrada := map[string]any{"jornadaId": "0192f0b4-8a3c-7d41-9c2e-5b6a7c8d9e0f", "fim": "2026-10-31T17:00:00Z", "motivo": "turno"}
	var evs []app.Event
	for i := range 3 {
		evs = append(evs,
			env.publish(t, apiPublishBody("jornada:iniciada", apiJornada())),
			env.publish(t, apiPublishBody("teste:livre", map[string]any{"n": i})),
			env.publish(t, apiPublishBody("jornada:encerrada", encerrada)))
	}
	after := evs[2].Sequence

	var want []app.Event
	for _, ev := range evs {
		if ev.Sequence > after && ev.Tipo != "teste:livre" {
			want = append(want, ev)
		}
	}
	t.Run("only later records of the listed types, in order", func(t *testing.T) {
		got := apiReplay(t, env, fmt.Sprintf("de_sequence=%d&tipos=jornada:iniciada,%%20jornada:encerrada", after))
		if !slices.Equal(apiIDs(got), apiIDs(want)) {
			t.Errorf("replay = %v, want %v", apiIDs(got), apiIDs(want))
		}
		apiCheckAscending(t, got)
		for i := range got {
			if !apiJSONEqual(t, got[i].Payload, want[i].Payload) {
				t.Errorf("replay must deliver the redacted payload: %s", got[i].Payload)
			}
		}
	})
	t.Run("no tipos replays every type", func(t *testing.T) {
		got := apiReplay(t, env, fmt.Sprintf("de_sequence=%d", after))
		if len(got) != len(evs)-3 || got[0].Sequence != after+1 {
			t.Errorf("replay = %v", apiIDs(got))
		}
		apiCheckAscending(t, got)
	})
	t.Run("no de_sequence replays from the start", func(t *testing.T) {
		if got := apiReplay(t, env, ""); !slices.Equal(apiIDs(got), apiIDs(evs)) {
			t.Errorf("replay = %v, want %v", apiIDs(got), apiIDs(evs))
		}
	})
	t.Run("nothing after the head is an empty stream", func(t *testing.T) {
		if got := apiReplay(t, env, fmt.Sprintf("de_sequence=%d", evs[len(evs)-1].Sequence)); len(got) != 0 {
			t.Errorf("replay = %v, want nothing", apiIDs(got))
		}
	})
	for _, q := range []string{"de_sequence=x", "de_sequence=-1"} {
		t.Run("a bad de_sequence is refused: "+q, func(t *testing.T) {
			env.run(t, apiScenario{method: http.MethodGet, route: "/api/events/replay?" + q, role: app.PapelLeitor,
				status: 422, codigo: app.EInvalid, caminhos: []string{"/de_sequence"}})
		})
	}
}

func TestRegistryManagesTypes(t *testing.T) {
	t.Parallel()
	env := apiSetup(t)
	iniciada := apiFixture(t, "jornada-iniciada")
	with := func(edit func(map[string]any)) map[string]any {
		v := apiFixture(t, "jornada-iniciada")
		edit(v)
		return v
	}
	reordered, err := json.MarshalIndent(iniciada, "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	v2 := with(func(v map[string]any) { v["versao"] = "2.0.0" })

	tests := []apiScenario{
		{name: "a new type version is created", body: iniciada, status: 201,
			contains: []string{`"tipo":"jornada:iniciada"`, `"versao":"1.0.0"`, `"status":"ativo"`, `"audiencia":"todos"`}},
		{name: "the same content again is a no-op", body: iniciada, status: 200, contains: []string{`"tipo":"jornada:iniciada"`}},
		{name: "the same content in another layout is a no-op", body: reordered, status: 200},
		{name: "other content for a published version conflicts", body: with(func(v map[string]any) {
			v["redacao"] = map[string]any{"manter": []string{""}}
		}), status: 409, codigo: app.EConflict},
		{name: "another audience for a published version conflicts", body: with(func(v map[string]any) { v["audiencia"] = "originador" }),
			status: 409, codigo: app.EConflict},
		{name: "a new version is created", body: v2, status: 201},
		{name: "the other fixture is created", body: apiFixture(t, "jornada-encerrada"), status: 201},
		{name: "a broken schema is refused at /schema", body: with(func(v map[string]any) {
			v["versao"] = "3.0.0"
			v["schema"] = map[string]any{"type": "objeto"}
		}), status: 422, codigo: app.EInvalid, caminhos: []string{"/schema"}},
		{name: "a schema that is not an object is refused", body: with(func(v map[string]any) { v["versao"] = "3.0.0"; v["schema"] = 5 }),
			status: 422, codigo: app.EInvalid, caminhos: []string{"/schema"}},
		{name: "a missing schema is refused", body: with(func(v map[string]any) { v["versao"] = "3.0.0"; delete(v, "schema") }),
			status: 422, codigo: app.EInvalid, caminhos: []string{"/schema"}},
		{name: "a schema of another draft is refused", body: with(func(v map[string]any) {
			v["versao"] = "3.0.0"
			v["schema"] = map[string]any{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}
		}), status: 422, codigo: app.EInvalid, caminhos: []string{"/schema/$schema"}},
		{name: "an embedded resource of another draft is refused", body: with(func(v map[string]any) {
			v["versao"] = "3.0.0"
			v["schema"] = map[string]any{"type": "object", "$defs": map[string]any{"s": map[string]any{"$id": "sub",
				"$schema": "http://json-schema.org/draft-07/schema#", "items": []any{map[string]any{"type": "string"}}}},
				"properties": map[string]any{"l": map[string]any{"$ref": "sub"}, "x": map[string]any{"const": map[string]any{"$schema": "dado"}}}}
		}), status: 422, codigo: app.EInvalid, caminhos: []string{"/schema/$defs/s/$schema"}},
		{name: "a schema with a remote ref is refused", body: with(func(v map[string]any) {
			v["versao"] = "3.0.0"
			v["schema"] = map[string]any{"$ref": "https://example.com/schema.json"}
		}), status: 422, codigo: app.EInvalid, caminhos: []string{"/schema"}},
		{name: "a redaction rule that is not a pointer is refused", body: with(func(v map[string]any) {
			v["versao"] = "3.0.0"
			v["redacao"] = map[string]any{"hash": []string{"cpf"}}
		}), status: 422, codigo: app.EInvalid, caminhos: []string{"/redacao/hash/0"}},
		{name: "every broken rule is named", body: with(func(v map[string]any) {
			v["versao"] = "3.0.0"
			v["redacao"] = map[string]any{"manter": []string{"/ok", "a//b"}, "hash": []string{"/x", ""}, "arredondar": []string{"/x/y"}}
		}), status: 422, codigo: app.EInvalid, caminhos: []string{"/redacao/manter/1", "/redacao/hash/1", "/redacao/arredondar/0"}},
		{name: "an unknown audience is refused", body: with(func(v map[string]any) { v["versao"] = "3.0.0"; v["audiencia"] = "ninguem" }),
			status: 422, codigo: app.EInvalid, caminhos: []string{"/audiencia"}},
		{name: "a bad tipo, versao and status are all named", body: with(func(v map[string]any) {
			v["tipo"], v["versao"], v["status"] = "Jornada", "1.0", "apagado"
		}), status: 422, codigo: app.EInvalid, caminhos: []string{"/tipo", "/versao", "/status"}},
		{name: "an unknown field is refused", body: with(func(v map[string]any) { v["versao"] = "3.0.0"; v["dono"] = "rh" }),
			status: 422, codigo: app.EInvalid, caminhos: []string{"/dono"}},
		{name: "an unknown redaction field is named with its path", body: with(func(v map[string]any) {
			v["versao"] = "3.0.0"
			v["redacao"] = map[string]any{"manter": []string{"/ok"}, "mascarar": []string{"/cpf"}}
		}), status: 422, codigo: app.EInvalid, caminhos: []string{"/redacao/mascarar"}},
		{name: "a wrongly typed redaction rule list is named", body: with(func(v map[string]any) {
			v["versao"] = "3.0.0"
			v["redacao"] = map[string]any{"hash": "/cpf"}
		}), status: 422, codigo: app.EInvalid, caminhos: []string{"/redacao/hash"}},
		{name: "a wrongly typed audience is named", body: with(func(v map[string]any) { v["versao"] = "3.0.0"; v["audiencia"] = 3 }),
			status: 422, codigo: app.EInvalid, caminhos: []string{"/audiencia"}},
		{name: "malformed JSON is a bad request", body: `{"tipo":`, status: 400, codigo: app.EMalformed},
	}
	for _, sc := range tests {
		sc.method, sc.route, sc.role = http.MethodPost, "/api/registro", app.PapelAdmin
		t.Run(sc.name, func(t *testing.T) { env.run(t, sc) })
	}

	t.Run("the list holds every version in order", func(t *testing.T) {
		var list struct{ Tipos []app.TypeVersion }
		env.do(t, http.MethodGet, "/api/registro", app.PapelLeitor, nil).want(t, http.StatusOK).decode(t, &list)
		var got []string
		for _, tv := range list.Tipos {
			got = append(got, tv.Tipo+"@"+tv.Versao)
		}
		want := []string{"jornada:encerrada@1.0.0", "jornada:iniciada@1.0.0", "jornada:iniciada@2.0.0"}
		if !slices.Equal(got, want) {
			t.Errorf("registry = %v, want %v", got, want)
		}
		if !apiJSONEqual(t, list.Tipos[1].Schema, apiMustJSON(t, iniciada["schema"])) {
			t.Errorf("schema = %s", list.Tipos[1].Schema)
		}
		if !list.Tipos[1].CriadoEm.Equal(apiStart) {
			t.Errorf("criado_em = %v, want %v", list.Tipos[1].CriadoEm, apiStart)
		}
	})

	patch := func(route, status string) apiScenario {
		return apiScenario{method: http.MethodPatch, route: route, role: app.PapelAdmin, body: map[string]string{"status": status}}
	}
	for _, sc := range []apiScenario{
		{name: "one type lists its versions", method: http.MethodGet, route: "/api/registro/jornada:iniciada", role: app.PapelLeitor, status: 200,
			contains: []string{`"tipo":"jornada:iniciada"`, `"versao":"1.0.0"`, `"versao":"2.0.0"`}},
		{name: "an unknown type is not found", method: http.MethodGet, route: "/api/registro/jornada:nada", role: app.PapelLeitor, status: 404, codigo: app.ENotFound},
		func() apiScenario {
			sc := patch("/api/registro/jornada:iniciada/2.0.0", "deprecado")
			sc.name, sc.status, sc.contains = "a version is deprecated", 200, []string{`"versao":"2.0.0"`, `"status":"deprecado"`}
			return sc
		}(),
		{name: "a deprecated version refuses publishes", method: http.MethodPost, route: "/api/events", role: app.PapelProdutor,
			body: func() map[string]any {
				b := apiPublishBody("jornada:iniciada", apiJornada())
				b["versao_schema"] = "2.0.0"
				return b
			}(), status: 422, codigo: app.EInvalid, caminhos: []string{"/versao_schema"}},
		{name: "the other version still publishes", method: http.MethodPost, route: "/api/events", role: app.PapelProdutor,
			body: apiPublishBody("jornada:iniciada", apiJornada()), status: 201},
		{name: "the type shows the new status", method: http.MethodGet, route: "/api/registro/jornada:iniciada", role: app.PapelLeitor, status: 200,
			contains: []string{`"status":"deprecado"`}},
		func() apiScenario {
			sc := patch("/api/registro/jornada:iniciada/2.0.0", "ativo")
			sc.name, sc.status, sc.contains = "a version is reactivated", 200, []string{`"status":"ativo"`}
			return sc
		}(),
		{name: "a reactivated version publishes", method: http.MethodPost, route: "/api/events", role: app.PapelProdutor,
			body: func() map[string]any {
				b := apiPublishBody("jornada:iniciada", apiJornada())
				b["versao_schema"] = "2.0.0"
				return b
			}(), status: 201, contains: []string{`"versao_schema":"2.0.0"`}},
		func() apiScenario {
			sc := patch("/api/registro/jornada:iniciada/1.0.0", "apagado")
			sc.name, sc.status, sc.codigo, sc.caminhos = "an unknown status is refused", 422, app.EInvalid, []string{"/status"}
			return sc
		}(),
		func() apiScenario {
			sc := patch("/api/registro/jornada:iniciada/9.0.0", "deprecado")
			sc.name, sc.status, sc.codigo = "an unknown version is not found", 404, app.ENotFound
			return sc
		}(),
	} {
		t.Run(sc.name, func(t *testing.T) { env.run(t, sc) })
	}
}

func TestDLQOverHTTP(t *testing.T) {
	t.Parallel()
	var healthy atomic.Bool
	var mu sync.Mutex
	var seen []json.RawMessage // payloads the handler was given
	env := apiSetup(t, func(c *app.Consumers) {
		c.Subscribe("jornada:encerrada", "folha", "fecharPonto", func(ctx context.Context, ev app.Event) error {
			mu.Lock()
			seen = append(seen, ev.Payload)
			mu.Unlock()
			if !healthy.Load() {
				return errors.New("folha indisponível")
			}
			return nil
		})
	})
	env.registerTypes(t)
	ev := env.publish(t, apiPublishBody("jornada:encerrada", map[string]any{
		"jornadaId": "0192f0b4-8a3c-7d41-9c2e-5b6a7c8d9e0f", "fim": "2026-10-31T17:00:00Z", "motivo": "licença médica"}))
	env.publish(t, apiPublishBody("teste:livre", map[string]any{"n": 1}))

	st := apiWaitDLQ(t, env, func(st app.DLQStats) bool { return st.TotalPendentes > 0 })
	t.Run("the failure is recorded with its event", func(t *testing.T) {
		if st.TotalPendentes != 1 || len(st.PendentesPorColonia) != 1 || st.PendentesPorColonia["folha"] != 1 {
			t.Errorf("pendentes = %d %v, want 1 for folha", st.TotalPendentes, st.PendentesPorColonia)
		}
		if len(st.Entradas) != 1 {
			t.Fatalf("entradas = %+v", st.Entradas)
		}
		e := st.Entradas[0]
		if e.ID == 0 || e.EventID != ev.EventID || e.Sequence != ev.Sequence || e.Tipo != "jornada:encerrada" ||
			e.Colonia != "folha" || e.HandlerNome != "fecharPonto" || e.MensagemErro != "folha indisponível" ||
			e.PilhaErro == "" || e.Tentativas != 1 || e.Status != app.DLQPendente || e.ResolvidoEm != nil {
			t.Errorf("entry = %+v", e)
		}
		if !e.CriadoEm.Equal(apiStart) || !e.UltimaTentativa.Equal(apiStart) {
			t.Errorf("criado_em %v, ultima_tentativa %v; want the clock's %v", e.CriadoEm, e.UltimaTentativa, apiStart)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(seen) != 1 || !bytes.Contains(seen[0], []byte("licença médica")) {
			t.Errorf("the live handler must get the full payload once, got %s", seen)
		}
	})

	folha := map[string]string{"colonia": "folha"}
	oneMoreAttempt := func(t *testing.T) {
		var st app.DLQStats
		env.do(t, http.MethodGet, "/api/events/dlq", app.PapelLeitor, nil).want(t, http.StatusOK).decode(t, &st)
		if st.TotalPendentes != 1 || len(st.Entradas) != 1 || st.Entradas[0].Tentativas != 2 ||
			st.Entradas[0].Status != app.DLQPendente || !st.Entradas[0].UltimaTentativa.Equal(apiStart) {
			t.Errorf("after a failed retry the entry must stay pendente with 2 attempts: %+v", st)
		}
	}
	// The steps share one rate limit, so they run in order on a clock that
	// only the steps move.
	steps := []struct {
		advance time.Duration // moved on the clock before the request
		healthy bool          // whether the handler succeeds from this step on
		sc      apiScenario
		then    func(t *testing.T)
	}{
		{sc: apiScenario{name: "a missing colonia is refused", body: map[string]string{},
			status: 422, codigo: app.EInvalid, caminhos: []string{"/colonia"}}},
		{sc: apiScenario{name: "an unknown colonia is not found", body: map[string]string{"colonia": "nenhuma"},
			status: 404, codigo: app.ENotFound, caminhos: []string{"/colonia"}}},
		{sc: apiScenario{name: "leitor cannot reprocess", role: app.PapelLeitor, body: folha, status: 403, codigo: app.EForbidden}},
		{sc: apiScenario{name: "a failing retry is counted", body: folha, status: 200,
			contains: []string{`"reprocessados":1`, `"resolvidos":0`, `"falharam":1`}}, then: oneMoreAttempt},
		{sc: apiScenario{name: "a second request within the minute is rate limited", body: folha,
			status: 429, codigo: app.ERateLimited, header: map[string]string{"Retry-After": "60"}}},
		{advance: 45 * time.Second, sc: apiScenario{name: "Retry-After counts down with the clock", body: folha,
			status: 429, codigo: app.ERateLimited, header: map[string]string{"Retry-After": "15"}}},
		{sc: apiScenario{name: "validation still comes first while rate limited", body: `{"colonia":""}`,
			status: 422, codigo: app.EInvalid, caminhos: []string{"/colonia"}}},
		{advance: 15 * time.Second, healthy: true, sc: apiScenario{name: "after a minute a healed handler resolves the entry", body: folha,
			status: 200, contains: []string{`"reprocessados":1`, `"resolvidos":1`, `"falharam":0`}}},
	}
	for _, step := range steps {
		sc := step.sc
		sc.method, sc.route = http.MethodPost, "/api/events/dlq/reprocessar"
		if sc.role == "" {
			sc.role = app.PapelOperador
		}
		ok := t.Run(sc.name, func(t *testing.T) {
			env.Clock.Advance(step.advance)
			healthy.Store(step.healthy)
			env.run(t, sc)
			if step.then != nil {
				step.then(t)
			}
		})
		if !ok {
			return
		}
	}

	t.Run("a resolved entry leaves the DLQ", func(t *testing.T) {
		res := env.do(t, http.MethodGet, "/api/events/dlq", app.PapelLeitor, nil).want(t, http.StatusOK)
		if !apiJSONEqual(t, res.Body, []byte(`{"pendentes_por_colonia":{},"total_pendentes":0,"entradas":[]}`)) {
			t.Errorf("DLQ = %s", res.Body)
		}
	})
	t.Run("reprocessing delivers the redacted payload", func(t *testing.T) {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) != 3 {
			t.Fatalf("handler ran %d times, want 3 (live, failed retry, healed retry)", len(seen))
		}
		for _, p := range seen[1:] {
			if !apiJSONEqual(t, p, ev.Payload) {
				t.Errorf("retry got %s, want the stored %s", p, ev.Payload)
			}
		}
	})
}

// apiWaitDLQ polls GET /api/events/dlq until done accepts it. The consumer
// records failures on its own goroutine, after publish has answered.
func apiWaitDLQ(t *testing.T, env *apiEnv, done func(app.DLQStats) bool) app.DLQStats {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		var st app.DLQStats
		env.do(t, http.MethodGet, "/api/events/dlq", app.PapelLeitor, nil).want(t, http.StatusOK).decode(t, &st)
		if done(st) {
			return st
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("the DLQ never reached the expected state; last: %+v", st)
		}
	}
}

func TestOperationsEndpoints(t *testing.T) {
	t.Parallel()
	env := apiSetup(t)
	env.registerTypes(t)

	for _, sc := range []apiScenario{
		{name: "healthz answers while the process is up", method: http.MethodGet, route: "/healthz", status: 200, contains: []string{`"status":"ok"`}},
		{name: "readyz answers when the database is writable", method: http.MethodGet, route: "/readyz", status: 200, contains: []string{`"status":"pronto"`}},
	} {
		t.Run(sc.name, func(t *testing.T) { env.run(t, sc) })
	}

	t.Run("metrics count published events by type", func(t *testing.T) {
		env.publish(t, apiPublishBody("teste:livre", map[string]any{"n": 1}))
		env.publish(t, apiPublishBody("teste:livre", map[string]any{"n": 2}))
		dup := apiPublishBody("jornada:iniciada", apiJornada())
		dup["event_id"] = uuid.NewString()
		env.publish(t, dup)
		env.do(t, http.MethodPost, "/api/events", app.PapelProdutor, dup).want(t, http.StatusOK)

		res := env.do(t, http.MethodGet, "/metrics", "", nil).want(t, http.StatusOK)
		for _, line := range []string{
			`geohub_events_published_total{tipo="teste:livre"} 2`,
			`geohub_events_published_total{tipo="jornada:iniciada"} 1`,
		} {
			if !apiHasLine(res.Body, line) {
				t.Errorf("metrics lack %q:\n%s", line, apiGrep(res.Body, "geohub_"))
			}
		}
	})
}

func apiHasLine(body []byte, line string) bool {
	return slices.Contains(strings.Split(string(body), "\n"), line)
}

func apiGrep(body []byte, prefix string) string {
	var out []string
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
