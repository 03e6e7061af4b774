package console_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"geohub/app"
	"geohub/store/storetest"
	"geohub/web"
	"geohub/web/proxy"
)

// consoleServer is the console alone on a real database, with an admin.
func consoleServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv, _ := consoleServerDB(t)
	return srv
}

func consoleServerDB(t *testing.T) (*httptest.Server, storetest.Store) {
	t.Helper()
	k := storetest.New(t, storetest.Options{AdminPassword: "senha-do-admin-1"})
	srv := httptest.NewServer(newEdge(k, nil))
	t.Cleanup(srv.Close)
	return srv, k.DB
}

// newEdge is the server's HTTP edge as `geohub serve` builds it, on the
// kit's services, believing proxies' forwarding headers.
func newEdge(k *storetest.Kit, proxies proxy.Trusted) *web.Handler {
	return web.NewHandler(k.Services, web.Options{Ocorrencias: k.Ocorrencias, TrustedProxies: proxies})
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
	res, _ := tryLogin(t, srv, c, "admin", "senha-do-admin-1", back)
	_, home := get(t, c, srv.URL+"/")
	m := csrfField.FindStringSubmatch(home)
	if m == nil {
		t.Fatalf("no csrf after login: %s", home)
	}
	return res, m[1]
}

// tryLogin submits the login form and returns the answer and its page.
func tryLogin(t *testing.T, srv *httptest.Server, c *http.Client, login, senha, back string) (*http.Response, string) {
	t.Helper()
	_, page := get(t, c, srv.URL+"/login")
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no csrf on the login page: %s", page)
	}
	return post(t, c, srv.URL+"/login", url.Values{"csrf": {m[1]}, "login": {login}, "senha": {senha}, "volta": {back}})
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
	t.Run("a password change reports every field at once", func(t *testing.T) {
		c := client(t)
		_, token := signIn(t, srv, c, "/")
		_, body := post(t, c, srv.URL+"/conta/senha", url.Values{"csrf": {token}, "atual": {"nao-e-esta-1"}, "nova": {"curta"}, "confirma": {"curta"}})
		if !strings.Contains(body, `id="erro-nova"`) || !strings.Contains(body, `id="erro-atual"`) {
			t.Fatalf("a wrong current password hid the weak new one: %s", body)
		}
		_, body = post(t, c, srv.URL+"/conta/senha", url.Values{"csrf": {token}, "atual": {"senha-do-admin-1"}, "nova": {"curta"}, "confirma": {"curto"}})
		if !strings.Contains(body, `id="erro-nova"`) || !strings.Contains(body, `id="erro-confirma"`) {
			t.Fatalf("a mismatched confirmation hid the weak new password: %s", body)
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

var activeForm = regexp.MustCompile(`action="/operadores/([^/"]+)/ativo"`)

// signInAs logs in as login, checks the console opens, and returns the
// session's CSRF token.
func signInAs(t *testing.T, srv *httptest.Server, c *http.Client, login, senha string) string {
	t.Helper()
	if res, _ := tryLogin(t, srv, c, login, senha, "/"); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("%s's login: %d", login, res.StatusCode)
	}
	res, home := get(t, c, srv.URL+"/")
	m := csrfField.FindStringSubmatch(home)
	if res.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("%s's first page: %d", login, res.StatusCode)
	}
	return m[1]
}

// adminPost is one admin's form post: who, with which form token, where.
type adminPost struct {
	c    *http.Client
	csrf string
	path string
}

// postTogether sends the posts at once and returns their statuses, sorted
// (0 for a transport error).
func postTogether(srv *httptest.Server, form url.Values, posts ...adminPost) []int {
	codes := make(chan int, len(posts))
	for _, p := range posts {
		go func() {
			f := url.Values{"csrf": {p.csrf}}
			for k, v := range form {
				f[k] = v
			}
			res, err := p.c.PostForm(srv.URL+p.path, f)
			if err != nil {
				codes <- 0
				return
			}
			res.Body.Close()
			codes <- res.StatusCode
		}()
	}
	got := make([]int, len(posts))
	for i := range got {
		got[i] = <-codes
	}
	slices.Sort(got)
	return got
}

// operatorIDs maps each login to its account id.
func operatorIDs(t *testing.T, db storetest.Store) map[string]string {
	t.Helper()
	ops, err := db.Operators(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for _, o := range ops {
		ids[o.Login] = o.ID
	}
	return ids
}

// createOperator adds an account through the console's form.
func createOperator(t *testing.T, srv *httptest.Server, admin *http.Client, csrf, login, papel, senha string) {
	t.Helper()
	if res, body := post(t, admin, srv.URL+"/operadores", url.Values{"csrf": {csrf}, "login": {login}, "papel": {papel},
		"senha": {senha}, "confirma": {senha}}); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("create %s: %d %s", login, res.StatusCode, body)
	}
}

func activeAdmins(t *testing.T, db storetest.Store) int {
	t.Helper()
	ops, err := db.Operators(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, o := range ops {
		if o.Papel == app.PapelAdmin && o.Ativo {
			n++
		}
	}
	return n
}

func TestOperatorDeactivation(t *testing.T) {
	srv, db := consoleServerDB(t)
	admin := client(t)
	_, csrf := signIn(t, srv, admin, "/")
	if res, body := post(t, admin, srv.URL+"/operadores", url.Values{"csrf": {csrf}, "login": {"fulana"}, "papel": {"operador"},
		"senha": {"senha-da-fulana-1"}, "confirma": {"senha-da-fulana-1"}}); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("create operator: %d %s", res.StatusCode, body)
	}
	fulana := client(t)
	signInAs(t, srv, fulana, "fulana", "senha-da-fulana-1")

	// One form, fulana's: nobody gets a button for their own account.
	_, page := get(t, admin, srv.URL+"/operadores")
	forms := activeForm.FindAllStringSubmatch(page, -1)
	if len(forms) != 1 {
		t.Fatalf("%d enable/disable forms for two accounts, want 1 (not the admin's own)", len(forms))
	}
	id := forms[0][1]
	setActive := func(c *http.Client, id, ativo string) (*http.Response, string) {
		return post(t, c, srv.URL+"/operadores/"+id+"/ativo", url.Values{"csrf": {csrf}, "ativo": {ativo}})
	}
	if res, body := setActive(admin, id, "nao"); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("deactivate: %d %s", res.StatusCode, body)
	}

	t.Run("a deactivated operator's session ends at once", func(t *testing.T) {
		res, _ := get(t, fulana, srv.URL+"/")
		if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(res.Header.Get("Location"), "/login") {
			t.Fatalf("fulana after deactivation: %d %s", res.StatusCode, res.Header.Get("Location"))
		}
	})
	t.Run("the login is refused, and says why only to who knows the password", func(t *testing.T) {
		res, body := tryLogin(t, srv, client(t), "fulana", "senha-da-fulana-1", "/")
		if res.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "desativada") {
			t.Fatalf("login of a deactivated account: %d, says desativada: %v", res.StatusCode, strings.Contains(body, "desativada"))
		}
		res, body = tryLogin(t, srv, client(t), "fulana", "senha-errada-123", "/")
		if res.StatusCode != http.StatusUnauthorized || strings.Contains(body, "desativada") {
			t.Fatalf("wrong password on a deactivated account: %d, says desativada: %v", res.StatusCode, strings.Contains(body, "desativada"))
		}
	})
	t.Run("the list shows it", func(t *testing.T) {
		_, page := get(t, admin, srv.URL+"/operadores")
		if !strings.Contains(page, "desativada") || !strings.Contains(page, `value="sim"`) {
			t.Fatal("the list does not show the account as deactivated with a Reativar button")
		}
	})
	t.Run("nobody deactivates their own account", func(t *testing.T) {
		ops, err := db.Operators(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		var adminID string
		for _, o := range ops {
			if o.Login == "admin" {
				adminID = o.ID
			}
		}
		if res, _ := setActive(admin, adminID, "nao"); res.StatusCode != http.StatusConflict {
			t.Fatalf("self-deactivation: %d", res.StatusCode)
		}
		if res, _ := get(t, admin, srv.URL+"/"); res.StatusCode != http.StatusOK {
			t.Fatalf("the admin lost the session: %d", res.StatusCode)
		}
	})
	t.Run("an unknown account is 404", func(t *testing.T) {
		if res, _ := setActive(admin, "nao-existe", "nao"); res.StatusCode != http.StatusNotFound {
			t.Fatalf("unknown id: %d", res.StatusCode)
		}
	})
	t.Run("reactivated, the operator signs in again", func(t *testing.T) {
		if res, body := setActive(admin, id, "sim"); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("reactivate: %d %s", res.StatusCode, body)
		}
		signInAs(t, srv, client(t), "fulana", "senha-da-fulana-1")
	})
	t.Run("a form without sim or nao changes nothing", func(t *testing.T) {
		if res, _ := post(t, admin, srv.URL+"/operadores/"+id+"/ativo", url.Values{"csrf": {csrf}}); res.StatusCode != http.StatusUnprocessableEntity {
			t.Fatalf("no ativo field: %d", res.StatusCode)
		}
		signInAs(t, srv, client(t), "fulana", "senha-da-fulana-1") // still active
	})
	t.Run("two admins deactivating each other at once leave one of them active", func(t *testing.T) {
		if res, body := post(t, admin, srv.URL+"/operadores", url.Values{"csrf": {csrf}, "login": {"beltrano"}, "papel": {"admin"},
			"senha": {"senha-do-beltrano-1"}, "confirma": {"senha-do-beltrano-1"}}); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("create a second admin: %d %s", res.StatusCode, body)
		}
		other := client(t)
		otherCSRF := signInAs(t, srv, other, "beltrano", "senha-do-beltrano-1")
		ids := operatorIDs(t, db)
		// One succeeds; the other either finds its own session gone (303
		// to /login) or its account no longer an active admin (403).
		got := postTogether(srv, url.Values{"ativo": {"nao"}},
			adminPost{admin, csrf, "/operadores/" + ids["beltrano"] + "/ativo"},
			adminPost{other, otherCSRF, "/operadores/" + ids["admin"] + "/ativo"})
		if active := activeAdmins(t, db); active != 1 {
			t.Fatalf("%d active admins after a mutual deactivation (answers %v), want 1", active, got)
		}
	})
	t.Run("an operador cannot deactivate anyone", func(t *testing.T) {
		c := client(t)
		token := signInAs(t, srv, c, "fulana", "senha-da-fulana-1")
		res, _ := post(t, c, srv.URL+"/operadores/"+id+"/ativo", url.Values{"csrf": {token}, "ativo": {"nao"}})
		if res.StatusCode != http.StatusForbidden {
			t.Fatalf("an operador's deactivation: %d", res.StatusCode)
		}
	})
}

