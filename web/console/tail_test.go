package console_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"geohub/app"
	"geohub/app/callback"
	"geohub/store/storetest"
)

// tailBench is the console with everything behind it, wired as `geohub
// serve` wires it: a real database, publisher, dispatcher, consumers (one
// of which fails on demand, to fill the DLQ) and the tails' notifiers.
type tailBench struct {
	srv         *httptest.Server
	pub         *app.Publisher
	sessions    *app.Sessions
	integrators *app.Integrators
	deliveries  *app.Deliveries
	events      *app.Notifier
	failing     atomic.Bool
	// ahead moves every service's clock forward, for tests whose events
	// must fall on either side of a cutoff.
	ahead atomic.Int64
	// What the tests wait on: the dispatcher's rounds and breakers, the
	// consumers' work.
	dispatcher *app.Dispatcher
	consumers  *app.Consumers
}

const benchAdminPassword = "senha-do-admin-1"

func newTailBench(t *testing.T) *tailBench {
	t.Helper()
	b := &tailBench{}
	k := storetest.New(t, storetest.Options{
		Deps: app.Deps{Policy: callback.Policy{Insecure: true}, Version: "teste",
			Now: func() time.Time { return time.Now().Add(time.Duration(b.ahead.Load())) }},
		BuiltinTypes: true, AdminPassword: benchAdminPassword,
		Subscribe: func(c *app.Consumers) {
			c.Subscribe("jornada:encerrada", "folha", "calcula-horas", func(context.Context, app.Event) error {
				if b.failing.Load() {
					return errors.New("banco da folha fora do ar")
				}
				return nil
			})
		},
		Tune: func(s *app.Services) {
			s.Dispatcher.Signals.Recorded.Init()
			s.Dispatcher.Signals.Circuit.Init()
			s.Consumers.Signals.Init()
		},
	})
	b.pub, b.sessions, b.integrators, b.deliveries, b.events = k.Publisher, k.Sessions, k.Integrators, k.Deliveries, k.EventsChanged
	b.dispatcher, b.consumers = k.Dispatcher, k.Consumers
	c := newEdge(k, nil)
	b.srv = httptest.NewServer(c)
	t.Cleanup(func() {
		c.CloseTails()
		b.srv.Close()
	})
	return b
}

// loginAs signs in through the login form and returns the client and the
// session's CSRF token.
func loginAs(t *testing.T, b *tailBench, login, senha string) (*http.Client, string) {
	t.Helper()
	c := client(t)
	_, page := get(t, c, b.srv.URL+"/login")
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no csrf on the login page")
	}
	res, _ := post(t, c, b.srv.URL+"/login", url.Values{"csrf": {m[1]}, "login": {login}, "senha": {senha}})
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("login %s: %d", login, res.StatusCode)
	}
	_, home := get(t, c, b.srv.URL+"/")
	if m = csrfField.FindStringSubmatch(home); m == nil {
		t.Fatalf("no csrf after login as %s", login)
	}
	return c, m[1]
}

