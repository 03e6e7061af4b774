package web_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"

	"geohub/app"
	"geohub/app/ocorrencia"
)

// cmdEnv is a Geohub with the built-in types and two integrators.
type cmdEnv struct {
	*apiEnv
	A, B app.CreatedIntegrator
}

func cmdSetup(t *testing.T) *cmdEnv {
	t.Helper()
	env := apiSetup(t)
	if _, _, err := app.RegisterBuiltinTypes(t.Context(), env.Registry); err != nil {
		t.Fatal(err)
	}
	e := &cmdEnv{apiEnv: env}
	for _, in := range []*app.CreatedIntegrator{&e.A, &e.B} {
		env.do(t, http.MethodPost, "/api/integradores", app.PapelAdmin,
			apiNewIntegrator("https://cad.exemplo.gov.br/geohub", "cad.exemplo.gov.br")).want(t, 201).decode(t, in)
	}
	return e
}

// cmd sends a command with an API key and an x-solicitacao-id ("" sends none).
func (e *cmdEnv) cmd(t *testing.T, key, solicitacao, route string, body any) apiResponse {
	t.Helper()
	var raw []byte
	switch b := body.(type) {
	case string:
		raw = []byte(b)
	default:
		raw = apiMustJSON(t, b)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.URL+route, bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if solicitacao != "" {
		req.Header.Set("X-Solicitacao-Id", solicitacao)
	}
	res, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var buf bytes.Buffer
	buf.ReadFrom(res.Body)
	return apiResponse{Status: res.StatusCode, Header: res.Header, Body: buf.Bytes()}
}

func (e *cmdEnv) events(t *testing.T, f app.EventFilter) []app.Event {
	t.Helper()
	f.Limite = 500
	evs, _, err := e.DB.Events(t.Context(), f)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func (e *cmdEnv) outcome(t *testing.T, solicitacao string) app.Event {
	t.Helper()
	evs := e.events(t, app.EventFilter{Agregado: "solicitacao:" + solicitacao})
	if len(evs) != 1 {
		t.Fatalf("solicitacao %s has %d outcome events, want 1", solicitacao, len(evs))
	}
	return evs[0]
}

func TestCommandsRunTheOcorrenciaLifecycle(t *testing.T) {
	e := cmdSetup(t)
	a := e.A.APIKey

	// Register.
	sol := uuid.NewString()
	body := map[string]any{"natureza": "incendio", "descricao": "Fumaça no galpão, vizinho Sr. José ligou",
		"endereco": "Rua das Flores, 120", "local": map[string]any{"lat": -22.90512, "lng": -47.06123}}
	first := e.cmd(t, a, sol, "/api/ocorrencias", body).want(t, 201)
	var oc ocorrencia.Ocorrencia
	first.decode(t, &oc)
	if oc.ID == "" || oc.Status != ocorrencia.Aberta || oc.Versao != 1 || oc.Natureza != "incendio" || len(oc.Despachos) != 0 {
		t.Fatalf("registered %s", first.Body)
	}
	before := e.count(t)

	t.Run("a repeated x-solicitacao-id returns the first outcome and publishes nothing", func(t *testing.T) {
		again := e.cmd(t, a, sol, "/api/ocorrencias", body).want(t, 201)
		if !bytes.Equal(again.Body, first.Body) {
			t.Fatalf("repeat answered %s, first %s", again.Body, first.Body)
		}
		if n := e.count(t); n != before {
			t.Fatalf("a repeat published %d events", n-before)
		}
	})
	t.Run("the same x-solicitacao-id with another body is a conflict", func(t *testing.T) {
		res := e.cmd(t, a, sol, "/api/ocorrencias", map[string]any{"natureza": "resgate"}).want(t, 409)
		if !strings.Contains(apiDecodeError(t, res).Erro, "x-solicitacao-id") {
			t.Fatalf("409 without the reason: %s", res.Body)
		}
		if n := e.count(t); n != before {
			t.Fatalf("a conflicting id published %d events", n-before)
		}
	})
	t.Run("the log keeps no descricao, no endereco and a rounded local", func(t *testing.T) {
		reg := e.events(t, app.EventFilter{Tipo: ocorrencia.TipoRegistrada})
		if len(reg) != 1 {
			t.Fatalf("%d registrada events", len(reg))
		}
		p := string(reg[0].Payload)
		if strings.Contains(p, "José") || strings.Contains(p, "Flores") || strings.Contains(p, "-22.90512") {
			t.Fatalf("personal data in the log: %s", p)
		}
		if !strings.Contains(p, "-22.905") {
			t.Fatalf("local not kept rounded: %s", p)
		}
		ev := reg[0]
		if ev.Autoria == nil || ev.Autoria.ID != e.A.ID || ev.Autoria.Tipo != "integrador" || ev.Solicitacao != sol ||
			ev.Origem != ocorrencia.Plugin || ev.Agregado != "ocorrencia:"+oc.ID || ev.CorrelacaoID != sol {
			t.Fatalf("registrada metadata %+v", ev)
		}
		out := e.outcome(t, sol)
		if out.Tipo != app.TipoComandoConcluido || out.Origem != app.PluginIntegracao || out.Autoria.ID != e.A.ID || out.Solicitacao != sol {
			t.Fatalf("outcome %+v", out)
		}
		if strings.Contains(string(out.Payload), "José") {
			t.Fatalf("the outcome keeps the command body in the log: %s", out.Payload)
		}
	})

	route := "/api/ocorrencias/" + oc.ID
	dispatch := func(t *testing.T, recurso string) ocorrencia.Ocorrencia {
		t.Helper()
		var got ocorrencia.Ocorrencia
		e.cmd(t, a, uuid.NewString(), route+"/despachos", map[string]any{"recurso": map[string]any{"identificador": recurso}}).
			want(t, 201).decode(t, &got)
		if got.Despacho == nil || got.Despacho.Status != ocorrencia.EmDeslocamento || got.Despacho.Recurso.Identificador != recurso ||
			got.Despacho.OcorrenciaID != oc.ID {
			t.Fatalf("dispatch answered %+v", got)
		}
		return got
	}
	setDespacho := func(t *testing.T, id, para string, status int) apiResponse {
		t.Helper()
		return e.cmd(t, a, uuid.NewString(), route+"/despachos/"+id+"/status", map[string]any{"para": para}).want(t, status)
	}

	ur := dispatch(t, "UR-12")
	t.Run("a resource on its way cannot be dispatched twice", func(t *testing.T) {
		e.cmd(t, a, uuid.NewString(), route+"/despachos", map[string]any{"recurso": map[string]any{"identificador": "UR-12"}}).want(t, 409)
	})

	t.Run("the first arrival moves the ocorrência to em_atendimento", func(t *testing.T) {
		n := e.count(t)
		var got ocorrencia.Ocorrencia
		setDespacho(t, ur.Despacho.ID, ocorrencia.NoLocal, 200).decode(t, &got)
		if got.Status != ocorrencia.EmAtendimento || got.Despacho.Status != ocorrencia.NoLocal || got.Versao != 4 {
			t.Fatalf("after the first arrival %+v", got)
		}
		// despacho-mudou-status, mudou-status and the outcome.
		if d := e.count(t) - n; d != 3 {
			t.Fatalf("first arrival published %d events, want 3", d)
		}
		ms := e.events(t, app.EventFilter{Tipo: ocorrencia.TipoMudouStatus})
		if len(ms) != 1 || !apiJSONEqual(t, ms[0].Payload, apiMustJSON(t, map[string]string{"id": oc.ID, "de": "aberta", "para": "em_atendimento"})) {
			t.Fatalf("mudou-status %+v", ms)
		}
	})
	abt := dispatch(t, "ABT-03")
	t.Run("a second arrival moves only its despacho", func(t *testing.T) {
		n := e.count(t)
		setDespacho(t, abt.Despacho.ID, ocorrencia.NoLocal, 200)
		if d := e.count(t) - n; d != 2 {
			t.Fatalf("second arrival published %d events, want 2", d)
		}
		ds := e.events(t, app.EventFilter{Tipo: ocorrencia.TipoDespachoMudouStatus})
		last := ds[len(ds)-1]
		if !apiJSONEqual(t, last.Payload, apiMustJSON(t, map[string]string{"id": abt.Despacho.ID, "ocorrenciaId": oc.ID,
			"de": "em_deslocamento", "para": "no_local"})) {
			t.Fatalf("despacho-mudou-status payload %s", last.Payload)
		}
	})
	t.Run("an invalid transition is refused with its reason and publishes only the refusal", func(t *testing.T) {
		n := e.count(t)
		s := uuid.NewString()
		res := e.cmd(t, a, s, route+"/despachos/"+ur.Despacho.ID+"/status", map[string]any{"para": "cancelado"}).want(t, 409)
		if msg := apiDecodeError(t, res).Erro; !strings.Contains(msg, "no_local") || !strings.Contains(msg, "liberado") {
			t.Fatalf("409 without the reason: %s", msg)
		}
		if d := e.count(t) - n; d != 1 {
			t.Fatalf("a refusal published %d events, want 1", d)
		}
		out := e.outcome(t, s)
		var p struct {
			Status int
			Motivo struct{ Erro, Codigo string }
		}
		if err := json.Unmarshal(out.Payload, &p); err != nil || out.Tipo != app.TipoComandoRecusado || p.Status != 409 ||
			p.Motivo.Codigo != string(app.EConflict) {
			t.Fatalf("refusal %s %s", out.Tipo, out.Payload)
		}
		// The refusal is an outcome too: repeating the command repeats it.
		again := e.cmd(t, a, s, route+"/despachos/"+ur.Despacho.ID+"/status", map[string]any{"para": "cancelado"}).want(t, 409)
		if !bytes.Equal(again.Body, res.Body) {
			t.Fatalf("repeated refusal %s, first %s", again.Body, res.Body)
		}
	})
	t.Run("an ocorrência with active despachos cannot be closed", func(t *testing.T) {
		res := e.cmd(t, a, uuid.NewString(), route+"/status", map[string]any{"para": "encerrada"}).want(t, 409)
		if !strings.Contains(apiDecodeError(t, res).Erro, "UR-12") {
			t.Fatalf("409 does not name the busy resources: %s", res.Body)
		}
	})
	setDespacho(t, ur.Despacho.ID, ocorrencia.Liberado, 200)
	setDespacho(t, abt.Despacho.ID, ocorrencia.Liberado, 200)
	usa := dispatch(t, "USA-07")
	setDespacho(t, usa.Despacho.ID, ocorrencia.Cancelado, 200)
	var closed ocorrencia.Ocorrencia
	e.cmd(t, a, uuid.NewString(), route+"/status", map[string]any{"para": "encerrada"}).want(t, 200).decode(t, &closed)
	if closed.Status != ocorrencia.Encerrada {
		t.Fatalf("closed %+v", closed)
	}
	t.Run("a closed ocorrência takes no despacho and no status", func(t *testing.T) {
		e.cmd(t, a, uuid.NewString(), route+"/despachos", map[string]any{"recurso": map[string]any{"identificador": "VTR-21"}}).want(t, 409)
		e.cmd(t, a, uuid.NewString(), route+"/status", map[string]any{"para": "aberta"}).want(t, 409)
	})

	t.Run("the projection is the state of each despacho", func(t *testing.T) {
		var got ocorrencia.Ocorrencia
		e.doAuth(t, http.MethodGet, route, "Bearer "+a, nil).want(t, 200).decode(t, &got)
		// The last answer is the ocorrência's own state; only GET lists
		// its despachos (an answer never grows with it: SPEC 10).
		if got.ID != closed.ID || got.Natureza != closed.Natureza || got.Status != closed.Status || got.Versao != closed.Versao ||
			len(closed.Despachos) != 0 {
			t.Fatalf("GET %+v, last answer %+v", got, closed)
		}
		want := map[string]string{ur.Despacho.ID: "liberado", abt.Despacho.ID: "liberado", usa.Despacho.ID: "cancelado"}
		for _, d := range got.Despachos {
			if want[d.ID] != d.Status {
				t.Fatalf("despacho %s is %s, want %s", d.ID, d.Status, want[d.ID])
			}
		}
		// Operators read every ocorrência, leitor included.
		e.do(t, http.MethodGet, route, app.PapelLeitor, nil).want(t, 200)
	})

	t.Run("another integrator's ocorrência is not found, and its refusal goes to that integrator", func(t *testing.T) {
		e.doAuth(t, http.MethodGet, route, "Bearer "+e.B.APIKey, nil).want(t, 404)
		s := uuid.NewString()
		res := e.cmd(t, e.B.APIKey, s, route+"/despachos", map[string]any{"recurso": map[string]any{"identificador": "X-1"}}).want(t, 404)
		unknown := e.cmd(t, e.B.APIKey, uuid.NewString(), "/api/ocorrencias/"+uuid.NewString()+"/despachos",
			map[string]any{"recurso": map[string]any{"identificador": "X-1"}}).want(t, 404)
		if strings.ReplaceAll(string(res.Body), oc.ID, "") == string(res.Body) {
			t.Fatalf("404 should name the id asked for, like any unknown one: %s", res.Body)
		}
		if apiDecodeError(t, res).Codigo != apiDecodeError(t, unknown).Codigo {
			t.Fatal("another's ocorrência must answer like an unknown one")
		}
		if out := e.outcome(t, s); out.Tipo != app.TipoComandoRecusado || out.Autoria.ID != e.B.ID {
			t.Fatalf("refusal %+v", out)
		}
	})
	t.Run("a despacho id is matched whatever its case", func(t *testing.T) {
		e.cmd(t, a, uuid.NewString(), route+"/despachos/"+strings.ToUpper(usa.Despacho.ID)+"/status", map[string]any{"para": "no_local"}).want(t, 409)
	})
	t.Run("an unknown despacho is not found", func(t *testing.T) {
		e.cmd(t, a, uuid.NewString(), route+"/despachos/"+uuid.NewString()+"/status", map[string]any{"para": "no_local"}).want(t, 404)
	})
}

func TestCommandsRefuseBadInput(t *testing.T) {
	e := cmdSetup(t)
	a := e.A.APIKey
	ok := map[string]any{"natureza": "resgate"}
	before := e.count(t)
	cases := []struct {
		name        string
		key, sol    string
		body        any
		status      int
		path        string
		outcomeKept bool // published as integracao:comando-recusado
	}{
		{"no x-solicitacao-id", a, "", ok, 400, "x-solicitacao-id", false},
		{"a malformed x-solicitacao-id", a, "123", ok, 400, "x-solicitacao-id", false},
		{"no API key", "", uuid.NewString(), ok, 401, "", false},
		{"a leitor token cannot command", e.Tokens[app.PapelLeitor], uuid.NewString(), ok, 403, "", false},
		{"a produtor token cannot command", e.Tokens[app.PapelProdutor], uuid.NewString(), ok, 403, "", false},
		{"an unknown token", "gh_nao-existe", uuid.NewString(), ok, 401, "", false},
		{"a made-up API key", "gk_nao-existe", uuid.NewString(), ok, 401, "", false},
		{"malformed JSON", a, uuid.NewString(), `{"natureza": `, 400, "", true},
		{"an unknown field", a, uuid.NewString(), map[string]any{"natureza": "x", "prioridade": 1}, 422, "/prioridade", true},
		{"no natureza", a, uuid.NewString(), map[string]any{"descricao": "x"}, 422, "/natureza", true},
		{"a blank natureza", a, uuid.NewString(), map[string]any{"natureza": "   "}, 422, "/natureza", true},
		// Near the limit, the refusal is still a 422 and still published:
		// the outcome does not carry so large a body back.
		{"a huge descricao", a, uuid.NewString(), map[string]any{"natureza": "x", "descricao": strings.Repeat("y", 1<<20-100)}, 422, "/descricao", true},
		{"a latitude out of range", a, uuid.NewString(), map[string]any{"natureza": "x", "local": map[string]any{"lat": 91, "lng": 0}}, 422, "/local/lat", true},
		{"a local without lng", a, uuid.NewString(), map[string]any{"natureza": "x", "local": map[string]any{"lat": 1}}, 422, "/local/lng", true},
		{"a body over 1 MiB", a, uuid.NewString(), `{"natureza": "` + strings.Repeat("x", 1<<20) + `"}`, 413, "", false},
	}
	published := 0
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := e.cmd(t, c.key, c.sol, "/api/ocorrencias", c.body).want(t, c.status)
			eb := apiDecodeError(t, res)
			if strings.HasPrefix(c.path, "x-") && !strings.Contains(eb.Erro, c.path) {
				t.Fatalf("the error does not name %s: %+v", c.path, eb)
			}
			if strings.HasPrefix(c.path, "/") {
				found := false
				for _, d := range eb.Detalhes {
					found = found || d.Caminho == c.path
				}
				if !found {
					t.Fatalf("no finding at %s: %+v", c.path, eb)
				}
			}
			if c.outcomeKept {
				published++
				if out := e.outcome(t, c.sol); out.Tipo != app.TipoComandoRecusado {
					t.Fatalf("outcome %s", out.Tipo)
				}
			}
		})
	}
	if regs := e.events(t, app.EventFilter{Tipo: ocorrencia.TipoRegistrada}); len(regs) != 0 {
		t.Fatalf("bad input registered %d ocorrências", len(regs))
	}
	if n := e.count(t) - before; n != published {
		t.Fatalf("bad input published %d events, want only the %d refusals", n, published)
	}

	t.Run("an inactive integrator is forbidden", func(t *testing.T) {
		e.do(t, http.MethodPatch, "/api/integradores/"+e.B.ID, app.PapelAdmin, map[string]any{"ativo": false}).want(t, 200)
		e.cmd(t, e.B.APIKey, uuid.NewString(), "/api/ocorrencias", ok).want(t, 403)
	})
	t.Run("a built-in type cannot be deprecated: 409 with the reason, commands go on", func(t *testing.T) {
		res := e.do(t, http.MethodPatch, "/api/registro/ocorrencia:registrada/1.0.0", app.PapelAdmin,
			map[string]any{"status": "deprecado"}).want(t, 409)
		if !strings.Contains(string(res.Body), "tipo embutido") {
			t.Fatalf("409 without the reason: %s", res.Body)
		}
		e.cmd(t, a, uuid.NewString(), "/api/ocorrencias", ok).want(t, 201)
	})
	t.Run("GET of a malformed id is not found", func(t *testing.T) {
		e.doAuth(t, http.MethodGet, "/api/ocorrencias/nao-e-uuid", "Bearer "+a, nil).want(t, 404)
		e.doAuth(t, http.MethodGet, "/api/ocorrencias/"+uuid.NewString(), "", nil).want(t, 401)
	})
}

