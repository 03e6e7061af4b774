package console_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"geohub/app"
	"geohub/store/storetest"
	"geohub/web/proxy"
)

// proxiedConsole is the console on a real database behind a trusted
// reverse proxy at 127.0.0.1, so each test chooses the address a browser
// comes from (X-Forwarded-For, see proxiedClient).
func proxiedConsole(t *testing.T) *httptest.Server {
	t.Helper()
	k := storetest.New(t, storetest.Options{AdminPassword: "senha-do-admin-1"})
	proxies, err := proxy.Parse("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(newEdge(k, proxies))
	t.Cleanup(srv.Close)
	return srv
}

// failFiveFrom spends the per-address login budget of from, each guess on
// another login so that no account's own counter is touched.
func failFiveFrom(t *testing.T, srv *httptest.Server, from, tag string) {
	t.Helper()
	for i := range 5 {
		if res, _ := tryLogin(t, srv, proxiedClient(from, "https"), fmt.Sprintf("%s-%d", tag, i), "errada-errada", "/"); res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("guess %d from %s: %d", i, from, res.StatusCode)
		}
	}
}

// retryAfterSeconds checks that a 429 says when to come back, within the
// login window.
func retryAfterSeconds(t *testing.T, res *http.Response) {
	t.Helper()
	n, err := strconv.Atoi(res.Header.Get("Retry-After"))
	if err != nil || n < 1 || n > int((15*time.Minute).Seconds()) {
		t.Fatalf("429 with Retry-After %q, want whole seconds within the 15-minute window", res.Header.Get("Retry-After"))
	}
}

// SPEC 10: login limits count IPv6 clients by /64, IPv4 ones by address.
func TestLoginLimitsCountIPv6ByItsSlash64(t *testing.T) {
	t.Parallel()
	t.Run("a second address of the same /64 is refused with Retry-After", func(t *testing.T) {
		srv := proxiedConsole(t)
		failFiveFrom(t, srv, "2001:db8:7:8::a", "v6")
		res, _ := tryLogin(t, srv, proxiedClient("2001:db8:7:8:ffff:ffff:ffff:fffe", "https"), "admin", "senha-do-admin-1", "/")
		if res.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("another address of the /64, right password: %d, want 429", res.StatusCode)
		}
		retryAfterSeconds(t, res)
		if res, _ := tryLogin(t, srv, proxiedClient("2001:db8:7:9::a", "https"), "admin", "senha-do-admin-1", "/"); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("the next /64 was locked out too: %d", res.StatusCode)
		}
	})
	t.Run("an IPv4-mapped address counts as its IPv4 address, and IPv4 per address", func(t *testing.T) {
		srv := proxiedConsole(t)
		failFiveFrom(t, srv, "::ffff:198.51.100.7", "v4")
		if res, _ := tryLogin(t, srv, proxiedClient("198.51.100.7", "https"), "admin", "senha-do-admin-1", "/"); res.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("the same IPv4 address, unmapped: %d, want 429", res.StatusCode)
		}
		if res, _ := tryLogin(t, srv, proxiedClient("198.51.100.8", "https"), "admin", "senha-do-admin-1", "/"); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("the next IPv4 address was locked out too: %d", res.StatusCode)
		}
	})
}