func (b *tailBench) publish(t *testing.T, req app.PublishRequest) app.Event {
	t.Helper()
	ev, _, err := b.pub.Publish(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

var jornadas atomic.Int64

func iniciada(origem string) app.PublishRequest {
	return app.PublishRequest{Tipo: "jornada:iniciada", Origem: origem, Payload: json.RawMessage(fmt.Sprintf(
		`{"jornadaId":"0199bb3e-0000-7000-8000-%012d","inicio":"2026-11-30T12:00:00Z","servidor":{"nome":"Ana","cpf":"12345678901"}}`,
		jornadas.Add(1)))}
}

func encerrada() app.PublishRequest {
	return app.PublishRequest{Tipo: "jornada:encerrada", Origem: "rh", Payload: json.RawMessage(fmt.Sprintf(
		`{"jornadaId":"0199bb3e-0000-7000-8000-%012d","fim":"2026-11-30T18:00:00Z"}`, jornadas.Add(1)))}
}

// dialTail opens a tail as the browser does: the session cookie and the
// page's own origin.
func dialTail(t *testing.T, b *tailBench, c *http.Client, path string) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	u := "ws" + strings.TrimPrefix(b.srv.URL, "http") + path
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	if c != nil {
		d.Jar = c.Jar
	}
	return d.Dial(u, http.Header{"Origin": {b.srv.URL}})
}

type tailMsg struct {
	Seq  string `json:"seq"`
	HTML string `json:"html"`
}

func readTail(t *testing.T, ws *websocket.Conn, within time.Duration) (tailMsg, error) {
	t.Helper()
	ws.SetReadDeadline(time.Now().Add(within))
	var m tailMsg
	err := ws.ReadJSON(&m)
	return m, err
}

func TestEventsTail(t *testing.T) {
	b := newTailBench(t)
	admin, _ := loginAs(t, b, "admin", benchAdminPassword)

	t.Run("a new event arrives within a second, filtered on the server", func(t *testing.T) {
		ws, _, err := dialTail(t, b, admin, "/ws/eventos?tipo=jornada:iniciada&origem=rh")
		if err != nil {
			t.Fatal(err)
		}
		defer ws.Close()
		waitSubscribed(t, b.events, 1)
		b.publish(t, iniciada("outra")) // other origem
		b.publish(t, encerrada())       // other tipo
		start := time.Now()
		want := b.publish(t, iniciada("rh"))
		m, err := readTail(t, ws, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("commit → tail message: %v", time.Since(start))
		if m.Seq != fmt.Sprint(want.Sequence) || !strings.Contains(m.HTML, "/eventos/"+want.EventID) ||
			!strings.HasPrefix(m.HTML, "<tr") {
			t.Fatalf("got %+v, want the row of %d", m, want.Sequence)
		}
		if _, err := readTail(t, ws, 300*time.Millisecond); !isTimeout(err) {
			t.Fatalf("a filtered-out event reached the tail: %v", err)
		}
	})

	t.Run("a reconnect resumes after the last line, nothing lost or repeated", func(t *testing.T) {
		first := b.publish(t, iniciada("rh"))
		var missed []string
		for range 3 { // published while no socket is open
			missed = append(missed, fmt.Sprint(b.publish(t, iniciada("rh")).Sequence))
			b.publish(t, encerrada())
		}
		ws, _, err := dialTail(t, b, admin, fmt.Sprintf("/ws/eventos?tipo=jornada:iniciada&de=%d", first.Sequence))
		if err != nil {
			t.Fatal(err)
		}
		defer ws.Close()
		var got []string
		for range missed {
			m, err := readTail(t, ws, 2*time.Second)
			if err != nil {
				t.Fatalf("after %v: %v", got, err)
			}
			got = append(got, m.Seq)
		}
		if strings.Join(got, ",") != strings.Join(missed, ",") {
			t.Fatalf("resumed with %v, want %v", got, missed)
		}
		if m, err := readTail(t, ws, 300*time.Millisecond); !isTimeout(err) {
			t.Fatalf("an extra line after the resume: %+v %v", m, err)
		}
	})

	t.Run("a backlog over one batch arrives whole and in order", func(t *testing.T) {
		before := b.publish(t, encerrada())
		var want []string
		reqs := make([]app.PublishRequest, 450)
		for i := range reqs {
			reqs[i] = iniciada("lote")
		}
		stored, err := b.pub.PublishAll(context.Background(), reqs)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range stored {
			want = append(want, fmt.Sprint(s.Event.Sequence))
		}
		ws, _, err := dialTail(t, b, admin, fmt.Sprintf("/ws/eventos?origem=lote&de=%d", before.Sequence))
		if err != nil {
			t.Fatal(err)
		}
		defer ws.Close()
		for i, w := range want {
			m, err := readTail(t, ws, 2*time.Second)
			if err != nil || m.Seq != w {
				t.Fatalf("line %d: %+v %v, want %s", i, m, err, w)
			}
		}
	})

	t.Run("without a session the socket closes with 4401", func(t *testing.T) {
		ws, _, err := dialTail(t, b, nil, "/ws/eventos")
		if err != nil {
			t.Fatal(err)
		}
		defer ws.Close()
		_, err = readTail(t, ws, 2*time.Second)
		if !websocket.IsCloseError(err, 4401) {
			t.Fatalf("want close 4401, got %v", err)
		}
	})

	t.Run("another origin is refused", func(t *testing.T) {
		u := "ws" + strings.TrimPrefix(b.srv.URL, "http") + "/ws/eventos"
		d := websocket.Dialer{Jar: admin.Jar}
		_, res, err := d.Dial(u, http.Header{"Origin": {"http://evil.example"}})
		if err == nil || res == nil || res.StatusCode != http.StatusForbidden {
			t.Fatalf("cross-origin tail: %v %v", err, res)
		}
	})

	t.Run("a bad cursor is refused before the upgrade", func(t *testing.T) {
		for _, q := range []string{"de=-1", "de=abc", "correlacao_id=nao-e-uuid"} {
			_, res, err := dialTail(t, b, admin, "/ws/eventos?"+q)
			if err == nil || res == nil || res.StatusCode != http.StatusBadRequest {
				t.Fatalf("%s: %v %v", q, err, res)
			}
		}
	})

	t.Run("a client that does not read never slows publishers", func(t *testing.T) {
		ws, _, err := dialTail(t, b, admin, "/ws/eventos?de=0")
		if err != nil {
			t.Fatal(err)
		}
		defer ws.Close()
		start := time.Now()
		reqs := make([]app.PublishRequest, 50)
		for i := range 20 {
			for j := range reqs {
				reqs[j] = iniciada(fmt.Sprintf("lento-%d", i))
			}
			if _, err := b.pub.PublishAll(context.Background(), reqs); err != nil {
				t.Fatal(err)
			}
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("1000 publishes took %v with a stalled tail", d)
		}
	})

	t.Run("a session that ends closes its tails with 4401", func(t *testing.T) {
		c, csrf := loginAs(t, b, "admin", benchAdminPassword)
		ws, _, err := dialTail(t, b, c, "/ws/eventos")
		if err != nil {
			t.Fatal(err)
		}
		defer ws.Close()
		post(t, c, b.srv.URL+"/sair", url.Values{"csrf": {csrf}})
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, err := readTail(t, ws, time.Until(deadline))
			if websocket.IsCloseError(err, 4401) {
				return
			}
			if err != nil {
				t.Fatalf("want close 4401 after logout, got %v", err)
			}
		}
	})
}

func waitSubscribed(t *testing.T, n *app.Notifier, want int) {
	t.Helper()
	storetest.Eventually(t, fmt.Sprintf("%d tails to subscribe", want), func() bool { return n.Subscribers() >= want })
}

func isTimeout(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne) && ne.Timeout()
}

