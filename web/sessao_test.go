package web_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"geohub/app"
	"geohub/store/storetest"
)

// sessionDial opens GET /api/sessao with key.
func (e *delEnv) sessionDial(t *testing.T, key string) *websocket.Conn {
	t.Helper()
	url := "ws" + strings.TrimPrefix(e.URL, "http") + "/api/sessao"
	conn, resp, err := websocket.DefaultDialer.Dial(url, http.Header{"Authorization": {"Bearer " + key}})
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("dial %s: %v (HTTP %d)", url, err, status)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// awaitSessions waits until /metrics counts n sessions attached.
func (e *delEnv) awaitSessions(t *testing.T, n int, what string) {
	t.Helper()
	var metrics string
	if !storetest.Poll(30*time.Second, func() bool {
		metrics = string(e.do(t, http.MethodGet, "/metrics", "", nil).want(t, http.StatusOK).Body)
		return strings.Contains(metrics, fmt.Sprintf("geohub_sessions_connected %d\n", n))
	}) {
		t.Fatalf("waiting for %s: /metrics says\n%s", what, metrics)
	}
}

// sessionRead reads one delivery message, checking its signature.
func sessionRead(t *testing.T, conn *websocket.Conn, secret string) map[string]string {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	kind, raw, err := conn.ReadMessage()
	if err != nil {
		t.Fatalf("read a delivery: %v", err)
	}
	if kind != websocket.TextMessage {
		t.Fatalf("message kind %d, want text", kind)
	}
	var m map[string]string
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("message %s: %v", raw, err)
	}
	ts, err := strconv.ParseInt(m["x-geohub-timestamp"], 10, 64)
	if err != nil {
		t.Fatalf("x-geohub-timestamp in %v", m)
	}
	if got, want := m["x-geohub-assinatura"], app.Sign([]byte(secret), ts, []byte(m["corpo"])); got != want {
		t.Fatalf("x-geohub-assinatura %q, want %q", got, want)
	}
	if m["webhook-signature"] == "" || m["x-geohub-entrega-id"] == "" {
		t.Fatalf("headers missing in %v", m)
	}
	return m
}