func TestConcurrentRepeatsOfACommandRegisterOnce(t *testing.T) {
	e := cmdSetup(t)
	sol := uuid.NewString()
	const n = 16
	bodies := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each goroutine uses its own request, as separate retries would.
			res := e.cmd(t, e.A.APIKey, sol, "/api/ocorrencias", map[string]any{"natureza": "alagamento"})
			if res.Status != 201 {
				t.Errorf("status %d: %s", res.Status, res.Body)
			}
			bodies[i] = res.Body
		}()
	}
	wg.Wait()
	for _, b := range bodies[1:] {
		if !bytes.Equal(b, bodies[0]) {
			t.Fatalf("repeats answered differently: %s vs %s", b, bodies[0])
		}
	}
	if regs := e.events(t, app.EventFilter{Tipo: ocorrencia.TipoRegistrada}); len(regs) != 1 {
		t.Fatalf("%d concurrent repeats registered %d ocorrências", n, len(regs))
	}
	e.outcome(t, sol)
}

// Only the plugin writes an ocorrência: its types and aggregates are closed
// to producers, so nothing bypasses the state machines or claims another
// integrator's ocorrência.
func TestProducersCannotWriteThePluginsEventsOrAggregates(t *testing.T) {
	e := cmdSetup(t)
	var oc ocorrencia.Ocorrencia
	e.cmd(t, e.A.APIKey, uuid.NewString(), "/api/ocorrencias", map[string]any{"natureza": "resgate"}).want(t, 201).decode(t, &oc)
	before := e.count(t)
	cases := []map[string]any{
		{"tipo": ocorrencia.TipoMudouStatus, "origem": "central", "agregado": "ocorrencia:" + oc.ID,
			"payload": map[string]any{"id": oc.ID, "de": "aberta", "para": "encerrada"}},
		{"tipo": ocorrencia.TipoRegistrada, "origem": "central", "agregado": "ocorrencia:" + uuid.NewString(),
			"payload": map[string]any{"id": oc.ID, "natureza": "x", "status": "aberta"}},
		{"tipo": app.TipoComandoConcluido, "origem": "central", "payload": map[string]any{}},
		{"tipo": "jornada:encerrada", "origem": "escala", "agregado": "ocorrencia:" + oc.ID,
			"payload": map[string]any{"jornadaId": uuid.NewString(), "fim": "2026-11-30T12:00:00Z"}},
	}
	for _, c := range cases {
		for _, role := range []app.Papel{app.PapelProdutor, app.PapelAdmin} {
			res := e.do(t, http.MethodPost, "/api/events", role, c).want(t, 403)
			if len(apiDecodeError(t, res).Detalhes) == 0 {
				t.Fatalf("403 without the reason: %s", res.Body)
			}
		}
	}
	if n := e.count(t); n != before {
		t.Fatalf("%d refused events reached the log", n-before)
	}
	var got ocorrencia.Ocorrencia
	e.doAuth(t, http.MethodGet, "/api/ocorrencias/"+oc.ID, "Bearer "+e.A.APIKey, nil).want(t, 200).decode(t, &got)
	if got.Versao != 1 || got.Status != ocorrencia.Aberta {
		t.Fatalf("the ocorrência changed: %+v", got)
	}
}

