package web_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"geohub/app"
)

// An integrator's API key reads its own deliveries and cadastro, and no
// other's; its gap repair of sequences 4..10 sends exactly those again,
// same bodies, in order, fresh delivery ids, to it alone; a purged body is
// counted, not sent; and each act is in the audit trail as that integrator.
func TestAnIntegratorServesItselfWithItsAPIKey(t *testing.T) {
	e := apiSetupWithDispatcher(t)
	e.delRegisterTypes(t)
	builtin, err := app.BuiltinTypes()
	if err != nil {
		t.Fatal(err)
	}
	for _, tv := range builtin {
		if tv.Tipo == app.TestEventType {
			if _, _, err := e.Registry.Register(t.Context(), tv); err != nil {
				t.Fatal(err)
			}
		}
	}
	rcA, rcB := delNewReceiver(t, http.StatusNoContent), delNewReceiver(t, http.StatusNoContent)
	a, b := e.delCreateIntegrator(t, rcA, "CAD A"), e.delCreateIntegrator(t, rcB, "CAD B")
	keyA := "Bearer " + a.APIKey
	var last app.Event
	for i := 1; i <= 10; i++ {
		last = e.delPublish(t, "equipe:1", i)
	}
	e.delWaitStatus(t, last.EventID, a.ID, app.EntregaEntregue)
	e.delWaitStatus(t, last.EventID, b.ID, app.EntregaEntregue)

	// Its own deliveries, and not another's, even when it asks.
	var page app.Page[app.Delivery]
	e.doAuth(t, http.MethodGet, "/api/entregas?limite=100", keyA, nil).want(t, http.StatusOK).decode(t, &page)
	if page.Total != 10 {
		t.Fatalf("the key sees %d deliveries, want its 10", page.Total)
	}
	for _, d := range page.Linhas {
		if d.Integrador != a.ID {
			t.Fatalf("the key sees a delivery to %s", d.Integrador)
		}
	}
	e.doAuth(t, http.MethodGet, "/api/entregas?integrador="+b.ID, keyA, nil).want(t, http.StatusForbidden)
	other := e.delOne(t, last.EventID, b.ID)
	e.doAuth(t, http.MethodGet, fmt.Sprintf("/api/entregas/%d", other.ID), keyA, nil).want(t, http.StatusNotFound)
	e.doAuth(t, http.MethodPost, fmt.Sprintf("/api/entregas/%d/reenviar", other.ID), keyA, nil).want(t, http.StatusNotFound)
	own := e.delOne(t, last.EventID, a.ID)
	e.doAuth(t, http.MethodGet, fmt.Sprintf("/api/entregas/%d", own.ID), keyA, nil).want(t, http.StatusOK)

	// Its cadastro, without the secret; not another's.
	var me map[string]any
	e.doAuth(t, http.MethodGet, "/api/integradores/eu", keyA, nil).want(t, http.StatusOK).decode(t, &me)
	if me["id"] != a.ID || me["segredo"] != nil || me["circuito"] == nil {
		t.Fatalf("/api/integradores/eu: %v", me)
	}
	e.doAuth(t, http.MethodGet, "/api/integradores/"+b.ID, keyA, nil).want(t, http.StatusForbidden)
	e.doAuth(t, http.MethodPost, "/api/integradores/"+b.ID+"/reenviar", keyA, map[string]any{"agregado": "equipe:1"}).
		want(t, http.StatusForbidden)
	e.do(t, http.MethodGet, "/api/integradores/eu", app.PapelAdmin, nil).want(t, http.StatusNotFound)
	// The registry, which the leitor role reads too.
	e.doAuth(t, http.MethodGet, "/api/registro/teste:todos", keyA, nil).want(t, http.StatusOK)

	// Gap repair from sequence 4.
	before := map[int64][]byte{}
	for _, r := range rcA.delRequests() {
		seq, _ := strconv.ParseInt(r.Header.Get("X-Geohub-Sequencia"), 10, 64)
		before[seq] = r.Body
	}
	nA, nB := len(rcA.delRequests()), len(rcB.delRequests())
	var res app.Resent
	e.doAuth(t, http.MethodPost, "/api/integradores/eu/reenviar", keyA, map[string]any{"agregado": "equipe:1", "sequencia_desde": 4}).
		want(t, http.StatusOK).decode(t, &res)
	if res.Reenviadas != 7 || res.Expurgadas != 0 {
		t.Fatalf("gap repair from 4: %+v, want 7 sent again", res)
	}
	e.waitRecorded(t, "the 7 sent again", func() bool { return len(rcA.delRequests()) >= nA+7 })
	again := rcA.delRequests()[nA:]
	seen := map[string]bool{}
	for i, r := range again {
		seq, _ := strconv.ParseInt(r.Header.Get("X-Geohub-Sequencia"), 10, 64)
		if seq != int64(4+i) || !bytes.Equal(r.Body, before[seq]) {
			t.Errorf("sent again #%d: sequence %d (want %d), same body %v", i, seq, 4+i, bytes.Equal(r.Body, before[seq]))
		}
		seen[r.Header.Get("X-Geohub-Entrega-Id")] = true
	}
	for _, r := range rcA.delRequests()[:nA] {
		if seen[r.Header.Get("X-Geohub-Entrega-Id")] {
			t.Errorf("a delivery id came again: %s", r.Header.Get("X-Geohub-Entrega-Id"))
		}
	}
	if got := len(rcB.delRequests()); got != nB {
		t.Errorf("the other integrator got %d more requests", got-nB)
	}
	e.waitRecorded(t, "every row delivered again", func() bool {
		return e.delList(t, "integrador="+a.ID+"&status=entregue").Total == 10
	})

	// Its circuit and its secret.
	e.doAuth(t, http.MethodPost, "/api/integradores/eu/tentar-agora", keyA, nil).want(t, http.StatusOK)
	var rot app.RotatedSecret
	e.doAuth(t, http.MethodPost, "/api/integradores/eu/segredo/rotacionar", keyA, nil).want(t, http.StatusOK).decode(t, &rot)
	if !app.LibraryReady([]byte(rot.Segredo)) {
		t.Errorf("the rotated secret %q is not library-ready", rot.Segredo)
	}
	e.doAuth(t, http.MethodPost, "/api/integradores/"+b.ID+"/segredo/rotacionar", keyA, nil).want(t, http.StatusForbidden)
	// The registry lists what it receives (every type, by default).
	var reg struct{ Tipos []app.TypeVersion }
	e.doAuth(t, http.MethodGet, "/api/registro", keyA, nil).want(t, http.StatusOK).decode(t, &reg)
	if len(reg.Tipos) == 0 {
		t.Error("the key reads no type in the registry")
	}
	// A key reaches none of the operators' other routes.
	e.doAuth(t, http.MethodGet, "/api/integradores", keyA, nil).want(t, http.StatusUnauthorized)
	e.doAuth(t, http.MethodGet, "/api/events", keyA, nil).want(t, http.StatusUnauthorized)

	// A test event to itself, through the outbox, to it alone.
	nA, nB = len(rcA.delRequests()), len(rcB.delRequests())
	var te app.TestEvent
	e.doAuth(t, http.MethodPost, "/api/integradores/eu/evento-teste", keyA, nil).want(t, http.StatusCreated).decode(t, &te)
	if te.Entregas != 1 || te.Evento.Tipo != app.TestEventType {
		t.Fatalf("evento-teste: %+v", te)
	}
	e.delWaitStatus(t, te.Evento.EventID, a.ID, app.EntregaEntregue)
	if got := rcA.delRequests()[nA:]; len(got) != 1 || !bytes.Contains(got[0].Body, []byte(`"tipo":"integracao:teste"`)) {
		t.Errorf("the test event's delivery: %d requests", len(got))
	}
	if got := len(rcB.delRequests()); got != nB {
		t.Errorf("the other integrator got %d requests of A's test event", got-nB)
	}

	// The tester, on its own callback: a receiver that answers 204 to
	// everything fails it, and the answer says where.
	var rep app.TestReport
	e.doAuth(t, http.MethodPost, "/api/integradores/eu/testar", keyA, nil).want(t, http.StatusOK).decode(t, &rep)
	if rep.Aprovado || len(rep.Verificacoes) != len(app.TestChecks) || rep.Verificacoes[1].Resultado != app.TesteFalhou {
		t.Fatalf("tester on a receiver that accepts everything: %+v", rep)
	}
	if got := len(rcA.delRequests()); got <= nA+1 {
		t.Fatal("the tester sent nothing")
	}
	if p := e.delList(t, "integrador="+a.ID); p.Total != 11 {
		t.Errorf("%d deliveries recorded after the tester, want 11: its requests are not deliveries", p.Total)
	}
	e.do(t, http.MethodPost, "/api/integradores/"+a.ID+"/testar", app.PapelOperador, nil).want(t, http.StatusOK)
	e.do(t, http.MethodPost, "/api/integradores/"+a.ID+"/testar", app.PapelLeitor, nil).want(t, http.StatusForbidden)

	// By time window, from an operator, for the other integrator: all 10.
	e.do(t, http.MethodPost, "/api/integradores/"+b.ID+"/reenviar", app.PapelOperador, map[string]any{
		"desde": apiStart.Add(-time.Hour).Format(time.RFC3339)}).want(t, http.StatusOK).decode(t, &res)
	if res.Reenviadas != 10 {
		t.Fatalf("gap repair by time: %+v, want 10", res)
	}
	// A purged body is counted, not sent.
	e.Clock.Advance(app.DefaultRetention + time.Hour)
	e.waitRecorded(t, "B's rows delivered again", func() bool {
		return e.delList(t, "integrador="+b.ID+"&status=entregue").Total == 10
	})
	if _, err := e.DB.PurgeDelivered(t.Context(), e.Clock.Now()); err != nil {
		t.Fatal(err)
	}
	e.doAuth(t, http.MethodPost, "/api/integradores/eu/reenviar", keyA, map[string]any{"agregado": "equipe:1"}).
		want(t, http.StatusOK).decode(t, &res)
	if res.Reenviadas != 0 || res.Expurgadas != 10 {
		t.Fatalf("gap repair of purged rows: %+v, want 10 purged", res)
	}

	// Refusals say why.
	for _, body := range []map[string]any{
		{},
		{"agregado": "equipe:1", "desde": apiStart.Format(time.RFC3339)},
		{"sequencia_desde": 3},
		{"desde": apiStart.Format(time.RFC3339), "ate": apiStart.Add(-time.Hour).Format(time.RFC3339)},
		{"desde": "ontem"},
	} {
		e.doAuth(t, http.MethodPost, "/api/integradores/eu/reenviar", keyA, body).want(t, http.StatusUnprocessableEntity)
	}

	for acao, want := range map[string]int{app.AcaoIntegradorReenviar: 2, app.AcaoIntegradorEventoTeste: 1,
		app.AcaoIntegradorTestar: 1, app.AcaoIntegradorSegredoRotacionar: 1, app.AcaoIntegradorTentarAgora: 1} {
		rows, _, err := e.DB.AuditEntries(t.Context(), app.AuditFilter{Acao: acao, Limite: 50})
		if err != nil {
			t.Fatal(err)
		}
		byA := 0
		for _, r := range rows {
			if r.Quem.Tipo == app.ActorIntegrador && r.Quem.ID == a.ID && r.Alvo.ID == a.ID {
				byA++
			}
		}
		if byA < want {
			t.Errorf("%d %s in the trail as integrator A, want %d or more: %+v", byA, acao, want, rows)
		}
	}
}

