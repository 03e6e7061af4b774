package web_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"

	"geohub/app"
	"geohub/app/ocorrencia"
)

// A CAD's key refused in a burst is answered 429 once its refusals run
// out, and from then on nothing more is recorded: the outside review sent
// 131 refused commands a second and got 117 MB a minute of audit and log
// rows that are never deleted (issue 26, M3). The other key is untouched.
func TestRefusedCommandsAreBoundedPerKey(t *testing.T) {
	t.Parallel()
	e := cmdSetup(t)
	logged := func() int { return len(e.events(t, app.EventFilter{Tipo: app.TipoComandoRecusado})) }
	audited := func() int {
		rows, _, err := e.DB.AuditEntries(t.Context(), app.AuditFilter{QuemID: e.A.ID, Limite: 500})
		if err != nil {
			t.Fatal(err)
		}
		return len(rows)
	}
	bad := map[string]any{"recurso": map[string]any{"identificador": ""}}
	// Sent 64 at a time: requests in flight together must not all pass a
	// check made before any of them is refused (the outside repeat got
	// 259 rows from 200 at once).
	var mu sync.Mutex
	limited := 0
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for range 320 {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			res := e.cmd(t, e.A.APIKey, uuid.NewString(), "/api/ocorrencias", bad)
			mu.Lock()
			defer mu.Unlock()
			switch res.Status {
			case http.StatusUnprocessableEntity:
			case http.StatusTooManyRequests:
				limited++
				if res.Header.Get("Retry-After") == "" {
					t.Error("a 429 without Retry-After")
				}
			default:
				t.Errorf("a refused command answered %d: %s", res.Status, res.Body)
			}
		})
	}
	wg.Wait()
	if limited == 0 {
		t.Fatal("320 refused commands in a burst, none answered 429")
	}
	if n := logged(); n > app.RefusalBurst {
		t.Fatalf("%d comando-recusado events for a burst of 320, want at most %d", n, app.RefusalBurst)
	}
	if n := audited(); n > app.RefusalBurst {
		t.Fatalf("%d audit rows for a burst of 320, want at most %d", n, app.RefusalBurst)
	}
	t.Logf("320 refused commands: %d answered 429, %d recorded", limited, logged())
	// Another CAD is not held back by the first one's refusals.
	res := e.cmd(t, e.B.APIKey, uuid.NewString(), "/api/ocorrencias", map[string]any{"natureza": "incendio"})
	if res.Status != http.StatusCreated {
		t.Fatalf("the other key: %d %s", res.Status, res.Body)
	}
}

// The refusals that come before a command runs leave an audit row too,
// naming the route or the command: a reused x-solicitacao-id with another
// body (409), a missing one (400), a body past the limit (413) (issue 26,
// L4).
func TestCommandsRefusedBeforeTheyRunAreAudited(t *testing.T) {
	t.Parallel()
	e := cmdSetup(t)
	sol := uuid.NewString()
	e.cmd(t, e.A.APIKey, sol, "/api/ocorrencias", map[string]any{"natureza": "incendio"}).want(t, http.StatusCreated)
	e.cmd(t, e.A.APIKey, sol, "/api/ocorrencias", map[string]any{"natureza": "alagamento"}).want(t, http.StatusConflict)
	e.cmd(t, e.A.APIKey, "", "/api/ocorrencias", map[string]any{"natureza": "incendio"}).want(t, http.StatusBadRequest)
	big := `{"natureza": "` + strings.Repeat("x", 2<<20) + `"}`
	e.cmd(t, e.A.APIKey, uuid.NewString(), "/api/ocorrencias", big).want(t, http.StatusRequestEntityTooLarge)
	rows, _, err := e.DB.AuditEntries(t.Context(), app.AuditFilter{QuemID: e.A.ID, Limite: 50})
	if err != nil {
		t.Fatal(err)
	}
	codes := map[app.Code]bool{}
	for _, r := range rows {
		if r.Resultado == app.AuditRecusado {
			codes[r.Codigo] = true
		}
	}
	for _, want := range []app.Code{app.EConflict, app.EMalformed, app.ETooLarge} {
		if !codes[want] {
			t.Errorf("no audit row for the %s refusal; rows: %+v", want, rows)
		}
	}
}

// An ocorrência takes at most ocorrencia.MaxDespachos despachos, and every
// answer is the ocorrência's own state and the despacho changed, never the
// list of its despachos: 2,583 dispatches of one key made a database of
// 1.28 GB, each answer and outcome carrying the whole ocorrência again
// (issue 26, M2).
func TestDespachosAreBoundedAndAnswersDoNotGrow(t *testing.T) {
	t.Parallel()
	e := cmdSetup(t)
	var oc struct{ ID string }
	e.cmd(t, e.A.APIKey, uuid.NewString(), "/api/ocorrencias", map[string]any{"natureza": "incendio"}).want(t, http.StatusCreated).decode(t, &oc)
	route := "/api/ocorrencias/" + oc.ID + "/despachos"
	var first, last int
	for i := range ocorrencia.MaxDespachos {
		res := e.cmd(t, e.A.APIKey, uuid.NewString(), route, map[string]any{"recurso": map[string]any{"identificador": fmt.Sprintf("UR-%d", i)}}).
			want(t, http.StatusCreated)
		if strings.Contains(string(res.Body), `"despachos"`) {
			t.Fatalf("answer %d lists the despachos: %s", i+1, res.Body)
		}
		if i == 0 {
			first = len(res.Body)
		}
		last = len(res.Body)
	}
	if last > 2*first {
		t.Fatalf("the %dth answer is %d bytes, the first %d", ocorrencia.MaxDespachos, last, first)
	}
	res := e.cmd(t, e.A.APIKey, uuid.NewString(), route, map[string]any{"recurso": map[string]any{"identificador": "UR-X"}}).
		want(t, http.StatusUnprocessableEntity)
	if d := apiDecodeError(t, res).Detalhes; len(d) != 1 || !strings.Contains(d[0].Mensagem, strconv.Itoa(ocorrencia.MaxDespachos)) {
		t.Fatalf("the refusal past the cap: %s", res.Body)
	}
	// The outcome published for the last one is as small as its answer.
	for _, ev := range e.events(t, app.EventFilter{Tipo: app.TipoComandoConcluido, Agregado: ""}) {
		if len(ev.Payload) > 4*first+2048 {
			t.Fatalf("an outcome of %d bytes", len(ev.Payload))
		}
	}
}

// An Upgrade header is no way around the limit: the API has no live
// sockets, and a proxy may forward the header on every request (a review
// found 400 refused requests with "Upgrade: x" all recorded).
func TestAnUpgradeHeaderDoesNotEscapeTheRefusalLimit(t *testing.T) {
	t.Parallel()
	e := apiSetup(t)
	limited := 0
	for range app.RefusalBurst + 20 {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, e.URL+"/api/integradores", strings.NewReader("{}"))
		req.Header.Set("Authorization", "Bearer "+e.Tokens[app.PapelLeitor])
		req.Header.Set("Upgrade", "websocket")
		res, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode == http.StatusTooManyRequests {
			limited++
		}
	}
	if limited < 19 {
		t.Fatalf("%d of %d refused requests with an Upgrade header answered 429", limited, app.RefusalBurst+20)
	}
}