var passwordForm = regexp.MustCompile(`action="/operadores/([^"/]+)/senha"`)
var newPassword = regexp.MustCompile(`<code id="senha-nova">([^<]+)</code>`)

func TestOperatorPasswordReset(t *testing.T) {
	srv, db := consoleServerDB(t)
	admin := client(t)
	_, csrf := signIn(t, srv, admin, "/")
	createOperator(t, srv, admin, csrf, "fulana", "operador", "senha-de-fulana")
	createOperator(t, srv, admin, csrf, "sicrano", "leitor", "senha-de-sicrano")
	ids := operatorIDs(t, db)
	fulana := client(t)
	signInAs(t, srv, fulana, "fulana", "senha-de-fulana")
	reset := func(c *http.Client, csrf, id string) (*http.Response, string) {
		return post(t, c, srv.URL+"/operadores/"+id+"/senha", url.Values{"csrf": {csrf}})
	}

	_, page := get(t, admin, srv.URL+"/operadores")
	if forms := passwordForm.FindAllStringSubmatch(page, -1); len(forms) != 2 || slices.ContainsFunc(forms, func(m []string) bool { return m[1] == ids["admin"] }) {
		t.Fatalf("reset forms %v: want one per other account, none for the admin's own", forms)
	}
	res, body := reset(admin, csrf, ids["fulana"])
	m := newPassword.FindStringSubmatch(body)
	if res.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("reset: %d %s", res.StatusCode, body)
	}
	if cc := res.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("the page with the password is cacheable: %q", cc)
	}
	t.Run("the old session and the old password stop, the new one signs in", func(t *testing.T) {
		if res, _ := get(t, fulana, srv.URL+"/"); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("fulana's session after the reset: %d", res.StatusCode)
		}
		if res, _ := tryLogin(t, srv, client(t), "fulana", "senha-de-fulana", "/"); res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("the old password: %d", res.StatusCode)
		}
		signInAs(t, srv, client(t), "fulana", m[1])
	})
	t.Run("nobody resets their own password here", func(t *testing.T) {
		if res, _ := reset(admin, csrf, ids["admin"]); res.StatusCode != http.StatusConflict {
			t.Fatalf("self-reset: %d", res.StatusCode)
		}
		signInAs(t, srv, client(t), "admin", "senha-do-admin-1")
	})
	t.Run("an unknown account is 404", func(t *testing.T) {
		if res, _ := reset(admin, csrf, "nao-existe"); res.StatusCode != http.StatusNotFound {
			t.Fatalf("unknown id: %d", res.StatusCode)
		}
	})
	t.Run("only admins, and only with the form's CSRF token", func(t *testing.T) {
		leitor := client(t)
		leitorCSRF := signInAs(t, srv, leitor, "sicrano", "senha-de-sicrano")
		if res, _ := reset(leitor, leitorCSRF, ids["fulana"]); res.StatusCode != http.StatusForbidden {
			t.Fatalf("a leitor's reset: %d", res.StatusCode)
		}
		if res, _ := reset(admin, "", ids["sicrano"]); res.StatusCode != http.StatusForbidden {
			t.Fatalf("a reset without CSRF: %d", res.StatusCode)
		}
		signInAs(t, srv, client(t), "sicrano", "senha-de-sicrano") // unchanged
	})
}