// One tester run at a time per integrator: a second call while the first
// waits on the receiver is refused with 429, and the first still answers.
func TestOneTesterRunAtATimePerIntegrator(t *testing.T) {
	e := apiSetupWithDispatcher(t)
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case arrived <- struct{}{}:
			<-release // the first request of the first run waits here
		default:
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer rc.Close()
	var in app.CreatedIntegrator
	e.do(t, http.MethodPost, "/api/integradores", app.PapelAdmin, map[string]any{"nome": "CAD lento",
		"callback_url": rc.URL + "/geohub/eventos", "hosts_permitidos": []string{"127.0.0.1"}}).
		want(t, http.StatusCreated).decode(t, &in)
	first := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, e.URL+"/api/integradores/eu/testar", nil)
		req.Header.Set("Authorization", "Bearer "+in.APIKey)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			first <- 0
			return
		}
		res.Body.Close()
		first <- res.StatusCode
	}()
	<-arrived
	e.doAuth(t, http.MethodPost, "/api/integradores/eu/testar", "Bearer "+in.APIKey, nil).want(t, http.StatusTooManyRequests)
	close(release)
	if got := <-first; got != http.StatusOK {
		t.Fatalf("the first run answered %d", got)
	}
}

// GET /api/integradores answers linhas like every other list, and still
// its old key for this release.
func TestTheIntegratorListAnswersLinhas(t *testing.T) {
	e := apiSetupWithDispatcher(t)
	e.delCreateIntegrator(t, delNewReceiver(t, 204), "CAD Lista")
	var got struct{ Linhas, Integradores []app.Integrator }
	e.do(t, http.MethodGet, "/api/integradores", app.PapelLeitor, nil).want(t, http.StatusOK).decode(t, &got)
	if len(got.Linhas) != 1 || len(got.Integradores) != 1 {
		t.Fatalf("linhas %d, integradores %d", len(got.Linhas), len(got.Integradores))
	}
}
