package console_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"geohub/app"
	"geohub/app/callback"
	"geohub/app/ocorrencia"
	"geohub/store/storetest"
)

// ocBench is the console over the ocorrência plugin as `geohub serve` wires
// it: a real database, the commands, and the read model kept by its
// in-process consumer, which wakes the live list.
type ocBench struct {
	srv     *httptest.Server
	db      storetest.Store
	svc     *ocorrencia.Service
	metrics *app.Metrics
}

func newOcBench(t *testing.T) *ocBench {
	t.Helper()
	k := storetest.New(t, storetest.Options{
		Deps:         app.Deps{Policy: callback.Policy{Insecure: true}},
		BuiltinTypes: true, AdminPassword: benchAdminPassword,
	})
	c := newEdge(k, nil)
	b := &ocBench{srv: httptest.NewServer(c), db: k.DB, svc: k.Ocorrencias, metrics: k.Metrics}
	t.Cleanup(func() {
		c.CloseTails()
		b.srv.Close()
	})
	return b
}

// signInRole creates an account of papel through the admin's form and
// signs it in, returning its client, CSRF token and account id.
func (b *ocBench) signInRole(t *testing.T, login, papel string) (*http.Client, string, string) {
	t.Helper()
	admin := client(t)
	token := signInAs(t, b.srv, admin, "admin", benchAdminPassword)
	senha := "senha-de-" + login + "-1"
	createOperator(t, b.srv, admin, token, login, papel, senha)
	c := client(t)
	return c, signInAs(t, b.srv, c, login, senha), operatorIDs(t, b.db)[login]
}

// register opens an ocorrência as a CAD would, through the plugin.
func (b *ocBench) register(t *testing.T, natureza string) string {
	t.Helper()
	out, err := b.svc.Register(t.Context(), app.Command{Integrador: "0199bb3e-0000-7000-8000-0000000000ca",
		Solicitacao: uuid.NewString(), Metodo: "POST", Rota: "/api/ocorrencias", Body: []byte(`{"natureza":"` + natureza + `"}`)})
	if err != nil || out.Status != http.StatusCreated {
		t.Fatalf("register: %v %d %s", err, out.Status, out.Body)
	}
	var o ocorrencia.Ocorrencia
	json.Unmarshal(out.Body, &o)
	return o.ID
}

var (
	formOpen      = regexp.MustCompile(`(?s)<form[^>]*method="post"[^>]*action="([^"]+)"[^>]*>(.*?)</form>`)
	solicitacaoIn = regexp.MustCompile(`name="solicitacao" value="([^"]+)"`)
	paraIn        = regexp.MustCompile(`name="para" value="([^"]+)"`)
)

// pageForm is one form of a page: where it posts and what it carries.
type pageForm struct {
	action, solicitacao, para string
}

// forms lists the page's POST forms inside <main>, the layout's sign-out
// aside.
func forms(page string) []pageForm {
	if i := strings.Index(page, "<main"); i >= 0 {
		page = page[i:]
	}
	var out []pageForm
	for _, m := range formOpen.FindAllStringSubmatch(page, -1) {
		f := pageForm{action: m[1]}
		if s := solicitacaoIn.FindStringSubmatch(m[2]); s != nil {
			f.solicitacao = s[1]
		}
		if p := paraIn.FindStringSubmatch(m[2]); p != nil {
			f.para = p[1]
		}
		out = append(out, f)
	}
	return out
}

// formFor finds the form posting to action (with para, when given).
func formFor(t *testing.T, page, action, para string) pageForm {
	t.Helper()
	for _, f := range forms(page) {
		if f.action == action && (para == "" || f.para == para) {
			if f.solicitacao == "" {
				t.Fatalf("the form to %s has no solicitação id", action)
			}
			return f
		}
	}
	t.Fatalf("no form to %s (para %q) on the page; forms: %+v", action, para, forms(page))
	return pageForm{}
}

// submit posts a form of the page and follows the redirect, returning the
// first answer and the page finally shown.
func submit(t *testing.T, b *ocBench, c *http.Client, csrf string, f pageForm, extra url.Values) (*http.Response, string) {
	t.Helper()
	v := url.Values{"csrf": {csrf}, "solicitacao": {f.solicitacao}}
	if f.para != "" {
		v.Set("para", f.para)
	}
	for k, vs := range extra {
		v[k] = vs
	}
	res, body := post(t, c, b.srv.URL+f.action, v)
	if res.StatusCode == http.StatusSeeOther {
		_, body = get(t, c, b.srv.URL+res.Header.Get("Location"))
	}
	return res, body
}

