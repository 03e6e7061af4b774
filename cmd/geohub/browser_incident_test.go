package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"geohub/app"
)

// TestConsoleAt3AM is issue 25 in a browser. Three pages are open
// (/ocorrencias, /eventos, /entregas) when a CAD starts answering 500: each
// shows the CAD in its header badge and title without a reload. A dispatch
// on that CAD's ocorrência says the CAD is not receiving, and the page says
// per event whether it got it; the integrator's page says why it fails in
// the receiver's own words.
func TestConsoleAt3AM(t *testing.T) {
	ctx := browser(t)
	s := startConsole(t)
	m, base, senha, client := s.m, s.base, s.senha, s.client
	producer := mainToken(t, s.dir, app.PapelProdutor, "rh")
	var failing atomic.Bool
	var hold atomic.Pointer[chan struct{}] // while set, the CAD answers only once it is closed
	cad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if h := hold.Load(); h != nil {
			select {
			case <-*h:
			case <-r.Context().Done():
				return
			}
		}
		if failing.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, "banco do CAD fora do ar")
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer cad.Close()
	in := s.integrator(t, "CAD Bombeiros", cad)
	oc := struct{ ID string }{s.register(t, in.APIKey, "vazamento_gas")}

	login(t, ctx, base, "admin", senha)
	pages := []string{"/ocorrencias", "/eventos", "/entregas"}
	tabs := map[string]context.Context{}
	for i, path := range pages {
		tab := ctx
		if i > 0 {
			var cancel context.CancelFunc
			tab, cancel = chromedp.NewContext(ctx)
			t.Cleanup(cancel)
		}
		tabs[path] = tab
		do(t, tab, "open "+path, chromedp.Navigate(base+path), chromedp.WaitVisible(css(`main h1`)))
		if n := count(t, tab, `[data-incidente]`); n != 0 {
			t.Fatalf("%s shows %d incidents before any failure", path, n)
		}
	}

	failing.Store(true)
	failedAt := time.Now()
	for i := range 6 {
		publishRecord(t, client, m.Addr, producer, jornada(9100+i))
	}
	for _, path := range pages {
		tab := tabs[path]
		waitFor(t, 20*time.Second, path+": the badge names the CAD without a reload", func() (bool, string) {
			v, _ := chromedp.Run(tab, chromedp.Evaluate[string](`[...document.querySelectorAll("[data-incidente]")].map((a) => a.textContent).join("|")`))
			return strings.Contains(v, "CAD Bombeiros"), v
		})
		t.Logf("%s: badge shown %v after the CAD began to fail", path, time.Since(failedAt).Round(time.Millisecond))
		waitFor(t, 20*time.Second, path+": the circuit opens in the badge", func() (bool, string) {
			v, _ := chromedp.Run(tab, chromedp.Evaluate[string](`document.querySelector("[data-incidente]")?.textContent || ""`))
			return strings.Contains(v, "circuito aberto"), v
		})
		if title := get(t, tab, "title", chromedp.Title()); !strings.HasPrefix(title, "⚠ CAD Bombeiros") {
			t.Errorf("%s: the title does not say it: %q", path, title)
		}
	}
	screenshot(t, ctx, "madrugada-badge")
	list, cancelList := chromedp.NewContext(ctx)
	defer cancelList()
	do(t, list, "open /integradores", chromedp.Navigate(base+"/integradores"), chromedp.WaitVisible(css(`tr[data-integrador="`+in.ID+`"]`)))
	// Open, or between probes (2 s after it opened, SPEC 6.4).
	if v := get(t, list, "mark the list", chromedp.Evaluate[string](`window.__semRecarga = true,
		document.querySelector('tr[data-integrador="`+in.ID+`"]').dataset.circuito`)); v == app.CircuitoFechado {
		t.Fatalf("the list shows the circuit %q", v)
	}

	tab := tabs["/ocorrencias"]
	do(t, tab, "open the CAD's ocorrência", chromedp.Navigate(base+"/ocorrencias/"+oc.ID), chromedp.WaitVisible(css(`input[name=recurso]`)))
	if n := count(t, tab, `[data-incidente]`); n != 1 {
		t.Errorf("the ocorrência page as served shows %d incidents", n)
	}
	do(t, tab, "dispatch", chromedp.SendKeys(css(`input[name=recurso]`), "ABT-11"),
		chromedp.Submit(css(`input[name=recurso]`)))
	// The page before the dispatch already warns (the CAD is down): the
	// confirmation says the answer is on screen.
	waitText(t, tab, `main .aviso-ok`, "ABT-11 despachado")
	if w := text(t, tab, `[data-aviso]`); !strings.Contains(w, "não está recebendo") {
		t.Errorf("the dispatch's answer does not warn: %q", w)
	}
	if n := count(t, tab, `td[data-recebido] .selo-pendente, td[data-recebido] .selo-processando, td[data-recebido] .selo-falhou`); n == 0 {
		t.Error("the ocorrência page does not show an event its CAD has not got")
	}
	if n := count(t, tab, `td[data-recebido] .selo-entregue`); n == 0 {
		t.Error("the ocorrência page does not show the registration its CAD got")
	}
	screenshot(t, tab, "madrugada-ocorrencia")

	do(t, tab, "the integrator's page", chromedp.Navigate(base+"/integradores/"+in.ID), chromedp.WaitVisible(css(`[data-por-que]`)))
	why := text(t, tab, `[data-por-que]`)
	if !strings.Contains(why, "HTTP 500") || !strings.Contains(why, "banco do CAD fora do ar") {
		t.Errorf("the integrator page's why: %q", why)
	}
	screenshot(t, tab, "madrugada-integrador")

	// Back up, and "Tentar agora" on its page: the page drains its queue
	// and drops the failure by itself, and the badge goes away everywhere.
	// The CAD holds its answers until the page is shown, so what follows
	// is seen changing on the page, not already done when it loads.
	answer := make(chan struct{})
	hold.Store(&answer)
	failing.Store(false)
	do(t, tab, "Tentar agora", chromedp.Click(css(`#saude form.tentar-agora button`)))
	waitText(t, tab, `main .aviso-ok`, "agora")
	get(t, tab, "mark the page", chromedp.Evaluate[bool](`window.__semRecarga = true`))
	if n := count(t, tab, `[data-por-que]`); n != 1 {
		t.Fatalf("the page after Tentar agora shows %d failure cards while the CAD has not answered", n)
	}
	hold.Store(nil)
	close(answer)
	waitFor(t, 20*time.Second, "the integrator page clears its failure and queue without a reload", func() (bool, string) {
		v, _ := chromedp.Run(tab, chromedp.Evaluate[string](`(window.__semRecarga ? "" : "RECARREGOU ") +
			document.querySelectorAll("[data-por-que]").length + " " + document.querySelector("#saude [data-fila]").textContent`))
		return v == "0 nenhuma entrega esperando", v
	})
	waitFor(t, 20*time.Second, "the integrator list shows the circuit closed without a reload", func() (bool, string) {
		v, _ := chromedp.Run(list, chromedp.Evaluate[string](`(window.__semRecarga ? "" : "RECARREGOU ") +
			document.querySelector('tr[data-integrador="`+in.ID+`"]').dataset.circuito`))
		return v == app.CircuitoFechado, v
	})
	for _, path := range pages[1:] {
		tab := tabs[path]
		waitFor(t, 20*time.Second, path+": the badge clears once the CAD is back", func() (bool, string) {
			v, _ := chromedp.Run(tab, chromedp.Evaluate[int](`document.querySelectorAll("[data-incidente]").length`))
			return v == 0, ""
		})
	}
}

