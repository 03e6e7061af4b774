package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"geohub/app"
)

// geometry is what the phone checks measure in the page, in CSS pixels.
type geometry struct {
	Viewport  float64 `json:"viewport"`  // window.innerWidth
	PageWidth float64 `json:"pageWidth"` // the document's scroll width
	ScrollX   float64 `json:"scrollX"`
}

const pageGeometry = `({viewport: innerWidth, pageWidth: document.documentElement.scrollWidth, scrollX: scrollX})`

// TestConsoleHealthAndPhone is issue 15 in a browser: a CAD that fails
// shows its open circuit and backlog on /integradores; once it is back,
// "Tentar agora" delivers its queue at once (its deliveries wait an hour
// otherwise); at 1366 px /entregas cuts no key column; at 390 px the menu
// collapses behind a button and opens, tables scroll inside their box
// while the page does not widen; an unknown URL gets the styled 404.
func TestConsoleHealthAndPhone(t *testing.T) {
	ctx := browser(t)
	m, dir, stop := runMain(t)
	t.Cleanup(func() { stop() })
	base := "http://" + m.Addr
	var out bytes.Buffer
	if err := resetPassword(context.Background(), &out, testDatabase(t, dir), "admin"); err != nil {
		t.Fatal(err)
	}
	senha := lastLine(out.String())
	admin, producer := mainToken(t, dir, app.PapelAdmin, "montagem"), mainToken(t, dir, app.PapelProdutor, "rh")
	client := &http.Client{Timeout: 10 * time.Second}

	// The CAD answers 503 until it "comes back"; it counts what it accepts.
	var answer, accepted atomic.Int32
	answer.Store(http.StatusServiceUnavailable)
	cad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		code := int(answer.Load())
		if code == http.StatusNoContent {
			accepted.Add(1)
		}
		w.WriteHeader(code)
	}))
	defer cad.Close()
	// A healthy CAD whose name sorts first: the overview still puts the
	// failing one above it.
	apiCall(t, client, "POST", base+"/api/integradores", admin, `{"nome":"A CAD Saudável","callback_url":"`+
		cad.URL+`/ok","hosts_permitidos":["127.0.0.1"],"eventos":["integracao:nada"]}`)
	var in app.CreatedIntegrator
	// An hour between attempts: a queue that only "Tentar agora" sends now.
	json.Unmarshal(apiCall(t, client, "POST", base+"/api/integradores", admin, `{"nome":"CAD Defesa Civil","callback_url":"`+
		cad.URL+`/eventos","hosts_permitidos":["127.0.0.1"],"eventos":["jornada:iniciada"],"backoff":["1h"]}`), &in)
	const queued = 30
	for i := range queued {
		publishRecord(t, client, m.Addr, producer, jornada(5000+i))
	}
	integrator := func() app.Integrator {
		var got app.Integrator
		json.Unmarshal(apiCall(t, client, "GET", base+"/api/integradores/"+in.ID, admin, ""), &got)
		return got
	}
	waitFor(t, 20*time.Second, "the circuit opens", func() (bool, string) {
		got := integrator()
		return got.Circuito != nil && got.Circuito.Estado != app.CircuitoFechado, fmt.Sprintf("%+v", got.Circuito)
	})
	login(t, ctx, base, "admin", senha)

	t.Run("1366: /integradores shows the open circuit and the backlog", func(t *testing.T) {
		row := `tr[data-integrador="` + in.ID + `"]`
		do(t, ctx, "open /integradores", chromedp.Navigate(base+"/integradores"), chromedp.WaitVisible(css(row)))
		state := get(t, ctx, "circuit", chromedp.Evaluate[string](`document.querySelector(`+strconv.Quote(row)+`).dataset.circuito`))
		rowText := text(t, ctx, row)
		if state == app.CircuitoFechado || !strings.Contains(rowText, "circuito") || !strings.Contains(rowText, "aberto desde") {
			t.Errorf("the failing CAD's row (circuit %s): %q", state, rowText)
		}
		if fila := text(t, ctx, row+` [data-fila]`); fila != strconv.Itoa(queued) {
			t.Errorf("backlog %q, want %d", fila, queued)
		}
		if !strings.Contains(rowText, "0% (0 de ") {
			t.Errorf("no success rate over the window: %q", rowText)
		}
		screenshot(t, ctx, "saude-integradores-1366")
		// The overview lists it first, ahead of the names before it.
		do(t, ctx, "open the overview", chromedp.Navigate(base+"/"), chromedp.WaitVisible(css(`.integradores-resumo`)))
		if first := get(t, ctx, "first integrator", chromedp.Evaluate[string](
			`document.querySelector(".integradores-resumo tbody tr").dataset.integrador`)); first != in.ID {
			t.Errorf("the overview lists %s first, not the CAD in trouble", first)
		}
		screenshot(t, ctx, "saude-visao-geral-1366")
	})

	t.Run("1366: /entregas cuts no key column", func(t *testing.T) {
		// ?de=0: the live attempts replay from the start, so both tables
		// have rows (a resend's page opens so).
		do(t, ctx, "open /entregas", chromedp.Navigate(base+"/entregas?de=0"), chromedp.WaitVisible(css(`.tail-tentativas tbody tr[data-seq] td.chave a`)),
			chromedp.WaitVisible(css(`td.chave a`)))
		// Every delivery link and HTTP code lies wholly inside its cell and
		// the table's box, which does not scroll at this width.
		cut := get(t, ctx, "key columns", chromedp.Evaluate[[]string](`(() => {
			const bad = [];
			const inside = (a, b) => a.left >= b.left - 0.5 && a.right <= b.right + 0.5;
			document.querySelectorAll("td.chave a, td.resposta .codigo-http").forEach((el) => {
				const td = el.closest("td"), wrap = el.closest(".tabela-wrap");
				const r = el.getBoundingClientRect();
				if (!inside(r, td.getBoundingClientRect()) || !inside(r, wrap.getBoundingClientRect()) || wrap.scrollWidth > wrap.clientWidth)
					bad.push(el.textContent.trim());
			});
			return bad;
		})()`))
		if n := count(t, ctx, `td.resposta .codigo-http`); n == 0 {
			t.Fatal("no HTTP code in Última resposta to check")
		}
		if len(cut) > 0 {
			t.Errorf("cut at 1366 px: %q", cut)
		}
		screenshot(t, ctx, "saude-entregas-1366")
	})

	t.Run("Tentar agora after the receiver recovers delivers its queue", func(t *testing.T) {
		answer.Store(http.StatusNoContent)
		do(t, ctx, "open the integrator", chromedp.Navigate(base+"/integradores/"+in.ID),
			chromedp.WaitVisible(css(`#saude form[action$="/tentar-agora"] button`)))
		// The circuit's probe (2 s after it opened, SPEC 6.4) may have
		// closed it already; the queue still waits for its retry times.
		if fila := text(t, ctx, `#saude [data-fila]`); !strings.Contains(fila, "pendente") {
			t.Errorf("backlog before: %q", fila)
		}
		clicked := time.Now()
		do(t, ctx, "Tentar agora", chromedp.Click(css(`#saude form[action$="/tentar-agora"] button`)))
		waitText(t, ctx, `p.aviso-ok`, "circuito de CAD Defesa Civil fechado")
		waitFor(t, 20*time.Second, "the queue is delivered", func() (bool, string) {
			var p app.Page[app.Delivery]
			json.Unmarshal(apiCall(t, client, "GET", base+"/api/entregas?status=entregue&limite=1&integrador="+in.ID, admin, ""), &p)
			return p.Total == queued && accepted.Load() >= queued, fmt.Sprintf("%d delivered, %d accepted", p.Total, accepted.Load())
		})
		t.Logf("Tentar agora → %d deliveries accepted in %v (each was due in up to an hour)", queued, time.Since(clicked).Round(time.Millisecond))
		do(t, ctx, "reload", chromedp.Navigate(base+"/integradores/"+in.ID), chromedp.WaitVisible(css(`#saude`)))
		if badge := text(t, ctx, `#saude .selo`); badge != "circuito fechado" {
			t.Errorf("after Tentar agora the circuit reads %q", badge)
		}
		if fila := text(t, ctx, `#saude [data-fila]`); fila != "nenhuma entrega esperando" {
			t.Errorf("backlog after: %q", fila)
		}
		screenshot(t, ctx, "saude-integrador-depois")
	})

	t.Run("paging back through 200 events while 20/s arrive repeats and skips none", func(t *testing.T) {
		for i := range 200 {
			publishRecord(t, client, m.Addr, producer, jornada(6000+i))
		}
		do(t, ctx, "open /eventos", chromedp.Navigate(base+"/eventos?limite=50"), chromedp.WaitVisible(css(`.tail-status.ao-vivo`)))
		// The first page's own rows: the tail adds newer ones above them.
		de := get(t, ctx, "first page", chromedp.Evaluate[string](`document.querySelector("[data-tail]").dataset.de`))
		top, _ := strconv.ParseInt(de, 10, 64)
		seen := get(t, ctx, "rows", chromedp.Evaluate[[]int64](`[...document.querySelectorAll("tbody tr[data-seq]")].map((r) => Number(r.dataset.seq)).filter((s) => s <= `+de+`)`))
		// Events keep arriving while the pages are read; before each click
		// the test waits for two more, so every page is read with newer
		// events committed since the one before, however fast it pages.
		stopArrivals := make(chan struct{})
		var arrived atomic.Int64
		arrivalsDone := make(chan struct{})
		go func() {
			defer close(arrivalsDone)
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stopArrivals:
					return
				case <-tick.C:
					req, _ := http.NewRequest("POST", base+"/api/events", strings.NewReader(jornada(7000+int(arrived.Load()))))
					req.Header.Set("Authorization", "Bearer "+producer)
					if res, err := client.Do(req); err == nil {
						res.Body.Close()
						arrived.Add(1)
					}
				}
			}
		}()
		pages := 0
		for ; count(t, ctx, `a[data-mais-antigos]`) > 0; pages++ {
			if pages >= 20 {
				t.Fatal("more than 20 pages")
			}
			want := int64(2 * (pages + 1))
			waitFor(t, 10*time.Second, "events arriving while paging", func() (bool, string) {
				return arrived.Load() >= want, fmt.Sprintf("%d of %d arrived", arrived.Load(), want)
			})
			first := get(t, ctx, "next page", chromedp.Evaluate[string](`document.querySelector("a[data-mais-antigos]").getAttribute("href")`))
			do(t, ctx, "Mais antigos", chromedp.Click(css(`a[data-mais-antigos]`)))
			// Errors while the page navigates are expected: ask again.
			waitFor(t, 10*time.Second, "the older page", func() (bool, string) {
				loc, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.readyState === "complete" ? location.pathname + location.search : ""`))
				return err == nil && loc == first, loc
			})
			seen = append(seen, get(t, ctx, "rows", chromedp.Evaluate[[]int64](`[...document.querySelectorAll("tbody tr[data-seq]")].map((r) => Number(r.dataset.seq))`))...)
		}
		close(stopArrivals)
		<-arrivalsDone
		n := arrived.Load()
		// Sequences are dense: from the first page's newest down to 1, each once.
		if int64(len(seen)) != top || seen[0] != top || seen[len(seen)-1] != 1 {
			t.Fatalf("paged through %d rows from %d to %d, want %d from %d to 1", len(seen), seen[0], seen[len(seen)-1], top, top)
		}
		for i := 1; i < len(seen); i++ {
			if seen[i] != seen[i-1]-1 {
				t.Fatalf("row %d after %d: a row repeated or skipped", seen[i], seen[i-1])
			}
		}
		if pages < 3 {
			t.Fatalf("only %d older pages: the test proves little", pages)
		}
		t.Logf("paged back through %d events while %d arrived", len(seen), n)
	})

	t.Run("an unknown URL shows the styled 404", func(t *testing.T) {
		do(t, ctx, "open a URL that does not exist", chromedp.Navigate(base+"/integradores/x/nada"), chromedp.WaitVisible(css(`.pagina-erro h1`)))
		if h := text(t, ctx, `.pagina-erro h1`); h != "Página não encontrada" {
			t.Errorf("heading %q", h)
		}
		// Inside the layout: the console's stylesheet and menu.
		if bg := get(t, ctx, "style", chromedp.Evaluate[string](`getComputedStyle(document.querySelector("header.topo")).backgroundColor`)); bg != "rgb(20, 33, 61)" {
			t.Errorf("the 404 is not styled: header background %s", bg)
		}
		if count(t, ctx, `nav.menu a[href="/eventos"]`) != 1 {
			t.Error("the 404 lacks the menu")
		}
		screenshot(t, ctx, "404")
	})

	do(t, ctx, "phone", chromedp.EmulateViewport(390, 844))
	defer do(t, ctx, "desktop", chromedp.EmulateViewport(1366, 768))

	t.Run("390: the menu collapses behind a button and opens", func(t *testing.T) {
		do(t, ctx, "open /eventos", chromedp.Navigate(base+"/eventos"), chromedp.WaitVisible(css(`[data-menu]`)),
			chromedp.WaitNotVisible(css(`nav.menu`)))
		if h := get(t, ctx, "header height", chromedp.Evaluate[float64](`document.querySelector("header.topo").offsetHeight`)); h > 70 {
			t.Errorf("the closed header is %.0f px tall", h)
		}
		do(t, ctx, "open the menu", chromedp.Click(css(`[data-menu]`)), chromedp.WaitVisible(css(`nav.menu`)))
		if exp := get(t, ctx, "aria-expanded", chromedp.Evaluate[string](`document.querySelector("[data-menu]").getAttribute("aria-expanded")`)); exp != "true" {
			t.Errorf("aria-expanded %q", exp)
		}
		// Every item is on screen and on the dark bar: none runs off to the
		// right, where its light text would sit on the light page.
		off := get(t, ctx, "menu items", chromedp.Evaluate[[]string](`(() => {
			const bar = document.querySelector("header.topo").getBoundingClientRect();
			return [...document.querySelectorAll("nav.menu a, .conta a, .conta button")].filter((a) => {
				const r = a.getBoundingClientRect();
				return r.width === 0 || r.left < 0 || r.right > innerWidth || r.left < bar.left || r.right > bar.right || r.bottom > bar.bottom;
			}).map((a) => a.textContent.trim());
		})()`))
		if len(off) > 0 {
			t.Errorf("menu items off the bar at 390 px: %q", off)
		}
		if n := count(t, ctx, `nav.menu a`); n < 9 {
			t.Errorf("%d menu items, want every one (admin: 9)", n)
		}
		if g := get(t, ctx, "page", chromedp.Evaluate[geometry](pageGeometry)); g.PageWidth > g.Viewport {
			t.Errorf("the open menu widens the page to %.0f px", g.PageWidth)
		}
		screenshot(t, ctx, "celular-menu-aberto")
		do(t, ctx, "close the menu", chromedp.Click(css(`[data-menu]`)), chromedp.WaitNotVisible(css(`nav.menu`)))
	})

	t.Run("390: the events table scrolls inside its box, keeping its key column", func(t *testing.T) {
		do(t, ctx, "open /eventos", chromedp.Navigate(base+"/eventos"), chromedp.WaitVisible(css(`[data-tail] tbody tr[data-seq]`)))
		type scroll struct {
			Wide, Moved         bool    // the box is wider than the screen, and scrolled
			KeyLeft, BoxLeft    float64 // the first cell's left edge and the box's
			PageWidth, Viewport float64
			PageScrollX         float64
			KeyText             float64 // the first cell's sequence
		}
		s := get(t, ctx, "scroll the table", chromedp.Evaluate[scroll](`(() => {
			const box = document.querySelector("[data-tail] .tabela-wrap");
			const wide = box.scrollWidth > box.clientWidth;
			box.scrollLeft = 300;
			const key = box.querySelector("tbody tr td:first-child");
			return {wide, moved: box.scrollLeft > 0, keyLeft: key.getBoundingClientRect().left, boxLeft: box.getBoundingClientRect().left,
				pageWidth: document.documentElement.scrollWidth, viewport: innerWidth, pageScrollX: scrollX, keyText: Number(key.textContent)};
		})()`))
		if !s.Wide || !s.Moved {
			t.Fatalf("the events table does not scroll inside its box: %+v", s)
		}
		if s.PageWidth > s.Viewport || s.PageScrollX != 0 {
			t.Errorf("the page widened to %.0f px at %.0f px", s.PageWidth, s.Viewport)
		}
		// The sequence, the row's key, stays in place while the rest scrolls.
		if s.KeyLeft > s.BoxLeft+1 || s.KeyText == 0 {
			t.Errorf("the key column moved with the scroll: %+v", s)
		}
		screenshot(t, ctx, "celular-eventos-rolado")
	})

	t.Run("390: no page widens the screen", func(t *testing.T) {
		for _, p := range []struct{ path, ready, name string }{
			{"/", `.numeros`, "celular-visao-geral"},
			{"/entregas", `td.chave a`, "celular-entregas"},
			{"/integradores", `tr[data-integrador]`, "celular-integradores"},
			{"/integradores/" + in.ID, `#saude`, ""},
			{"/dlq", `main h1`, ""},
			{"/registro", `table`, ""},
			{"/ocorrencias", `main h1`, ""},
			{"/nao-existe", `.pagina-erro`, ""},
		} {
			do(t, ctx, "open "+p.path, chromedp.Navigate(base+p.path), chromedp.WaitVisible(css(p.ready)))
			if g := get(t, ctx, "page", chromedp.Evaluate[geometry](pageGeometry)); g.PageWidth > g.Viewport {
				t.Errorf("%s is %.0f px wide at %.0f px", p.path, g.PageWidth, g.Viewport)
			}
			// The first column of each table (its key) starts on screen.
			if off := get(t, ctx, "key columns", chromedp.Evaluate[int](`[...document.querySelectorAll(".tabela-wrap tbody tr:not(.vazio) > :first-child")].filter((c) => {
				const r = c.getBoundingClientRect(); return r.left < 0 || r.left > innerWidth - 20;
			}).length`)); off > 0 {
				t.Errorf("%s: %d key cells off screen", p.path, off)
			}
			if p.name != "" {
				screenshot(t, ctx, p.name)
			}
		}
	})
}
