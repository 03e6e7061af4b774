package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"

	"geohub/app"
)

// The leitor account TestConsoleOperadorLeitor creates through /operadores.
const (
	leitorLogin    = "leitora.ana"
	leitorPassword = "senha-da-leitora-1"
)

// cadReceiver stands in for a CAD's webhook endpoint on loopback: it answers
// every request with one status and keeps what it received.
type cadReceiver struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []receivedRequest
}

type receivedRequest struct {
	header http.Header
	body   []byte
}

func newCADReceiver(t *testing.T, status int) *cadReceiver {
	t.Helper()
	c := &cadReceiver{}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		c.mu.Lock()
		c.reqs = append(c.reqs, receivedRequest{r.Header.Clone(), body})
		c.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(c.Close)
	return c
}

func (c *cadReceiver) callback() string { return c.URL + "/geohub/eventos" }

func (c *cadReceiver) received() []receivedRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]receivedRequest(nil), c.reqs...)
}

// pageHTML is the whole document as the browser holds it now.
func pageHTML(t *testing.T, ctx context.Context) string {
	t.Helper()
	return get(t, ctx, "page HTML", chromedp.Evaluate[string](`document.documentElement.outerHTML`))
}

// count is how many elements of the page match a CSS selector, without
// waiting for any to appear.
func count(t *testing.T, ctx context.Context, sel string) int {
	t.Helper()
	return get(t, ctx, "count "+sel, chromedp.Evaluate[int](`document.querySelectorAll(`+strconv.Quote(sel)+`).length`))
}

// fill sets form fields by name; textareas get their newlines as typed.
func fill(fields map[string]string) chromedp.Action[chromedp.Void] {
	var steps []chromedp.Action[chromedp.Void]
	for name, v := range fields {
		steps = append(steps, chromedp.SetValue(css(`main [name="`+name+`"]`), v))
	}
	return chromedp.Steps(steps...)
}

// answerConfirms makes the page's confirm() dialogs answer OK and keeps
// their questions in sessionStorage, which outlives the navigation the
// confirmed form starts (read them with confirmQuestions). Set it again
// after each navigation.
var answerConfirms = chromedp.Evaluate[chromedp.Void](`window.confirm = (q) => {
	sessionStorage.setItem("perguntas", JSON.stringify([...JSON.parse(sessionStorage.getItem("perguntas") || "[]"), q]));
	return true;
}`)

// confirmQuestions returns and forgets the questions confirm() asked.
func confirmQuestions(t *testing.T, ctx context.Context) []string {
	t.Helper()
	return get(t, ctx, "confirm questions", chromedp.Evaluate[[]string](
		`(() => { const q = JSON.parse(sessionStorage.getItem("perguntas") || "[]"); sessionStorage.removeItem("perguntas"); return q; })()`))
}

// askedOnce fails unless exactly one confirm() was asked, containing want.
func askedOnce(t *testing.T, ctx context.Context, want string) {
	t.Helper()
	if q := confirmQuestions(t, ctx); len(q) != 1 || !strings.Contains(q[0], want) {
		t.Fatalf("confirm questions %q, want one with %q", q, want)
	}
}

// fetchResult is what an in-page fetch reports back to the test.
type fetchResult struct {
	Status       int    `json:"status"`
	CacheControl string `json:"cacheControl"`
	Body         string `json:"body"`
}

// postFromPage sends a form POST from inside the page, as a script on it
// could: same cookies, and the page's own CSRF token unless the form data
// brings one.
func postFromPage(t *testing.T, ctx context.Context, path string, form map[string]string) fetchResult {
	t.Helper()
	data, _ := json.Marshal(form)
	js := `(async () => {
		const d = new URLSearchParams(` + string(data) + `);
		if (!d.has("csrf")) d.set("csrf", document.querySelector("input[name=csrf]").value);
		const r = await fetch(` + strconv.Quote(path) + `, {method: "POST", body: d, redirect: "manual"});
		return {status: r.status, cacheControl: r.headers.get("cache-control") || "", body: await r.text()};
	})()`
	return get(t, ctx, "POST "+path+" from the page", chromedp.Evaluate[fetchResult](js, chromedp.EvalAwaitPromise))
}

