//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"geohub/app"
	"geohub/app/ocorrencia"
)

// command sends one ocorrência command with an operator token.
func command(client *http.Client, base, token, route, body string) (int, []byte, error) {
	req, err := http.NewRequest(http.MethodPost, base+route, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Solicitacao-Id", uuid.NewString())
	res, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, b, err
}

// lifecycle runs ocorrências through register, dispatch, arrival, release
// and close
// until the server stops answering or stop closes; every ocorrência whose
// registration was acknowledged goes into registered.
func lifecycle(client *http.Client, base, token string, stop <-chan struct{}, registered *sync.Map) {
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		status, body, err := command(client, base, token, "/api/ocorrencias", `{"natureza":"incendio"}`)
		if err != nil || status != http.StatusCreated {
			return
		}
		var o ocorrencia.Ocorrencia
		json.Unmarshal(body, &o)
		registered.Store(o.ID, true)
		status, body, err = command(client, base, token, "/api/ocorrencias/"+o.ID+"/despachos",
			fmt.Sprintf(`{"recurso":{"identificador":"UR-%d"}}`, n))
		if err != nil || status != http.StatusCreated {
			return
		}
		var d struct{ Despacho ocorrencia.Despacho }
		json.Unmarshal(body, &d)
		for _, step := range []struct{ route, body string }{
			{"/api/ocorrencias/" + o.ID + "/despachos/" + d.Despacho.ID + "/status", `{"para":"no_local"}`},
			{"/api/ocorrencias/" + o.ID + "/despachos/" + d.Despacho.ID + "/status", `{"para":"liberado"}`},
			{"/api/ocorrencias/" + o.ID + "/status", `{"para":"encerrada"}`},
		} {
			if status, _, err := command(client, base, token, step.route, step.body); err != nil || status != http.StatusOK {
				return
			}
		}
	}
}

func getJSON(t *testing.T, client *http.Client, url, token string, v any) {
	t.Helper()
	a, err := call(client, http.MethodGet, url, token, "")
	if err != nil || a.status != http.StatusOK {
		t.Fatalf("GET %s: %v %d %s", url, err, a.status, a.body)
	}
	if err := json.Unmarshal(a.body, v); err != nil {
		t.Fatal(err)
	}
}

// listOcorrencias pages through GET /api/ocorrencias.
func listOcorrencias(t *testing.T, client *http.Client, base, token string) []ocorrencia.Summary {
	t.Helper()
	var out []ocorrencia.Summary
	cursor := ""
	for {
		var l ocorrencia.List
		getJSON(t, client, base+"/api/ocorrencias?limite=500&antes="+cursor, token, &l)
		out = append(out, l.Linhas...)
		if l.Proximo == "" {
			return out
		}
		cursor = l.Proximo
	}
}

