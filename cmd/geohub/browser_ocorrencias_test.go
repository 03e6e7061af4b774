package main

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"geohub/receiver/simulator"
)

// The operador account TestConsoleOcorrencias creates through /operadores.
const (
	despachanteLogin    = "despachante.rita"
	despachantePassword = "senha-da-despachante-1"
)

// receivedEnvelope is what the test reads of a webhook the CAD received.
type receivedEnvelope struct {
	ID     string `json:"id"`
	Tipo   string `json:"tipo"`
	Origem struct {
		Autoria struct{ ID, Tipo string } `json:"autoria"`
	} `json:"origem"`
}

// TestConsoleOcorrencias is issue 14's acceptance in a browser: an operator
// dispatches a vehicle and marks its arrival on a CAD's ocorrência; the CAD
// simulator receives those events as somebody else's (not its echo) and its
// projection equals GET /api/ocorrencias/{id}; the list shows it all live.
func TestConsoleOcorrencias(t *testing.T) {
	data := t.TempDir()
	srv := startServer(t, data, "--insecure-callbacks")
	base := "http://" + srv.addr
	admin := lastLine(runCLI(t, "token", "create", "--papel", "admin", "--data", data))
	client := &http.Client{Timeout: 10 * time.Second}
	cad := newE2ECAD(t, client, srv.addr, admin, "CAD Bombeiros")
	ctx := browser(t)
	cadCtx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	var operadorID string
	t.Run("admin creates an operador", func(t *testing.T) {
		login(t, ctx, base, "admin", adminPassword)
		do(t, ctx, "create", chromedp.Navigate(base+"/operadores"), chromedp.WaitVisible(css(`main input[name=login]`)),
			fill(map[string]string{"login": despachanteLogin, "papel": "operador", "senha": despachantePassword, "confirma": despachantePassword}),
			chromedp.Click(css(`main button[type=submit]`)), chromedp.WaitVisible(css(`p.aviso-ok`)))
		// The admin's own row has no forms: the one reset form is hers.
		action := get(t, ctx, "reset form", chromedp.AttributeValue(css(`form[action$="/senha"]`), "action"))
		operadorID = strings.TrimSuffix(strings.TrimPrefix(action.Value, "/operadores/"), "/senha")
		do(t, ctx, "sign out", chromedp.Click(css(`.conta button`)), chromedp.WaitVisible(css(signedOut)))
		login(t, ctx, base, despachanteLogin, despachantePassword)
	})

	// The list stays open in its own tab for the whole test: everything it
	// shows from here on comes over its socket.
	list, closeList := chromedp.NewContext(ctx)
	defer closeList()
	do(t, list, "open the list", chromedp.Navigate(base+"/ocorrencias"), chromedp.WaitVisible(css(`[data-vivo] table`)))
	waitText(t, list, `[data-vivo] [data-tail-status]`, "ao vivo")
	do(t, list, "mark the page", chromedp.Evaluate[chromedp.Void](`window.__semRecarregar = true`))
	stillSamePage := func(t *testing.T) {
		t.Helper()
		if !get(t, list, "no reload", chromedp.Evaluate[bool](`window.__semRecarregar === true`)) {
			t.Fatal("the list page was reloaded")
		}
	}
	rowText := func(id string) string {
		v, err := chromedp.Run(list, chromedp.Evaluate[string](`document.querySelector('tr[data-id="`+id+`"]')?.textContent || ""`))
		if err != nil {
			return err.Error()
		}
		return strings.Join(strings.Fields(v), " ")
	}

	oc, err := cad.Register(cadCtx, simulator.RegisterRequest{Natureza: "incendio", Descricao: "galpão", Endereco: "Rua A, 1",
		Local: &simulator.Local{Lat: -22.9, Lng: -47.06}})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("the CAD's new ocorrência appears on the open list", func(t *testing.T) {
		waitFor(t, 10*time.Second, "the new row", func() (bool, string) {
			r := rowText(oc.ID)
			return strings.Contains(r, "Incêndio") && strings.Contains(r, "Aberta") && strings.Contains(r, "CAD Bombeiros"), r
		})
		stillSamePage(t)
		screenshot(t, list, "ocorrencias")
	})

	t.Run("the operador dispatches UR-12 and marks its arrival", func(t *testing.T) {
		do(t, ctx, "open the ocorrência", chromedp.Navigate(base+"/ocorrencias"), chromedp.WaitVisible(css(`tr[data-id="`+oc.ID+`"] a`)),
			chromedp.Click(css(`tr[data-id="`+oc.ID+`"] a`)), chromedp.WaitVisible(css(`main input[name=recurso]`)))
		if h := text(t, ctx, `main h1`); !strings.Contains(h, "Incêndio") || !strings.Contains(h, "Aberta") {
			t.Fatalf("heading %q", h)
		}
		do(t, ctx, "dispatch", chromedp.SendKeys(css(`main input[name=recurso]`), "UR-12"),
			chromedp.Click(css(`form[action$="/despachos"] button[type=submit]`)))
		waitText(t, ctx, `p.aviso-ok`, "Recurso UR-12 despachado")
		if row := text(t, ctx, `table.despachos tbody tr`); !strings.Contains(row, "UR-12") || !strings.Contains(row, "Em deslocamento") {
			t.Fatalf("despacho row %q", row)
		}
		do(t, ctx, "arrival", chromedp.Click(css(`button[data-para="no_local"]`)))
		waitText(t, ctx, `p.aviso-ok`, "UR-12 chegou ao local")
		if h := text(t, ctx, `main h1`); !strings.Contains(h, "Em atendimento") {
			t.Fatalf("after the arrival the heading is %q", h)
		}
		if evs := text(t, ctx, `#eventos table`); !strings.Contains(evs, "ocorrencia:despacho-mudou-status") ||
			!strings.Contains(evs, "usuário "+despachanteLogin) {
			t.Fatalf("the ocorrência's events:\n%s", evs)
		}
		screenshot(t, ctx, "ocorrencia")
	})

	t.Run("the list showed the change without reloading", func(t *testing.T) {
		waitFor(t, 10*time.Second, "the changed row", func() (bool, string) {
			r := rowText(oc.ID)
			return strings.Contains(r, "Em atendimento") && strings.Contains(r, "UR-12") && strings.Contains(r, "No local"), r
		})
		stillSamePage(t)
	})

	t.Run("the CAD received the operador's events as somebody else's", func(t *testing.T) {
		want := []string{"ocorrencia:despachada", "ocorrencia:despacho-mudou-status", "ocorrencia:mudou-status"}
		var seen map[string]receivedEnvelope
		waitFor(t, 20*time.Second, "the operador's events at the CAD", func() (bool, string) {
			seen = map[string]receivedEnvelope{}
			for _, r := range cad.requests() {
				var env receivedEnvelope
				if json.Unmarshal(r.body, &env) == nil && r.header.Get("X-Geohub-Agregado") == "ocorrencia:"+oc.ID {
					seen[env.Tipo] = env
				}
			}
			for _, tipo := range want {
				if _, ok := seen[tipo]; !ok {
					return false, "missing " + tipo
				}
			}
			return true, ""
		})
		for _, tipo := range want {
			a := seen[tipo].Origem.Autoria
			if a.Tipo != "usuario" || a.ID != operadorID {
				t.Errorf("%s arrived with autoria %+v, want usuario %s", tipo, a, operadorID)
			}
		}
	})

	t.Run("the simulator's projection equals GET /api/ocorrencias/{id}", func(t *testing.T) {
		var server, mine simulator.Ocorrencia
		waitFor(t, 20*time.Second, "the projections to agree", func() (bool, string) {
			raw := apiCall(t, client, "GET", base+"/api/ocorrencias/"+oc.ID, cad.APIKey, "")
			var err error
			if server, err = simulator.DecodeOcorrencia(raw); err != nil {
				t.Fatal(err)
			}
			mine, _ = cad.Projection().Ocorrencia(oc.ID)
			return reflect.DeepEqual(mine, server), "simulator " + jsonString(mine) + " server " + jsonString(server)
		})
		if server.Status != simulator.StatusEmAtendimento || len(server.Despachos) != 1 ||
			server.Despachos[0].Recurso.Identificador != "UR-12" || server.Despachos[0].Status != simulator.DespachoNoLocal {
			t.Fatalf("the server's projection %+v", server)
		}
	})

	t.Run("at 390 px the pages keep their key columns and scroll the rest", func(t *testing.T) {
		do(t, ctx, "phone", chromedp.EmulateViewport(390, 844))
		defer do(t, ctx, "desktop", chromedp.EmulateViewport(1366, 768))
		for path, key := range map[string]string{"/ocorrencias": `[data-vivo] th:nth-child(2)`, "/ocorrencias/" + oc.ID: `table.despachos th:nth-child(2)`} {
			do(t, ctx, "open "+path, chromedp.Navigate(base+path), chromedp.WaitVisible(css(key)))
			// The page's content never widens the screen: wide tables scroll
			// inside their own box.
			if w := get(t, ctx, "content width", chromedp.Evaluate[int](`document.querySelector("main").scrollWidth`)); w > 390 {
				t.Errorf("%s: the content is %d px wide at 390 px", path, w)
			}
			if right := get(t, ctx, "key column", chromedp.Evaluate[float64](`document.querySelector(`+"`"+key+"`"+`).getBoundingClientRect().right`)); right > 390 {
				t.Errorf("%s: the status column ends at %.0f px, off a 390 px screen", path, right)
			}
		}
		screenshot(t, ctx, "ocorrencia-390")
	})
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