func TestConsoleAdminIntegradores(t *testing.T) {
	cad := newCADReceiver(t, http.StatusNoContent)
	broken := newCADReceiver(t, http.StatusServiceUnavailable)
	srv := startServer(t, t.TempDir(), "--insecure-callbacks")
	ctx := browser(t)
	base := "http://" + srv.addr
	login(t, ctx, base, "admin", adminPassword)

	var id, segredo, apiKey string
	t.Run("a refused callback comes back beside its field with what was typed", func(t *testing.T) {
		typed := map[string]string{"nome": "CAD Bombeiros", "callback_url": "http://10.20.30.40/geohub/eventos",
			"hosts_permitidos": "10.20.30.40", "eventos": "ocorrencia:*, integracao:*", "backoff": "5s, 30s"}
		do(t, ctx, "open the create form", chromedp.Navigate(base+"/integradores/novo"), chromedp.WaitVisible(css(`input[name=nome]`)),
			fill(typed), chromedp.Click(css(`main button[type=submit]`)), chromedp.WaitVisible(css(`#erro-callback_url`)))
		if msg := text(t, ctx, `#erro-callback_url`); !strings.Contains(msg, "rede privada") {
			t.Fatalf("callback error %q does not give the reason", msg)
		}
		for name, want := range typed {
			if got := get(t, ctx, "value of "+name, chromedp.Value(css(`main [name="`+name+`"]`))); got != want {
				t.Errorf("%s came back as %q, typed %q", name, got, want)
			}
		}
		screenshot(t, ctx, "integrador-novo-erro")

		do(t, ctx, "a bad pattern and a host outside the allowlist",
			fill(map[string]string{"callback_url": cad.callback(), "hosts_permitidos": "127.0.0.1", "eventos": "ocorrencia:*\nNao Vale"}),
			chromedp.Click(css(`main button[type=submit]`)), chromedp.WaitVisible(css(`#erro-eventos`)))
		if msg := text(t, ctx, `#erro-eventos`); !strings.Contains(msg, `"Nao Vale"`) {
			t.Fatalf("eventos error %q does not name the bad entry", msg)
		}
	})

	t.Run("the secret and API key are shown once", func(t *testing.T) {
		do(t, ctx, "create", fill(map[string]string{"eventos": "ocorrencia:*, integracao:*"}),
			chromedp.Click(css(`main button[type=submit]`)), chromedp.WaitVisible(css(`#segredo`)))
		segredo, apiKey = text(t, ctx, `#segredo`), text(t, ctx, `#api-key`)
		if !strings.HasPrefix(segredo, "whsec_") || !strings.HasPrefix(apiKey, app.APIKeyPrefix) {
			t.Fatalf("segredo %q, api key %q", segredo, apiKey)
		}
		if w := text(t, ctx, `.aviso-forte`); !strings.Contains(w, "Guarde agora: não será mostrado de novo") {
			t.Fatalf("warning %q", w)
		}
		if n := count(t, ctx, `main [data-copiar]`); n != 2 {
			t.Fatalf("%d copy buttons", n)
		}
		screenshot(t, ctx, "integrador-segredo")

		do(t, ctx, "go to the integrator", chromedp.Click(css(`main a.botao.primario`)), chromedp.WaitVisible(css(`h1.com-selo`)))
		loc := get(t, ctx, "location", chromedp.Location())
		id = loc[strings.LastIndex(loc, "/")+1:]
		assertNoSecret(t, ctx, "the integrator page", segredo, apiKey)
		// The answer was a POST marked no-store: going back finds nothing
		// to show (chromium offers to resend the form instead), and a
		// reload sends it again, which its single-use token refuses.
		if err := chromedp.Do(ctx, chromedp.NavigateBack()); err != nil && !strings.Contains(err.Error(), "ERR_CACHE_MISS") {
			t.Fatalf("back to the answer: %v", err)
		}
		assertNoSecret(t, ctx, "the answer, back in history", segredo, apiKey)
		if err := chromedp.Do(ctx, chromedp.Reload()); err != nil && !strings.Contains(err.Error(), "ERR_CACHE_MISS") {
			t.Fatalf("reload the answer: %v", err)
		}
		assertNoSecret(t, ctx, "the answer, reloaded", segredo, apiKey)
		if h := text(t, ctx, `main h1`); h != "Este cadastro já foi enviado" {
			t.Fatalf("reloading the answer shows %q", h)
		}
		do(t, ctx, "the list", chromedp.Navigate(base+"/integradores"), chromedp.WaitVisible(css(`table.dados`)))
		assertNoSecret(t, ctx, "the list", segredo, apiKey)
		do(t, ctx, "the list, reloaded", chromedp.Reload(), chromedp.WaitVisible(css(`table.dados`)))
		assertNoSecret(t, ctx, "the list, reloaded", segredo, apiKey)
	})

	t.Run("a form sent twice creates one integrator and shows no secret the second time", func(t *testing.T) {
		do(t, ctx, "open the create form", chromedp.Navigate(base+"/integradores/novo"), chromedp.WaitVisible(css(`input[name=nome]`)))
		envio := get(t, ctx, "form token", chromedp.Value(css(`input[name=envio]`)))
		form := map[string]string{"envio": envio, "nome": "CAD SAMU", "callback_url": broken.callback(), "hosts_permitidos": "127.0.0.1"}
		first := postFromPage(t, ctx, "/integradores", form)
		if first.Status != http.StatusCreated || first.CacheControl != "no-store" || !strings.Contains(first.Body, "whsec_") {
			t.Fatalf("first submission: %d, Cache-Control %q", first.Status, first.CacheControl)
		}
		again := postFromPage(t, ctx, "/integradores", form)
		if again.Status != http.StatusConflict || strings.Contains(again.Body, "whsec_") || strings.Contains(again.Body, app.APIKeyPrefix) {
			t.Fatalf("second submission: %d\n%s", again.Status, again.Body)
		}
		do(t, ctx, "the list", chromedp.Navigate(base+"/integradores"), chromedp.WaitVisible(css(`table.dados`)))
		if n := strings.Count(pageHTML(t, ctx), ">CAD SAMU<"); n != 1 {
			t.Fatalf("CAD SAMU listed %d times", n)
		}
	})

	t.Run("a failing verification says why and changes nothing", func(t *testing.T) {
		do(t, ctx, "open CAD SAMU", chromedp.Navigate(base+"/integradores"), chromedp.WaitVisible(css(`table.dados`)),
			chromedp.Click(css(`table.dados a:not([href$="`+id+`"])`)), chromedp.WaitVisible(css(`h1.com-selo`)),
			chromedp.Click(css(`form[action$="/verificar"] button`)), chromedp.WaitVisible(css(`.verificacao`)))
		if msg := text(t, ctx, `.verificacao`); !strings.Contains(msg, "A verificação falhou") || !strings.Contains(msg, "HTTP 503") {
			t.Fatalf("verification failure reads %q", msg)
		}
		screenshot(t, ctx, "integrador-verificacao-falhou")
		do(t, ctx, "disable it", answerConfirms, chromedp.Click(css(`form[action$="/ativo"] button`)), chromedp.WaitVisible(css(`p.aviso-ok`)))
		askedOnce(t, ctx, "Desativar CAD SAMU?")
		if b := text(t, ctx, `h1 .selo`); b != "inativo" {
			t.Fatalf("badge after disabling: %q", b)
		}
	})

	t.Run("list", func(t *testing.T) {
		do(t, ctx, "the list", chromedp.Navigate(base+"/integradores"), chromedp.WaitVisible(css(`table.dados`)))
		if n := count(t, ctx, `table.dados tbody tr`); n != 2 {
			t.Fatalf("%d rows", n)
		}
		if msg := text(t, ctx, `.motivo`); msg != "desativado por um operador" {
			t.Fatalf("motivo %q", msg)
		}
		screenshot(t, ctx, "integradores")
	})

	var novo string
	t.Run("rotation shows the new secret once and explains the grace period", func(t *testing.T) {
		do(t, ctx, "open CAD Bombeiros", chromedp.Navigate(base+"/integradores/"+id), chromedp.WaitVisible(css(`h1.com-selo`)),
			answerConfirms, chromedp.Click(css(`form[action$="/segredo/rotacionar"] button`)), chromedp.WaitVisible(css(`#segredo`)))
		askedOnce(t, ctx, "Gerar um novo segredo para CAD Bombeiros?")
		novo = text(t, ctx, `#segredo`)
		if !strings.HasPrefix(novo, "whsec_") || novo == segredo {
			t.Fatalf("new secret %q (old %q)", novo, segredo)
		}
		body := text(t, ctx, `main`)
		for _, want := range []string{"Guarde agora: não será mostrado de novo", "X-Geohub-Assinatura-Anterior", "24 h"} {
			if !strings.Contains(body, want) {
				t.Errorf("rotation page lacks %q", want)
			}
		}
		screenshot(t, ctx, "integrador-rotacao")
		do(t, ctx, "back to the integrator", chromedp.Click(css(`main a.botao.primario`)), chromedp.WaitVisible(css(`h1.com-selo`)))
		assertNoSecret(t, ctx, "the integrator page after rotation", novo, segredo)
	})

	t.Run("a new API key is shown once and the old one stops at once", func(t *testing.T) {
		do(t, ctx, "open CAD Bombeiros", chromedp.Navigate(base+"/integradores/"+id), chromedp.WaitVisible(css(`h1.com-selo`)),
			answerConfirms, chromedp.Click(css(`form[action$="/api_key/rotacionar"] button`)), chromedp.WaitVisible(css(`#api-key`)))
		askedOnce(t, ctx, "Gerar uma nova chave de API para CAD Bombeiros?")
		chave := text(t, ctx, `#api-key`)
		if !strings.HasPrefix(chave, app.APIKeyPrefix) || chave == apiKey {
			t.Fatalf("new API key %q (old %q)", chave, apiKey)
		}
		if body := text(t, ctx, `main`); !strings.Contains(body, "Guarde agora: não será mostrada de novo") {
			t.Error("the key page does not say it is shown once")
		}
		// A command route answers 401 to the old key and 404 (known key,
		// unknown ocorrência) to the new one.
		for key, want := range map[string]int{apiKey: http.StatusUnauthorized, chave: http.StatusNotFound} {
			req, _ := http.NewRequest(http.MethodGet, base+"/api/ocorrencias/0199bb3e-0000-7000-8000-000000000001", nil)
			req.Header.Set("Authorization", "Bearer "+key)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != want {
				t.Errorf("GET with the %s key: %d, want %d", map[bool]string{true: "old", false: "new"}[key == apiKey], res.StatusCode, want)
			}
		}
		do(t, ctx, "back to the integrator", chromedp.Click(css(`main a.botao.primario`)), chromedp.WaitVisible(css(`h1.com-selo`)))
		assertNoSecret(t, ctx, "the integrator page after the key rotation", chave, apiKey)
	})

	t.Run("verify against a receiver answering 204", func(t *testing.T) {
		before := len(cad.received())
		do(t, ctx, "verify", chromedp.Click(css(`form[action$="/verificar"] button`)), chromedp.WaitVisible(css(`div.aviso-ok`)))
		if msg := text(t, ctx, `div.aviso-ok`); !strings.Contains(msg, "Verificação bem-sucedida") || !strings.Contains(msg, "HTTP 204") {
			t.Fatalf("verification reads %q", msg)
		}
		reqs := cad.received()
		if len(reqs) != before+1 {
			t.Fatalf("receiver got %d requests, want %d", len(reqs), before+1)
		}
		// The ping is signed with the new secret and, during the grace
		// period, with the previous one too.
		ping := reqs[len(reqs)-1]
		ts, _ := strconv.ParseInt(ping.header.Get("X-Geohub-Timestamp"), 10, 64)
		if got := ping.header.Get("X-Geohub-Assinatura"); got != app.Sign([]byte(novo), ts, ping.body) {
			t.Errorf("X-Geohub-Assinatura %q is not the new secret's", got)
		}
		if got := ping.header.Get("X-Geohub-Assinatura-Anterior"); got != app.Sign([]byte(segredo), ts, ping.body) {
			t.Errorf("X-Geohub-Assinatura-Anterior %q is not the old secret's", got)
		}
		screenshot(t, ctx, "integrador-detalhe")
	})

	t.Run("edit keeps what was typed on error and saves when valid", func(t *testing.T) {
		do(t, ctx, "a host list without the callback's host", chromedp.Navigate(base+"/integradores/"+id), chromedp.WaitVisible(css(`h1.com-selo`)),
			fill(map[string]string{"hosts_permitidos": "cad.exemplo.gov.br", "eventos": "ocorrencia:*"}),
			chromedp.Click(css(`form.formulario button[type=submit]`)), chromedp.WaitVisible(css(`#erro-callback_url`)))
		if msg := text(t, ctx, `#erro-callback_url`); !strings.Contains(msg, "hosts_permitidos") {
			t.Fatalf("callback error %q", msg)
		}
		if v := get(t, ctx, "hosts kept", chromedp.Value(css(`textarea[name=hosts_permitidos]`))); v != "cad.exemplo.gov.br" {
			t.Fatalf("hosts came back as %q", v)
		}
		do(t, ctx, "save", fill(map[string]string{"hosts_permitidos": "127.0.0.1"}),
			chromedp.Click(css(`form.formulario button[type=submit]`)), chromedp.WaitVisible(css(`p.aviso-ok`)))
		if msg := text(t, ctx, `p.aviso-ok`); msg != "Alterações salvas." {
			t.Fatalf("flash %q", msg)
		}
		if v := text(t, ctx, `.grade-integrador dl.ficha`); !strings.Contains(v, "ocorrencia:*") || strings.Contains(v, "integracao:*") {
			t.Fatalf("eventos not saved: %q", v)
		}
	})
}