// TestReadModelAfterKill9 is the read model's side of the crash suite: the
// server is killed while the ocorrências consumer is behind the log, twice,
// and once it has caught up every ocorrência in the log has exactly one row,
// equal to its projection from the log, with every event folded once.
func TestReadModelAfterKill9(t *testing.T) {
	data := t.TempDir()
	consumerLog := t.TempDir() + "/handled.log"
	start := func(delay time.Duration) *child {
		c := launch{data: data, consumerLog: consumerLog, readModelDelay: delay}.start(t)
		if !c.alive() {
			t.Fatalf("geohub did not start:\n%s", c.out)
		}
		return c
	}
	srv := start(20 * time.Millisecond)
	bin, _ := plainBinary()
	out, err := cli(t, nil, bin, "token", "create", "--papel", "operador", "--data", data)
	if err != nil {
		t.Fatalf("token create: %v %s", err, out)
	}
	token := lastLine(out)
	client := &http.Client{Timeout: 15 * time.Second}
	var registered sync.Map
	count := func() int {
		n := 0
		registered.Range(func(any, any) bool { n++; return true })
		return n
	}
	var behindAtKill atomic.Int64
	for cycle := range 3 {
		before := count()
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() { lifecycle(client, "http://"+srv.addr, token, stop, &registered) })
		}
		if cycle == 2 {
			waitFor(t, 30*time.Second, "10 more ocorrências registered", func() (bool, string) {
				return count() >= before+10, fmt.Sprintf("%d", count()-before)
			})
			close(stop)
			wg.Wait()
			break
		}
		// Kill once the read model is well behind the log.
		waitFor(t, 30*time.Second, fmt.Sprintf("cycle %d: the read model to fall 5 behind", cycle), func() (bool, string) {
			var page app.Page[app.Event]
			getJSON(t, client, "http://"+srv.addr+"/api/events?limite=1&tipo="+ocorrencia.TipoRegistrada, token, &page)
			var l ocorrencia.List
			getJSON(t, client, "http://"+srv.addr+"/api/ocorrencias?limite=500", token, &l)
			if behind := page.Total - len(l.Linhas); behind >= 5 {
				behindAtKill.Add(int64(behind))
				return true, ""
			}
			return false, fmt.Sprintf("%d registered, %d in the list, %d acknowledged\n%s", page.Total, len(l.Linhas), count(), srv.out)
		})
		srv.kill()
		wg.Wait()
		srv = start(20 * time.Millisecond)
	}
	srv.stop()
	srv = start(0)
	base := "http://" + srv.addr

	// Caught up: as many rows as registrations in the log, each equal to
	// the projection folded from the log.
	var registrations app.Page[app.Event]
	getJSON(t, client, base+"/api/events?limite=1&tipo="+ocorrencia.TipoRegistrada, token, &registrations)
	var rows []ocorrencia.Summary
	waitFor(t, 45*time.Second, fmt.Sprintf("the read model to hold %d ocorrências", registrations.Total), func() (bool, string) {
		rows = listOcorrencias(t, client, base, token)
		return len(rows) == registrations.Total, fmt.Sprintf("%d", len(rows))
	})
	seen := map[string]bool{}
	for _, row := range rows {
		if seen[row.ID] {
			t.Errorf("ocorrência %s has two rows", row.ID)
		}
		seen[row.ID] = true
		var proj ocorrencia.Ocorrencia
		// A row may trail its projection only until the consumer folds the
		// last events; wait for it, then compare.
		waitFor(t, 45*time.Second, "ocorrência "+row.ID+"'s row to reach its projection", func() (bool, string) {
			getJSON(t, client, base+"/api/ocorrencias/"+row.ID, token, &proj)
			if row.Versao >= proj.Versao {
				return true, ""
			}
			for _, r := range listOcorrencias(t, client, base, token) {
				if r.ID == row.ID {
					row = r
				}
			}
			return false, fmt.Sprintf("row %d, projection %d", row.Versao, proj.Versao)
		})
		var evs app.Page[app.Event]
		getJSON(t, client, base+"/api/events?limite=1&agregado=ocorrencia:"+row.ID, token, &evs)
		if row.Versao != evs.Total || row.Versao != proj.Versao || row.Status != proj.Status ||
			!slices.Equal(row.Despachos, proj.Despachos) {
			t.Errorf("ocorrência %s: row %+v (versao %d), projection %+v, %d events in the log",
				row.ID, row, row.Versao, proj, evs.Total)
		}
	}
	registered.Range(func(id, _ any) bool {
		if !seen[id.(string)] {
			t.Errorf("acknowledged ocorrência %s is not in the read model", id)
		}
		return true
	})
	var dlq app.DLQStats
	getJSON(t, client, base+"/api/events/dlq", token, &dlq)
	if n := dlq.PendentesPorColonia[ocorrencia.Colonia]; n != 0 {
		t.Errorf("%d DLQ entries for the read model, which never fails here", n)
	}
	t.Logf("%d ocorrências, %d acknowledged; read model %d behind the log at the kills", len(rows), count(), behindAtKill.Load())
}

// SPEC 10: at start the server says where its console is.
func TestServerPrintsTheConsoleURL(t *testing.T) {
	srv := launch{data: t.TempDir()}.start(t)
	srv.stop()
	if want := "Console: http://" + srv.addr + "/"; !strings.Contains(srv.out.String(), want) {
		t.Fatalf("the output lacks %q:\n%s", want, srv.out)
	}
}
