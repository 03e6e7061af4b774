package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// publishRecord publishes over the API and returns the stored record's
// sequence and event id, failing unless the answer is 201.
func publishRecord(t *testing.T, client *http.Client, addr, token, body string) (seq, id string) {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://"+addr+"/api/events", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("publish: %d %s", res.StatusCode, b)
	}
	var rec struct {
		Seq string `json:"sequence_number"`
		ID  string `json:"event_id"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	return rec.Seq, rec.ID
}

// tailSeqs is the sequences of the page's tail rows, top to bottom.
const tailSeqs = `[...document.querySelectorAll("[data-tail] tbody tr[data-seq]")].map(r => r.dataset.seq)`

// watchRows records, per row the tail inserts, when it entered the page
// (Date.now(), the machine's clock, as the test's is), keyed by sequence.
const watchRows = `(() => {
	window.__visto = {};
	new MutationObserver((ms) => {
		for (const m of ms) for (const n of m.addedNodes) if (n.dataset && n.dataset.seq) window.__visto[n.dataset.seq] = Date.now();
	}).observe(document.querySelector("[data-tail] tbody"), {childList: true});
	return true;
})()`

func TestConsoleLiveTails(t *testing.T) {
	ctx := browser(t)
	data := t.TempDir()
	// The CAD answers 400 (a dead letter at once) until told otherwise.
	var answer atomic.Int32
	answer.Store(http.StatusBadRequest)
	cad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		code := int(answer.Load())
		w.WriteHeader(code)
		if code != http.StatusNoContent {
			fmt.Fprint(w, `{"erro":"assinatura não confere"}`)
		}
	}))
	defer cad.Close()
	srv := startServer(t, data, "--insecure-callbacks")
	base := "http://" + srv.addr
	producer := lastLine(runCLI(t, "token", "create", "--papel", "produtor", "--data", data))
	admin := lastLine(runCLI(t, "token", "create", "--papel", "admin", "--data", data))
	client := &http.Client{Timeout: 10 * time.Second}
	for i := range 6 { // rows on the page before the tail starts
		publishRecord(t, client, srv.addr, producer, jornada(1000+i))
	}
	login(t, ctx, base, "admin", adminPassword)
	var lastSeq, lastID string

	t.Run("a new event shows in the live tail within a second", func(t *testing.T) {
		do(t, ctx, "open /eventos", chromedp.Navigate(base+"/eventos"), chromedp.WaitVisible(css(`.tail-status.ao-vivo`)))
		get(t, ctx, "watch the tail", chromedp.Evaluate[bool](watchRows))
		var worst time.Duration
		for i := range 3 {
			sent := time.Now().UnixMilli()
			seq, id := publishRecord(t, client, srv.addr, producer, jornada(i))
			acked := time.Now().UnixMilli()
			shown := get(t, ctx, "row "+seq+" appears", chromedp.Poll[int64](fmt.Sprintf(`window.__visto[%q]`, seq),
				chromedp.WithPollingTimeout(10*time.Second)))
			// The row can beat the 201 to the test (the commit wakes the
			// tail before the answer is written): then it counts from the send.
			latency := time.Duration(shown-acked) * time.Millisecond
			t.Logf("event %s: POST sent → row in the page %v; API 201 → row %v", seq,
				time.Duration(shown-sent)*time.Millisecond, latency)
			worst = max(worst, latency)
			lastSeq, lastID = seq, id
		}
		// The promise is a second; 3 s leaves room for a loaded CI machine.
		if worst > 3*time.Second {
			t.Fatalf("a new event took %v to show", worst)
		}
		if top := text(t, ctx, `[data-tail] tbody tr:first-child td:first-child`); top != lastSeq {
			t.Fatalf("the newest row is %s, want %s on top", top, lastSeq)
		}
		screenshot(t, ctx, "eventos")
	})

	t.Run("a dropped socket resumes without losing or repeating a line", func(t *testing.T) {
		before := get(t, ctx, "rows", chromedp.Evaluate[[]string](tailSeqs))
		// Reconnect after 2 s instead of 0.5 s, so the events below are
		// certainly published while no socket is open.
		get(t, ctx, "drop the socket", chromedp.Evaluate[bool](`window.__geohubTail.wait = 2000; window.__geohubTail.drop(); true`))
		do(t, ctx, "the page says it is reconnecting", chromedp.Poll[chromedp.Void](
			`document.querySelector("[data-tail-status]").textContent === "reconectando…"`, chromedp.WithPollingTimeout(5*time.Second)))
		var missed []string
		for i := range 3 {
			seq, id := publishRecord(t, client, srv.addr, producer, jornada(100+i))
			missed = append(missed, seq)
			lastSeq, lastID = seq, id
		}
		if open := get(t, ctx, "socket state", chromedp.Evaluate[int](`window.__geohubTail.ws.readyState`)); open == 1 {
			t.Fatal("the socket reconnected before the events were published: the test proves nothing")
		}
		js, _ := json.Marshal(missed)
		do(t, ctx, "the missed events arrive after the reconnect", chromedp.Poll[chromedp.Void](
			fmt.Sprintf(`%s.every((s) => window.__visto[s])`, js), chromedp.WithPollingTimeout(15*time.Second)),
			chromedp.WaitVisible(css(`.tail-status.ao-vivo`)))
		after := get(t, ctx, "rows", chromedp.Evaluate[[]string](tailSeqs))
		want := append(slices.Clone(missed), before...)
		slices.Reverse(want[:len(missed)])
		if strings.Join(after, ",") != strings.Join(want, ",") {
			t.Fatalf("after the reconnect the rows are %v, want each once, newest first: %v", after, want)
		}
	})

	t.Run("event detail", func(t *testing.T) {
		do(t, ctx, "open the newest event", chromedp.Navigate(base+"/eventos"), chromedp.WaitVisible(css(`[data-tail] tbody tr`)),
			chromedp.Click(css(`[data-tail] tbody tr:first-child a.botao`)), chromedp.WaitVisible(css(`pre.json`)))
		if loc := get(t, ctx, "location", chromedp.Location()); !strings.HasSuffix(loc, "/eventos/"+lastID) {
			t.Fatalf("landed on %s", loc)
		}
		if payload := text(t, ctx, `pre.json`); strings.Contains(payload, "Ana") || !strings.Contains(payload, "jornadaId") {
			t.Fatalf("the payload shown is not the redacted one: %s", payload)
		}
		screenshot(t, ctx, "evento")
	})

	var failedID string
	t.Run("resend a dead letter", func(t *testing.T) {
		apiCall(t, client, "POST", base+"/api/integradores", admin,
			`{"nome":"CAD Bombeiros","callback_url":"`+cad.URL+`/eventos","hosts_permitidos":["127.0.0.1"]}`)
		_, id := publishRecord(t, client, srv.addr, producer, jornada(200))
		var delivery string
		waitFor(t, 15*time.Second, "the delivery to become a dead letter", func() (bool, string) {
			var page struct {
				Linhas []struct {
					ID     string `json:"id"`
					Status string `json:"status"`
				} `json:"linhas"`
			}
			json.Unmarshal(apiCall(t, client, "GET", base+"/api/entregas?event_id="+id, admin, ""), &page)
			if len(page.Linhas) == 1 && page.Linhas[0].Status == "falhou" {
				delivery = page.Linhas[0].ID
			}
			return delivery != "", fmt.Sprintf("%+v", page)
		})
		do(t, ctx, "open /entregas", chromedp.Navigate(base+"/entregas"), chromedp.WaitVisible(css(`.tail-status.ao-vivo`)))
		// One more dead letter while the page is open: its attempt shows in the tail.
		_, other := publishRecord(t, client, srv.addr, producer, jornada(201))
		do(t, ctx, "its attempt appears in the tail", chromedp.Poll[chromedp.Void](
			`document.querySelectorAll(".tail-tentativas tbody tr .selo-falhou").length > 0`, chromedp.WithPollingTimeout(10*time.Second)))
		do(t, ctx, "reload", chromedp.Reload(), chromedp.WaitVisible(css(`.tail-status.ao-vivo`)))
		var p struct {
			Linhas []struct {
				ID string `json:"id"`
			} `json:"linhas"`
		}
		json.Unmarshal(apiCall(t, client, "GET", base+"/api/entregas?event_id="+other, admin, ""), &p)
		if len(p.Linhas) == 1 {
			failedID = p.Linhas[0].ID
		}

		answer.Store(http.StatusNoContent)
		row := fmt.Sprintf(`form[action="/entregas/%s/reenviar"] button`, delivery)
		do(t, ctx, "click Reenviar", chromedp.Click(css(row)), chromedp.WaitVisible(css(`.aviso-ok`)))
		if flash := text(t, ctx, `.aviso-ok`); !strings.Contains(flash, "Entrega #"+delivery+" reenviada") {
			t.Fatalf("flash %q", flash)
		}
		do(t, ctx, "the resend's attempt shows in the tail as delivered", chromedp.Poll[chromedp.Void](fmt.Sprintf(
			`[...document.querySelectorAll(".tail-tentativas tbody tr")].some((tr) => tr.querySelector('a[href="/entregas/%s"]') && tr.querySelector(".selo-entregue"))`,
			delivery), chromedp.WithPollingTimeout(10*time.Second)))
		screenshot(t, ctx, "entregas")
		cell := fmt.Sprintf(`[...document.querySelectorAll("table.dados tr")].find((tr) => tr.querySelector('a[href="/entregas/%s"]') && !tr.closest(".tail-tentativas"))?.querySelector(".selo")?.textContent`, delivery)
		waitFor(t, 10*time.Second, "the resent row to show Entregue", func() (bool, string) {
			do(t, ctx, "reload /entregas", chromedp.Navigate(base+"/entregas"), chromedp.WaitVisible(css(`table.dados`)))
			status, _ := chromedp.Run(ctx, chromedp.Evaluate[string](cell))
			return status == "Entregue", status
		})
		do(t, ctx, "open the delivery", chromedp.Navigate(base+"/entregas/"+delivery), chromedp.WaitVisible(css(`.resultado`)))
		attempts := get(t, ctx, "attempts", chromedp.Evaluate[[]string](`[...document.querySelectorAll("td.resultado")].map((td) => td.textContent.replace(/\s+/g, " ").trim())`))
		if len(attempts) != 2 || !strings.Contains(attempts[0], "HTTP 400") || !strings.Contains(attempts[1], "HTTP 204") {
			t.Fatalf("attempts shown: %q", attempts)
		}
		screenshot(t, ctx, "entrega")
	})

	t.Run("dlq", func(t *testing.T) {
		do(t, ctx, "open /dlq", chromedp.Navigate(base+"/dlq"), chromedp.WaitVisible(css(`h1`)))
		if msg := text(t, ctx, `main .cartao p.sutil`); !strings.Contains(msg, "Nenhuma falha interna pendente") {
			t.Fatalf("empty DLQ says %q", msg)
		}
		screenshot(t, ctx, "dlq")
	})

	t.Run("a leitor sees no resend button and a forged resend is refused", func(t *testing.T) {
		if failedID == "" {
			t.Fatal("no dead letter left from the resend test")
		}
		do(t, ctx, "create a leitor", chromedp.Navigate(base+"/operadores"), chromedp.WaitVisible(css(`input[name=login]`)),
			chromedp.SendKeys(css(`input[name=login]`), "leitora"),
			chromedp.SendKeys(css(`input[name=senha]`), "senha-da-leitora-1"),
			chromedp.SendKeys(css(`input[name=confirma]`), "senha-da-leitora-1"),
			chromedp.Submit(css(`input[name=login]`)), chromedp.WaitVisible(css(`.aviso-ok`)))
		do(t, ctx, "sign out", chromedp.Click(css(`.conta button`)), chromedp.WaitVisible(css(signedOut)))
		login(t, ctx, base, "leitora", "senha-da-leitora-1")
		do(t, ctx, "open /entregas", chromedp.Navigate(base+"/entregas?status=falhou"), chromedp.WaitVisible(css(`.tail-status.ao-vivo`)))
		if n := get(t, ctx, "dead letters listed", chromedp.Evaluate[int](`document.querySelectorAll("table.dados .selo-falhou").length`)); n == 0 {
			t.Fatal("the leitor must still see the dead letters")
		}
		if n := get(t, ctx, "resend forms", chromedp.Evaluate[int](`document.querySelectorAll('form[action$="/reenviar"]').length`)); n != 0 {
			t.Fatalf("a leitor sees %d resend forms", n)
		}
		status := get(t, ctx, "forged resend", chromedp.Evaluate[int](fmt.Sprintf(`fetch("/entregas/%s/reenviar", {method: "POST",
			body: new URLSearchParams({csrf: document.querySelector(".conta input[name=csrf]").value})}).then((r) => r.status)`, failedID),
			chromedp.EvalAwaitPromise))
		if status != http.StatusForbidden {
			t.Fatalf("a leitor's resend answered %d", status)
		}
	})
}