// A CAD that cannot receive webhooks dials in and gets its deliveries over
// the session: every message signed, each aggregate 1..10 in order, and
// each acknowledged delivery entregue in /api/entregas.
func TestASessionReceivesEveryDeliveryInOrder(t *testing.T) {
	e := apiSetupWithDispatcher(t)
	e.delRegisterTypes(t)
	var cad app.CreatedIntegrator
	e.do(t, http.MethodPost, "/api/integradores", app.PapelAdmin, map[string]any{"nome": "CAD atrás de NAT",
		"entrega": "sessao"}).want(t, http.StatusCreated).decode(t, &cad)
	if cad.Entrega != app.EntregaSessao || cad.APIKey == "" || cad.Segredo == "" {
		t.Fatalf("created %+v", cad)
	}
	conn := e.sessionDial(t, cad.APIKey)
	e.awaitSessions(t, 1, "/metrics to count the session")
	for i := 1; i <= 10; i++ {
		for _, a := range []string{"equipe:a", "equipe:b", "equipe:c"} {
			e.delPublish(t, a, i)
		}
	}
	next := map[string]int64{}
	for range 30 {
		m := sessionRead(t, conn, cad.Segredo)
		seq, _ := strconv.ParseInt(m["x-geohub-sequencia"], 10, 64)
		if want := next[m["x-geohub-agregado"]] + 1; seq != want {
			t.Fatalf("%s: sequence %d, want %d", m["x-geohub-agregado"], seq, want)
		}
		next[m["x-geohub-agregado"]] = seq
		if err := conn.WriteJSON(map[string]string{"ack": m["x-geohub-entrega-id"]}); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range []string{"equipe:a", "equipe:b", "equipe:c"} {
		if next[a] != 10 {
			t.Fatalf("%s arrived up to %d, want 10", a, next[a])
		}
	}
	e.waitRecorded(t, "the 30 acknowledged deliveries to be entregue", func() bool {
		return e.delList(t, fmt.Sprintf("integrador=%s&status=entregue&limite=100", cad.ID)).Total == 30
	})
}

// sessionCreate registers a session integrator.
func (e *delEnv) sessionCreate(t *testing.T, nome string) app.CreatedIntegrator {
	t.Helper()
	var cad app.CreatedIntegrator
	e.do(t, http.MethodPost, "/api/integradores", app.PapelAdmin, map[string]any{"nome": nome, "entrega": "sessao"}).
		want(t, http.StatusCreated).decode(t, &cad)
	return cad
}

// One delivery left unacknowledged holds its aggregate and only that one;
// after the connection drops, the next session gets it again first, the
// same body, then the rest of its aggregate in order.
func TestAnUnacknowledgedDeliveryHoldsItsAggregateAcrossReconnects(t *testing.T) {
	e := apiSetupWithDispatcher(t)
	e.delRegisterTypes(t)
	cad := e.sessionCreate(t, "CAD atrás de NAT")
	conn := e.sessionDial(t, cad.APIKey)
	for i := 1; i <= 3; i++ {
		e.delPublish(t, "equipe:a", i)
		e.delPublish(t, "equipe:b", i)
	}
	// equipe:a 1 is never acknowledged; equipe:b goes on to 3.
	var held map[string]string
	got := map[string][]string{}
	for len(got["equipe:b"]) < 3 {
		m := sessionRead(t, conn, cad.Segredo)
		a := m["x-geohub-agregado"]
		got[a] = append(got[a], m["x-geohub-sequencia"])
		if a == "equipe:a" {
			if held != nil {
				t.Fatalf("equipe:a %s arrived while 1 was unacknowledged", m["x-geohub-sequencia"])
			}
			held = m
			continue
		}
		if err := conn.WriteJSON(map[string]string{"ack": m["x-geohub-entrega-id"]}); err != nil {
			t.Fatal(err)
		}
	}
	if held == nil || held["x-geohub-sequencia"] != "1" || strings.Join(got["equipe:b"], ",") != "1,2,3" {
		t.Fatalf("arrived %v", got)
	}
	conn.Close() // the CAD's link drops

	conn = e.sessionDial(t, cad.APIKey)
	for want := 1; want <= 3; want++ {
		m := sessionRead(t, conn, cad.Segredo)
		if m["x-geohub-agregado"] != "equipe:a" || m["x-geohub-sequencia"] != strconv.Itoa(want) {
			t.Fatalf("after the reconnect: %s %s, want equipe:a %d", m["x-geohub-agregado"], m["x-geohub-sequencia"], want)
		}
		if want == 1 && (m["corpo"] != held["corpo"] || m["x-geohub-entrega-id"] == held["x-geohub-entrega-id"]) {
			t.Fatalf("the unacknowledged delivery came again with another body or the same delivery id")
		}
		if err := conn.WriteJSON(map[string]string{"ack": m["x-geohub-entrega-id"]}); err != nil {
			t.Fatal(err)
		}
	}
	e.waitRecorded(t, "the 6 deliveries entregue", func() bool {
		return e.delList(t, "integrador="+cad.ID+"&status=entregue").Total == 6
	})
}

// A nack means what a 5xx does: the delivery is retried, with the CAD's
// reason recorded. A callback integrator's key, or a second session, is
// told why it is closed; a session sees none of another integrator's
// deliveries.
func TestSessionsAreTheirIntegratorsAlone(t *testing.T) {
	e := apiSetupWithDispatcher(t)
	e.delRegisterTypes(t)
	a, b := e.sessionCreate(t, "CAD A"), e.sessionCreate(t, "CAD B")
	web := e.delCreateIntegrator(t, delNewReceiver(t, http.StatusNoContent), "CAD por callback")
	closed := func(conn *websocket.Conn) *websocket.CloseError {
		t.Helper()
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				var ce *websocket.CloseError
				if !errors.As(err, &ce) {
					t.Fatalf("read: %v, want a close frame", err)
				}
				return ce
			}
		}
	}
	// A plain GET is told what the route is, as any bad request is.
	if res := e.doAuth(t, http.MethodGet, "/api/sessao", "Bearer "+a.APIKey, nil).want(t, http.StatusBadRequest); !strings.Contains(string(res.Body), `"malformado"`) {
		t.Fatalf("a plain GET /api/sessao: %s", res.Body)
	}
	if ce := closed(e.sessionDial(t, web.APIKey)); ce.Code != 4001 {
		t.Fatalf("a callback integrator's session: close %d %q, want 4001", ce.Code, ce.Text)
	}
	connA, connB := e.sessionDial(t, a.APIKey), e.sessionDial(t, b.APIKey)
	ev := e.delPublish(t, "equipe:n", 1)
	m := sessionRead(t, connA, a.Segredo)
	if err := connA.WriteJSON(map[string]string{"nack": m["x-geohub-entrega-id"], "motivo": "banco do CAD fora do ar"}); err != nil {
		t.Fatal(err)
	}
	d := e.delWaitStatus(t, ev.EventID, a.ID, app.EntregaPendente)
	e.waitRecorded(t, "the nack recorded as an attempt", func() bool {
		d = e.delOne(t, ev.EventID, a.ID)
		return d.Tentativas == 1
	})
	// Its reason is the attempt's answer, as a receiver's body would be,
	// and the row's last error says it was a nack and why.
	if detail, _ := e.delGet(t, d.ID); d.UltimoStatus != http.StatusServiceUnavailable || len(detail.Registradas) != 1 ||
		detail.Registradas[0].Resposta != "banco do CAD fora do ar" || d.UltimoErro != "o CAD respondeu nack: banco do CAD fora do ar" {
		t.Fatalf("after a nack: %+v, %+v", d, detail)
	}
	// B got its own copy of the event, signed with its own secret, and
	// nothing of A's.
	mb := sessionRead(t, connB, b.Segredo)
	if mb["x-geohub-evento-id"] != ev.EventID || mb["x-geohub-entrega-id"] == m["x-geohub-entrega-id"] {
		t.Fatalf("B received %v", mb)
	}
	// A second session of A replaces the first, which is told why.
	e.sessionDial(t, a.APIKey)
	if ce := closed(connA); ce.Code != 4000 {
		t.Fatalf("the replaced session: close %d %q, want 4000", ce.Code, ce.Text)
	}
}

