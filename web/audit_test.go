package web_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"geohub/app"
	"geohub/app/callback"
	"geohub/app/ocorrencia"
	"geohub/store/storetest"
	"geohub/web"
	"geohub/web/proxy"
)

// audEnv is the whole HTTP edge, API and console, on one real database,
// wired as geohub serve wires it, for checking what each action records.
type audEnv struct {
	URL      string
	DB       storetest.Store
	Tokens   map[app.Papel]string
	TokenIDs map[app.Papel]string
	Sessions *app.Sessions
	// Receiver is the integrators' callback: it answers Status.
	Receiver *httptest.Server
	Status   atomic.Int32
}

const audAdminPassword = "senha-do-admin-1"

func audSetup(t *testing.T) *audEnv {
	t.Helper()
	ctx := t.Context()
	// The dispatcher is not run: deliveries stay where a test puts them.
	k := storetest.New(t, storetest.Options{
		Deps: app.Deps{MasterKey: bytes.Repeat([]byte{0x42}, 32), Version: "teste", NoDispatch: true,
			Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError})),
			Policy: callback.Policy{Insecure: true}},
		BuiltinTypes: true, AdminPassword: audAdminPassword,
	})
	db, auth, sessions := k.DB, k.Auth, k.Sessions
	hs := httptest.NewServer(web.NewHandler(k.Services, web.Options{Ocorrencias: k.Ocorrencias,
		TrustedProxies: proxy.Trusted{netip.MustParsePrefix("127.0.0.1/32")}}))
	t.Cleanup(hs.Close)
	env := &audEnv{URL: hs.URL, DB: db, Tokens: map[app.Papel]string{}, TokenIDs: map[app.Papel]string{}, Sessions: sessions}
	env.Status.Store(http.StatusNoContent)
	env.Receiver = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(int(env.Status.Load()))
	}))
	t.Cleanup(env.Receiver.Close)
	for _, p := range []app.Papel{app.PapelAdmin, app.PapelOperador} {
		secret, tok, err := auth.CreateToken(ctx, p, "teste-"+string(p))
		if err != nil {
			t.Fatal(err)
		}
		env.Tokens[p], env.TokenIDs[p] = secret, tok.ID
	}
	return env
}

// api sends a JSON request with a bearer ("" for none) and decodes the answer into out.
func (e *audEnv) api(t *testing.T, method, path, bearer string, body any, headers ...string) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequestWithContext(t.Context(), method, e.URL+path, r)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return res.StatusCode, raw
}