// assertNoSecret fails when the page the browser shows holds any secret.
func assertNoSecret(t *testing.T, ctx context.Context, where string, secrets ...string) {
	t.Helper()
	html := pageHTML(t, ctx)
	for _, s := range secrets {
		if strings.Contains(html, s) {
			t.Fatalf("%s shows a secret again", where)
		}
	}
}

func TestConsoleIntegradorSemModoInseguro(t *testing.T) {
	srv := startServer(t, t.TempDir())
	ctx := browser(t)
	base := "http://" + srv.addr
	login(t, ctx, base, "admin", adminPassword)
	typed := map[string]string{"nome": "CAD Polícia", "callback_url": "http://127.0.0.1:9/geohub/eventos", "hosts_permitidos": "127.0.0.1"}
	do(t, ctx, "an http callback", chromedp.Navigate(base+"/integradores/novo"), chromedp.WaitVisible(css(`input[name=nome]`)),
		fill(typed), chromedp.Click(css(`main button[type=submit]`)), chromedp.WaitVisible(css(`#erro-callback_url`)))
	if msg := text(t, ctx, `#erro-callback_url`); msg != "o esquema deve ser https (http só com --insecure-callbacks)" {
		t.Fatalf("callback error %q", msg)
	}
	// The first answer's error is still on screen until the second answer
	// replaces the page: wait for the new reason itself.
	do(t, ctx, "https on loopback", fill(map[string]string{"callback_url": "https://127.0.0.1/geohub/eventos"}),
		chromedp.Click(css(`main button[type=submit]`)))
	waitText(t, ctx, `#erro-callback_url`, "loopback")
	if v := get(t, ctx, "nome kept", chromedp.Value(css(`input[name=nome]`))); v != typed["nome"] {
		t.Fatalf("nome came back as %q", v)
	}
}