// A CAD that drops its session on the same delivery again and again does
// not get it forever uncounted: past three drops each one is an attempt
// without an answer. A rotated API key ends its session.
func TestASessionDroppingOnOneDeliveryCountsAndARotatedKeyEndsIt(t *testing.T) {
	e := apiSetupWithDispatcher(t)
	e.delRegisterTypes(t)
	cad := e.sessionCreate(t, "CAD que cai")
	ev := e.delPublish(t, "equipe:x", 1)
	for range 4 {
		conn := e.sessionDial(t, cad.APIKey)
		if m := sessionRead(t, conn, cad.Segredo); m["x-geohub-evento-id"] != ev.EventID {
			t.Fatalf("received %v", m)
		}
		conn.Close()
	}
	var d app.Delivery
	e.waitRecorded(t, "the fourth drop counted", func() bool {
		d = e.delOne(t, ev.EventID, cad.ID)
		return d.Tentativas == 1
	})
	if d.Status != app.EntregaPendente || !strings.Contains(d.UltimoErro, "caiu") {
		t.Fatalf("after four drops: %+v", d)
	}

	conn := e.sessionDial(t, cad.APIKey)
	e.do(t, http.MethodPost, "/api/integradores/"+cad.ID+"/api_key/rotacionar", app.PapelAdmin, nil).want(t, http.StatusOK)
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		_, _, err := conn.ReadMessage()
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			if ce.Code != websocket.ClosePolicyViolation {
				t.Fatalf("after the rotation: close %d %q, want 1008", ce.Code, ce.Text)
			}
			break
		}
		if err != nil {
			t.Fatalf("after the rotation: %v, want a close frame", err)
		}
	}
}