// TestConsoleTouchTargetsOnAPhone measures, at 390 px, every visible
// button, link-button and form control of the ocorrência and integrator
// pages: each is at least 44 px tall, and a destructive action stands at
// least 12 px from the others.
func TestConsoleTouchTargetsOnAPhone(t *testing.T) {
	ctx := browser(t)
	s := startConsole(t)
	base, senha, client := s.base, s.senha, s.client
	in := s.integrator(t, "CAD SAMU", acceptingCAD(t))
	oc := struct{ ID string }{s.register(t, in.APIKey, "resgate")}
	if status, body, err := command(client, base, in.APIKey, "/api/ocorrencias/"+oc.ID+"/despachos",
		`{"recurso":{"identificador":"USA-3"}}`); err != nil || status != http.StatusCreated {
		t.Fatalf("dispatch: %v %d %s", err, status, body)
	}

	login(t, ctx, base, "admin", senha)
	do(t, ctx, "phone", chromedp.EmulateViewport(390, 844))
	defer do(t, ctx, "desktop", chromedp.EmulateViewport(1366, 768))
	type small struct {
		What   string
		Height float64
	}
	for _, p := range []struct{ path, ready string }{
		{"/ocorrencias/" + oc.ID, `button[data-para="no_local"]`},
		{"/integradores/" + in.ID, `#saude`},
	} {
		do(t, ctx, "open "+p.path, chromedp.Navigate(base+p.path), chromedp.WaitVisible(css(p.ready)))
		tiny := get(t, ctx, "measure", chromedp.Evaluate[[]small](`[...document.querySelectorAll(
			"main button, main .botao, main select, main textarea, main input:not([type=hidden]):not([type=checkbox]):not([type=radio])")]
			.filter((e) => e.offsetParent !== null)
			.map((e) => ({what: (e.textContent || e.name || e.tagName).trim().slice(0, 40), height: e.getBoundingClientRect().height}))
			.filter((e) => e.height < 44)`))
		if len(tiny) > 0 {
			t.Errorf("%s: touch targets under 44 px at 390 px: %+v", p.path, tiny)
		}
		screenshot(t, ctx, "celular-alvos"+strings.ReplaceAll(p.path, "/", "-"))
	}
	// The destructive action stands apart from the one above or beside it.
	do(t, ctx, "the ocorrência", chromedp.Navigate(base+"/ocorrencias/"+oc.ID), chromedp.WaitVisible(css(`button[data-para="cancelado"]`)))
	gap := get(t, ctx, "gap", chromedp.Evaluate[float64](`(() => {
		const danger = document.querySelector('button[data-para="cancelado"]').getBoundingClientRect();
		const other = document.querySelector('button[data-para="no_local"]').getBoundingClientRect();
		const dx = Math.max(danger.left - other.right, other.left - danger.right, 0);
		const dy = Math.max(danger.top - other.bottom, other.top - danger.bottom, 0);
		return Math.max(dx, dy);
	})()`))
	if gap < 12 {
		t.Errorf("Cancelar despacho is %.0f px from Chegou ao local at 390 px, want 12 or more", gap)
	}

	// The key state columns are on screen without scrolling the table: a
	// failing CAD's circuit and queue, and the audit's action and result.
	down := s.integrator(t, "Central de Regulação Médica Regional", failingCAD(t))
	for range 6 {
		s.register(t, down.APIKey, "queda")
	}
	do(t, ctx, "the list", chromedp.Navigate(base+"/integradores"))
	waitFor(t, 20*time.Second, "the failing CAD's circuit opens", func() (bool, string) {
		v, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('tr[data-integrador="`+down.ID+`"]')?.dataset.circuito || ""`))
		return v == app.CircuitoAberto, v
	})
	type cell struct {
		What  string
		Right float64
		Edge  float64
	}
	for _, p := range []struct{ path, cells string }{
		{"/integradores", "td.estado, td.fila"},
		{"/auditoria", "td.acao, td.desfecho"},
	} {
		do(t, ctx, "open "+p.path, chromedp.Navigate(base+p.path), chromedp.WaitVisible(css(`table.dados tbody tr`)))
		cut := get(t, ctx, "measure", chromedp.Evaluate[[]cell](`[...document.querySelectorAll("`+p.cells+`")]
			.map((c) => ({what: c.className + ": " + c.textContent.trim().slice(0, 40), right: c.getBoundingClientRect().right,
				edge: Math.min(window.innerWidth, c.closest(".tabela-wrap").getBoundingClientRect().right)}))
			.filter((c) => c.right > c.edge + 0.5)`))
		if len(cut) > 0 {
			t.Errorf("%s: key columns cut off at 390 px: %+v", p.path, cut)
		}
		do(t, ctx, "scroll to the table", chromedp.ScrollIntoView(css(`table.dados`)))
		screenshot(t, ctx, "celular-colunas"+strings.ReplaceAll(p.path, "/", "-"))
	}
}

// failingCAD is a receiver that answers every delivery 500.
func failingCAD(t *testing.T) *httptest.Server {
	t.Helper()
	cad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		http.Error(w, "banco do CAD fora do ar", http.StatusInternalServerError)
	}))
	t.Cleanup(cad.Close)
	return cad
}

// TestLiveListsHoldStillUnderThePointer: while the pointer is over the live
// /ocorrencias list, a new ocorrência does not move the rows (the list says
// it is paused); once the pointer leaves, it appears.
func TestLiveListsHoldStillUnderThePointer(t *testing.T) {
	ctx := browser(t)
	s := startConsole(t)
	base, senha := s.base, s.senha
	in := s.integrator(t, "CAD PM", acceptingCAD(t))
	register := func(natureza string) string { return s.register(t, in.APIKey, natureza) }
	first := register("resgate")
	register("alagamento")

	login(t, ctx, base, "admin", senha)
	do(t, ctx, "open the list", chromedp.Navigate(base+"/ocorrencias"), chromedp.WaitVisible(css(`tr[data-id="`+first+`"]`)))
	waitText(t, ctx, `[data-tail-status]`, "ao vivo")
	type point struct{ X, Y float64 }
	p := get(t, ctx, "the first row", chromedp.Evaluate[point](`(() => {
		const r = document.querySelector("tbody tr[data-id]").getBoundingClientRect();
		return {x: r.left + 20, y: r.top + r.height / 2};
	})()`))
	top := func() string {
		return get(t, ctx, "the top row", chromedp.Evaluate[string](`document.querySelector("tbody tr[data-id]").dataset.id`))
	}
	before := top()
	do(t, ctx, "point at the first row", chromedp.MouseEvent("mouseMoved", p.X, p.Y))
	third := register("incendio")
	waitText(t, ctx, `[data-tail-status]`, "pausado")
	if n := count(t, ctx, `tr[data-id="`+third+`"]`); n != 0 || top() != before {
		t.Fatal("the list moved under the pointer")
	}
	do(t, ctx, "move away", chromedp.MouseEvent("mouseMoved", 5, 5))
	waitFor(t, 10*time.Second, "the new row once the pointer left", func() (bool, string) {
		n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('tr[data-id="`+third+`"]').length`))
		return n == 1, ""
	})
}
