package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"geohub/app"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The console is tested in a real browser: Debian's chromium, headless,
// driven over the DevTools protocol. ./scripts/test installs chromium and
// sets GEOHUB_REQUIRE_BROWSER=1, so there a missing browser fails the run;
// elsewhere these tests skip without one.
const adminPassword = "senha-de-teste-123" // startServer's GEOHUB_ADMIN_PASSWORD

// browser opens a headless chromium at the console's usual screen size.
// It is the first call of a top-level test, which it runs alongside.
func browser(t *testing.T) context.Context {
	t.Helper()
	alongside(t)
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("GEOHUB_REQUIRE_BROWSER") == "1" {
			t.Fatal("chromium is required (apt-get install chromium)")
		}
		t.Skip("chromium not installed; ./scripts/test installs it")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.WindowSize(1366, 768),
		chromedp.NoSandbox, // CI runs as root, where chromium's sandbox cannot start
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("lang", "pt-BR"),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// The first run starts the browser, which lives as long as its context:
	// no timeout on that one; each test's steps get one below.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(cancelTimeout)
	return ctx
}

type css = chromedp.CSS

// do runs browser actions, failing the test with the step that failed.
func do(t *testing.T, ctx context.Context, step string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", step, err)
	}
}

// login signs in through the login form and waits for the page it lands on.
// signedOut is on the login page only: /operadores has an input named
// login too, and waiting for that one let the next navigation abort the
// sign-out's redirect (net::ERR_ABORTED).
const signedOut = `form[action="/login"] input[name=login]`

func login(t *testing.T, ctx context.Context, base, user, password string) {
	t.Helper()
	do(t, ctx, "login as "+user,
		chromedp.Navigate(base+"/login"),
		chromedp.WaitVisible(css(`input[name=login]`)),
		chromedp.SendKeys(css(`input[name=login]`), user),
		chromedp.SendKeys(css(`input[name=senha]`), password),
		chromedp.Click(css(`button[type=submit]`)),
		chromedp.WaitVisible(css(`nav.menu`)),
	)
}

// screenshot saves the page as it looks at 1366x768 into
// $GEOHUB_SCREENSHOTS, for a person to review; without it, nothing: no
// test reads a screenshot, and each cost a pause and a capture.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("GEOHUB_SCREENSHOTS")
	if dir == "" {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Wall time on purpose: transitions and fonts finish for the reviewer.
	do(t, ctx, "settle before "+name, chromedp.Sleep(300*time.Millisecond))
	png := get(t, ctx, "screenshot "+name, chromedp.CaptureScreenshot())
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// get runs one browser action that returns a value.
func get[T any](t *testing.T, ctx context.Context, step string, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", step, err)
	}
	return v
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	return strings.TrimSpace(get(t, ctx, "read "+sel, chromedp.Text(css(sel), chromedp.NodeVisible)))
}

func TestConsoleLogin(t *testing.T) {
	ctx := browser(t)
	srv := startServer(t, t.TempDir())
	base := "http://" + srv.addr

	t.Run("a page without a session goes to /login and back after it", func(t *testing.T) {
		do(t, ctx, "open a page", chromedp.Navigate(base+"/conta/senha?x=1"), chromedp.WaitVisible(css(`input[name=login]`)))
		url := get(t, ctx, "location", chromedp.Location())
		if !strings.Contains(url, "/login?volta=%2Fconta%2Fsenha%3Fx%3D1") {
			t.Fatalf("landed on %s", url)
		}
		screenshot(t, ctx, "login")
		do(t, ctx, "sign in", chromedp.SendKeys(css(`input[name=login]`), "admin"), chromedp.SendKeys(css(`input[name=senha]`), adminPassword),
			chromedp.Click(css(`button[type=submit]`)), chromedp.WaitVisible(css(`nav.menu`)))
		url = get(t, ctx, "location", chromedp.Location())
		if !strings.HasSuffix(url, "/conta/senha?x=1") {
			t.Fatalf("after login landed on %s", url)
		}
	})
	t.Run("a wrong password gets a generic message", func(t *testing.T) {
		ctx, cancel := chromedp.NewContext(ctx) // a fresh tab shares cookies; sign out first
		defer cancel()
		do(t, ctx, "sign out", chromedp.Navigate(base+"/"), chromedp.WaitVisible(css(`nav.menu`)), chromedp.Click(css(`.conta button`)),
			chromedp.WaitVisible(css(signedOut)))
		for _, user := range []string{"admin", "ninguem"} {
			// A fresh form each time: the previous answer's message must not
			// pass for this one's while the page navigates.
			do(t, ctx, "wrong password for "+user, chromedp.Navigate(base+"/login"), chromedp.WaitVisible(css(`input[name=login]`)),
				chromedp.SendKeys(css(`input[name=login]`), user),
				chromedp.SendKeys(css(`input[name=senha]`), "errada-errada"), chromedp.Click(css(`button[type=submit]`)))
			waitText(t, ctx, `.erro-form`, "usuário ou senha incorretos")
			if msg := text(t, ctx, `.erro-form`); msg != "usuário ou senha incorretos" {
				t.Fatalf("%s: message %q", user, msg)
			}
		}
		login := get(t, ctx, "typed login kept", chromedp.Value(css(`input[name=login]`)))
		if login != "ninguem" {
			t.Fatalf("the login field lost what was typed: %q", login)
		}
	})
	t.Run("overview", func(t *testing.T) {
		login(t, ctx, base, "admin", adminPassword)
		do(t, ctx, "overview", chromedp.Navigate(base+"/"), chromedp.WaitVisible(css(`.numeros`)))
		screenshot(t, ctx, "visao-geral")
	})
}