// waitListed waits until the read model lists the ocorrência in status.
func (b *ocBench) waitListed(t *testing.T, id, status string) ocorrencia.Summary {
	t.Helper()
	// Subscribed before the first look: a fold between the two still wakes.
	changed, unsubscribe := b.svc.Changed.Subscribe()
	defer unsubscribe()
	timeout := time.After(storetest.AwaitTimeout)
	for {
		l, err := b.svc.List(t.Context(), ocorrencia.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range l.Linhas {
			if s.ID == id && s.Status == status {
				return s
			}
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("the read model never listed %s as %s: %+v", id, status, l.Linhas)
		}
	}
}

func TestConsoleOcorrenciasLeitorReadsOnly(t *testing.T) {
	b := newOcBench(t)
	id := b.register(t, "incendio")
	b.waitListed(t, id, ocorrencia.Aberta)
	o, _ := b.svc.Get(t.Context(), id, "")
	leitor, csrf, _ := b.signInRole(t, "leitor.lia", "leitor")

	for _, path := range []string{"/ocorrencias", "/ocorrencias/" + id} {
		res, page := get(t, leitor, b.srv.URL+path)
		if res.StatusCode != http.StatusOK || !strings.Contains(page, "incendio") {
			t.Fatalf("%s: %d\n%s", path, res.StatusCode, page)
		}
		if f := forms(page); len(f) != 0 {
			t.Errorf("%s shows a leitor forms: %+v", path, f)
		}
		if strings.Contains(page, "/ocorrencias/nova") {
			t.Errorf("%s offers a leitor to register", path)
		}
	}
	if res, _ := get(t, leitor, b.srv.URL+"/ocorrencias/nova"); res.StatusCode != http.StatusForbidden {
		t.Errorf("GET /ocorrencias/nova as leitor: %d", res.StatusCode)
	}
	for path, form := range map[string]url.Values{
		"/ocorrencias":                               {"natureza": {"alagamento"}},
		"/ocorrencias/" + id + "/despachos":          {"recurso": {"UR-12"}},
		"/ocorrencias/" + id + "/status":             {"para": {"encerrada"}},
		"/ocorrencias/" + id + "/despachos/x/status": {"para": {"no_local"}},
	} {
		form.Set("csrf", csrf)
		form.Set("solicitacao", uuid.NewString())
		if res, _ := post(t, leitor, b.srv.URL+path, form); res.StatusCode != http.StatusForbidden {
			t.Errorf("POST %s as leitor: %d, want 403", path, res.StatusCode)
		}
	}
	if after, _ := b.svc.Get(t.Context(), id, ""); after.Versao != o.Versao {
		t.Fatalf("a leitor's POST changed the ocorrência: versao %d → %d", o.Versao, after.Versao)
	}
}

func TestConsoleOcorrenciasOperadorActs(t *testing.T) {
	b := newOcBench(t)
	op, csrf, opID := b.signInRole(t, "operador.otto", "operador")

	// Register through the form.
	_, page := get(t, op, b.srv.URL+"/ocorrencias")
	if !strings.Contains(page, `href="/ocorrencias/nova"`) {
		t.Fatal("the list offers an operador no way to register")
	}
	_, page = get(t, op, b.srv.URL+"/ocorrencias/nova")
	reg := formFor(t, page, "/ocorrencias", "")
	res, page := submit(t, b, op, csrf, reg, url.Values{"natureza": {"alagamento"}, "descricao": {"rua coberta"},
		"endereco": {"Av. Brasil, 100"}, "lat": {"-22,9056"}, "lng": {"-47,0608"}})
	if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(res.Header.Get("Location"), "/ocorrencias/") {
		t.Fatalf("register: %d %s\n%s", res.StatusCode, res.Header.Get("Location"), page)
	}
	id := strings.TrimPrefix(strings.SplitN(res.Header.Get("Location"), "?", 2)[0], "/ocorrencias/")
	if !strings.Contains(page, "Ocorrência registrada") || !strings.Contains(page, "alagamento") {
		t.Fatalf("the ocorrência's page after registering:\n%s", page)
	}
	// The events pages name the person by login, not by the account's id.
	if _, evs := get(t, op, b.srv.URL+"/eventos?agregado=ocorrencia:"+id); !strings.Contains(evs, "usuário operador.otto") || strings.Contains(evs, "usuário "+opID) {
		t.Errorf("the events list does not name operador.otto")
	}
	t.Run("a double submit of the register form registers once", func(t *testing.T) {
		again, _ := submit(t, b, op, csrf, reg, url.Values{"natureza": {"alagamento"}, "descricao": {"rua coberta"},
			"endereco": {"Av. Brasil, 100"}, "lat": {"-22,9056"}, "lng": {"-47,0608"}})
		if loc := again.Header.Get("Location"); loc != "/ocorrencias/"+id {
			t.Fatalf("the repeat went to %q, want the same ocorrência %s", loc, id)
		}
		if l, _ := b.svc.List(t.Context(), ocorrencia.Filter{}); len(l.Linhas) > 1 {
			t.Fatalf("%d ocorrências after a double submit", len(l.Linhas))
		}
	})

	// Dispatch UR-12, twice with the same form: one despacho.
	disp := formFor(t, page, "/ocorrencias/"+id+"/despachos", "")
	for i := range 2 {
		res, page = submit(t, b, op, csrf, disp, url.Values{"recurso": {"UR-12"}})
		if res.StatusCode != http.StatusSeeOther || !strings.Contains(page, "Recurso UR-12 despachado") {
			t.Fatalf("dispatch #%d: %d\n%s", i+1, res.StatusCode, page)
		}
		if i == 1 && !strings.Contains(page, "executado uma vez só") {
			t.Error("the repeated dispatch does not say it ran once")
		}
	}
	o, err := b.svc.Get(t.Context(), id, "")
	if err != nil || len(o.Despachos) != 1 || o.Despachos[0].Status != ocorrencia.EmDeslocamento {
		t.Fatalf("after a double dispatch: %+v %v", o, err)
	}
	despacho := o.Despachos[0].ID
	statusAction := "/ocorrencias/" + id + "/despachos/" + despacho + "/status"

	t.Run("only the despacho's valid next statuses are offered", func(t *testing.T) {
		var offered []string
		for _, f := range forms(page) {
			if f.action == statusAction {
				offered = append(offered, f.para)
			}
		}
		if strings.Join(offered, ",") != "no_local,cancelado" {
			t.Fatalf("em_deslocamento offers %v", offered)
		}
	})
	t.Run("a refused transition shows its reason, not a 500", func(t *testing.T) {
		// Closing with UR-12 on its way is refused by the plugin.
		res, body := submit(t, b, op, csrf, formFor(t, page, "/ocorrencias/"+id+"/status", "encerrada"), nil)
		if res.StatusCode != http.StatusConflict || !strings.Contains(body, "Comando recusado") ||
			!strings.Contains(body, "despachos ativos não pode ser encerrada") {
			t.Fatalf("close with an active despacho: %d\n%s", res.StatusCode, body)
		}
		// A stale page's move (liberado straight from em_deslocamento).
		res, body = submit(t, b, op, csrf, pageForm{action: statusAction, solicitacao: uuid.NewString(), para: "liberado"}, nil)
		if res.StatusCode != http.StatusConflict || !strings.Contains(body, "só pode ir para no_local ou cancelado") {
			t.Fatalf("invalid despacho move: %d\n%s", res.StatusCode, body)
		}
		// An empty recurso comes back beside its field.
		res, body = submit(t, b, op, csrf, pageForm{action: "/ocorrencias/" + id + "/despachos", solicitacao: uuid.NewString()},
			url.Values{"recurso": {"  "}})
		if res.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, `id="erro-recurso"`) {
			t.Fatalf("empty recurso: %d\n%s", res.StatusCode, body)
		}
		if after, _ := b.svc.Get(t.Context(), id, ""); after.Versao != o.Versao {
			t.Fatalf("refused commands changed the ocorrência: versao %d → %d", o.Versao, after.Versao)
		}
	})

	// Arrival: the despacho is no_local and the ocorrência em_atendimento.
	res, page = submit(t, b, op, csrf, formFor(t, page, statusAction, "no_local"), nil)
	if res.StatusCode != http.StatusSeeOther || !strings.Contains(page, "UR-12 chegou ao local") {
		t.Fatalf("arrival: %d\n%s", res.StatusCode, page)
	}
	res, page = submit(t, b, op, csrf, formFor(t, page, statusAction, "liberado"), nil)
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("release: %d\n%s", res.StatusCode, page)
	}
	if f := forms(page); len(f) == 0 {
		t.Fatal("no forms after release")
	}
	for _, f := range forms(page) {
		if f.action == "/ocorrencias/"+id+"/status" && f.para != "encerrada" {
			t.Errorf("em_atendimento offers %q", f.para)
		}
	}
	res, page = submit(t, b, op, csrf, formFor(t, page, "/ocorrencias/"+id+"/status", "encerrada"), nil)
	if res.StatusCode != http.StatusSeeOther || !strings.Contains(page, "Ocorrência encerrada") {
		t.Fatalf("close: %d\n%s", res.StatusCode, page)
	}
	for _, f := range forms(page) {
		if strings.HasPrefix(f.action, "/ocorrencias/") {
			t.Errorf("a closed ocorrência still offers %s %s", f.action, f.para)
		}
	}

	o, _ = b.svc.Get(t.Context(), id, "")
	if o.Status != ocorrencia.Encerrada || o.Despachos[0].Status != ocorrencia.Liberado {
		t.Fatalf("final state %+v", o)
	}
	t.Run("every event names the operador as its author, and the page links each", func(t *testing.T) {
		evs, _, err := b.db.Events(t.Context(), app.EventFilter{Agregado: "ocorrencia:" + id, Limite: 100})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 6 { // registrada, despachada, 2 despacho-mudou-status, 2 mudou-status
			t.Fatalf("%d events", len(evs))
		}
		for _, ev := range evs {
			if ev.Autoria == nil || ev.Autoria.Tipo != "usuario" || ev.Autoria.ID != opID {
				t.Errorf("%s autoria %+v, want usuario %s", ev.Tipo, ev.Autoria, opID)
			}
			if !strings.Contains(page, `href="/eventos/`+ev.EventID+`"`) {
				t.Errorf("the page does not link %s", ev.EventID)
			}
		}
		if !strings.Contains(page, "usuário operador.otto") {
			t.Error("the events do not name the operator by login")
		}
	})
	t.Run("the list shows it with its despacho", func(t *testing.T) {
		b.waitListed(t, id, ocorrencia.Encerrada)
		_, list := get(t, op, b.srv.URL+"/ocorrencias?status=encerrada")
		if !strings.Contains(list, `data-id="`+id+`"`) || !strings.Contains(list, "UR-12") || !strings.Contains(list, "Liberado") {
			t.Fatalf("list:\n%s", list)
		}
		if _, list = get(t, op, b.srv.URL+"/ocorrencias?status=aberta"); strings.Contains(list, `data-id="`+id+`"`) {
			t.Fatal("status=aberta lists a closed ocorrência")
		}
	})
}