// An upgrade that brings a type built in must start even where an admin
// registered that version with other content: it is reported, not fatal.
func TestBuiltinTypeConflictsAreReportedNotFatal(t *testing.T) {
	env := apiSetup(t)
	env.do(t, http.MethodPost, "/api/registro", app.PapelAdmin, map[string]any{"tipo": ocorrencia.TipoDespachada, "versao": "1.0.0",
		"audiencia": "originador", "schema": map[string]any{"type": "object"}, "redacao": map[string]any{"manter": []string{""}}}).want(t, 201)
	conflicts, _, err := app.RegisterBuiltinTypes(t.Context(), env.Registry)
	if err != nil || len(conflicts) != 1 || conflicts[0] != ocorrencia.TipoDespachada+"@1.0.0" {
		t.Fatalf("conflicts %v, err %v", conflicts, err)
	}
	if _, err := env.Registry.Versions(ocorrencia.TipoRegistrada); err != nil {
		t.Fatalf("the other built-in types were not registered: %v", err)
	}
}

// A command whose event the registry refuses for its own state (a built-in
// version an admin registered before an upgrade made it built in, with a
// schema that refuses everything) is not the caller's fault and not a bare
// 500: 503 saying what to fix, and nothing recorded.
func TestARegistryThatRefusesThePluginIsNotA500(t *testing.T) {
	for _, c := range []struct{ tipo, versao, audiencia string }{
		{ocorrencia.TipoRegistrada, "1.0.0", "originador"},           // the handler's own check of its event
		{app.TipoComandoConcluido, app.OutcomeVersao, "solicitante"}, // the outcome, refused at the append
	} {
		t.Run(c.tipo, func(t *testing.T) { registryRefusesPlugin(t, c.tipo, c.versao, c.audiencia) })
	}
}