var seqCell = regexp.MustCompile(`<td class="num mono">(\d+)</td>`)

func TestEventsPage(t *testing.T) {
	b := newTailBench(t)
	admin, _ := loginAs(t, b, "admin", benchAdminPassword)
	var evs []app.Event
	for range 5 {
		evs = append(evs, b.publish(t, iniciada("rh")))
	}

	res, page := get(t, admin, b.srv.URL+"/eventos?limite=2")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", res.StatusCode, page)
	}
	var shown []string
	for _, m := range seqCell.FindAllStringSubmatch(page, -1) {
		shown = append(shown, m[1])
	}
	if want := []string{fmt.Sprint(evs[4].Sequence), fmt.Sprint(evs[3].Sequence)}; strings.Join(shown, ",") != strings.Join(want, ",") {
		t.Fatalf("first page shows %v, want the newest first %v", shown, want)
	}
	if !strings.Contains(page, fmt.Sprintf(`data-de="%d"`, evs[4].Sequence)) || !strings.Contains(page, `data-tail="/ws/eventos"`) {
		t.Fatal("the first page must start its tail after its newest row")
	}
	if !strings.Contains(page, fmt.Sprintf("ate=%d&amp;limite=2", evs[3].Sequence-1)) {
		t.Fatal("no keyset link to the older page")
	}
	_, page = get(t, admin, b.srv.URL+fmt.Sprintf("/eventos?limite=2&ate=%d", evs[0].Sequence))
	if shown := seqCell.FindAllStringSubmatch(page, -1); len(shown) != 1 || shown[0][1] != fmt.Sprint(evs[0].Sequence) {
		t.Fatalf("last page: %v", shown)
	}
	if strings.Contains(page, "data-tail=") {
		t.Fatal("an older page must not tail")
	}

	for q, want := range map[string]string{
		"limite=abc":             "use um número de 1 a 500",
		"limite=501":             "use um número de 1 a 500",
		"ate=x":                  "Cursor de página inválido",
		"ate=3&apos=1":           "Cursor de página inválido",
		"event_id=abc":           "deve ser um UUID",
		"timestamp_inicio=ontem": "use dia e hora",
		"correlacao_id=xyz":      "deve ser um UUID",
		"tipo=nao:existe&limite": "Nenhum evento com estes filtros.",
	} {
		_, page := get(t, admin, b.srv.URL+"/eventos?"+q)
		if !strings.Contains(page, want) {
			t.Errorf("%s: the page does not say %q", q, want)
		}
	}

	_, page = get(t, admin, b.srv.URL+"/eventos/"+evs[0].EventID)
	if !strings.Contains(page, `<pre class="json">`) || strings.Contains(page, "Ana") || !strings.Contains(page, "jornadaId") {
		t.Fatalf("detail must show the redacted payload: %s", page)
	}
	if res, _ := get(t, admin, b.srv.URL+"/eventos/0199bb3e-0000-7000-8000-000000000000"); res.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown event: %d", res.StatusCode)
	}
}