// TestConsoleTour walks every page of a live --demo server, the way an
// operator first meets the console, and saves each at 1366x768 for review.
func TestConsoleTour(t *testing.T) {
	srv := startServer(t, t.TempDir(), "--demo")
	ctx := browser(t)
	base := "http://" + srv.addr
	login(t, ctx, base, "admin", adminPassword)
	// Let the simulator and the jornada trickle put some life in the log.
	deadline := time.Now().Add(60 * time.Second)
	for {
		do(t, ctx, "events", chromedp.Navigate(base+"/eventos"), chromedp.WaitVisible(css(`table`)))
		n := get(t, ctx, "count rows", chromedp.Evaluate[int](`document.querySelectorAll("tr[data-seq], tbody tr:not(.vazio)").length`))
		if n >= 12 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo logged only %d events in 60 s", n)
		}
		do(t, ctx, "wait", chromedp.Sleep(time.Second))
	}
	for _, p := range []struct{ path, name, ready string }{
		{"/", "tour-visao-geral", `.numeros`},
		{"/eventos", "tour-eventos", `table`},
		{"/entregas", "tour-entregas", `table`},
		{"/dlq", "tour-dlq", `main h1`},
		{"/integradores", "tour-integradores", `table`},
		{"/registro", "tour-registro", `table`},
		{"/operadores", "tour-operadores", `table`},
		{"/conta/senha", "tour-senha", `form`},
	} {
		do(t, ctx, "open "+p.path, chromedp.Navigate(base+p.path), chromedp.WaitVisible(css(p.ready)))
		screenshot(t, ctx, p.name)
	}
	// One event and one delivery in detail.
	do(t, ctx, "event detail", chromedp.Navigate(base+"/eventos"), chromedp.WaitVisible(css(`table`)),
		chromedp.Click(css(`tbody tr a[href^="/eventos/"]`)), chromedp.WaitVisible(css(`pre.json`)))
	screenshot(t, ctx, "tour-evento")
	do(t, ctx, "delivery detail", chromedp.Navigate(base+"/entregas"), chromedp.WaitVisible(css(`table`)),
		chromedp.Click(css(`tbody tr a[href^="/entregas/"]`)), chromedp.WaitVisible(css(`main h1`)))
	screenshot(t, ctx, "tour-entrega")
}

// waitText waits until the element shows want: after a form post the old
// page stays on screen until the answer replaces it, so waiting for the
// element alone could read the old text.
func waitText(t *testing.T, ctx context.Context, sel, want string) {
	t.Helper()
	var last string
	waitFor(t, 20*time.Second, fmt.Sprintf("%s to show %q", sel, want), func() (bool, string) {
		// Errors while the page navigates are expected: read again.
		if v, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.querySelector(`+"`"+sel+"`"+`)?.textContent || "")`)); err == nil {
			last = v
		}
		return strings.Contains(last, want), last
	})
}

// consoleServer is an in-process server for a browser test: its address,
// the admin's password, an admin token and a client for the API.
type consoleServer struct {
	m      *Main
	dir    string
	base   string
	senha  string
	admin  string
	client *http.Client
}

func startConsole(t *testing.T) consoleServer {
	t.Helper()
	m, dir, stop := runMain(t)
	t.Cleanup(func() { stop() })
	var out bytes.Buffer
	if err := resetPassword(context.Background(), &out, testDatabase(t, dir), "admin"); err != nil {
		t.Fatal(err)
	}
	return consoleServer{m: m, dir: dir, base: "http://" + m.Addr, senha: lastLine(out.String()),
		admin: mainToken(t, dir, app.PapelAdmin, "montagem"), client: &http.Client{Timeout: 10 * time.Second}}
}

// acceptingCAD is a receiver that answers 204 to every delivery.
func acceptingCAD(t *testing.T) *httptest.Server {
	t.Helper()
	cad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(cad.Close)
	return cad
}

// integrator registers one with its callback at cad, as the admin.
func (s consoleServer) integrator(t *testing.T, nome string, cad *httptest.Server) app.CreatedIntegrator {
	t.Helper()
	var in app.CreatedIntegrator
	json.Unmarshal(apiCall(t, s.client, "POST", s.base+"/api/integradores", s.admin, `{"nome":"`+nome+`","callback_url":"`+
		cad.URL+`/eventos","hosts_permitidos":["127.0.0.1"]}`), &in)
	return in
}

// register registers an ocorrência with an integrator's key.
func (s consoleServer) register(t *testing.T, key, natureza string) string {
	t.Helper()
	status, body, err := command(s.client, s.base, key, "/api/ocorrencias", `{"natureza":"`+natureza+`"}`)
	if err != nil || status != http.StatusCreated {
		t.Fatalf("register: %v %d %s", err, status, body)
	}
	var oc struct{ ID string }
	json.Unmarshal(body, &oc)
	return oc.ID
}
