package web_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"geohub/app"
	"geohub/app/ocorrencia"
	"geohub/store/storetest"
)

// listUntil reads GET /api/ocorrencias?query with auth until cond holds,
// waking on the read model's changes; it fails the test after 10 s.
func (e *cmdEnv) listUntil(t *testing.T, auth, query string, cond func(ocorrencia.List) bool) ocorrencia.List {
	t.Helper()
	changed, stop := e.Ocorrencias.Changed.Subscribe()
	defer stop()
	deadline := time.After(10 * time.Second)
	for {
		var l ocorrencia.List
		e.doAuth(t, http.MethodGet, "/api/ocorrencias?"+query, "Bearer "+auth, nil).want(t, 200).decode(t, &l)
		if cond(l) {
			return l
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("GET /api/ocorrencias?%s never satisfied the test; last %+v", query, l)
		}
	}
}

func ids(l ocorrencia.List) []string {
	out := make([]string, len(l.Linhas))
	for i, s := range l.Linhas {
		out[i] = s.ID
	}
	return out
}

func (e *cmdEnv) register(t *testing.T, key, natureza string) ocorrencia.Ocorrencia {
	t.Helper()
	var o ocorrencia.Ocorrencia
	e.cmd(t, key, uuid.NewString(), "/api/ocorrencias", map[string]any{"natureza": natureza}).want(t, 201).decode(t, &o)
	return o
}

func TestOcorrenciasListFiltersAndPages(t *testing.T) {
	e := cmdSetup(t)
	leitor := e.Tokens[app.PapelLeitor]
	a1 := e.register(t, e.A.APIKey, "incendio")
	a2 := e.register(t, e.A.APIKey, "resgate")
	b1 := e.register(t, e.B.APIKey, "incendio")
	op := e.register(t, e.Tokens[app.PapelOperador], "incendio")
	all := e.listUntil(t, leitor, "", func(l ocorrencia.List) bool { return len(l.Linhas) == 4 })
	if got, want := ids(all), []string{op.ID, b1.ID, a2.ID, a1.ID}; !slices.Equal(got, want) {
		t.Fatalf("newest first: got %v, want %v", got, want)
	}
	byID := map[string]ocorrencia.Summary{}
	for _, s := range all.Linhas {
		byID[s.ID] = s
	}
	if byID[a1.ID].Integrador != e.A.ID || byID[b1.ID].Integrador != e.B.ID || byID[op.ID].Integrador != "" {
		t.Fatalf("originators: %+v", all.Linhas)
	}
	if s := byID[a1.ID]; s.Status != ocorrencia.Aberta || s.Versao != 1 || s.RegistradaEm.IsZero() || s.Despachos == nil {
		t.Fatalf("a row: %+v", s)
	}

	// Dispatch and arrive on a1: its row follows, with the despacho's own status.
	var desp struct{ Despacho ocorrencia.Despacho }
	e.cmd(t, e.A.APIKey, uuid.NewString(), "/api/ocorrencias/"+a1.ID+"/despachos",
		map[string]any{"recurso": map[string]any{"identificador": "UR-12"}}).want(t, 201).decode(t, &desp)
	e.cmd(t, e.Tokens[app.PapelOperador], uuid.NewString(), "/api/ocorrencias/"+a1.ID+"/despachos/"+desp.Despacho.ID+"/status",
		map[string]any{"para": "no_local"}).want(t, 200)
	var proj ocorrencia.Ocorrencia
	e.doAuth(t, http.MethodGet, "/api/ocorrencias/"+a1.ID, "Bearer "+leitor, nil).want(t, 200).decode(t, &proj)
	row := e.listUntil(t, leitor, "status=em_atendimento", func(l ocorrencia.List) bool {
		return len(l.Linhas) == 1 && l.Linhas[0].Versao == proj.Versao
	}).Linhas[0]
	if row.ID != a1.ID || !slices.Equal(row.Despachos, proj.Despachos) || row.Status != proj.Status {
		t.Fatalf("the list's row %+v differs from the projection %+v", row, proj)
	}

	for _, c := range []struct {
		query string
		want  []string
	}{
		{"natureza=incendio", []string{op.ID, b1.ID, a1.ID}},
		{"natureza=incendio&status=aberta", []string{op.ID, b1.ID}},
		{"integrador=" + e.B.ID, []string{b1.ID}},
		{"status=encerrada", []string{}},
		{"registrada_inicio=" + url.QueryEscape(apiStart.Add(time.Hour).Format(time.RFC3339)), []string{}},
		{"registrada_fim=" + url.QueryEscape(apiStart.Add(time.Hour).Format(time.RFC3339)), []string{op.ID, b1.ID, a2.ID, a1.ID}},
	} {
		var l ocorrencia.List
		e.doAuth(t, http.MethodGet, "/api/ocorrencias?"+c.query, "Bearer "+leitor, nil).want(t, 200).decode(t, &l)
		if !slices.Equal(ids(l), c.want) {
			t.Errorf("%s: got %v, want %v", c.query, ids(l), c.want)
		}
	}

	// An integrator's key sees its own only, whatever it asks for.
	for _, q := range []string{"", "integrador=" + e.B.ID} {
		var l ocorrencia.List
		e.doAuth(t, http.MethodGet, "/api/ocorrencias?"+q, "Bearer "+e.A.APIKey, nil).want(t, 200).decode(t, &l)
		if got := ids(l); !slices.Equal(got, []string{a2.ID, a1.ID}) {
			t.Errorf("A's key with %q sees %v", q, got)
		}
	}
	e.doAuth(t, http.MethodGet, "/api/ocorrencias", "", nil).want(t, 401)
	e.doAuth(t, http.MethodGet, "/api/ocorrencias", "Bearer "+e.Tokens[app.PapelProdutor], nil).want(t, 403)

	// Keyset paging holds still while ocorrências arrive between pages.
	seen := []string{}
	cursor := ""
	for page := 0; ; page++ {
		var l ocorrencia.List
		e.doAuth(t, http.MethodGet, "/api/ocorrencias?limite=3&antes="+cursor, "Bearer "+leitor, nil).want(t, 200).decode(t, &l)
		seen = append(seen, ids(l)...)
		if page == 0 {
			e.register(t, e.A.APIKey, "novo")
			e.register(t, e.A.APIKey, "novo")
		}
		if l.Proximo == "" {
			break
		}
		cursor = l.Proximo
	}
	if want := []string{op.ID, b1.ID, a2.ID, a1.ID}; !slices.Equal(seen, want) {
		t.Fatalf("paging while registering: got %v, want %v", seen, want)
	}

	for _, q := range []string{"status=fechada", "antes=x", "limite=-1", "registrada_inicio=ontem", "pagina=2",
		"registrada_inicio=2026-12-02T00:00:00Z&registrada_fim=2026-12-01T00:00:00Z"} {
		res := e.doAuth(t, http.MethodGet, "/api/ocorrencias?"+q, "Bearer "+leitor, nil).want(t, 422)
		if !strings.Contains(string(res.Body), "detalhes") {
			t.Errorf("%s: a 422 without its details: %s", q, res.Body)
		}
	}
}