// A CAD that answers 400 turns each delivery into a dead letter at once.
func TestDeliveriesPagesAndResend(t *testing.T) {
	b := newTailBench(t)
	var answer atomic.Int32
	answer.Store(http.StatusBadRequest)
	cad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(int(answer.Load()))
		fmt.Fprint(w, `{"erro":"assinatura"}`)
	}))
	defer cad.Close()
	created, err := b.integrators.Create(context.Background(), app.NewIntegrator{Nome: "CAD Bombeiros",
		CallbackURL: cad.URL + "/eventos", HostsPermitidos: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.sessions.CreateOperator(context.Background(), "", "leitora", "senha-da-leitora-1", app.PapelLeitor); err != nil {
		t.Fatal(err)
	}
	admin, adminCSRF := loginAs(t, b, "admin", benchAdminPassword)
	leitora, leitoraCSRF := loginAs(t, b, "leitora", "senha-da-leitora-1")

	tail, _, err := dialTail(t, b, admin, "/ws/entregas?de=0")
	if err != nil {
		t.Fatal(err)
	}
	defer tail.Close()
	ev := b.publish(t, iniciada("rh"))
	m, err := readTail(t, tail, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(m.HTML, "CAD Bombeiros") || !strings.Contains(m.HTML, "HTTP 400") || !strings.Contains(m.HTML, "Falhou") {
		t.Fatalf("attempt line: %s", m.HTML)
	}
	dels, err := b.deliveries.List(context.Background(), app.DeliveryFilter{EventID: ev.EventID})
	if err != nil || len(dels.Linhas) != 1 || dels.Linhas[0].Status != app.EntregaFalhou {
		t.Fatalf("deliveries %+v %v", dels, err)
	}
	d := dels.Linhas[0]
	resendPath := fmt.Sprintf("/entregas/%d/reenviar", d.ID)

	_, page := get(t, admin, b.srv.URL+"/entregas?status=falhou")
	if !strings.Contains(page, `action="`+resendPath+`"`) || !strings.Contains(page, "Reenviar todas as que falharam") {
		t.Fatal("an admin must see the resend buttons")
	}
	_, page = get(t, leitora, b.srv.URL+"/entregas?status=falhou")
	if strings.Contains(page, "/reenviar") || !strings.Contains(page, "#"+fmt.Sprint(d.ID)) {
		t.Fatal("a leitor sees the deliveries but no resend button")
	}
	if res, _ := post(t, leitora, b.srv.URL+resendPath, url.Values{"csrf": {leitoraCSRF}}); res.StatusCode != http.StatusForbidden {
		t.Fatalf("a leitor's forged resend: %d", res.StatusCode)
	}
	if res, _ := post(t, leitora, b.srv.URL+"/entregas/reenviar", url.Values{"csrf": {leitoraCSRF}, "integrador": {created.ID}}); res.StatusCode != http.StatusForbidden {
		t.Fatalf("a leitor's forged bulk resend: %d", res.StatusCode)
	}
	if res, _ := get(t, admin, b.srv.URL+"/entregas?status=perdida"); res.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("a bad status filter: %d", res.StatusCode)
	}
	_, page = get(t, admin, b.srv.URL+fmt.Sprintf("/entregas/%d", d.ID))
	if !strings.Contains(page, "HTTP 400") || !strings.Contains(page, "{&#34;erro&#34;:&#34;assinatura&#34;}") {
		t.Fatalf("the detail shows each attempt and the start of its answer: %s", page)
	}

	answer.Store(http.StatusNoContent)
	res, _ := post(t, admin, b.srv.URL+resendPath, url.Values{"csrf": {adminCSRF}, "volta": {"/entregas?status=falhou&ok=velho"}})
	loc := res.Header.Get("Location")
	if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/entregas?") || strings.Contains(loc, "velho") ||
		!strings.Contains(loc, "status=falhou") || !strings.Contains(loc, "de=1") {
		t.Fatalf("resend: %d %s", res.StatusCode, loc)
	}
	_, page = get(t, admin, b.srv.URL+loc)
	if !strings.Contains(page, fmt.Sprintf("Entrega #%d reenviada", d.ID)) {
		t.Fatal("no confirmation after the resend")
	}
	if !strings.Contains(page, `data-de="1"`) {
		t.Fatal("after a resend the tail must start before the attempt it causes")
	}
	m, err = readTail(t, tail, 5*time.Second)
	if err != nil || !strings.Contains(m.HTML, "Entregue") || !strings.Contains(m.HTML, "HTTP 204") {
		t.Fatalf("the resend's attempt: %+v %v", m, err)
	}
	res, _ = post(t, admin, b.srv.URL+"/entregas/reenviar", url.Values{"csrf": {adminCSRF}, "integrador": {created.ID}})
	if msg := flashOf(t, admin, b.srv.URL, res); !strings.Contains(msg, "Nenhuma entrega com falha para CAD Bombeiros") {
		t.Fatalf("bulk resend with nothing to resend: %s", msg)
	}
}

func TestDLQPageAndReprocess(t *testing.T) {
	b := newTailBench(t)
	if _, err := b.sessions.CreateOperator(context.Background(), "", "leitora", "senha-da-leitora-1", app.PapelLeitor); err != nil {
		t.Fatal(err)
	}
	admin, csrf := loginAs(t, b, "admin", benchAdminPassword)
	leitora, leitoraCSRF := loginAs(t, b, "leitora", "senha-da-leitora-1")
	_, page := get(t, admin, b.srv.URL+"/dlq")
	if !strings.Contains(page, "Nenhuma falha interna pendente") {
		t.Fatal("no empty state")
	}
	b.failing.Store(true)
	b.publish(t, encerrada())
	storetest.Await(t, "the failure on the DLQ page", func() bool {
		_, page = get(t, admin, b.srv.URL+"/dlq")
		return strings.Contains(page, "banco da folha fora do ar")
	}, &b.consumers.Signals.DeadLettered)
	if !strings.Contains(page, `name="colonia" value="folha"`) {
		t.Fatal("an admin must see Reprocessar for the colônia")
	}
	if _, page := get(t, leitora, b.srv.URL+"/dlq"); strings.Contains(page, "/dlq/reprocessar") || !strings.Contains(page, "folha") {
		t.Fatal("a leitor sees the DLQ without the button")
	}
	if res, _ := post(t, leitora, b.srv.URL+"/dlq/reprocessar", url.Values{"csrf": {leitoraCSRF}, "colonia": {"folha"}}); res.StatusCode != http.StatusForbidden {
		t.Fatalf("a leitor's forged reprocess: %d", res.StatusCode)
	}
	b.failing.Store(false)
	res, _ := post(t, admin, b.srv.URL+"/dlq/reprocessar", url.Values{"csrf": {csrf}, "colonia": {"folha"}})
	if msg := flashOf(t, admin, b.srv.URL, res); !strings.Contains(msg, "1 resolvida,") {
		t.Fatalf("reprocess: %s", msg)
	}
	res, page = post(t, admin, b.srv.URL+"/dlq/reprocessar", url.Values{"csrf": {csrf}, "colonia": {"folha"}})
	if res.StatusCode != http.StatusTooManyRequests || !strings.Contains(page, "Tente de novo em") || res.Header.Get("Retry-After") == "" {
		t.Fatalf("a second reprocess within the minute: %d %s", res.StatusCode, page)
	}
	if res, page := post(t, admin, b.srv.URL+"/dlq/reprocessar", url.Values{"csrf": {csrf}, "colonia": {"ninguem"}}); res.StatusCode != http.StatusNotFound ||
		!strings.Contains(page, "não tem consumidores") {
		t.Fatalf("an unknown colônia: %d", res.StatusCode)
	}
}

// The cap and close code of tail.go, as a script sees them.
const (
	maxTailsPerAccount = 32
	closeTooManyTails  = 4429
)

// The cap counts an account's tails whatever its sessions: signing in again
// opens no more (issue 26, M1).
func TestTailsPerAccount(t *testing.T) {
	b := newTailBench(t)
	c, _ := loginAs(t, b, "admin", benchAdminPassword)
	var open []*websocket.Conn
	defer func() {
		for _, ws := range open {
			ws.Close()
		}
	}()
	for range maxTailsPerAccount {
		ws, _, err := dialTail(t, b, c, "/ws/eventos")
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, ws)
	}
	waitSubscribed(t, b.events, maxTailsPerAccount)

	// refused reports whether a tail of client cl is closed with 4429; an
	// admitted one sends nothing, so its read times out (generously: a
	// late 4429 must not pass for an admission on a loaded machine).
	refused := func(cl *http.Client) bool {
		t.Helper()
		ws, _, err := dialTail(t, b, cl, "/ws/eventos")
		if err != nil {
			t.Fatal(err)
		}
		_, err = readTail(t, ws, 2*time.Second)
		if websocket.IsCloseError(err, closeTooManyTails) {
			ws.Close()
			return true
		}
		if !isTimeout(err) {
			t.Fatalf("want 4429 or an open tail, got %v", err)
		}
		open = append(open, ws)
		return false
	}
	if !refused(c) {
		t.Fatalf("tail %d of one session was admitted", maxTailsPerAccount+1)
	}
	again, _ := loginAs(t, b, "admin", benchAdminPassword)
	if !refused(again) {
		t.Fatal("signing in again opened more tails for the same account")
	}
	other, _ := b.operator(t, "leitora", app.PapelLeitor)
	if refused(other) {
		t.Fatal("another account's first tail was refused")
	}
	open[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for refused(c) {
		if time.Now().After(deadline) {
			t.Fatal("a closed tail did not free its slot")
		}
	}
}