func TestConsoleAdminRegistro(t *testing.T) {
	srv := startServer(t, t.TempDir())
	ctx := browser(t)
	base := "http://" + srv.addr
	login(t, ctx, base, "admin", adminPassword)

	do(t, ctx, "the registry", chromedp.Navigate(base+"/registro"), chromedp.WaitVisible(css(`table.dados`)))
	list := text(t, ctx, `table.dados`)
	for _, want := range []string{"ocorrencia:registrada", "jornada:iniciada", "1.0.0", "originador"} {
		if !strings.Contains(list, want) {
			t.Errorf("registry list lacks %q", want)
		}
	}
	screenshot(t, ctx, "registro")

	do(t, ctx, "a type", chromedp.Click(css(`a[href="/registro/jornada:iniciada"]`)), chromedp.WaitVisible(css(`pre.json`)))
	schema := text(t, ctx, `pre.json`)
	if !strings.Contains(schema, `"$schema": "https://json-schema.org/draft/2020-12/schema"`) {
		t.Fatalf("schema is not shown indented:\n%s", schema)
	}
	rules := text(t, ctx, `.registro-grade`)
	for _, want := range []string{"Manter", "/jornadaId", "Hash", "/servidor/cpf", "Arredondar", "/local", "todo o resto é descartado"} {
		if !strings.Contains(rules, want) {
			t.Errorf("redaction rules lack %q", want)
		}
	}
	screenshot(t, ctx, "registro-tipo")

	do(t, ctx, "deprecate", answerConfirms, chromedp.Click(css(`form[action$="/status"] button`)), chromedp.WaitVisible(css(`p.aviso-ok`)))
	askedOnce(t, ctx, "Descontinuar jornada:iniciada@1.1.0?") // the newest version comes first
	if msg := text(t, ctx, `p.aviso-ok`); !strings.Contains(msg, "jornada:iniciada@1.1.0 descontinuada") {
		t.Fatalf("flash %q", msg)
	}
	if b := text(t, ctx, `.versao-cabecalho .selo`); b != "descontinuada" {
		t.Fatalf("badge %q", b)
	}
	// The deprecation's flash is still on screen while the post is in
	// flight: wait for the new one, or the next navigation races the
	// post's redirect.
	do(t, ctx, "reactivate", answerConfirms, chromedp.Click(css(`form[action$="/status"] button`)))
	waitText(t, ctx, `p.aviso-ok`, "jornada:iniciada@1.1.0 reativada")
	do(t, ctx, "reactivated", chromedp.WaitVisible(css(`.versao-cabecalho .selo-ativo`)))
	askedOnce(t, ctx, "Reativar jornada:iniciada@1.1.0?")

	// A built-in plugin's type says why it cannot be deprecated, and a
	// forged POST gets the reason, not a deprecated type.
	do(t, ctx, "a built-in type", chromedp.Navigate(base+"/registro/ocorrencia:registrada"), chromedp.WaitVisible(css(`pre.json`)))
	if n := count(t, ctx, `form[action$="/status"]`); n != 0 {
		t.Fatalf("a built-in type offers %d status forms", n)
	}
	if !strings.Contains(text(t, ctx, `main`), "Tipo embutido") {
		t.Fatal("the built-in type's page does not say why it cannot be deprecated")
	}
	res := postFromPage(t, ctx, "/registro/ocorrencia:registrada/1.0.0/status", map[string]string{"status": "deprecado"})
	if res.Status != http.StatusConflict || !strings.Contains(res.Body, "tipo embutido") {
		t.Fatalf("deprecating a built-in type answered %d: %.300s", res.Status, res.Body)
	}
}

