package console_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"geohub/store/storetest"
)

var (
	envioField = regexp.MustCompile(`name="envio" value="([^"]+)"`)
	apiKeyBox  = regexp.MustCompile(`<code id="api-key">([^<]+)</code>`)
	newID      = regexp.MustCompile(`href="/integradores/([0-9a-f-]{36})"`)
)

// An operator registers a CAD behind NAT from the console, choosing
// delivery by session, and its page then says whether the CAD's session
// is connected, from where, with how many deliveries unanswered of its
// window, and when it ended.
func TestConsoleRegistersASessionIntegratorAndShowsItsSession(t *testing.T) {
	srv := consoleServer(t)
	c := client(t)
	_, csrf := signIn(t, srv, c, "/")

	create := func(values url.Values) (*http.Response, string) {
		_, form := get(t, c, srv.URL+"/integradores/novo")
		m := envioField.FindStringSubmatch(form)
		if m == nil {
			t.Fatalf("no envio token on the form")
		}
		if !strings.Contains(form, `name="entrega" value="sessao"`) {
			t.Fatalf("the form offers no session delivery")
		}
		values.Set("csrf", csrf)
		values.Set("envio", m[1])
		return post(t, c, srv.URL+"/integradores", values)
	}
	if res, page := create(url.Values{"nome": {"CAD sem callback"}, "entrega": {"callback"}}); res.StatusCode != http.StatusUnprocessableEntity ||
		!strings.Contains(page, `id="erro-callback_url"`) {
		t.Fatalf("a callback integrator without a URL: %d", res.StatusCode)
	}
	res, page := create(url.Values{"nome": {"CAD da Guarda"}, "entrega": {"sessao"}, "eventos": {"jornada:*"}})
	key, id := apiKeyBox.FindStringSubmatch(page), newID.FindStringSubmatch(page)
	if res.StatusCode != http.StatusCreated || key == nil || id == nil {
		t.Fatalf("create a session integrator: %d\n%s", res.StatusCode, page)
	}
	if !strings.Contains(page, "/api/sessao") {
		t.Errorf("the created page does not say the key opens the session")
	}

	state := func(path string) string {
		t.Helper()
		_, page := get(t, c, srv.URL+path)
		m := regexp.MustCompile(`data-sessao="([a-z]+)"`).FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("%s shows no session state", path)
		}
		return m[1] + " " + page
	}
	if got := state("/integradores/" + id[1]); !strings.HasPrefix(got, "nunca ") || !strings.Contains(got, "nenhuma sessão desde o cadastro") {
		t.Errorf("before any session the page says %.200s", got)
	} else if strings.Contains(got, "/testar") || strings.Contains(got, `name="hosts_permitidos"`) || strings.Contains(got, `name="callback_url"`) {
		t.Errorf("a session integrator's page offers the receiver tester, or a callback or hosts to edit")
	} else if !strings.Contains(got, "a sessão do CAD é fechada (1008)") {
		t.Errorf("the key rotation's confirmation does not say it ends the session")
	}

	conn, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/api/sessao",
		http.Header{"Authorization": {"Bearer " + key[1]}})
	if err != nil {
		t.Fatal(err)
	}
	var got string
	if !storetest.Poll(10*time.Second, func() bool {
		got = state("/integradores/" + id[1])
		return strings.HasPrefix(got, "conectada ")
	}) {
		t.Fatalf("the page does not show the session connected: %.300s", got)
	}
	if !strings.Contains(got, "127.0.0.1") || !strings.Contains(got, "0 de 16") {
		t.Errorf("the connected session's page lacks its address or its window")
	}
	if list := state("/integradores"); !strings.HasPrefix(list, "conectada ") || !strings.Contains(list, "sessão conectada (0 sem resposta)") {
		t.Errorf("the list does not show the session connected")
	}

	conn.Close()
	if !storetest.Poll(10*time.Second, func() bool {
		got = state("/integradores/" + id[1])
		return strings.HasPrefix(got, "desconectada ")
	}) {
		t.Fatalf("the page does not show the session ended: %.300s", got)
	}
	if !strings.Contains(got, "o CAD fechou a sessão") {
		t.Errorf("the ended session's page does not say why")
	}
}