// The read model is a consumer like any other (SPEC 4.5): a failing fold
// lands in the DLQ, the row lags, and reprocessing the colônia repairs it.
func TestOcorrenciasReadModelFailureGoesToTheDLQAndReprocessRepairsIt(t *testing.T) {
	e := cmdSetup(t)
	leitor := e.Tokens[app.PapelLeitor]
	o := e.register(t, e.A.APIKey, "incendio")
	e.listUntil(t, leitor, "", func(l ocorrencia.List) bool { return len(l.Linhas) == 1 })

	var failing atomic.Bool
	failing.Store(true)
	hook := func(ctx context.Context, ev app.Event) error {
		if failing.Load() && ev.Tipo == ocorrencia.TipoMudouStatus {
			return errors.New("falha injetada pelo teste")
		}
		return nil
	}
	e.projectHook.Store(&hook)
	e.cmd(t, e.A.APIKey, uuid.NewString(), "/api/ocorrencias/"+o.ID+"/status", map[string]any{"para": "encerrada"}).want(t, 200)

	var dlq app.DLQStats
	storetest.Await(t, "the failure to reach the DLQ", func() bool {
		e.do(t, http.MethodGet, "/api/events/dlq", app.PapelLeitor, nil).want(t, 200).decode(t, &dlq)
		return dlq.PendentesPorColonia[ocorrencia.Colonia] == 1
	}, &e.Consumers.Signals.DeadLettered)
	if en := dlq.Entradas[0]; en.Colonia != ocorrencia.Colonia || en.Tipo != ocorrencia.TipoMudouStatus ||
		!strings.Contains(en.MensagemErro, "falha injetada") {
		t.Fatalf("DLQ entry: %+v", en)
	}
	var l ocorrencia.List
	e.doAuth(t, http.MethodGet, "/api/ocorrencias", "Bearer "+leitor, nil).want(t, 200).decode(t, &l)
	if l.Linhas[0].Status != ocorrencia.Aberta {
		t.Fatalf("the failed fold changed the row: %+v", l.Linhas[0])
	}

	// Still failing: reprocessing counts it as failed again.
	var res app.ReprocessResult
	e.do(t, http.MethodPost, "/api/events/dlq/reprocessar", app.PapelOperador, map[string]string{"colonia": ocorrencia.Colonia}).
		want(t, 200).decode(t, &res)
	if res.Reprocessados != 1 || res.Falharam != 1 {
		t.Fatalf("reprocess while failing: %+v", res)
	}
	failing.Store(false)
	e.Clock.Advance(app.ReprocessInterval)
	e.do(t, http.MethodPost, "/api/events/dlq/reprocessar", app.PapelOperador, map[string]string{"colonia": ocorrencia.Colonia}).
		want(t, 200).decode(t, &res)
	if res.Resolvidos != 1 {
		t.Fatalf("reprocess: %+v", res)
	}
	e.doAuth(t, http.MethodGet, "/api/ocorrencias", "Bearer "+leitor, nil).want(t, 200).decode(t, &l)
	if s := l.Linhas[0]; s.Status != ocorrencia.Encerrada || s.Versao != 2 {
		t.Fatalf("after reprocess: %+v", s)
	}
	e.do(t, http.MethodGet, "/api/events/dlq", app.PapelLeitor, nil).want(t, 200).decode(t, &dlq)
	if dlq.TotalPendentes != 0 {
		t.Fatalf("DLQ after repair: %+v", dlq)
	}
}