func TestOperatorRoleChange(t *testing.T) {
	srv, db := consoleServerDB(t)
	admin := client(t)
	_, csrf := signIn(t, srv, admin, "/")
	createOperator(t, srv, admin, csrf, "fulana", "leitor", "senha-da-fulana-1")
	ids := operatorIDs(t, db)
	fulana := client(t)
	fulanaCSRF := signInAs(t, srv, fulana, "fulana", "senha-da-fulana-1")
	setRole := func(c *http.Client, csrf, id, papel string) (*http.Response, string) {
		return post(t, c, srv.URL+"/operadores/"+id+"/papel", url.Values{"csrf": {csrf}, "papel": {papel}})
	}
	canManage := func() int {
		res, _ := get(t, fulana, srv.URL+"/operadores")
		return res.StatusCode
	}
	if code := canManage(); code != http.StatusForbidden {
		t.Fatalf("a leitor opened /operadores: %d", code)
	}

	t.Run("a promotion applies to the open session at once", func(t *testing.T) {
		if res, body := setRole(admin, csrf, ids["fulana"], "admin"); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("promote: %d %s", res.StatusCode, body)
		}
		if code := canManage(); code != http.StatusOK {
			t.Fatalf("the promoted session on /operadores: %d", code)
		}
	})
	t.Run("nobody changes their own role", func(t *testing.T) {
		if res, _ := setRole(fulana, fulanaCSRF, ids["fulana"], "leitor"); res.StatusCode != http.StatusConflict {
			t.Fatalf("self-demotion: %d", res.StatusCode)
		}
	})
	t.Run("two admins demoting each other at once leave one admin", func(t *testing.T) {
		got := postTogether(srv, url.Values{"papel": {"leitor"}},
			adminPost{admin, csrf, "/operadores/" + ids["fulana"] + "/papel"},
			adminPost{fulana, fulanaCSRF, "/operadores/" + ids["admin"] + "/papel"})
		if admins := activeAdmins(t, db); admins != 1 {
			t.Fatalf("%d admins after a mutual demotion (answers %v), want 1", admins, got)
		}
	})
	t.Run("bad requests change nothing", func(t *testing.T) {
		ops, _ := db.Operators(t.Context())
		var holder *http.Client
		var holderCSRF, other string
		for _, o := range ops {
			if o.Papel == app.PapelAdmin {
				holder, holderCSRF = admin, csrf
				other = ids["fulana"]
				if o.Login == "fulana" {
					holder, holderCSRF, other = fulana, fulanaCSRF, ids["admin"]
				}
			}
		}
		if holder == nil {
			t.Fatal("no admin left to try bad requests with")
		}
		for _, tt := range []struct {
			id, papel string
			want      int
		}{{other, "produtor", http.StatusUnprocessableEntity}, {other, "", http.StatusUnprocessableEntity},
			{"nao-existe", "leitor", http.StatusNotFound}} {
			if res, _ := setRole(holder, holderCSRF, tt.id, tt.papel); res.StatusCode != tt.want {
				t.Errorf("papel %q for %s: %d, want %d", tt.papel, tt.id, res.StatusCode, tt.want)
			}
		}
		if res, _ := setRole(holder, "", other, "admin"); res.StatusCode != http.StatusForbidden {
			t.Errorf("without CSRF: %d", res.StatusCode)
		}
		after, _ := db.Operators(t.Context())
		if !slices.EqualFunc(ops, after, func(a, b app.Operator) bool { return a.Papel == b.Papel }) {
			t.Fatalf("roles changed: %v → %v", ops, after)
		}
	})
}

