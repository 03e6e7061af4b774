package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"geohub/app"
)

// auditLine is one row of /auditoria as the browser shows it.
type auditLine struct {
	Acao      string `json:"acao"`
	Resultado string `json:"resultado"`
	Quem      string `json:"quem"`
	Alvo      string `json:"alvo"`
	Texto     string `json:"texto"`
}

// auditLines reads the rows of the /auditoria table on screen.
func auditLines(t *testing.T, ctx context.Context) []auditLine {
	t.Helper()
	return get(t, ctx, "audit rows", chromedp.Evaluate[[]auditLine](`[...document.querySelectorAll("table.auditoria tbody tr[data-acao]")].map(tr => ({
		acao: tr.dataset.acao, resultado: tr.dataset.resultado,
		quem: (tr.querySelector("td.autor a") || tr.querySelector("td.autor")).textContent.trim(),
		alvo: tr.querySelector("td.alvo").textContent.trim(), texto: tr.textContent}))`))
}

func findLine(lines []auditLine, acao, quem string) (auditLine, bool) {
	for _, l := range lines {
		if l.Acao == acao && l.Quem == quem {
			return l, true
		}
	}
	return auditLine{}, false
}

// TestConsoleAuditoria: two admins, one disables an integrator in the
// console and the other rotates its secret, and somebody fails a login;
// /auditoria shows the three, each with the operator who did it.
func TestConsoleAuditoria(t *testing.T) {
	ctx := browser(t)
	m, dir, stop := runMain(t)
	t.Cleanup(func() { stop() })
	base := "http://" + m.Addr
	var out bytes.Buffer
	if err := resetPassword(context.Background(), &out, testDatabase(t, dir), "admin"); err != nil {
		t.Fatal(err)
	}
	adminSenha := lastLine(out.String())
	const bruna, brunaSenha = "bruna.admin", "senha-da-bruna-123"

	// The integrator the two admins act on, created over the API.
	cad := newCADReceiver(t, http.StatusNoContent)
	h := newAuditHTTP(t, m.Addr)
	var in app.CreatedIntegrator
	json.Unmarshal([]byte(h.api("POST", "/api/integradores", mainToken(t, dir, app.PapelAdmin, "montagem"), map[string]any{
		"nome": "CAD Guarda Municipal", "callback_url": cad.callback(), "hosts_permitidos": []string{"127.0.0.1"}}, 201)), &in)

	login(t, ctx, base, "admin", adminSenha)
	do(t, ctx, "admin creates a second admin", chromedp.Navigate(base+"/operadores"), chromedp.WaitVisible(css(`main input[name=login]`)),
		fill(map[string]string{"login": bruna, "papel": "admin", "senha": brunaSenha, "confirma": brunaSenha}),
		chromedp.Click(css(`main button[type=submit]`)), chromedp.WaitVisible(css(`p.aviso-ok`)))
	do(t, ctx, "admin disables the integrator", chromedp.Navigate(base+"/integradores/"+in.ID), chromedp.WaitVisible(css(`h1.com-selo`)),
		answerConfirms, chromedp.Click(css(`form[action$="/ativo"] button`)), chromedp.WaitVisible(css(`p.aviso-ok`)))
	do(t, ctx, "admin signs out", chromedp.Click(css(`.conta button`)), chromedp.WaitVisible(css(signedOut)))

	do(t, ctx, "a wrong password for bruna", chromedp.Navigate(base+"/login"), chromedp.WaitVisible(css(`input[name=login]`)),
		chromedp.SendKeys(css(`input[name=login]`), bruna), chromedp.SendKeys(css(`input[name=senha]`), "nao-e-a-senha-dela"),
		chromedp.Click(css(`button[type=submit]`)))
	waitText(t, ctx, `.erro-form`, "usuário ou senha incorretos")

	login(t, ctx, base, bruna, brunaSenha)
	do(t, ctx, "bruna rotates the secret", chromedp.Navigate(base+"/integradores/"+in.ID), chromedp.WaitVisible(css(`h1.com-selo`)),
		answerConfirms, chromedp.Click(css(`form[action$="/segredo/rotacionar"] button`)), chromedp.WaitVisible(css(`#segredo`)))
	segredo := text(t, ctx, `#segredo`)

	do(t, ctx, "the audit page", chromedp.Navigate(base+"/auditoria"), chromedp.WaitVisible(css(`table.auditoria`)))
	screenshot(t, ctx, "auditoria")
	lines := auditLines(t, ctx)
	disabled, ok := findLine(lines, app.AcaoIntegradorDesativar, "admin")
	if !ok || disabled.Resultado != app.AuditOK || !strings.Contains(disabled.Alvo, "CAD Guarda Municipal") ||
		!strings.Contains(disabled.Texto, "Desativou integrador") {
		t.Errorf("no row of admin disabling the integrator: %+v", lines)
	}
	rotated, ok := findLine(lines, app.AcaoIntegradorSegredoRotacionar, bruna)
	if !ok || rotated.Resultado != app.AuditOK || !strings.Contains(rotated.Alvo, "CAD Guarda Municipal") {
		t.Errorf("no row of %s rotating the secret: %+v", bruna, lines)
	}
	failed, ok := findLine(lines, app.AcaoLoginFalhou, bruna)
	if !ok || failed.Resultado != app.AuditRecusado || !strings.Contains(failed.Texto, "senha incorreta") {
		t.Errorf("no row of %s's failed login: %+v", bruna, lines)
	}
	for _, l := range lines {
		if l.Acao == app.AcaoIntegradorDesativar && l.Quem == bruna || l.Acao == app.AcaoIntegradorSegredoRotacionar && l.Quem == "admin" {
			t.Errorf("a row credits the wrong operator: %+v", l)
		}
	}
	if html := pageHTML(t, ctx); strings.Contains(html, segredo) || strings.Contains(html, brunaSenha) ||
		strings.Contains(html, "nao-e-a-senha-dela") {
		t.Error("the audit page shows a secret or a password")
	}

	do(t, ctx, "filter by who", chromedp.SetValue(css(`form.filtros input[name=quem]`), bruna),
		chromedp.Click(css(`form.filtros button[type=submit]`)), chromedp.WaitVisible(css(`a[href="/auditoria"].botao`)))
	for _, l := range auditLines(t, ctx) {
		if l.Quem != bruna {
			t.Errorf("filtered by %s, the page shows %+v", bruna, l)
		}
	}
	if _, ok := findLine(auditLines(t, ctx), app.AcaoIntegradorSegredoRotacionar, bruna); !ok {
		t.Error("the filter by who lost bruna's rotation")
	}
}
