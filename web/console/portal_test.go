package console_test

import (
	"context"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"geohub/app"
)

var portalLinkRe = regexp.MustCompile(`id="link-portal"[^>]*>([^<]+)<`)

// The portal end to end over HTTP: an operator makes a single-use link on
// the integrator's page; the vendor signs in with it (a second use fails),
// sees its own deliveries and none of another integrator's, runs the
// tester and a gap repair; the operators' console stays closed to it; a
// revoked link signs no one in; the API key signs in too.
func TestThePortalServesOneIntegratorOnly(t *testing.T) {
	b := newTailBench(t)
	ctx := context.Background()
	cad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }))
	defer cad.Close()
	mk := func(nome string) app.CreatedIntegrator {
		in, err := b.integrators.Create(ctx, app.NewIntegrator{Nome: nome, CallbackURL: cad.URL + "/eventos",
			HostsPermitidos: []string{"127.0.0.1"}})
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	a, other := mk("CAD Bombeiros"), mk("CAD Outro Vendedor")
	var last app.Event
	for range 3 {
		req := iniciada("rh")
		req.Agregado = "jornada:portal"
		last = b.publish(t, req)
	}
	b.waitRecorded(t, "both integrators got the 3", func() bool {
		for _, id := range []string{a.ID, other.ID} {
			p, err := b.deliveries.List(ctx, app.DeliveryFilter{Integrador: id, Status: app.EntregaEntregue})
			if err != nil || p.Total != 3 {
				return false
			}
		}
		return true
	})
	otherDelivery, err := b.deliveries.List(ctx, app.DeliveryFilter{Integrador: other.ID, EventID: last.EventID})
	if err != nil || otherDelivery.Total != 1 {
		t.Fatal(err)
	}

	admin, csrf := loginAs(t, b, "admin", benchAdminPassword)
	issue := func() string {
		t.Helper()
		res, page := post(t, admin, b.srv.URL+"/integradores/"+a.ID+"/portal/link", url.Values{"csrf": {csrf}})
		m := portalLinkRe.FindStringSubmatch(page)
		if res.StatusCode != http.StatusCreated || m == nil {
			t.Fatalf("issue a portal link: %d %s", res.StatusCode, page)
		}
		return html.UnescapeString(m[1])
	}
	link := issue()
	signIn := func(t *testing.T, link string) (*http.Client, int) {
		t.Helper()
		vendor := client(t)
		_, page := get(t, vendor, link)
		m := csrfField.FindStringSubmatch(page)
		token := regexp.MustCompile(`name="link" value="([^"]+)"`).FindStringSubmatch(page)
		if m == nil || token == nil {
			t.Fatalf("the link's page has no form: %s", page)
		}
		res, _ := post(t, vendor, b.srv.URL+"/portal/entrar", url.Values{"csrf": {m[1]}, "link": {html.UnescapeString(token[1])}})
		return vendor, res.StatusCode
	}
	vendor, status := signIn(t, link)
	if status != http.StatusSeeOther {
		t.Fatalf("sign in with the link: %d", status)
	}
	if _, again := signIn(t, link); again != http.StatusUnauthorized {
		t.Errorf("a second use of the link: %d, want 401", again)
	}

	_, home := get(t, vendor, b.srv.URL+"/portal")
	if !strings.Contains(home, "CAD Bombeiros") || strings.Contains(home, "Outro Vendedor") || strings.Contains(home, other.ID) {
		t.Fatalf("the portal's home: %s", home)
	}
	if n := strings.Count(home, "data-entrega="); n != 3 {
		t.Errorf("%d deliveries on the portal, want its 3", n)
	}
	// Filters: a family of types, and a time window that ended before them.
	if _, page := get(t, vendor, b.srv.URL+"/portal?tipo="+url.QueryEscape("jornada:*")); strings.Count(page, "data-entrega=") != 3 {
		t.Error("the jornada:* filter on the portal does not show its 3 deliveries")
	}
	if _, page := get(t, vendor, b.srv.URL+"/portal?ate=2020-01-01T00:00"); strings.Count(page, "data-entrega=") != 0 {
		t.Error("a window that ended in 2020 shows deliveries")
	}
	if res, _ := get(t, vendor, b.srv.URL+"/portal/entregas/"+strconv.FormatInt(otherDelivery.Linhas[0].ID, 10)); res.StatusCode != http.StatusNotFound {
		t.Errorf("another integrator's delivery on the portal: %d", res.StatusCode)
	}
	if res, _ := get(t, vendor, b.srv.URL+"/integradores"); res.StatusCode != http.StatusSeeOther ||
		!strings.HasPrefix(res.Header.Get("Location"), "/login") {
		t.Errorf("the operators' console with a portal session: %d %s", res.StatusCode, res.Header.Get("Location"))
	}

	pcsrf := csrfField.FindStringSubmatch(home)[1]
	res, page := post(t, vendor, b.srv.URL+"/portal/testar", url.Values{"csrf": {pcsrf}})
	if res.StatusCode != http.StatusOK || !strings.Contains(page, `data-verificacao="recusa-assinatura" data-resultado="falhou"`) {
		t.Fatalf("the tester on the portal: %d %s", res.StatusCode, page)
	}
	res, page = post(t, vendor, b.srv.URL+"/portal/reenviar", url.Values{"csrf": {pcsrf}, "agregado": {"jornada:portal"}, "sequencia_desde": {"2"}})
	if res.StatusCode != http.StatusOK || !strings.Contains(page, "2 entregas postas de novo na fila") {
		t.Fatalf("a gap repair on the portal: %d %s", res.StatusCode, page)
	}
	if res, _ := post(t, vendor, b.srv.URL+"/portal/testar", url.Values{}); res.StatusCode != http.StatusForbidden {
		t.Errorf("a portal form without CSRF: %d", res.StatusCode)
	}

	// A revoked link signs no one in.
	revoked := issue()
	_, ipage := get(t, admin, b.srv.URL+"/integradores/"+a.ID)
	ids := regexp.MustCompile(`/portal/link/([0-9a-f-]+)/revogar`).FindAllStringSubmatch(ipage, -1)
	if len(ids) != 1 {
		t.Fatalf("%d usable links listed, want 1", len(ids))
	}
	if res, _ := post(t, admin, b.srv.URL+"/integradores/"+a.ID+"/portal/link/"+ids[0][1]+"/revogar", url.Values{"csrf": {csrf}}); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("revoke: %d", res.StatusCode)
	}
	if _, st := signIn(t, revoked); st != http.StatusUnauthorized {
		t.Errorf("sign in with a revoked link: %d", st)
	}

	// The API key signs in too; a wrong one does not.
	keyed := client(t)
	_, page = get(t, keyed, b.srv.URL+"/portal/entrar")
	m := csrfField.FindStringSubmatch(page)
	if res, _ := post(t, keyed, b.srv.URL+"/portal/entrar", url.Values{"csrf": {m[1]}, "api_key": {"gk_errada"}}); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("a wrong API key: %d", res.StatusCode)
	}
	_, page = get(t, keyed, b.srv.URL+"/portal/entrar")
	m = csrfField.FindStringSubmatch(page)
	if res, _ := post(t, keyed, b.srv.URL+"/portal/entrar", url.Values{"csrf": {m[1]}, "api_key": {a.APIKey}}); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in with the API key: %d", res.StatusCode)
	}
	if _, home := get(t, keyed, b.srv.URL+"/portal"); !strings.Contains(home, "CAD Bombeiros") {
		t.Error("the API key's portal session does not show its integrator")
	}

	// A replaced API key ends every portal session of the integrator: a
	// leaked key's session does not outlive it.
	if _, err := b.integrators.RotateAPIKey(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*http.Client{"the key's": keyed, "the link's": vendor} {
		if res, _ := get(t, c, b.srv.URL+"/portal"); res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/portal/entrar" {
			t.Errorf("%s portal session after the key was replaced: %d %s", name, res.StatusCode, res.Header.Get("Location"))
		}
	}
	// And an operator ends them by hand.
	again, st := signIn(t, issue())
	if st != http.StatusSeeOther {
		t.Fatalf("sign in: %d", st)
	}
	if res, _ := post(t, admin, b.srv.URL+"/integradores/"+a.ID+"/portal/sessoes/encerrar", url.Values{"csrf": {csrf}}); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("end the portal's sessions: %d", res.StatusCode)
	}
	if res, _ := get(t, again, b.srv.URL+"/portal"); res.StatusCode != http.StatusSeeOther {
		t.Errorf("a portal session after the operator ended them: %d", res.StatusCode)
	}
}