// rows reads the trail newest first, every page.
func (e *audEnv) rows(t *testing.T, f app.AuditFilter) []app.AuditEntry {
	t.Helper()
	f.Limite = 500
	rows, _, err := e.DB.AuditEntries(t.Context(), f)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// one asserts exactly one row for acao on alvo and returns it.
func (e *audEnv) one(t *testing.T, acao, alvo string) app.AuditEntry {
	t.Helper()
	rows := e.rows(t, app.AuditFilter{Acao: acao, Alvo: alvo})
	if len(rows) != 1 {
		t.Fatalf("%d rows of %s on %q, want 1: %+v", len(rows), acao, alvo, rows)
	}
	return rows[0]
}

// audExpect is what a row must say; empty fields are not checked.
type audExpect struct {
	quemTipo, quemID, quemNome string
	papel                      app.Papel
	endereco                   string
	alvoTipo, alvoNome         string
	resultado                  string
	codigo                     app.Code
	detalhe                    string   // a substring
	campos                     []string // "campo de→para", values as JSON
}

func audCheck(t *testing.T, e app.AuditEntry, w audExpect) {
	t.Helper()
	var bad []string
	chk := func(name, got, want string) {
		if want != "" && got != want {
			bad = append(bad, fmt.Sprintf("%s = %q, want %q", name, got, want))
		}
	}
	chk("quem.tipo", e.Quem.Tipo, w.quemTipo)
	chk("quem.id", e.Quem.ID, w.quemID)
	chk("quem.nome", e.Quem.Nome, w.quemNome)
	chk("quem.papel", string(e.Quem.Papel), string(w.papel))
	chk("endereco", e.Endereco, w.endereco)
	chk("alvo.tipo", e.Alvo.Tipo, w.alvoTipo)
	chk("alvo.nome", e.Alvo.Nome, w.alvoNome)
	chk("resultado", e.Resultado, w.resultado)
	chk("codigo", string(e.Codigo), string(w.codigo))
	if w.detalhe != "" && !strings.Contains(e.Detalhe, w.detalhe) {
		bad = append(bad, fmt.Sprintf("detalhe %q lacks %q", e.Detalhe, w.detalhe))
	}
	if w.campos != nil {
		var got []string
		for _, f := range e.Campos {
			got = append(got, fmt.Sprintf("%s %s→%s", f.Campo, f.De, f.Para))
		}
		if !slices.Equal(got, w.campos) {
			bad = append(bad, fmt.Sprintf("campos %q, want %q", got, w.campos))
		}
	}
	if e.Em.IsZero() || e.ID == 0 {
		bad = append(bad, "no id or time")
	}
	if len(bad) > 0 {
		t.Errorf("%s on %s: %s", e.Acao, e.Alvo.ID, strings.Join(bad, "; "))
	}
}

// Behind --trusted-proxies the API records the client the proxy forwarded
// for, as the console does; a forged entry left of it is not believed.
func TestAuditRecordsTheAPIClientBehindATrustedProxy(t *testing.T) {
	e := audSetup(t)
	admin := e.Tokens[app.PapelAdmin]
	status, raw := e.api(t, "POST", "/api/integradores", admin, map[string]any{"nome": "CAD Proxy",
		"callback_url": e.Receiver.URL + "/geohub", "hosts_permitidos": []string{"127.0.0.1"}, "eventos": []string{"ocorrencia:*"}},
		"X-Forwarded-For", "203.0.113.66, 198.51.100.23")
	if status != http.StatusCreated {
		t.Fatalf("create: %d %s", status, raw)
	}
	var c app.CreatedIntegrator
	json.Unmarshal(raw, &c)
	audCheck(t, e.one(t, app.AcaoIntegradorCriar, c.ID), audExpect{endereco: "198.51.100.23", resultado: app.AuditOK})
	// An integrator's command through the proxy says the same.
	status, raw = e.api(t, "POST", "/api/ocorrencias", c.APIKey, map[string]any{"natureza": "incendio"},
		"X-Forwarded-For", "198.51.100.24", "X-Solicitacao-Id", "0199bb3e-0000-7000-8000-0000000000b1")
	if status != http.StatusCreated {
		t.Fatalf("register: %d %s", status, raw)
	}
	var oc struct{ ID string }
	json.Unmarshal(raw, &oc)
	audCheck(t, e.one(t, app.AcaoOcorrenciaRegistrar, oc.ID), audExpect{quemTipo: app.ActorIntegrador, quemID: c.ID,
		endereco: "198.51.100.24", resultado: app.AuditOK})
}

func TestAuditRecordsEachAPIAction(t *testing.T) {
	e := audSetup(t)
	admin, operador := e.Tokens[app.PapelAdmin], e.Tokens[app.PapelOperador]
	asAdmin := audExpect{quemTipo: app.ActorToken, quemID: e.TokenIDs[app.PapelAdmin], quemNome: "teste-admin",
		papel: app.PapelAdmin, endereco: "127.0.0.1", resultado: app.AuditOK}

	var in struct{ ID, Segredo, APIKey string }
	t.Run("integrator created, with its cadastro and no secret", func(t *testing.T) {
		status, raw := e.api(t, "POST", "/api/integradores", admin, map[string]any{"nome": "CAD Bombeiros",
			"callback_url": e.Receiver.URL + "/geohub", "hosts_permitidos": []string{"127.0.0.1"}, "eventos": []string{"ocorrencia:*"}})
		if status != http.StatusCreated {
			t.Fatalf("create: %d %s", status, raw)
		}
		var c app.CreatedIntegrator
		json.Unmarshal(raw, &c)
		in.ID, in.Segredo, in.APIKey = c.ID, c.Segredo, c.APIKey
		audCheck(t, e.one(t, app.AcaoIntegradorCriar, in.ID), with2(asAdmin, func(w *audExpect) {
			w.alvoTipo, w.alvoNome = "integrador", "CAD Bombeiros"
			w.campos = []string{`nome →"CAD Bombeiros"`, `entrega →"callback"`, `callback_url →"` + e.Receiver.URL + `/geohub"`,
				`hosts_permitidos →["127.0.0.1"]`, `eventos →["ocorrencia:*"]`, `ativo →true`}
		}))
	})
	t.Run("disabled, with the field that changed", func(t *testing.T) {
		if status, raw := e.api(t, "PATCH", "/api/integradores/"+in.ID, admin, map[string]any{"ativo": false}); status != 200 {
			t.Fatalf("%d %s", status, raw)
		}
		audCheck(t, e.one(t, app.AcaoIntegradorDesativar, in.ID), with2(asAdmin, func(w *audExpect) {
			w.alvoNome, w.campos = "CAD Bombeiros", []string{"ativo true→false"}
		}))
	})
	t.Run("verificar without 2xx failed and changed nothing; with 2xx reactivates", func(t *testing.T) {
		e.Status.Store(http.StatusServiceUnavailable)
		if status, raw := e.api(t, "POST", "/api/integradores/"+in.ID+"/verificar", admin, nil); status != 200 {
			t.Fatalf("%d %s", status, raw)
		}
		e.Status.Store(http.StatusNoContent)
		if status, raw := e.api(t, "POST", "/api/integradores/"+in.ID+"/verificar", admin, nil); status != 200 {
			t.Fatalf("%d %s", status, raw)
		}
		rows := e.rows(t, app.AuditFilter{Acao: app.AcaoIntegradorVerificar, Alvo: in.ID})
		if len(rows) != 2 {
			t.Fatalf("%d verificar rows", len(rows))
		}
		audCheck(t, rows[1], with2(asAdmin, func(w *audExpect) {
			w.resultado, w.detalhe, w.campos = app.AuditFalhou, "HTTP 503", []string{}
		}))
		audCheck(t, rows[0], with2(asAdmin, func(w *audExpect) {
			w.detalhe, w.campos = "HTTP 204", []string{"ativo false→true"}
		}))
	})
	t.Run("an edit refused by validation is recorded as refused", func(t *testing.T) {
		status, _ := e.api(t, "PATCH", "/api/integradores/"+in.ID, admin, map[string]any{"eventos": []string{"Nao Vale"}})
		if status != http.StatusUnprocessableEntity {
			t.Fatalf("status %d", status)
		}
		audCheck(t, e.one(t, app.AcaoIntegradorEditar, in.ID), with2(asAdmin, func(w *audExpect) {
			w.resultado, w.codigo, w.detalhe = app.AuditRecusado, app.EInvalid, "/eventos/0"
		}))
	})
	t.Run("rotations record that they happened, not what they made", func(t *testing.T) {
		status, raw := e.api(t, "POST", "/api/integradores/"+in.ID+"/segredo/rotacionar", admin, nil)
		if status != 200 {
			t.Fatalf("%d %s", status, raw)
		}
		var rot app.RotatedSecret
		json.Unmarshal(raw, &rot)
		audCheck(t, e.one(t, app.AcaoIntegradorSegredoRotacionar, in.ID), with2(asAdmin, func(w *audExpect) {
			w.alvoNome = "CAD Bombeiros"
			w.campos = []string{"anterior_valido_ate →" + string(audJSON(rot.AnteriorValidoAte))}
		}))
		status, raw = e.api(t, "POST", "/api/integradores/"+in.ID+"/api_key/rotacionar", admin, nil)
		if status != 200 {
			t.Fatalf("%d %s", status, raw)
		}
		var key app.RotatedAPIKey
		json.Unmarshal(raw, &key)
		in.APIKey = key.APIKey
		audCheck(t, e.one(t, app.AcaoIntegradorAPIKeyRotacionar, in.ID), with2(asAdmin, func(w *audExpect) {
			w.alvoNome, w.campos = "CAD Bombeiros", []string{}
		}))
	})
	t.Run("a role the route does not admit is refused at the edge and recorded", func(t *testing.T) {
		if status, _ := e.api(t, "PATCH", "/api/integradores/"+in.ID, operador, map[string]any{"ativo": false}); status != 403 {
			t.Fatalf("status %d", status)
		}
		audCheck(t, e.one(t, app.AcaoAcessoNegado, "PATCH /api/integradores/"+in.ID), audExpect{quemTipo: app.ActorToken,
			quemID: e.TokenIDs[app.PapelOperador], papel: app.PapelOperador, endereco: "127.0.0.1", alvoTipo: "rota",
			resultado: app.AuditRecusado, codigo: app.EForbidden})
	})
	t.Run("registry: a type registered and deprecated; a built-in one refused", func(t *testing.T) {
		tv := map[string]any{"tipo": "teste:auditado", "versao": "1.0.0", "audiencia": "todos",
			"schema": map[string]any{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"}}
		if status, raw := e.api(t, "POST", "/api/registro", admin, tv); status != 201 {
			t.Fatalf("%d %s", status, raw)
		}
		audCheck(t, e.one(t, app.AcaoRegistroRegistrar, "teste:auditado@1.0.0"), with2(asAdmin, func(w *audExpect) {
			w.alvoTipo, w.campos = "registro", []string{`status →"ativo"`, `audiencia →"todos"`}
		}))
		if status, raw := e.api(t, "PATCH", "/api/registro/teste:auditado/1.0.0", admin, map[string]any{"status": "deprecado"}); status != 200 {
			t.Fatalf("%d %s", status, raw)
		}
		audCheck(t, e.one(t, app.AcaoRegistroDescontinuar, "teste:auditado@1.0.0"), with2(asAdmin, func(w *audExpect) {
			w.campos = []string{`status "ativo"→"deprecado"`}
		}))
		if status, _ := e.api(t, "PATCH", "/api/registro/ocorrencia:registrada/1.0.0", admin, map[string]any{"status": "deprecado"}); status != 409 {
			t.Fatalf("built-in deprecated: %d", status)
		}
		audCheck(t, e.one(t, app.AcaoRegistroDescontinuar, "ocorrencia:registrada@1.0.0"), with2(asAdmin, func(w *audExpect) {
			w.resultado, w.codigo, w.detalhe = app.AuditRecusado, app.EConflict, "embutido"
		}))
	})
	t.Run("resends and Tentar agora: refused ones, and many with their count", func(t *testing.T) {
		if status, _ := e.api(t, "POST", "/api/entregas/999999/reenviar", operador, nil); status != 404 {
			t.Fatalf("status %d", status)
		}
		asOperador := audExpect{quemTipo: app.ActorToken, quemID: e.TokenIDs[app.PapelOperador], papel: app.PapelOperador,
			endereco: "127.0.0.1"}
		audCheck(t, e.one(t, app.AcaoEntregaReenviar, "999999"), with2(asOperador, func(w *audExpect) {
			w.alvoTipo, w.resultado, w.codigo = "entrega", app.AuditRecusado, app.ENotFound
		}))
		if status, raw := e.api(t, "POST", "/api/entregas/reenviar", operador, map[string]any{"integrador": in.ID}); status != 200 {
			t.Fatalf("%d %s", status, raw)
		}
		audCheck(t, e.one(t, app.AcaoEntregaReenviarLote, in.ID), with2(asOperador, func(w *audExpect) {
			w.alvoTipo, w.resultado, w.campos = "integrador", app.AuditOK, []string{`status "falhou"→"pendente"`, "reenviadas →0"}
		}))
		if status, raw := e.api(t, "POST", "/api/integradores/"+in.ID+"/tentar-agora", operador, nil); status != 200 {
			t.Fatalf("tentar agora: %d %s", status, raw)
		}
		audCheck(t, e.one(t, app.AcaoIntegradorTentarAgora, in.ID), with2(asOperador, func(w *audExpect) {
			w.alvoTipo, w.alvoNome, w.resultado = "integrador", "CAD Bombeiros", app.AuditOK
			w.campos = []string{`circuito →"fechado"`, "antecipadas →0"}
		}))
		if status, _ := e.api(t, "POST", "/api/entregas/999999/tentar-agora", operador, nil); status != 404 {
			t.Fatalf("tentar agora, no such delivery: %d", status)
		}
		audCheck(t, e.one(t, app.AcaoEntregaTentarAgora, "999999"), with2(asOperador, func(w *audExpect) {
			w.alvoTipo, w.resultado, w.codigo = "entrega", app.AuditRecusado, app.ENotFound
		}))
	})
	t.Run("DLQ reprocess with its counts, then the once-a-minute refusal", func(t *testing.T) {
		for range 2 {
			e.api(t, "POST", "/api/events/dlq/reprocessar", operador, map[string]any{"colonia": ocorrencia.Colonia})
		}
		rows := e.rows(t, app.AuditFilter{Acao: app.AcaoDLQReprocessar, Alvo: ocorrencia.Colonia})
		if len(rows) != 2 {
			t.Fatalf("%d rows", len(rows))
		}
		audCheck(t, rows[1], audExpect{quemTipo: app.ActorToken, papel: app.PapelOperador, alvoTipo: "colonia", resultado: app.AuditOK,
			campos: []string{"reprocessados →0", "resolvidos →0", "falharam →0"}})
		audCheck(t, rows[0], audExpect{resultado: app.AuditRecusado, codigo: app.ERateLimited})
	})
	t.Run("commands: by an operator token and by the integrator, each with its outcome", func(t *testing.T) {
		sol := "0199bb3e-0000-7000-8000-0000000000a1"
		status, raw := e.api(t, "POST", "/api/ocorrencias", operador, map[string]any{"natureza": "incendio",
			"endereco": "Rua Sigilosa, 10"}, "X-Solicitacao-Id", sol)
		if status != 201 {
			t.Fatalf("%d %s", status, raw)
		}
		var oc struct{ ID string }
		json.Unmarshal(raw, &oc)
		r := e.one(t, app.AcaoOcorrenciaRegistrar, oc.ID)
		audCheck(t, r, audExpect{quemTipo: app.ActorToken, quemID: e.TokenIDs[app.PapelOperador], papel: app.PapelOperador,
			endereco: "127.0.0.1", alvoTipo: "ocorrencia", resultado: app.AuditOK,
			campos: []string{`solicitacao →"` + sol + `"`, `eventos →["ocorrencia:registrada","integracao:comando-concluido"]`}})
		if strings.Contains(fmt.Sprint(r), "Sigilosa") {
			t.Errorf("the command's body reached the trail: %+v", r)
		}
		// A repeat publishes nothing and records nothing.
		e.api(t, "POST", "/api/ocorrencias", operador, map[string]any{"natureza": "incendio", "endereco": "Rua Sigilosa, 10"},
			"X-Solicitacao-Id", sol)
		e.one(t, app.AcaoOcorrenciaRegistrar, oc.ID)

		sol2 := "0199bb3e-0000-7000-8000-0000000000a2"
		status, raw = e.api(t, "POST", "/api/ocorrencias/"+oc.ID+"/status", operador, map[string]any{"para": "aberta"},
			"X-Solicitacao-Id", sol2)
		if status != 409 {
			t.Fatalf("an invalid transition: %d %s", status, raw)
		}
		audCheck(t, e.one(t, app.AcaoOcorrenciaStatus, oc.ID), audExpect{quemTipo: app.ActorToken, papel: app.PapelOperador,
			alvoTipo: "ocorrencia", resultado: app.AuditRecusado, codigo: app.EConflict,
			campos: []string{`solicitacao →"` + sol2 + `"`, `eventos →["integracao:comando-recusado"]`}})

		sol3 := "0199bb3e-0000-7000-8000-0000000000a3"
		status, raw = e.api(t, "POST", "/api/ocorrencias", in.APIKey, map[string]any{"natureza": "resgate"},
			"X-Solicitacao-Id", sol3)
		if status != 201 {
			t.Fatalf("the integrator's command: %d %s", status, raw)
		}
		json.Unmarshal(raw, &oc)
		audCheck(t, e.one(t, app.AcaoOcorrenciaRegistrar, oc.ID), audExpect{quemTipo: app.ActorIntegrador, quemID: in.ID,
			quemNome: "CAD Bombeiros", endereco: "127.0.0.1", alvoTipo: "ocorrencia", resultado: app.AuditOK})
	})
	t.Run("GET /api/auditoria is admin-only, filters and pages", func(t *testing.T) {
		if status, _ := e.api(t, "GET", "/api/auditoria", operador, nil); status != 403 {
			t.Fatalf("operador read the trail: %d", status)
		}
		var seen []int64
		next := ""
		for range 100 {
			path := "/api/auditoria?limite=3&quem=teste-admin"
			if next != "" {
				path += "&antes=" + next
			}
			status, raw := e.api(t, "GET", path, admin, nil)
			if status != 200 {
				t.Fatalf("%d %s", status, raw)
			}
			var page struct {
				Linhas  []map[string]any `json:"linhas"`
				Proximo *string          `json:"proximo"`
			}
			if err := json.Unmarshal(raw, &page); err != nil || page.Proximo == nil {
				t.Fatalf("page %s: %v", raw, err)
			}
			for _, l := range page.Linhas {
				if q := l["quem"].(map[string]any); q["nome"] != "teste-admin" || q["tipo"] != "token" || q["papel"] != "admin" {
					t.Fatalf("row of someone else: %v", l)
				}
				for _, k := range []string{"id", "em", "quem", "endereco", "acao", "alvo", "campos", "resultado"} {
					if _, ok := l[k]; !ok {
						t.Fatalf("row without %s: %v", k, l)
					}
				}
				seen = append(seen, int64(l["id"].(float64)))
			}
			if *page.Proximo == "" {
				break
			}
			next = *page.Proximo
		}
		want := e.rows(t, app.AuditFilter{QuemNome: "teste-admin"})
		if len(seen) != len(want) || len(want) < 8 {
			t.Fatalf("paged %d rows, the trail has %d", len(seen), len(want))
		}
		for i := range want {
			if seen[i] != want[i].ID {
				t.Fatalf("row %d: id %d, want %d", i, seen[i], want[i].ID)
			}
		}
		for _, bad := range []string{"?inicio=ontem", "?limite=-1", "?quem=x&desconhecido=1",
			"?inicio=2026-12-01T00:00:00Z&fim=2026-11-01T00:00:00Z"} {
			if status, raw := e.api(t, "GET", "/api/auditoria"+bad, admin, nil); status != 422 {
				t.Errorf("%s: %d %s", bad, status, raw)
			}
		}
		status, raw := e.api(t, "GET", "/api/auditoria?acao="+app.AcaoIntegradorCriar+"&alvo="+in.ID, admin, nil)
		if status != 200 || strings.Count(string(raw), `"acao":"integrador.criar"`) != 1 {
			t.Fatalf("filtered by acao and alvo: %d %s", status, raw)
		}
		status, raw = e.api(t, "GET", "/api/auditoria/exportar?quem=teste-admin", admin, nil)
		if status != 200 || bytes.Count(raw, []byte("\n")) != len(want) {
			t.Fatalf("export: %d, %d lines for %d rows", status, bytes.Count(raw, []byte("\n")), len(want))
		}
	})
}

func audJSON(v any) []byte { b, _ := json.Marshal(v); return b }

// audBrowser is a console client: cookies kept, redirects not followed.
type audBrowser struct {
	t    *testing.T
	base string
	c    *http.Client
	// forwarded, when set, is sent as X-Forwarded-For (the console trusts
	// 127.0.0.1 as a proxy in audSetup).
	forwarded string
}

func (e *audEnv) browser(t *testing.T, forwarded string) *audBrowser {
	jar, _ := cookiejar.New(nil)
	return &audBrowser{t: t, base: e.URL, forwarded: forwarded,
		c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

var audCSRF = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

func (b *audBrowser) do(method, path string, form url.Values) (int, string) {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, b.base+path, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if b.forwarded != "" {
		req.Header.Set("X-Forwarded-For", b.forwarded)
	}
	res, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(raw)
}

// csrf reads a form token from a page: the login form's before a session,
// the session's after.
func (b *audBrowser) csrf(path string) string {
	b.t.Helper()
	_, page := b.do("GET", path, nil)
	m := audCSRF.FindStringSubmatch(page)
	if m == nil {
		b.t.Fatalf("no csrf on %s", path)
	}
	return m[1]
}

func (b *audBrowser) login(user, senha string) int {
	b.t.Helper()
	status, _ := b.do("POST", "/login", url.Values{"csrf": {b.csrf("/login")}, "login": {user}, "senha": {senha}})
	return status
}

func (b *audBrowser) post(path string, form url.Values) int {
	b.t.Helper()
	form.Set("csrf", b.csrf("/conta/senha"))
	status, _ := b.do("POST", path, form)
	return status
}

func TestAuditRecordsEachConsoleAction(t *testing.T) {
	e := audSetup(t)
	adminOp, _, err := e.DB.OperatorByLogin(t.Context(), "admin")
	if err != nil {
		t.Fatal(err)
	}
	b := e.browser(t, "203.0.113.9")
	asAdmin := audExpect{quemTipo: app.ActorOperador, quemID: adminOp.ID, quemNome: "admin", papel: app.PapelAdmin,
		endereco: "203.0.113.9", alvoTipo: "operador", resultado: app.AuditOK}

	t.Run("failed logins: a known account by name, an unknown one without what was typed", func(t *testing.T) {
		if status := b.login("admin", "errada-errada"); status != http.StatusUnauthorized {
			t.Fatalf("wrong password: %d", status)
		}
		if status := b.login("ninguem.aqui", "errada-errada"); status != http.StatusUnauthorized {
			t.Fatalf("unknown login: %d", status)
		}
		rows := e.rows(t, app.AuditFilter{Acao: app.AcaoLoginFalhou})
		if len(rows) != 2 {
			t.Fatalf("%d failed logins recorded", len(rows))
		}
		audCheck(t, rows[1], audExpect{quemTipo: app.ActorOperador, quemID: adminOp.ID, quemNome: "admin",
			endereco: "203.0.113.9", resultado: app.AuditRecusado, codigo: app.EUnauthorized, detalhe: "senha incorreta"})
		audCheck(t, rows[0], audExpect{quemTipo: app.ActorAnonimo, endereco: "203.0.113.9", resultado: app.AuditRecusado,
			detalhe: "usuário desconhecido"})
		if strings.Contains(fmt.Sprint(rows), "ninguem") || strings.Contains(fmt.Sprint(rows), "errada") {
			t.Fatalf("what was typed reached the trail: %+v", rows)
		}
	})
	t.Run("login", func(t *testing.T) {
		if status := b.login("admin", audAdminPassword); status != http.StatusSeeOther {
			t.Fatalf("login: %d", status)
		}
		audCheck(t, e.one(t, app.AcaoLogin, adminOp.ID), with2(asAdmin, func(w *audExpect) { w.alvoNome = "admin" }))
	})
	var ana app.Operator
	t.Run("operators: created, role changed, deactivated, password reset", func(t *testing.T) {
		if status := b.post("/operadores", url.Values{"login": {"ana.silva"}, "papel": {"leitor"},
			"senha": {"senha-da-ana-123"}, "confirma": {"senha-da-ana-123"}}); status != http.StatusSeeOther {
			t.Fatalf("create: %d", status)
		}
		ana, _, _ = e.DB.OperatorByLogin(t.Context(), "ana.silva")
		audCheck(t, e.one(t, app.AcaoOperadorCriar, ana.ID), with2(asAdmin, func(w *audExpect) {
			w.alvoNome, w.campos = "ana.silva", []string{`login →"ana.silva"`, `papel →"leitor"`, "ativo →true"}
		}))
		if status := b.post("/operadores/"+ana.ID+"/papel", url.Values{"papel": {"operador"}}); status != http.StatusSeeOther {
			t.Fatalf("role: %d", status)
		}
		audCheck(t, e.one(t, app.AcaoOperadorPapelAlterar, ana.ID), with2(asAdmin, func(w *audExpect) {
			w.alvoNome, w.campos = "ana.silva", []string{`papel "leitor"→"operador"`}
		}))
		if status := b.post("/operadores/"+ana.ID+"/ativo", url.Values{"ativo": {"nao"}}); status != http.StatusSeeOther {
			t.Fatalf("deactivate: %d", status)
		}
		audCheck(t, e.one(t, app.AcaoOperadorDesativar, ana.ID), with2(asAdmin, func(w *audExpect) {
			w.alvoNome, w.campos = "ana.silva", []string{"ativo true→false"}
		}))
		if status := b.post("/operadores/"+ana.ID+"/senha", url.Values{}); status != http.StatusOK {
			t.Fatalf("reset: %d", status)
		}
		audCheck(t, e.one(t, app.AcaoOperadorSenhaRedefinir, ana.ID), with2(asAdmin, func(w *audExpect) {
			w.alvoNome, w.campos = "ana.silva", []string{}
		}))
		if status := b.post("/operadores/"+adminOp.ID+"/ativo", url.Values{"ativo": {"nao"}}); status != http.StatusConflict {
			t.Fatalf("deactivating oneself: %d", status)
		}
		audCheck(t, e.one(t, app.AcaoOperadorDesativar, adminOp.ID), with2(asAdmin, func(w *audExpect) {
			w.resultado, w.codigo, w.detalhe = app.AuditRecusado, app.EConflict, "própria conta"
		}))
	})
	t.Run("own password: a wrong current one refused, then changed", func(t *testing.T) {
		if status := b.post("/conta/senha", url.Values{"atual": {"nao-e-esta-1"}, "nova": {"senha-nova-do-admin-1"},
			"confirma": {"senha-nova-do-admin-1"}}); status != http.StatusUnprocessableEntity {
			t.Fatalf("wrong current: %d", status)
		}
		if status := b.post("/conta/senha", url.Values{"atual": {audAdminPassword}, "nova": {"senha-nova-do-admin-1"},
			"confirma": {"senha-nova-do-admin-1"}}); status != http.StatusSeeOther {
			t.Fatalf("change: %d", status)
		}
		rows := e.rows(t, app.AuditFilter{Acao: app.AcaoOperadorSenhaTrocar, Alvo: adminOp.ID})
		if len(rows) != 2 {
			t.Fatalf("%d rows", len(rows))
		}
		audCheck(t, rows[1], with2(asAdmin, func(w *audExpect) {
			w.resultado, w.codigo, w.detalhe = app.AuditRecusado, app.EInvalid, "senha atual incorreta"
		}))
		audCheck(t, rows[0], with2(asAdmin, func(w *audExpect) { w.campos = []string{} }))
	})
	t.Run("a form without the session's CSRF token is refused and recorded", func(t *testing.T) {
		if status, _ := b.do("POST", "/operadores/"+ana.ID+"/ativo", url.Values{"ativo": {"sim"}, "csrf": {"00"}}); status != 403 {
			t.Fatalf("status %d", status)
		}
		audCheck(t, e.one(t, app.AcaoAcessoNegado, "POST /operadores/"+ana.ID+"/ativo"), with2(asAdmin, func(w *audExpect) {
			w.alvoTipo, w.resultado, w.codigo, w.detalhe = "rota", app.AuditRecusado, app.EForbidden, "CSRF"
		}))
	})
	t.Run("the audit page lists it all, for admins only", func(t *testing.T) {
		status, page := b.do("GET", "/auditoria?acao="+app.AcaoOperadorPapelAlterar, nil)
		if status != 200 || !strings.Contains(page, "Mudou o papel de operador") || !strings.Contains(page, "ana.silva") ||
			!strings.Contains(page, "203.0.113.9") || !strings.Contains(page, "leitor → operador") {
			t.Fatalf("audit page: %d\n%s", status, page)
		}
		leitor := e.browser(t, "")
		if _, err := e.Sessions.CreateOperator(t.Context(), "", "leo.leitor", "senha-do-leo-123", app.PapelLeitor); err != nil {
			t.Fatal(err)
		}
		leitor.login("leo.leitor", "senha-do-leo-123")
		if status, _ := leitor.do("GET", "/auditoria", nil); status != http.StatusForbidden {
			t.Fatalf("a leitor opened /auditoria: %d", status)
		}
	})
	t.Run("logout", func(t *testing.T) {
		if status := b.post("/sair", url.Values{}); status != http.StatusSeeOther {
			t.Fatalf("logout: %d", status)
		}
		audCheck(t, e.one(t, app.AcaoLogout, adminOp.ID), with2(asAdmin, func(w *audExpect) { w.alvoNome = "admin" }))
	})
}

// with2 is base with the changes f makes.
func with2(base audExpect, f func(*audExpect)) audExpect { f(&base); return base }

// A change that its transaction refuses leaves a refusal and no ok row,
// and the change itself is not there.
func TestAuditNoOKRowWithoutItsChange(t *testing.T) {
	e := audSetup(t)
	ctx := t.Context()
	chefe, err := e.Sessions.CreateOperator(ctx, "", "chefe.um", "senha-do-chefe-1", app.PapelAdmin)
	if err != nil {
		t.Fatal(err)
	}
	outro, err := e.Sessions.CreateOperator(ctx, "", "chefe.dois", "senha-do-chefe-2", app.PapelAdmin)
	if err != nil {
		t.Fatal(err)
	}
	alvo, err := e.Sessions.CreateOperator(ctx, "", "alvo.tres", "senha-do-alvo-3", app.PapelLeitor)
	if err != nil {
		t.Fatal(err)
	}
	// chefe.um is demoted by chefe.dois; a change chefe.um started as an
	// admin reaches the store afterwards, where the transaction checks again.
	if err := e.Sessions.SetRole(ctx, outro, chefe.ID, app.PapelLeitor); err != nil {
		t.Fatal(err)
	}
	actx := app.WithActor(ctx, app.Actor{Tipo: app.ActorOperador, ID: chefe.ID, Nome: chefe.Login, Papel: app.PapelAdmin, Endereco: "198.51.100.4"})
	if err := e.Sessions.SetRole(actx, chefe, alvo.ID, app.PapelAdmin); app.ErrorCode(err) != app.EForbidden {
		t.Fatalf("a demoted admin's change: %v", err)
	}
	rows := e.rows(t, app.AuditFilter{Acao: app.AcaoOperadorPapelAlterar, Alvo: alvo.ID})
	if len(rows) != 1 || rows[0].Resultado != app.AuditRecusado || rows[0].Codigo != app.EForbidden || rows[0].Quem.ID != chefe.ID {
		t.Fatalf("rows %+v, want one refusal by chefe.um", rows)
	}
	after, _, _ := e.DB.OperatorByLogin(ctx, "alvo.tres")
	if after.Papel != app.PapelLeitor {
		t.Fatalf("the refused change happened: papel %s", after.Papel)
	}
}

// A leitor refused on a path of its choosing adds one bounded row per
// request, each named, and only as long as it has refusals left
// (app.RefusalBurst, back at app.RefusalRate): then every request of its
// token is 429 at once and records nothing. The trail is kept forever, so
// its growth is not the caller's to choose (issue 26, M3 and L2).
func TestRefusalsCannotGrowTheTrailWithoutBound(t *testing.T) {
	ctx := t.Context()
	clock := storetest.NewClock(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC))
	k := storetest.New(t, storetest.Options{Deps: app.Deps{Now: clock.Now, NoDispatch: true}})
	hs := httptest.NewServer(web.NewHandler(k.Services, web.Options{Ocorrencias: k.Ocorrencias}))
	t.Cleanup(hs.Close)
	secret, tok, err := k.Auth.CreateToken(ctx, app.PapelLeitor, "script")
	if err != nil {
		t.Fatal(err)
	}
	send := func(method, path string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, hs.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res
	}
	refuse := func(path string) {
		t.Helper()
		if res := send("POST", path); res.StatusCode != http.StatusForbidden {
			t.Fatalf("%s: %d, want 403", path[:min(len(path), 60)], res.StatusCode)
		}
	}
	rowsOf := func() []app.AuditEntry {
		t.Helper()
		rows, _, err := k.DB.AuditEntries(ctx, app.AuditFilter{QuemID: tok.ID, Limite: 500})
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
	// Paths of 900 KB a few times, to see each row bounded, without
	// parsing 54 MB of paths under -race.
	long := "/api/integradores/" + strings.Repeat("A", 900_000) + "/verificar"
	for i := range app.RefusalBurst {
		if i < 5 {
			refuse(long)
		} else {
			refuse(fmt.Sprintf("/api/integradores/x%d/verificar", i))
		}
	}
	rows := rowsOf()
	size := 0
	for _, r := range rows {
		size += r.Size()
	}
	if len(rows) != app.RefusalBurst || size > app.RefusalBurst*2048 {
		t.Fatalf("%d refusals stored %d rows of %d bytes in all; want one each, each within 2 KiB", app.RefusalBurst, len(rows), size)
	}
	// Out of refusals: 429 at once, even for a read it may make, and no row.
	for _, req := range [][2]string{{"POST", long}, {"GET", "/api/events"}} {
		res := send(req[0], req[1])
		if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" {
			t.Fatalf("%s past the refusals: %d, Retry-After %q", req[0], res.StatusCode, res.Header.Get("Retry-After"))
		}
	}
	if n := len(rowsOf()); n != app.RefusalBurst {
		t.Fatalf("the 429s stored %d rows", n-app.RefusalBurst)
	}
	// One comes back every 1/RefusalRate, and its refusal is recorded by name.
	clock.Set(clock.Now().Add(time.Duration(float64(time.Second) / app.RefusalRate)))
	refuse("/api/integradores/x/verificar")
	if rows := rowsOf(); len(rows) != app.RefusalBurst+1 || rows[0].Alvo.ID != "POST /api/integradores/x/verificar" {
		t.Fatalf("the refusal after the wait: %d rows, newest %+v", len(rows), rows[0])
	}
}
