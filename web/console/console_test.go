package console_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"geohub/app"
	"geohub/store"
	"geohub/web/console"
)

// consoleServer is the console alone on a real database, with an admin.
func consoleServer(t *testing.T) *httptest.Server {
	t.Helper()
	db, err := store.Open(t.Context(), filepath.Join(t.TempDir(), store.FileName), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, _, err := (&app.Auth{Store: db, Now: time.Now}).EnsureAdmin(t.Context(), "senha-do-admin-1"); err != nil {
		t.Fatal(err)
	}
	c := &console.Console{Sessions: &app.Sessions{Store: db, Now: time.Now, CSRFKey: app.DeriveCSRFKey(make([]byte, 32))},
		Stats: &app.Stats{Store: db, Now: time.Now}, Logger: slog.New(slog.DiscardHandler), Now: time.Now}
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(srv.Close)
	return srv
}

// client is a browser without JavaScript: cookies kept, redirects not
// followed, so each answer can be checked.
func client(t *testing.T) *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

func get(t *testing.T, c *http.Client, u string) (*http.Response, string) {
	t.Helper()
	res, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

func post(t *testing.T, c *http.Client, u string, form url.Values) (*http.Response, string) {
	t.Helper()
	res, err := c.PostForm(u, form)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// signIn logs in as admin and returns the session's CSRF token.
func signIn(t *testing.T, srv *httptest.Server, c *http.Client, back string) (*http.Response, string) {
	t.Helper()
	_, page := get(t, c, srv.URL+"/login")
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no csrf on the login page: %s", page)
	}
	res, _ := post(t, c, srv.URL+"/login", url.Values{"csrf": {m[1]}, "login": {"admin"}, "senha": {"senha-do-admin-1"}, "volta": {back}})
	_, home := get(t, c, srv.URL+"/")
	m = csrfField.FindStringSubmatch(home)
	if m == nil {
		t.Fatalf("no csrf after login: %s", home)
	}
	return res, m[1]
}

func TestConsoleSessionsAndCSRF(t *testing.T) {
	srv := consoleServer(t)

	t.Run("a page without a session goes to /login, remembering where to return", func(t *testing.T) {
		res, _ := get(t, client(t), srv.URL+"/conta/senha?x=1")
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/login?volta=%2Fconta%2Fsenha%3Fx%3D1" {
			t.Fatalf("%d %s", res.StatusCode, res.Header.Get("Location"))
		}
	})
	t.Run("the login form refuses a post without its CSRF cookie", func(t *testing.T) {
		res, _ := post(t, client(t), srv.URL+"/login", url.Values{"login": {"admin"}, "senha": {"senha-do-admin-1"}})
		if res.StatusCode != http.StatusForbidden {
			t.Fatalf("login without CSRF: %d", res.StatusCode)
		}
	})
	t.Run("login returns only to console paths", func(t *testing.T) {
		for back, want := range map[string]string{"/dlq": "/dlq", "//evil.example/x": "/", "https://evil.example": "/", "/\\evil": "/",
			"/\t/evil.example": "/", "/\n/evil.example": "/"} {
			res, _ := signIn(t, srv, client(t), back)
			if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != want {
				t.Errorf("volta=%q went to %q, want %q", back, res.Header.Get("Location"), want)
			}
		}
	})
	t.Run("the session cookie is HttpOnly and SameSite=Strict", func(t *testing.T) {
		c := client(t)
		_, page := get(t, c, srv.URL+"/login")
		m := csrfField.FindStringSubmatch(page)
		res, _ := post(t, c, srv.URL+"/login", url.Values{"csrf": {m[1]}, "login": {"admin"}, "senha": {"senha-do-admin-1"}})
		set := strings.Join(res.Header.Values("Set-Cookie"), "\n")
		if !strings.Contains(set, "geohub_sessao=gs_") || !strings.Contains(set, "HttpOnly") || !strings.Contains(set, "SameSite=Strict") {
			t.Fatalf("Set-Cookie: %s", set)
		}
	})
	t.Run("a state-changing form without the session's CSRF token is 403", func(t *testing.T) {
		c := client(t)
		_, token := signIn(t, srv, c, "/")
		for _, bad := range []string{"", "00", strings.Repeat("a", len(token))} {
			res, _ := post(t, c, srv.URL+"/sair", url.Values{"csrf": {bad}})
			if res.StatusCode != http.StatusForbidden {
				t.Fatalf("csrf %q: %d", bad, res.StatusCode)
			}
		}
		res, _ := post(t, c, srv.URL+"/sair", url.Values{"csrf": {token}})
		if res.StatusCode != http.StatusSeeOther {
			t.Fatalf("logout with the token: %d", res.StatusCode)
		}
		if res, _ := get(t, c, srv.URL+"/"); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("the session survived logout: %d", res.StatusCode)
		}
	})
	t.Run("an invalid password change keeps the form and says why beside the field", func(t *testing.T) {
		c := client(t)
		_, token := signIn(t, srv, c, "/")
		res, body := post(t, c, srv.URL+"/conta/senha", url.Values{"csrf": {token}, "atual": {"senha-do-admin-1"}, "nova": {"curta"}, "confirma": {"curta"}})
		if res.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, `id="erro-nova"`) {
			t.Fatalf("%d %s", res.StatusCode, body)
		}
	})
	t.Run("logging in again ends the browser's previous session", func(t *testing.T) {
		c := client(t)
		signIn(t, srv, c, "/")
		u, _ := url.Parse(srv.URL)
		var old *http.Cookie
		for _, ck := range c.Jar.Cookies(u) {
			if ck.Name == "geohub_sessao" {
				old = ck
			}
		}
		signIn(t, srv, c, "/")
		stale := client(t)
		stale.Jar.SetCookies(u, []*http.Cookie{old})
		if res, _ := get(t, stale, srv.URL+"/"); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("the replaced session still opens pages: %d", res.StatusCode)
		}
	})
	t.Run("only the console's own confirmations are shown", func(t *testing.T) {
		c := client(t)
		signIn(t, srv, c, "/")
		_, body := get(t, c, srv.URL+"/?ok="+url.QueryEscape("Sua senha expirou: ligue para 0800"))
		if strings.Contains(body, "0800") {
			t.Fatal("a crafted ?ok= message was shown as a confirmation")
		}
	})
	t.Run("every page carries a strict CSP", func(t *testing.T) {
		res, _ := get(t, client(t), srv.URL+"/login")
		if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || strings.Contains(csp, "unsafe-inline") {
			t.Fatalf("CSP %q", csp)
		}
	})
}