// The login form's double-submit check must not pass two empty values: a
// cookie set blank (by a sibling subdomain, say) and an empty field.
func TestLoginRefusesAnEmptyCSRFCookieWithAnEmptyToken(t *testing.T) {
	t.Parallel()
	srv := consoleServer(t)
	for _, token := range []string{"", "x"} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/login",
			strings.NewReader(url.Values{"csrf": {token}, "login": {"admin"}, "senha": {"senha-do-admin-1"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Cookie", "geohub_csrf_login=")
		res, err := client(t).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusForbidden {
			t.Fatalf("empty CSRF cookie, token %q: %d, want 403", token, res.StatusCode)
		}
		for _, ck := range res.Cookies() {
			if ck.Name == "geohub_sessao" && ck.Value != "" {
				t.Fatal("a session was opened")
			}
		}
	}
}

// A sibling subdomain can plant the login form's double-submit cookie and
// post the same value: the browser still says the post is not from the
// console (Sec-Fetch-Site, or Origin for older browsers), and nothing runs.
// The same post from the console's own page signs in.
func TestConsoleRefusesPostsFromAnotherSite(t *testing.T) {
	t.Parallel()
	srv := consoleServer(t)
	host := strings.TrimPrefix(srv.URL, "http://")
	for _, c := range []struct {
		name    string
		headers map[string]string
		want    int
	}{
		{"sibling subdomain", map[string]string{"Sec-Fetch-Site": "same-site", "Origin": "http://outro.exemplo.gov.br"}, http.StatusForbidden},
		{"another site", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://atacante.example"}, http.StatusForbidden},
		{"an old browser on another site", map[string]string{"Origin": "https://atacante.example"}, http.StatusForbidden},
		{"the console's own page", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://" + host}, http.StatusSeeOther},
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/login",
			strings.NewReader(url.Values{"csrf": {"plantado"}, "login": {"admin"}, "senha": {"senha-do-admin-1"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Cookie", "geohub_csrf_login=plantado")
		for k, v := range c.headers {
			req.Header.Set(k, v)
		}
		res, err := client(t).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		opened := false
		for _, ck := range res.Cookies() {
			opened = opened || (ck.Name == "geohub_sessao" && ck.Value != "")
		}
		if res.StatusCode != c.want || opened != (c.want == http.StatusSeeOther) {
			t.Errorf("%s: %d (session opened: %v), want %d", c.name, res.StatusCode, opened, c.want)
		}
	}
}

// Every 429 of the console says when to come back: the login limit and the
// limit on wrong current passwords.
func TestConsoleRateLimitsSayRetryAfter(t *testing.T) {
	t.Parallel()
	srv := consoleServer(t)
	c := client(t)
	_, csrf := signIn(t, srv, c, "/")
	var res *http.Response
	for i := range 6 {
		res, _ = post(t, c, srv.URL+"/conta/senha", url.Values{"csrf": {csrf}, "atual": {"errada-errada"},
			"nova": {"outra-senha-boa-1"}, "confirma": {"outra-senha-boa-1"}})
		if i < 5 && res.StatusCode != http.StatusUnprocessableEntity {
			t.Fatalf("wrong current password %d: %d", i, res.StatusCode)
		}
	}
	if res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("the 6th wrong current password: %d, want 429", res.StatusCode)
	}
	retryAfterSeconds(t, res)
}

// /static/ serves the console's files and nothing else: no listing of the
// directory, and a missing file gets the console's own 404 page.
func TestStaticServesFilesOnly(t *testing.T) {
	t.Parallel()
	srv := consoleServer(t)
	for _, path := range []string{"/static/", "/static/nao-existe.css", "/static/console.css/"} {
		res, page := get(t, client(t), srv.URL+path)
		if res.StatusCode != http.StatusNotFound || !strings.Contains(page, "Página não encontrada") ||
			strings.Contains(page, `href="console.css"`) || strings.Contains(page, "404 page not found") {
			t.Fatalf("GET %s: %d %s", path, res.StatusCode, page)
		}
		if res.Header.Get("X-Content-Type-Options") != "nosniff" || res.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("GET %s: headers %v", path, res.Header)
		}
	}
	res, css := get(t, client(t), srv.URL+"/static/console.css")
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/css") || css == "" ||
		res.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("the stylesheet: %d %v", res.StatusCode, res.Header)
	}
}

// An operator refused on the console spends the same refusals as a token on
// the API (issue 26, M3): past them every request of the account is 429 at
// once, and nothing more reaches the audit trail.
func TestConsoleRefusalsAreBoundedPerAccount(t *testing.T) {
	b := newTailBench(t)
	c, csrf := b.operator(t, "leitora", app.PapelLeitor)
	refused := 0
	for range app.RefusalBurst + 5 {
		res, _ := post(t, c, b.srv.URL+"/integradores", url.Values{"csrf": {csrf}, "nome": {"x"}})
		switch res.StatusCode {
		case http.StatusForbidden:
			refused++
		case http.StatusTooManyRequests:
			if res.Header.Get("Retry-After") == "" {
				t.Fatal("a 429 without Retry-After")
			}
		default:
			t.Fatalf("a leitor's admin form: %d", res.StatusCode)
		}
	}
	// The burst, give or take the one the clock brings back meanwhile.
	if refused < app.RefusalBurst-1 || refused > app.RefusalBurst+1 {
		t.Fatalf("%d refusals answered before the 429s, want %d", refused, app.RefusalBurst)
	}
	if res, _ := get(t, c, b.srv.URL+"/eventos"); res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a page past the refusals: %d", res.StatusCode)
	}
}

// Text a caller chose (an integrator's name here) shows on /auditoria with
// its invisible and control characters written as code points: a bidi
// override reordered the row and a line break split it (issue 26, L3).
func TestAuditShowsInvisibleCharacters(t *testing.T) {
	b := newTailBench(t)
	rc, _ := receiver(t, http.StatusNoContent)
	b.integrator(t, "CAD \u202egnp.exe\nsegunda linha\u200b", rc.URL, nil, nil)
	admin, _ := loginAs(t, b, "admin", benchAdminPassword)
	_, page := get(t, admin, b.srv.URL+"/auditoria")
	if !strings.Contains(page, "CAD [U+202E]gnp.exe[U+000A]segunda linha[U+200B]") {
		t.Fatal("the integrator's name is not shown with its controls visible")
	}
	for _, raw := range []string{"\u202e", "\u200b", "gnp.exe\nsegunda"} {
		if strings.Contains(page, raw) {
			t.Fatalf("the page carries %+q raw", raw)
		}
	}
}
