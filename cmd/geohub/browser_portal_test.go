package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"geohub/app"
)

// TestPortalInABrowser is issue 24's portal as a CAD vendor meets it: an
// operator makes a sign-in link on the integrator's page and signs out; the
// vendor opens the link, enters, runs the tester and a gap repair, and sees
// nothing of the other integrator; at 390 px the portal does not widen the
// screen and its actions stay reachable.
func TestPortalInABrowser(t *testing.T) {
	ctx := browser(t)
	s := startConsole(t)
	m, base, senha, admin, client := s.m, s.base, s.senha, s.admin, s.client
	producer := mainToken(t, s.dir, app.PapelProdutor, "rh")
	cad := acceptingCAD(t)
	mine, other := s.integrator(t, "CAD Bombeiros do Vale", cad), s.integrator(t, "CAD Vizinho Secreto", cad)
	for i := range 5 {
		body := strings.Replace(jornada(7000+i), `"origem":"teste",`, `"origem":"teste","agregado":"jornada:portal",`, 1)
		publishRecord(t, client, m.Addr, producer, body)
	}
	waitFor(t, 20*time.Second, "5 deliveries to each", func() (bool, string) {
		var p app.Page[app.Delivery]
		json.Unmarshal(apiCall(t, client, "GET", base+"/api/entregas?status=entregue", admin, ""), &p)
		return p.Total == 10, "not yet"
	})

	login(t, ctx, base, "admin", senha)
	do(t, ctx, "make a portal link", chromedp.Navigate(base+"/integradores/"+mine.ID),
		chromedp.Click(css(`form[action$="/portal/link"] button`)), chromedp.WaitVisible(css(`#link-portal`)))
	link := text(t, ctx, `#link-portal`)
	screenshot(t, ctx, "portal-link")
	do(t, ctx, "sign out of the console", chromedp.Click(css(`form[action="/sair"] button`)), chromedp.WaitVisible(css(signedOut)))

	do(t, ctx, "open the link", chromedp.Navigate(link), chromedp.WaitVisible(css(`form[action="/portal/entrar"] button`)))
	screenshot(t, ctx, "portal-entrar")
	do(t, ctx, "enter", chromedp.Click(css(`form[action="/portal/entrar"] button`)), chromedp.WaitVisible(css(`table[data-entregas]`)))
	if h := text(t, ctx, `main h1`); !strings.Contains(h, "CAD Bombeiros do Vale") {
		t.Fatalf("the portal's title: %q", h)
	}
	if n := count(t, ctx, `tr[data-entrega]`); n != 5 {
		t.Errorf("%d deliveries on the portal, want its 5", n)
	}
	seen := func() {
		t.Helper()
		page := get(t, ctx, "page text", chromedp.Evaluate[string](`document.documentElement.outerHTML`))
		if strings.Contains(page, "Vizinho Secreto") || strings.Contains(page, other.ID) {
			t.Error("the portal shows the other integrator")
		}
	}
	seen()
	screenshot(t, ctx, "portal")

	do(t, ctx, "run the tester", chromedp.Click(css(`form[action="/portal/testar"] button`)), chromedp.WaitVisible(css(`[data-testador]`)))
	if n := count(t, ctx, `[data-testador] tr[data-verificacao]`); n != len(app.TestChecks) {
		t.Errorf("%d checks in the report, want %d", n, len(app.TestChecks))
	}
	if n := count(t, ctx, `tr[data-verificacao="recusa-assinatura"][data-resultado="falhou"]`); n != 1 {
		t.Error("a receiver that accepts everything passes recusa-assinatura")
	}
	screenshot(t, ctx, "portal-testador")

	do(t, ctx, "gap repair", chromedp.SendKeys(css(`[data-reparo] input[name=agregado]`), "jornada:portal"),
		chromedp.SendKeys(css(`[data-reparo] input[name=sequencia_desde]`), "3"),
		chromedp.Click(css(`[data-reparo] button`)))
	waitText(t, ctx, `[data-resultado]`, "3 entregas postas de novo na fila")
	seen()

	do(t, ctx, "phone", chromedp.EmulateViewport(390, 844))
	defer do(t, ctx, "desktop", chromedp.EmulateViewport(1366, 768))
	for _, path := range []string{"/portal", "/portal/catalogo"} {
		do(t, ctx, "open "+path, chromedp.Navigate(base+path), chromedp.WaitVisible(css(`main h1`)))
		if g := get(t, ctx, "page", chromedp.Evaluate[geometry](pageGeometry)); g.PageWidth > g.Viewport {
			t.Errorf("%s is %.0f px wide at %.0f px", path, g.PageWidth, g.Viewport)
		}
	}
	do(t, ctx, "home", chromedp.Navigate(base+"/portal"), chromedp.WaitVisible(css(`table[data-entregas]`)))
	off := get(t, ctx, "actions", chromedp.Evaluate[[]string](`[...document.querySelectorAll(".acoes button")].filter((b) => {
		const r = b.getBoundingClientRect(); return r.width === 0 || r.left < 0 || r.right > innerWidth || r.height < 32;
	}).map((b) => b.textContent.trim())`))
	if len(off) > 0 {
		t.Errorf("actions off screen or under 32 px tall at 390 px: %q", off)
	}
	screenshot(t, ctx, "portal-celular")
}