// "Verificar" on a session integrator goes through its connected session
// and counts the CAD's ack as its answer; the receiver tester, which POSTs
// to a callback, refuses a session integrator and says what to use.
func TestVerifyGoesThroughTheSessionAndTheTesterRefusesIt(t *testing.T) {
	e := apiSetupWithDispatcher(t)
	cad := e.sessionCreate(t, "CAD atrás de NAT")
	conn := e.sessionDial(t, cad.APIKey)
	e.awaitSessions(t, 1, "the session to attach")
	go func() {
		m := sessionRead(t, conn, cad.Segredo)
		if !strings.Contains(m["corpo"], "integracao:verificacao") {
			t.Errorf("the session got %v, want the verification", m)
		}
		conn.WriteJSON(map[string]string{"ack": m["x-geohub-entrega-id"]})
	}()
	var v struct {
		Tentativa  app.Attempt `json:"tentativa"`
		Verificado bool        `json:"verificado"`
	}
	e.do(t, http.MethodPost, "/api/integradores/"+cad.ID+"/verificar", app.PapelAdmin, nil).want(t, http.StatusOK).decode(t, &v)
	if !v.Verificado || v.Tentativa.StatusCode != http.StatusNoContent {
		t.Errorf("verificar through the session: %+v", v)
	}

	r := e.do(t, http.MethodPost, "/api/integradores/"+cad.ID+"/testar", app.PapelAdmin, nil).want(t, http.StatusUnprocessableEntity)
	if err := apiDecodeError(t, r); !strings.Contains(err.Erro, "sessão") {
		t.Errorf("the tester's refusal: %+v", err)
	}
}

// A connection that died without a close (a NAT that forgot it) takes
// messages into its socket and answers nothing, not even a ping. The
// delivery's timeout then ends the session (4003, reconnect) and the
// delivery waits uncounted for the next session, which gets it at once;
// a CAD that is alive but slow still answers pings, and its timeout
// counts as before.
func TestADeadConnectionEndsTheSessionWithoutCountingTheDelivery(t *testing.T) {
	e := apiSetupWithDispatcher(t)
	e.delRegisterTypes(t)
	cad := e.sessionCreate(t, "CAD atrás de NAT")

	// Alive but slow: it reads (so its library answers pings) and never
	// answers the delivery.
	slow := e.sessionDial(t, cad.APIKey)
	ev := e.delPublish(t, "equipe:a", 1)
	first := sessionRead(t, slow, cad.Segredo)
	slow.SetReadDeadline(time.Time{})
	go func() { // keep answering pings, as a live CAD's library does
		for {
			if _, _, err := slow.ReadMessage(); err != nil {
				return
			}
		}
	}()
	e.waitRecorded(t, "the slow CAD's timeout counted", func() bool {
		return e.delOne(t, ev.EventID, cad.ID).Tentativas == 1
	})
	if d := e.delOne(t, ev.EventID, cad.ID); !strings.Contains(d.UltimoErro, "não respondeu a tempo") {
		t.Fatalf("the slow CAD's timeout: %+v", d)
	}
	slow.Close()

	// Dead: it never reads again, and its socket stays open.
	dead := e.sessionDial(t, cad.APIKey)
	e.Clock.Advance(2 * time.Minute) // the counted timeout's backoff
	e.Dispatcher.Wake()
	e.awaitSessions(t, 0, "the dead connection's session to end")
	dead.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		_, _, err := dead.ReadMessage()
		if err == nil {
			continue // the delivery it never read
		}
		var closed *websocket.CloseError
		if !errors.As(err, &closed) || closed.Code != 4003 {
			t.Fatalf("the dead session ended with %v, want 4003", err)
		}
		break
	}
	if d := e.delOne(t, ev.EventID, cad.ID); d.Tentativas != 1 {
		t.Fatalf("the dead connection counted an attempt: %+v", d)
	}

	alive := e.sessionDial(t, cad.APIKey)
	m := sessionRead(t, alive, cad.Segredo)
	if m["x-geohub-evento-id"] != ev.EventID || m["corpo"] != first["corpo"] {
		t.Fatalf("after the dead connection: %v", m)
	}
	alive.WriteJSON(map[string]string{"ack": m["x-geohub-entrega-id"]})
	if d := e.delWaitStatus(t, ev.EventID, cad.ID, app.EntregaEntregue); d.Tentativas != 2 {
		t.Fatalf("the slow timeout and the ack count, the dead connection not: %+v", d)
	}
}