// forwarded is a browser behind a reverse proxy at 127.0.0.1: the proxy
// adds who the browser is and how it came in.
type forwarded struct {
	from, proto string
}

func (f forwarded) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Forwarded-For", f.from)
	r.Header.Set("X-Forwarded-Proto", f.proto)
	return http.DefaultTransport.RoundTrip(r)
}

func proxiedClient(from, proto string) *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, Transport: forwarded{from, proto},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func TestConsoleBehindATrustedProxy(t *testing.T) {
	k := storetest.New(t, storetest.Options{AdminPassword: "senha-do-admin-1"})
	serve := func(trusted string) *httptest.Server {
		proxies, err := proxy.Parse(trusted)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(newEdge(k, proxies))
		t.Cleanup(srv.Close)
		return srv
	}
	secure := func(res *http.Response) bool {
		for _, ck := range res.Cookies() {
			if ck.Name == "geohub_sessao" || ck.Name == "geohub_csrf_login" {
				return ck.Secure
			}
		}
		t.Fatalf("no console cookie in %v", res.Header["Set-Cookie"])
		return false
	}

	t.Run("behind the proxy, one browser's failed logins do not lock the others out", func(t *testing.T) {
		srv := serve("127.0.0.1")
		guesser := proxiedClient("203.0.113.7", "https")
		for i := range 5 {
			tryLogin(t, srv, guesser, fmt.Sprintf("ninguem-%d", i), "errada-errada", "/")
		}
		if res, _ := tryLogin(t, srv, guesser, "admin", "senha-do-admin-1", "/"); res.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("the guesser's 6th attempt: %d", res.StatusCode)
		}
		other := proxiedClient("203.0.113.8", "https")
		res, _ := tryLogin(t, srv, other, "admin", "senha-do-admin-1", "/")
		if res.StatusCode != http.StatusSeeOther {
			t.Fatalf("another browser behind the same proxy: %d", res.StatusCode)
		}
		if !secure(res) {
			t.Error("the session cookie is not Secure though the browser came in over https")
		}
	})
	t.Run("an untrusted peer's forwarding headers change nothing", func(t *testing.T) {
		srv := serve("")
		res, _ := get(t, proxiedClient("203.0.113.9", "https"), srv.URL+"/login")
		if secure(res) {
			t.Error("a forged X-Forwarded-Proto made the cookie Secure")
		}
		for i := range 5 {
			tryLogin(t, srv, proxiedClient(fmt.Sprintf("198.51.100.%d", i), "http"), fmt.Sprintf("outro-%d", i), "errada-errada", "/")
		}
		if res, _ := tryLogin(t, srv, proxiedClient("198.51.100.99", "http"), "admin", "senha-do-admin-1", "/"); res.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("forged addresses escaped the per-address limit: %d", res.StatusCode)
		}
	})
}