func registryRefusesPlugin(t *testing.T, tipo, versao, audiencia string) {
	env := apiSetup(t)
	env.do(t, http.MethodPost, "/api/registro", app.PapelAdmin, map[string]any{"tipo": tipo, "versao": versao,
		"audiencia": audiencia, "schema": map[string]any{"not": map[string]any{}}, "redacao": map[string]any{"manter": []string{""}}}).want(t, 201)
	if conflicts, _, err := app.RegisterBuiltinTypes(t.Context(), env.Registry); err != nil || len(conflicts) != 1 {
		t.Fatalf("conflicts %v, err %v", conflicts, err)
	}
	e := &cmdEnv{apiEnv: env}
	env.do(t, http.MethodPost, "/api/integradores", app.PapelAdmin,
		apiNewIntegrator("https://cad.exemplo.gov.br/geohub", "cad.exemplo.gov.br")).want(t, 201).decode(t, &e.A)
	before := e.count(t)
	res := e.cmd(t, e.A.APIKey, uuid.NewString(), "/api/ocorrencias", map[string]any{"natureza": "incendio"}).want(t, 503)
	if !strings.Contains(string(res.Body), "registro de tipos") {
		t.Fatalf("503 without what to fix: %s", res.Body)
	}
	if n := e.count(t) - before; n != 0 {
		t.Fatalf("a refused command recorded %d events", n)
	}
}

