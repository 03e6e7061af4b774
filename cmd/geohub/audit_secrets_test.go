package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"geohub/app"
	"geohub/store"
)

// auditHTTP is a client of the in-process server: the API with a bearer,
// the console with a cookie jar and its forms' CSRF tokens.
type auditHTTP struct {
	t    *testing.T
	base string
	c    *http.Client
}

func newAuditHTTP(t *testing.T, addr string) *auditHTTP {
	jar, _ := cookiejar.New(nil)
	return &auditHTTP{t: t, base: "http://" + addr,
		c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (h *auditHTTP) send(method, path, bearer string, body io.Reader, contentType string, headers ...string) (int, string) {
	h.t.Helper()
	req, _ := http.NewRequest(method, h.base+path, body)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := h.c.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(raw)
}

// api sends JSON with a bearer and fails unless the status is want.
func (h *auditHTTP) api(method, path, bearer string, body any, want int, headers ...string) string {
	h.t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	status, raw := h.send(method, path, bearer, r, "application/json", headers...)
	if status != want {
		h.t.Fatalf("%s %s: %d, want %d: %.400s", method, path, status, want, raw)
	}
	return raw
}

var auditCSRF = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// form posts a console form with the CSRF token of the page at from.
func (h *auditHTTP) form(from, path string, v url.Values, want int) string {
	h.t.Helper()
	_, page := h.send("GET", from, "", nil, "")
	m := auditCSRF.FindStringSubmatch(page)
	if m == nil {
		h.t.Fatalf("no csrf on %s: %.300s", from, page)
	}
	v.Set("csrf", m[1])
	status, raw := h.send("POST", path, "", strings.NewReader(v.Encode()), "application/x-www-form-urlencoded")
	if status != want {
		h.t.Fatalf("POST %s: %d, want %d: %.400s", path, status, want, raw)
	}
	return raw
}

func (h *auditHTTP) session() string {
	u, _ := url.Parse(h.base)
	for _, ck := range h.c.Jar.Cookies(u) {
		if ck.Name == "geohub_sessao" {
			return ck.Value
		}
	}
	return ""
}

func shown(t *testing.T, page, id string) string {
	t.Helper()
	m := regexp.MustCompile(`<code id="` + id + `">([^<]+)</code>`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no #%s on the page: %.400s", id, page)
	}
	return m[1]
}

// TestAuditHoldsNoSecret performs every kind of audited action, through
// the CLI's code paths, the API and the console, and then reads the whole
// audit table, the API's JSON, its export and the console page: none holds
// a secret, an API key, a token, a password, or a hash of any of them.
func TestAuditHoldsNoSecret(t *testing.T) {
	alongside(t)
	sqliteOnly(t)
	m, dir, stop := runMain(t)
	t.Cleanup(func() { stop() })
	ctx := context.Background()
	cad := newCADReceiver(t, http.StatusNoContent)
	var secrets []string
	keep := func(s ...string) { secrets = append(secrets, s...) }

	// The CLI: tokens created and one revoked, the admin's password reset.
	admin := mainToken(t, dir, app.PapelAdmin, "auditoria-admin")
	operador := mainToken(t, dir, app.PapelOperador, "auditoria-operador")
	var out bytes.Buffer
	if err := createToken(ctx, &out, testDatabase(t, dir), app.PapelLeitor, "descartavel"); err != nil {
		t.Fatal(err)
	}
	descartavel := lastLine(out.String())
	tokenID := regexp.MustCompile(`token (\S+) \(`).FindStringSubmatch(out.String())[1]
	if err := tokenRevokeCmd(ctx, withDatabase(t, []string{"--data", dir, "--id", tokenID})); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := resetPassword(ctx, &out, testDatabase(t, dir), "admin"); err != nil {
		t.Fatal(err)
	}
	adminSenha := lastLine(out.String())
	keep(admin, operador, descartavel, adminSenha)

	h := newAuditHTTP(t, m.Addr)
	// The API: an integrator's whole life, commands, the registry, resends.
	var created app.CreatedIntegrator
	json.Unmarshal([]byte(h.api("POST", "/api/integradores", admin, map[string]any{"nome": "CAD Auditado",
		"callback_url": cad.callback(), "hosts_permitidos": []string{"127.0.0.1"}}, 201)), &created)
	keep(created.Segredo, created.APIKey)
	var rot app.RotatedSecret
	json.Unmarshal([]byte(h.api("POST", "/api/integradores/"+created.ID+"/segredo/rotacionar", admin, nil, 200)), &rot)
	var key app.RotatedAPIKey
	json.Unmarshal([]byte(h.api("POST", "/api/integradores/"+created.ID+"/api_key/rotacionar", admin, nil, 200)), &key)
	keep(rot.Segredo, key.APIKey)
	h.api("PATCH", "/api/integradores/"+created.ID, admin, map[string]any{"ativo": false}, 200)
	h.api("PATCH", "/api/integradores/"+created.ID, admin, map[string]any{"ativo": true}, 200)
	h.api("POST", "/api/integradores/"+created.ID+"/verificar", admin, nil, 200)
	var oc struct{ ID string }
	json.Unmarshal([]byte(h.api("POST", "/api/ocorrencias", key.APIKey, map[string]any{"natureza": "incendio"}, 201,
		"X-Solicitacao-Id", "0199bb3e-0000-7000-8000-0000000000b1")), &oc)
	h.api("POST", "/api/ocorrencias/"+oc.ID+"/despachos", operador, map[string]any{"recurso": map[string]any{"identificador": "UR-7"}},
		201, "X-Solicitacao-Id", "0199bb3e-0000-7000-8000-0000000000b2")
	h.api("POST", "/api/registro", admin, map[string]any{"tipo": "auditoria:teste", "versao": "1.0.0", "audiencia": "todos",
		"schema": map[string]any{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"}}, 201)
	h.api("PATCH", "/api/registro/auditoria:teste/1.0.0", admin, map[string]any{"status": "deprecado"}, 200)
	h.api("POST", "/api/entregas/reenviar", operador, map[string]any{"integrador": created.ID}, 200)
	h.api("POST", "/api/events/dlq/reprocessar", operador, map[string]any{"colonia": "ocorrencias"}, 200)

	// The console: a failed login, a login, an account created and its
	// password reset, a rotation, the admin's own password, logout.
	errada := "senha-errada-para-auditar-1"
	keep(errada)
	h.form("/login", "/login", url.Values{"login": {"admin"}, "senha": {errada}}, http.StatusUnauthorized)
	h.form("/login", "/login", url.Values{"login": {"admin"}, "senha": {adminSenha}}, http.StatusSeeOther)
	keep(h.session())
	opSenha := "senha-do-operador-auditado-1"
	keep(opSenha)
	h.form("/operadores", "/operadores", url.Values{"login": {"rita.auditada"}, "papel": {"operador"},
		"senha": {opSenha}, "confirma": {opSenha}}, http.StatusSeeOther)
	db := openTestStore(t, dir)
	defer db.Close()
	rita, _, err := db.OperatorByLogin(ctx, "rita.auditada")
	if err != nil {
		t.Fatal(err)
	}
	keep(shown(t, h.form("/operadores", "/operadores/"+rita.ID+"/senha", url.Values{}, 200), "senha-nova"))
	keep(shown(t, h.form("/integradores/"+created.ID, "/integradores/"+created.ID+"/segredo/rotacionar", url.Values{}, 200), "segredo"))
	novaSenha := "senha-nova-do-admin-auditado-1"
	keep(novaSenha)
	h.form("/conta/senha", "/conta/senha", url.Values{"atual": {adminSenha}, "nova": {novaSenha}, "confirma": {novaSenha}},
		http.StatusSeeOther)
	keep(h.session())
	h.form("/conta/senha", "/sair", url.Values{}, http.StatusSeeOther)
	h.form("/login", "/login", url.Values{"login": {"admin"}, "senha": {novaSenha}}, http.StatusSeeOther)
	keep(h.session())

	// Every secret above, their SHA-256 (how tokens, keys and sessions are
	// stored), and whatever hash or sealed value the database holds now.
	for _, s := range append([]string(nil), secrets...) {
		if s == "" {
			t.Fatal("a secret of the scenario came back empty")
		}
		sum := sha256.Sum256([]byte(s))
		keep(hex.EncodeToString(sum[:]))
	}
	raw, err := sql.Open(store.DriverName, store.DSN(filepath.Join(dir, store.FileName), true))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	for _, q := range []string{`SELECT hash FROM api_token`, `SELECT senha_hash FROM operator`, `SELECT hash FROM operator_session`,
		`SELECT api_key_hash FROM integrator`, `SELECT hex(segredo) FROM integrator`,
		`SELECT hex(segredo_anterior) FROM integrator WHERE segredo_anterior IS NOT NULL`} {
		rows, err := raw.QueryContext(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var v string
			rows.Scan(&v)
			keep(v, strings.ToLower(v))
		}
		rows.Close()
	}

	// The whole audit table, every column of every row.
	rows, err := raw.QueryContext(ctx, `SELECT * FROM audit_log ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	cols, _ := rows.Columns()
	var table strings.Builder
	acoes := map[string]int{}
	n := 0
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			table.WriteString(v.String + "\t")
			if cols[i] == "acao" {
				acoes[v.String]++
			}
		}
		table.WriteString("\n")
		n++
	}
	rows.Close()
	for _, a := range []string{app.AcaoTokenCriar, app.AcaoTokenRevogar, app.AcaoOperadorSenhaRedefinir, app.AcaoIntegradorCriar,
		app.AcaoIntegradorSegredoRotacionar, app.AcaoIntegradorAPIKeyRotacionar, app.AcaoIntegradorDesativar,
		app.AcaoIntegradorAtivar, app.AcaoIntegradorVerificar, app.AcaoOcorrenciaRegistrar, app.AcaoOcorrenciaDespachar,
		app.AcaoRegistroRegistrar, app.AcaoRegistroDescontinuar, app.AcaoEntregaReenviarLote, app.AcaoDLQReprocessar,
		app.AcaoLoginFalhou, app.AcaoLogin, app.AcaoOperadorCriar, app.AcaoOperadorSenhaTrocar, app.AcaoLogout} {
		if acoes[a] == 0 {
			t.Errorf("no %s in the trail: the scenario did not audit what it meant to", a)
		}
	}
	if acoes[app.AcaoIntegradorSegredoRotacionar] != 2 || acoes[app.AcaoOperadorSenhaRedefinir] != 2 || acoes[app.AcaoTokenCriar] < 3 {
		t.Errorf("actions counted %v", acoes)
	}
	if !strings.Contains(table.String(), "\tcli\t") {
		t.Error("no row by the CLI")
	}

	// What admins read: the API's pages, its export and the console page.
	var api strings.Builder
	next := ""
	for {
		path := "/api/auditoria?limite=7"
		if next != "" {
			path += "&antes=" + next
		}
		body := h.api("GET", path, admin, nil, 200)
		api.WriteString(body)
		var page app.AuditPage
		json.Unmarshal([]byte(body), &page)
		if page.Proximo == "" {
			break
		}
		next = page.Proximo
	}
	export := h.api("GET", "/api/auditoria/exportar", admin, nil, 200)
	if lines := strings.Count(export, "\n"); lines != n {
		t.Errorf("the export has %d lines, the table %d rows", lines, n)
	}
	_, consolePage := h.send("GET", "/auditoria?limite=500", "", nil, "")
	if !strings.Contains(consolePage, "Trocou o segredo") {
		t.Fatalf("the console page does not list the trail: %.500s", consolePage)
	}

	for where, text := range map[string]string{"the audit table": table.String(), "GET /api/auditoria": api.String(),
		"the export": export, "the /auditoria page": consolePage} {
		for _, s := range secrets {
			if s != "" && strings.Contains(text, s) {
				t.Errorf("%s holds a secret (%.12s…)", where, s)
			}
		}
	}
	t.Logf("%d audit rows checked against %d secrets and hashes", n, len(secrets))
}
