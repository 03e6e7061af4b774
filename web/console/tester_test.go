package console_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"geohub/app"
)

// "Testar receptor" on an integrator's page runs the receiver tester and
// shows each check's outcome; a receiver that answers 204 to everything
// fails recusa-assinatura, and the page says so.
func TestTheIntegratorPageRunsTheReceiverTester(t *testing.T) {
	b := newTailBench(t)
	cad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }))
	defer cad.Close()
	created, err := b.integrators.Create(context.Background(), app.NewIntegrator{Nome: "CAD SAMU",
		CallbackURL: cad.URL + "/eventos", HostsPermitidos: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	admin, csrf := loginAs(t, b, "admin", benchAdminPassword)
	_, page := get(t, admin, b.srv.URL+"/integradores/"+created.ID)
	if !strings.Contains(page, `action="/integradores/`+created.ID+`/testar"`) {
		t.Fatal("no Testar receptor on the integrator's page")
	}
	res, page := post(t, admin, b.srv.URL+"/integradores/"+created.ID+"/testar", url.Values{"csrf": {csrf}})
	if res.StatusCode != http.StatusOK || !strings.Contains(page, "não passou no testador") ||
		!strings.Contains(page, `data-verificacao="recusa-assinatura" data-resultado="falhou"`) ||
		!strings.Contains(page, `data-verificacao="aceita-valido" data-resultado="ok"`) {
		t.Fatalf("the tester's report: %d %s", res.StatusCode, page)
	}
	for _, id := range app.TestChecks {
		if !strings.Contains(page, `data-verificacao="`+id+`"`) {
			t.Errorf("the report has no %s", id)
		}
	}
	// Without the form's token, nothing runs.
	if res, _ := post(t, admin, b.srv.URL+"/integradores/"+created.ID+"/testar", url.Values{}); res.StatusCode != http.StatusForbidden {
		t.Errorf("a tester run without CSRF: %d", res.StatusCode)
	}
}

// An integrator whose secret predates Standard Webhooks (unpadded URL-safe
// base64) is told, on its page, that one rotation gives a library-ready
// secret; one with a new secret is not.
func TestTheIntegratorPageSaysWhenItsSecretPredatesStandardWebhooks(t *testing.T) {
	b := newTailBench(t)
	ctx := context.Background()
	mk := func(nome string) app.CreatedIntegrator {
		in, err := b.integrators.Create(ctx, app.NewIntegrator{Nome: nome, CallbackURL: "http://127.0.0.1:1/eventos",
			HostsPermitidos: []string{"127.0.0.1"}})
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	fresh, old := mk("CAD Novo"), mk("CAD Antigo")
	legacy := app.SecretPrefix + base64.RawURLEncoding.EncodeToString(bytes.Repeat([]byte{0xfb}, 32))
	if err := b.integrators.Store.SetIntegratorSecret(ctx, old.ID, app.IntegratorSecrets{
		Atual: b.integrators.Sealer.Seal([]byte(legacy), old.ID)}, nil); err != nil {
		t.Fatal(err)
	}
	admin, _ := loginAs(t, b, "admin", benchAdminPassword)
	if _, page := get(t, admin, b.srv.URL+"/integradores/"+old.ID); !strings.Contains(page, "data-segredo-antigo") {
		t.Error("no notice for a secret of the old format")
	}
	if _, page := get(t, admin, b.srv.URL+"/integradores/"+fresh.ID); strings.Contains(page, "data-segredo-antigo") {
		t.Error("a notice for a library-ready secret")
	}
}

// An operador reads the audit trail without the admin's rows (accounts,
// sign-ins, tokens), and can leave out what the CADs' keys did.
func TestAnOperadorReadsTheAuditTrail(t *testing.T) {
	b := newTailBench(t)
	ctx := context.Background()
	created, err := b.integrators.Create(app.WithActor(ctx, app.Actor{Tipo: app.ActorOperador, ID: "montagem", Nome: "montagem"}),
		app.NewIntegrator{Nome: "CAD Auditado", CallbackURL: "http://127.0.0.1:1/eventos", HostsPermitidos: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	// The CAD's key rotates its own secret: a row by an integrator.
	if _, err := b.integrators.RotateSecret(app.WithActor(ctx, app.Actor{Tipo: app.ActorIntegrador, ID: created.ID, Nome: "CAD Auditado"}),
		created.ID); err != nil {
		t.Fatal(err)
	}
	admin, csrf := loginAs(t, b, "admin", benchAdminPassword)
	createOperator(t, b.srv, admin, csrf, "plantonista", "operador", "senha-do-plantao")
	op, _ := loginAs(t, b, "plantonista", "senha-do-plantao")

	res, page := get(t, op, b.srv.URL+"/auditoria")
	row := func(acao string) string { return `data-acao="` + acao + `"` }
	if res.StatusCode != http.StatusOK || !strings.Contains(page, row(app.AcaoIntegradorSegredoRotacionar)) ||
		!strings.Contains(page, row(app.AcaoIntegradorCriar)) {
		t.Fatalf("the operador's audit page: %d %s", res.StatusCode, page)
	}
	for _, acao := range []string{app.AcaoLogin, app.AcaoOperadorCriar} {
		if strings.Contains(page, row(acao)) {
			t.Errorf("an operador sees %s rows", acao)
		}
	}
	if _, page := get(t, op, b.srv.URL+"/auditoria?acao="+app.AcaoOperadorCriar); strings.Contains(page, row(app.AcaoOperadorCriar)) {
		t.Error("an operador reads the account rows by asking for them")
	}
	if _, page := get(t, op, b.srv.URL+"/auditoria?sem_cads=1"); strings.Contains(page, row(app.AcaoIntegradorSegredoRotacionar)) ||
		!strings.Contains(page, row(app.AcaoIntegradorCriar)) {
		t.Error("sem_cads still shows what the CAD's key did")
	}
	for _, acao := range []string{app.AcaoIntegradorReenviar, app.AcaoIntegradorTestar, app.AcaoPortalEntrar} {
		if res, _ := get(t, op, b.srv.URL+"/auditoria?acao="+acao); res.StatusCode != http.StatusOK {
			t.Errorf("the action filter refuses %s: %d", acao, res.StatusCode)
		}
	}
	if _, page := get(t, admin, b.srv.URL+"/auditoria"); !strings.Contains(page, row(app.AcaoOperadorCriar)) {
		t.Error("the admin does not see the account rows")
	}
}

// A form's confirmation is not in the URL: the page it leads to shows it
// once, and a reload does not.
func TestAConfirmationIsShownOnceAndNotInTheURL(t *testing.T) {
	b := newTailBench(t)
	created, err := b.integrators.Create(context.Background(), app.NewIntegrator{Nome: "CAD Flash",
		CallbackURL: "http://127.0.0.1:1/eventos", HostsPermitidos: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	admin, csrf := loginAs(t, b, "admin", benchAdminPassword)
	res, _ := post(t, admin, b.srv.URL+"/integradores/"+created.ID+"/tentar-agora", url.Values{"csrf": {csrf}})
	if loc := res.Header.Get("Location"); res.StatusCode != http.StatusSeeOther || strings.Contains(loc, "Tentar") || strings.Contains(loc, "ok=") {
		t.Fatalf("the redirect: %d %s", res.StatusCode, loc)
	}
	if msg := flashOf(t, admin, b.srv.URL, res); !strings.Contains(msg, "circuito de CAD Flash fechado") {
		t.Fatalf("the confirmation: %q", msg)
	}
	if _, page := get(t, admin, b.srv.URL+res.Header.Get("Location")); strings.Contains(page, "circuito de CAD Flash fechado") {
		t.Error("a reload shows the confirmation again")
	}
}