// The connection dies right after the CAD's last frame (an ack): the
// deliveries handed off in the next moments get a ping of their own, so
// none of them is counted as the CAD's timeout.
func TestAConnectionDeadRightAfterAnAckCountsNoTimeout(t *testing.T) {
	e := apiSetupWithDispatcher(t)
	e.delRegisterTypes(t)
	cad := e.sessionCreate(t, "CAD atrás de NAT")
	conn := e.sessionDial(t, cad.APIKey)
	e.delPublish(t, "equipe:a", 1)
	m := sessionRead(t, conn, cad.Segredo)
	if err := conn.WriteJSON(map[string]string{"ack": m["x-geohub-entrega-id"]}); err != nil {
		t.Fatal(err)
	}
	var evs []app.Event
	for _, a := range []string{"equipe:b", "equipe:c", "equipe:d"} {
		evs = append(evs, e.delPublish(t, a, 1))
	}
	e.awaitSessions(t, 0, "the dead connection's session to end")
	// The CAD's next session gets them at once; only its acks count.
	alive := e.sessionDial(t, cad.APIKey)
	for range evs {
		m := sessionRead(t, alive, cad.Segredo)
		alive.WriteJSON(map[string]string{"ack": m["x-geohub-entrega-id"]})
	}
	for _, ev := range evs {
		if d := e.delWaitStatus(t, ev.EventID, cad.ID, app.EntregaEntregue); d.Tentativas != 1 {
			t.Errorf("a delivery to the dead connection counted: %+v", d)
		}
	}
}

// A session integrator's cadastro refuses what only a callback has, each
// field named where it is, and an entrega that is neither mode.
func TestASessionIntegratorsCadastroNamesWhatItRefuses(t *testing.T) {
	e := apiSetupWithDispatcher(t)
	for _, tc := range []struct {
		body  map[string]any
		paths []string
	}{
		{map[string]any{"nome": "CAD", "entrega": "sessao", "callback_url": "https://cad.exemplo.gov.br/x",
			"hosts_permitidos": []string{"cad.exemplo.gov.br"}}, []string{"/callback_url", "/hosts_permitidos"}},
		{map[string]any{"nome": "CAD", "entrega": "sessao", "hosts_permitidos": []string{"cad.exemplo.gov.br"}}, []string{"/hosts_permitidos"}},
		{map[string]any{"nome": "CAD", "entrega": "fax"}, []string{"/entrega"}},
	} {
		r := e.do(t, http.MethodPost, "/api/integradores", app.PapelAdmin, tc.body).want(t, http.StatusUnprocessableEntity)
		var paths []string
		for _, d := range apiDecodeError(t, r).Detalhes {
			paths = append(paths, d.Caminho)
		}
		if strings.Join(paths, " ") != strings.Join(tc.paths, " ") {
			t.Errorf("%v: details at %v, want %v", tc.body, paths, tc.paths)
		}
	}
}