// SPEC 7: an operator's token (admin or operador) sends the same commands.
// Its events name the token as a usuario, and on a CAD's ocorrência they
// reach that CAD as somebody else's act: not its echo. An ocorrência an
// operator registers has no originating integrator and reaches no CAD.
func TestOperatorsSendCommands(t *testing.T) {
	e := cmdSetup(t)
	var oc ocorrencia.Ocorrencia
	e.cmd(t, e.A.APIKey, uuid.NewString(), "/api/ocorrencias", map[string]any{"natureza": "incendio"}).want(t, 201).decode(t, &oc)
	operador := e.Tokens[app.PapelOperador]
	sol := uuid.NewString()
	var desp struct {
		Despacho ocorrencia.Despacho `json:"despacho"`
	}
	first := e.cmd(t, operador, sol, "/api/ocorrencias/"+oc.ID+"/despachos",
		map[string]any{"recurso": map[string]any{"identificador": "UR-12"}}).want(t, 201)
	first.decode(t, &desp)
	// Idempotent as for an integrator.
	if again := e.cmd(t, operador, sol, "/api/ocorrencias/"+oc.ID+"/despachos",
		map[string]any{"recurso": map[string]any{"identificador": "UR-12"}}).want(t, 201); !bytes.Equal(again.Body, first.Body) {
		t.Fatalf("a repeat answered %s, first %s", again.Body, first.Body)
	}
	evs := e.events(t, app.EventFilter{Tipo: ocorrencia.TipoDespachada})
	if len(evs) != 1 || evs[0].Autoria == nil || evs[0].Autoria.Tipo != "usuario" || evs[0].Autoria.ID == "" {
		t.Fatalf("an operator's despacho: %+v", evs)
	}
	// An admin token marks the arrival.
	e.cmd(t, e.Tokens[app.PapelAdmin], uuid.NewString(), "/api/ocorrencias/"+oc.ID+"/despachos/"+desp.Despacho.ID+"/status",
		map[string]any{"para": "no_local"}).want(t, 200)

	// The CAD that registered it gets every one of them, and its own
	// projection shows the operators' acts.
	rows, _, err := e.DB.Deliveries(t.Context(), app.DeliveryFilter{Integrador: e.A.ID, Agregado: "ocorrencia:" + oc.ID, Limite: 50})
	if err != nil || len(rows) != 4 { // registrada, despachada, despacho-mudou-status, mudou-status
		t.Fatalf("deliveries to the originator: %d %v", len(rows), err)
	}
	var got ocorrencia.Ocorrencia
	e.doAuth(t, http.MethodGet, "/api/ocorrencias/"+oc.ID, "Bearer "+e.A.APIKey, nil).want(t, 200).decode(t, &got)
	if got.Status != ocorrencia.EmAtendimento || len(got.Despachos) != 1 || got.Despachos[0].Status != "no_local" {
		t.Fatalf("the CAD's projection: %+v", got)
	}
	// The operators' outcomes go to no integrator.
	if rows, _, _ := e.DB.Deliveries(t.Context(), app.DeliveryFilter{Agregado: "solicitacao:" + sol, Limite: 10}); len(rows) != 0 {
		t.Fatalf("an operator's outcome was routed to %d integrators", len(rows))
	}

	// Registered by an operator: nobody's ocorrência.
	var mine ocorrencia.Ocorrencia
	e.cmd(t, operador, uuid.NewString(), "/api/ocorrencias", map[string]any{"natureza": "resgate"}).want(t, 201).decode(t, &mine)
	if rows, _, _ := e.DB.Deliveries(t.Context(), app.DeliveryFilter{Agregado: "ocorrencia:" + mine.ID, Limite: 10}); len(rows) != 0 {
		t.Fatalf("an operator's ocorrência was delivered to %d integrators", len(rows))
	}
	e.doAuth(t, http.MethodGet, "/api/ocorrencias/"+mine.ID, "Bearer "+e.A.APIKey, nil).want(t, 404)
	e.doAuth(t, http.MethodGet, "/api/ocorrencias/"+mine.ID, "Bearer "+e.Tokens[app.PapelLeitor], nil).want(t, 200)
	// And no CAD can act on it.
	e.cmd(t, e.A.APIKey, uuid.NewString(), "/api/ocorrencias/"+mine.ID+"/status", map[string]any{"para": "encerrada"}).want(t, 404)

	// The idempotency key is per requester: an integrator and two operator
	// tokens may each use one x-solicitacao-id for commands of their own.
	shared := uuid.NewString()
	for i, key := range []string{e.A.APIKey, operador, e.Tokens[app.PapelAdmin]} {
		res := e.cmd(t, key, shared, "/api/ocorrencias", map[string]any{"natureza": fmt.Sprintf("natureza-%d", i)}).want(t, 201)
		var o ocorrencia.Ocorrencia
		res.decode(t, &o)
		if o.Natureza != fmt.Sprintf("natureza-%d", i) {
			t.Fatalf("requester %d got another's outcome: %s", i, res.Body)
		}
	}
	e.cmd(t, e.A.APIKey, uuid.NewString(), "/api/ocorrencias", map[string]any{"natureza": "x"}).want(t, 201)
	res := e.cmd(t, "", uuid.NewString(), "/api/ocorrencias", map[string]any{"natureza": "x"}).want(t, 401)
	if !strings.Contains(string(res.Body), "api_key") || !strings.Contains(string(res.Body), "token") {
		t.Fatalf("401 without saying which credentials: %s", res.Body)
	}
}