func TestConsoleOcorrenciasListIsLive(t *testing.T) {
	b := newOcBench(t)
	first := b.register(t, "incendio")
	b.waitListed(t, first, ocorrencia.Aberta)
	op, _, _ := b.signInRole(t, "operador.olga", "operador")

	_, page := get(t, op, b.srv.URL+"/ocorrencias?natureza=incendio")
	if !strings.Contains(page, `data-vivo="/ws/ocorrencias?natureza=incendio"`) {
		t.Fatalf("the list has no live socket with its filter:\n%s", page)
	}
	u := "ws" + strings.TrimPrefix(b.srv.URL, "http") + "/ws/ocorrencias?natureza=incendio"
	ws, _, err := (&websocket.Dialer{Jar: op.Jar, HandshakeTimeout: 5 * time.Second}).Dial(u, http.Header{"Origin": {b.srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	read := func(want string) string {
		t.Helper()
		return readRows(t, ws, want)
	}
	read(`data-id="` + first + `"`) // the state at once, on connect

	second := b.register(t, "incendio")
	rows := read(`data-id="` + second + `"`)
	if strings.Index(rows, second) > strings.Index(rows, first) {
		t.Error("the new ocorrência is not on top")
	}
	other := b.register(t, "alagamento") // outside the filter: no message for it
	b.waitListed(t, other, ocorrencia.Aberta)

	out, err := b.svc.Dispatch(t.Context(), app.Command{Operador: "teste", Solicitacao: uuid.NewString(), Metodo: "POST",
		Rota: "/api/ocorrencias/" + first + "/despachos", Body: []byte(`{"recurso":{"identificador":"ABT-03"}}`)}, first)
	if err != nil || out.Status != http.StatusCreated {
		t.Fatalf("dispatch: %v %d %s", err, out.Status, out.Body)
	}
	rows = read("ABT-03")
	if strings.Contains(rows, other) {
		t.Fatal("the live rows ignore the page's filter")
	}
	if !strings.Contains(rows, "Em deslocamento") {
		t.Fatalf("the despacho's status is missing:\n%s", rows)
	}
}

// Sockets showing the same list share its reads: one render per change for
// all of them, whatever their sessions (issue 26, M1), where each socket
// used to read and render the whole list on every change.
func TestConsoleLiveListRendersOncePerChange(t *testing.T) {
	b := newOcBench(t)
	first := b.register(t, "incendio")
	b.waitListed(t, first, ocorrencia.Aberta)
	renders := func() float64 { return testutil.ToFloat64(b.metrics.LiveRenders.WithLabelValues("ocorrencias")) }
	const same = 6
	var socks []*websocket.Conn
	for i := range same + 1 {
		c, _, _ := b.signInRole(t, fmt.Sprintf("leitor.%d", i), "leitor")
		q := "?natureza=incendio"
		if i == same {
			q = "?natureza=alagamento" // another view: a read of its own
		}
		u := "ws" + strings.TrimPrefix(b.srv.URL, "http") + "/ws/ocorrencias" + q
		ws, _, err := (&websocket.Dialer{Jar: c.Jar, HandshakeTimeout: 5 * time.Second}).Dial(u, http.Header{"Origin": {b.srv.URL}})
		if err != nil {
			t.Fatal(err)
		}
		defer ws.Close()
		socks = append(socks, ws)
	}
	for _, ws := range socks[:same] {
		readRows(t, ws, first)
	}
	before := renders()
	second := b.register(t, "incendio")
	for _, ws := range socks[:same] {
		readRows(t, ws, second)
	}
	// A change may wake a view twice (the log and the read model); each
	// of the two views reads at most that often, not once per socket.
	if n := renders() - before; n > 4 {
		t.Fatalf("%d sockets on two views cost %.0f renders for one change", same+1, n)
	}
}

func TestConsoleOcorrenciasRegisterFormFindings(t *testing.T) {
	b := newOcBench(t)
	op, csrf, _ := b.signInRole(t, "operador.ana", "operador")
	_, page := get(t, op, b.srv.URL+"/ocorrencias/nova")
	reg := formFor(t, page, "/ocorrencias", "")
	for name, c := range map[string]struct {
		form  url.Values
		field string
	}{
		"no natureza":       {url.Values{"natureza": {" "}}, "natureza"},
		"half a point":      {url.Values{"natureza": {"incendio"}, "lat": {"-22.9"}}, "lng"},
		"not a number":      {url.Values{"natureza": {"incendio"}, "lat": {"norte"}, "lng": {"-47"}}, "lat"},
		"out of range":      {url.Values{"natureza": {"incendio"}, "lat": {"-122.9"}, "lng": {"-47"}}, "lat"},
		"natureza too long": {url.Values{"natureza": {strings.Repeat("x", 61)}}, "natureza"},
	} {
		f := reg
		f.solicitacao = uuid.NewString()
		res, body := submit(t, b, op, csrf, f, c.form)
		if res.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, fmt.Sprintf(`id="erro-%s"`, c.field)) {
			t.Errorf("%s: %d, want 422 with erro-%s\n%s", name, res.StatusCode, c.field, body)
		}
	}
	if l, _ := b.svc.List(t.Context(), ocorrencia.Filter{}); len(l.Linhas) != 0 {
		t.Fatalf("invalid forms registered %d ocorrências", len(l.Linhas))
	}
}

// A live list with a filter that is not valid closes with 4400 and the
// reason, as a refusal: it used to close 1011 and log an ERROR per
// connection, one a script could repeat at will (issue 26, I6).
func TestLiveListWithABadFilterIsRefused(t *testing.T) {
	b := newOcBench(t)
	c, _, _ := b.signInRole(t, "leitor.filtro", "leitor")
	u := "ws" + strings.TrimPrefix(b.srv.URL, "http") + "/ws/ocorrencias?status=bogus"
	ws, _, err := (&websocket.Dialer{Jar: c.Jar, HandshakeTimeout: 5 * time.Second}).Dial(u, http.Header{"Origin": {b.srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, _, err = ws.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != 4400 || !strings.Contains(ce.Text, "filtro") {
		t.Fatalf("want a 4400 close naming the filter, got %v", err)
	}
}

// readRows reads a live list's messages until its rows hold want, and
// returns them.
func readRows(t *testing.T, ws *websocket.Conn, want string) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ws.SetReadDeadline(deadline)
		var m struct{ Partes map[string]string }
		if err := ws.ReadJSON(&m); err != nil {
			t.Fatalf("waiting for %q: %v", want, err)
		}
		if strings.Contains(m.Partes["linhas"], want) {
			return m.Partes["linhas"]
		}
	}
}