func TestConsoleOperadorLeitor(t *testing.T) {
	cad := newCADReceiver(t, http.StatusNoContent)
	srv := startServer(t, t.TempDir(), "--insecure-callbacks")
	ctx := browser(t)
	base := "http://" + srv.addr
	login(t, ctx, base, "admin", adminPassword)

	t.Run("admin creates a leitor", func(t *testing.T) {
		do(t, ctx, "mismatched passwords", chromedp.Navigate(base+"/operadores"), chromedp.WaitVisible(css(`input[name=login]`)),
			fill(map[string]string{"login": leitorLogin, "papel": "leitor", "senha": leitorPassword, "confirma": "outra-senha-qualquer"}),
			chromedp.Click(css(`main button[type=submit]`)), chromedp.WaitVisible(css(`#erro-confirma`)))
		if v := get(t, ctx, "login kept", chromedp.Value(css(`main input[name=login]`))); v != leitorLogin {
			t.Fatalf("login came back as %q", v)
		}
		if v := get(t, ctx, "papel kept", chromedp.Value(css(`select[name=papel]`))); v != "leitor" {
			t.Fatalf("papel came back as %q", v)
		}
		if strings.Contains(pageHTML(t, ctx), leitorPassword) {
			t.Fatal("the password was echoed into the page")
		}
		do(t, ctx, "create", fill(map[string]string{"senha": leitorPassword, "confirma": leitorPassword}),
			chromedp.Click(css(`main button[type=submit]`)), chromedp.WaitVisible(css(`p.aviso-ok`)))
		if rows := text(t, ctx, `table.dados`); !strings.Contains(rows, leitorLogin) || !strings.Contains(rows, "Leitor") {
			t.Fatalf("operators table:\n%s", rows)
		}
		screenshot(t, ctx, "operadores")
	})

	// The leitor signs in below with the password the reset shows.
	var leitorSenha, leitorID string
	t.Run("admin resets the leitor's forgotten password", func(t *testing.T) {
		action := get(t, ctx, "reset form", chromedp.AttributeValue(css(`form[action$="/senha"]`), "action"))
		leitorID = strings.TrimSuffix(strings.TrimPrefix(action.Value, "/operadores/"), "/senha")
		do(t, ctx, "reset", answerConfirms, chromedp.Click(css(`form[action$="/senha"] button`)), chromedp.WaitVisible(css(`#senha-nova`)))
		askedOnce(t, ctx, "Gerar uma nova senha para "+leitorLogin+"?")
		leitorSenha = text(t, ctx, `#senha-nova`)
		if len(leitorSenha) < 10 || leitorSenha == leitorPassword {
			t.Fatalf("new password %q", leitorSenha)
		}
		screenshot(t, ctx, "senha-redefinida")
	})

	var id string
	t.Run("admin creates an integrator", func(t *testing.T) {
		do(t, ctx, "create", chromedp.Navigate(base+"/integradores/novo"), chromedp.WaitVisible(css(`input[name=nome]`)),
			fill(map[string]string{"nome": "CAD Defesa Civil", "callback_url": cad.callback(), "hosts_permitidos": "127.0.0.1"}),
			chromedp.Click(css(`main button[type=submit]`)), chromedp.WaitVisible(css(`#segredo`)))
		href := get(t, ctx, "integrator link", chromedp.AttributeValue(css(`main a.botao.primario`), "href"))
		id = strings.TrimPrefix(href.Value, "/integradores/")
	})

	t.Run("a leitor sees everything read-only and a forged POST is 403", func(t *testing.T) {
		do(t, ctx, "sign out", chromedp.Click(css(`.conta button`)), chromedp.WaitVisible(css(signedOut)))
		login(t, ctx, base, leitorLogin, leitorSenha)
		if n := count(t, ctx, `nav.menu a[href="/operadores"]`); n != 0 {
			t.Fatal("a leitor's menu has Operadores")
		}
		for _, path := range []string{"/integradores", "/integradores/" + id, "/registro", "/registro/ocorrencia:registrada"} {
			do(t, ctx, "open "+path, chromedp.Navigate(base+path), chromedp.WaitVisible(css(`main h1`)))
			if controls := count(t, ctx, `main form, main button, main textarea, main input, a[href="/integradores/novo"]`); controls != 0 {
				t.Errorf("%s shows %d controls to a leitor", path, controls)
			}
		}
		do(t, ctx, "the integrator", chromedp.Navigate(base+"/integradores/"+id), chromedp.WaitVisible(css(`h1.com-selo`)))
		if !strings.Contains(text(t, ctx, `main`), "Somente leitura") {
			t.Error("the integrator page does not say it is read-only")
		}
		screenshot(t, ctx, "integrador-leitor")
		for _, path := range []string{"/integradores/novo", "/operadores"} {
			do(t, ctx, "open "+path, chromedp.Navigate(base+path), chromedp.WaitVisible(css(`main h1`)))
			if h := text(t, ctx, `main h1`); h != "Acesso negado" {
				t.Errorf("%s answered a leitor with %q", path, h)
			}
		}
		do(t, ctx, "back to a page with a form token", chromedp.Navigate(base+"/integradores/"+id), chromedp.WaitVisible(css(`h1.com-selo`)))
		forged := map[string]map[string]string{
			"/integradores/" + id + "/verificar":           {},
			"/integradores/" + id + "/segredo/rotacionar":  {},
			"/integradores/" + id + "/api_key/rotacionar":  {},
			"/integradores/" + id + "/ativo":               {"ativo": "nao"},
			"/integradores/" + id:                          {"callback_url": "http://127.0.0.1:9/x", "hosts_permitidos": "127.0.0.1"},
			"/integradores":                                {"nome": "Intruso", "callback_url": cad.callback(), "hosts_permitidos": "127.0.0.1"},
			"/registro/ocorrencia:registrada/1.0.0/status": {"status": "deprecado"},
			"/operadores":                                  {"login": "intruso", "papel": "admin", "senha": "senha-do-intruso", "confirma": "senha-do-intruso"},
			"/operadores/" + leitorID + "/senha":           {},
		}
		for path, form := range forged {
			if res := postFromPage(t, ctx, path, form); res.Status != http.StatusForbidden {
				t.Errorf("forged POST %s answered %d", path, res.Status)
			}
		}
		if n := len(cad.received()); n != 0 {
			t.Fatalf("the receiver got %d requests from forged POSTs", n)
		}
		do(t, ctx, "the integrator is untouched", chromedp.Reload(), chromedp.WaitVisible(css(`h1.com-selo`)))
		if b := text(t, ctx, `h1 .selo`); b != "ativo" {
			t.Fatalf("badge %q", b)
		}
		if strings.Contains(text(t, ctx, `.grade-integrador dl.ficha`), "127.0.0.1:9") {
			t.Fatal("a forged edit changed the callback")
		}
	})
}
