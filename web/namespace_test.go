package web_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/uuid"

	"geohub/app"
	"geohub/app/ocorrencia"
)

// SPEC 10: the built-in plugins' origens and aggregates are theirs alone. A
// producer that could publish there would join a command's trace as the
// plugin and take sequence numbers in the requester's outcome aggregate or
// in an ocorrência.
func TestOutsidePublishesStayOutOfThePluginsNamespaces(t *testing.T) {
	e := cmdSetup(t)
	e.do(t, http.MethodPost, "/api/registro", app.PapelAdmin, apiFreeType("teste:livre", "1.0.0")).want(t, http.StatusCreated)

	// A real command: its outcome opens solicitacao:<sol>, its event ocorrencia:<id>.
	sol := uuid.NewString()
	var oc ocorrencia.Ocorrencia
	e.cmd(t, e.A.APIKey, sol, "/api/ocorrencias", map[string]any{"natureza": "incendio"}).want(t, http.StatusCreated).decode(t, &oc)
	solAgg, ocAgg := "solicitacao:"+sol, "ocorrencia:"+oc.ID
	seqs := func() (int, int) {
		return len(e.events(t, app.EventFilter{Agregado: solAgg})), len(e.events(t, app.EventFilter{Agregado: ocAgg}))
	}
	solBefore, ocBefore := seqs()
	total := e.count(t)

	event := func(origem, agregado string) map[string]any {
		return map[string]any{"tipo": "teste:livre", "origem": origem, "agregado": agregado, "payload": map[string]any{"n": 1}}
	}
	for _, role := range []app.Papel{app.PapelProdutor, app.PapelAdmin} {
		for _, sc := range []apiScenario{
			{name: "the review's finding: origem integracao into a command's outcome aggregate",
				body: event(app.PluginIntegracao, solAgg), caminhos: []string{"/origem", "/agregado"}},
			{name: "the ocorrência plugin's origem", body: event(ocorrencia.Plugin, "lote:1"), caminhos: []string{"/origem"}},
			{name: "an ocorrência's aggregate", body: event("rh", ocAgg), caminhos: []string{"/agregado"}},
			{name: "any solicitacao: aggregate", body: event("rh", "solicitacao:"+uuid.NewString()), caminhos: []string{"/agregado"}},
			{name: "an integracao: aggregate", body: event("rh", "integracao:x"), caminhos: []string{"/agregado"}},
			{name: "an event's own aggregate", body: event("rh", "evento:"+oc.ID), caminhos: []string{"/agregado"}},
			{name: "the server's own origem", body: event("geohub", "lote:1"), caminhos: []string{"/origem"}},
			{name: "the server's own autoria, and a lookalike of it", body: map[string]any{"tipo": "teste:livre", "origem": "rh",
				"autoria": map[string]any{"tipo": "sistema", "id": "GeoHub"}, "payload": map[string]any{"n": 1}}, caminhos: []string{"/autoria/id"}},
		} {
			t.Run(string(role)+": "+sc.name, func(t *testing.T) {
				sc.method, sc.route, sc.role, sc.status, sc.codigo = http.MethodPost, "/api/events", role, http.StatusForbidden, app.EForbidden
				e.run(t, sc)
			})
		}
	}
	t.Run("an integrator's API key cannot publish at all", func(t *testing.T) {
		e.run(t, apiScenario{method: http.MethodPost, route: "/api/events", auth: "Bearer " + e.A.APIKey,
			body: event(app.PluginIntegracao, solAgg), status: http.StatusUnauthorized, codigo: app.EUnauthorized})
	})
	t.Run("nothing reached the log nor the plugins' sequences", func(t *testing.T) {
		if n := e.count(t); n != total {
			t.Fatalf("the refused publishes stored %d events", n-total)
		}
		if s, o := seqs(); s != solBefore || o != ocBefore {
			t.Fatalf("solicitacao: %d → %d events, ocorrencia: %d → %d", solBefore, s, ocBefore, o)
		}
	})
	t.Run("a producer's own namespaces stay open", func(t *testing.T) {
		for _, body := range []map[string]any{event("rh", "lote:1"), event("ocorrencias-legadas", "jornada:ocorrencia:1"),
			event("solicitacoes", "solicitacoes:1"), event("São Paulo", "unidade:São Paulo"),
			event("evento", "eventos:1"), event("integração-sp", "ocorrência-antiga:1"), event("geohub-legado", "lote:2"),
			{"tipo": "teste:livre", "origem": "rh", "autoria": map[string]any{"tipo": "usuario", "id": "geohub"}, "payload": map[string]any{"n": 2}}} {
			e.do(t, http.MethodPost, "/api/events", app.PapelProdutor, body).want(t, http.StatusCreated)
		}
	})
	t.Run("the plugins themselves still publish there", func(t *testing.T) {
		e.cmd(t, e.A.APIKey, uuid.NewString(), "/api/ocorrencias/"+oc.ID+"/despachos",
			map[string]any{"recurso": map[string]any{"identificador": "UR-12"}}).want(t, http.StatusCreated)
		evs := e.events(t, app.EventFilter{Agregado: ocAgg})
		if len(evs) != ocBefore+1 || evs[len(evs)-1].Origem != ocorrencia.Plugin {
			t.Fatalf("the dispatch's event did not join %s: %d events", ocAgg, len(evs))
		}
	})
}

// Aggregates and origens that a person would take for the plugins' are
// theirs too: case, accents, compatibility forms, spaces and letters of
// other scripts drawn like the Latin ones. (Invisible characters are the
// character rule's: TestInvisibleCharactersAreRefusedEverywhere.)
func TestLookalikesOfThePluginsNamespacesAreRefused(t *testing.T) {
	t.Parallel()
	env := apiSetup(t)
	env.registerTypes(t)
	total := env.count(t)
	event := func(origem, agregado string) map[string]any {
		return map[string]any{"tipo": "teste:livre", "origem": origem, "agregado": agregado, "payload": map[string]any{"n": 1}}
	}
	for name, body := range map[string]map[string]any{
		"upper case":                    event("rh", "Solicitacao:1"),
		"all capitals with the accents": event("rh", "SOLICITAÇÃO:1"),
		"the Portuguese spelling":       event("rh", "solicitação:1"),
		"an accent on ocorrência":       event("rh", "ocorrência:1"),
		"fullwidth letters":             event("rh", "ｏｃｏｒｒｅｎｃｉａ:1"),
		"a fullwidth colon":             event("rh", "ocorrencia：1"),
		"a modifier-letter colon":       event("rh", "ocorrencia꞉1"),
		"a Cyrillic o":                  event("rh", "\u043ecorrencia:1"),
		"a Greek iota":                  event("rh", "ocorrenc\u03b9a:1"),
		"capital I for l":               event("rh", "soIicitacao:1"),
		"digit one for l":               event("rh", "so1icitacao:1"),
		"digit zero for o":              event("rh", "0correncia:1"),
		"a combining accent":            event("rh", "integrac\u0327a\u0303o:1"),
		"origem in capitals":            event("INTEGRACAO", "lote:1"),
		"origem with the accents":       event("Integração", "lote:1"),
		"origem with a Cyrillic a":      event("ocorrenci\u0430", "lote:1"),
		"a space inside":                event("rh", "ocor rencia:1"),
		// The outside review's, accepted before: ϲ and ︰ were in the
		// table but NFKD had changed them before it was read; the small
		// capitals and the visarga were not in it.
		"a Greek lunate sigma for c":          event("rh", "o\u03f2orren\u03f2ia:1"),
		"lunate sigmas in solicitacao":        event("rh", "soli\u03f2ita\u03f2ao:1"),
		"a vertical two-dot leader for colon": event("rh", "solicitacao\ufe301"),
		"a Devanagari visarga for colon":      event("rh", "solicitacao\u09031"),
		"small capitals":                      event("rh", "ᴏᴄᴏʀʀᴇɴᴄɪᴀ:1"),
		"small capitals in solicitacao":       event("rh", "ꜱᴏʟɪᴄɪᴛᴀᴄᴀᴏ:1"),
		"a small capital I":                   event("rh", "ɪntegracao:1"),
		"origem with a Greek lunate sigma":    event("o\u03f2orrencia", "lote:1"),
		"origem in small capitals":            event("ᴏᴄᴏʀʀᴇɴᴄɪᴀ", "lote:1"),
		"origem with a small capital I":       event("ɪntegracao", "lote:1"),
		"Greek capitals, Ν read as N":         event("rh", "ΙΝΤΕGRΑCΑΟ:1"),
		"an o with a stroke":                  event("rh", "øcorrencia:1"),
	} {
		t.Run(name, func(t *testing.T) {
			res := env.run(t, apiScenario{method: http.MethodPost, route: "/api/events", role: app.PapelProdutor, body: body,
				status: http.StatusForbidden, codigo: app.EForbidden})
			got := apiDecodeError(t, res)
			if len(got.Detalhes) != 1 || !strings.Contains(got.Detalhes[0].Mensagem, "parecid") {
				t.Fatalf("want one finding naming the lookalike: %+v", got.Detalhes)
			}
		})
	}
	if n := env.count(t); n != total {
		t.Fatalf("lookalikes stored %d events", n-total)
	}
}

// An aggregate or origem is an identifier shown to people and compared byte
// for byte by receivers: characters that draw nothing, or steer how their
// neighbours are drawn, are refused in every namespace, with the character
// and its place named.
func TestInvisibleCharactersAreRefusedEverywhere(t *testing.T) {
	t.Parallel()
	env := apiSetup(t)
	env.registerTypes(t)
	total := env.count(t)
	for _, c := range []struct {
		name, origem, agregado, caminho, want string
	}{
		{"zero-width space", "rh", "lote\u200b:1", "/agregado", "U+200B no caractere 5"},
		{"right-to-left override", "rh", "lote:\u202e1", "/agregado", "U+202E"},
		{"bidi isolate", "rh", "lote:\u20661\u2069", "/agregado", "U+2066"},
		{"byte order mark", "rh", "\ufefflote:1", "/agregado", "U+FEFF"},
		{"line separator", "rh", "lote:\u20281", "/agregado", "U+2028"},
		{"no-break space", "rh", "lote:\u00a01", "/agregado", "U+00A0"},
		{"ideographic space", "rh", "lote:\u30001", "/agregado", "U+3000"},
		{"Hangul filler", "rh", "lote:\u3164", "/agregado", "U+3164"},
		{"variation selector", "rh", "lote:1\ufe0f", "/agregado", "U+FE0F"},
		{"private use", "rh", "lote:\ue000", "/agregado", "U+E000"},
		{"tab", "rh", "lote:\t1", "/agregado", "U+0009"},
		{"zero-width joiner in origem", "r\u200dh", "lote:1", "/origem", "U+200D"},
		{"no-break space in origem", "escala\u00a0rh", "lote:1", "/origem", "U+00A0"},
		// In a reserved name too: the character rule names the character,
		// which says more than "looks like integracao" (403).
		{"zero-width space in a reserved origem", "integ\u200bracao", "lote:1", "/origem", "U+200B no caractere 6"},
		{"zero-width joiner in a reserved origem", "ocorr\u200dencia", "lote:1", "/origem", "U+200D"},
		{"no-break space after a reserved origem", "ocorrencia\u00a0", "lote:1", "/origem", "U+00A0"},
		{"zero-width space in a reserved aggregate", "rh", "solici\u200btacao:1", "/agregado", "U+200B"},
		{"soft hyphen in a reserved aggregate", "rh", "ocor\u00adrencia:1", "/agregado", "U+00AD"},
		{"no-break space before the colon", "rh", "ocorrencia\u00a0:1", "/agregado", "U+00A0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := env.run(t, apiScenario{method: http.MethodPost, route: "/api/events", role: app.PapelProdutor,
				body:   map[string]any{"tipo": "teste:livre", "origem": c.origem, "agregado": c.agregado, "payload": map[string]any{"n": 1}},
				status: http.StatusUnprocessableEntity, codigo: app.EInvalid, caminhos: []string{c.caminho}})
			if got := apiDecodeError(t, res); !strings.Contains(got.Detalhes[0].Mensagem, c.want) {
				t.Fatalf("the finding does not name %q: %q", c.want, got.Detalhes[0].Mensagem)
			}
		})
	}
	// The server's reserved autoria spelt with an invisible, format or
	// control character: each variant the outside review sent was stored,
	// and the console showed it as the server (issue 26, L1).
	for _, id := range []string{"geohub\u200b", "\u200bgeohub", "geo\u00adhub", "geohub\u2060", "\ufeffgeohub", "geohub\u202e",
		"ge\u200dohub", "geohub\u061c", "geohub\u180e", "geohub\u0000", "geohub\n", "geohub\u3164"} {
		t.Run(fmt.Sprintf("autoria %+q", id), func(t *testing.T) {
			env.run(t, apiScenario{method: http.MethodPost, route: "/api/events", role: app.PapelProdutor,
				body: map[string]any{"tipo": "teste:livre", "origem": "rh", "autoria": map[string]any{"tipo": "sistema", "id": id},
					"payload": map[string]any{"n": 1}},
				status: http.StatusUnprocessableEntity, codigo: app.EInvalid, caminhos: []string{"/autoria/id"}})
		})
	}
	if n := env.count(t); n != total {
		t.Fatalf("invisible characters stored %d events", n-total)
	}
}

// The rules refuse new publishes only: a record stored before them, with a
// lookalike or invisible aggregate, is still read by every route.
func TestRecordsStoredBeforeTheRulesStayReadable(t *testing.T) {
	t.Parallel()
	env := apiSetup(t)
	old := []app.Event{
		{EventID: uuid.NewString(), Tipo: "teste:livre", VersaoSchema: "1.0.0", Origem: "Integração", Agregado: "Solicitação:1"},
		{EventID: uuid.NewString(), Tipo: "teste:livre", VersaoSchema: "1.0.0", Origem: "rh", Agregado: "lote\u200b:1"},
	}
	batch := make([]app.Pending, len(old))
	for i, ev := range old {
		ev.Timestamp, ev.CorrelacaoID, ev.Payload = apiStart, ev.EventID, json.RawMessage(`{"n":1}`)
		ev.Autoria = &app.Autoria{Tipo: "sistema", ID: ev.Origem}
		batch[i] = app.Pending{Event: ev, Full: ev.Payload}
	}
	if _, err := env.DB.Append(t.Context(), batch); err != nil {
		t.Fatal(err)
	}
	for _, ev := range old {
		var one app.Event
		env.do(t, http.MethodGet, "/api/events/"+ev.EventID, app.PapelLeitor, nil).want(t, http.StatusOK).decode(t, &one)
		if one.Agregado != ev.Agregado || one.Origem != ev.Origem {
			t.Fatalf("read back %q from %q, %q from %q", one.Agregado, ev.Agregado, one.Origem, ev.Origem)
		}
		res := env.do(t, http.MethodGet, "/api/events?agregado="+url.QueryEscape(ev.Agregado)+"&origem="+url.QueryEscape(ev.Origem),
			app.PapelLeitor, nil).want(t, http.StatusOK)
		if !strings.Contains(string(res.Body), ev.EventID) {
			t.Fatalf("the filter on %q does not find the record: %s", ev.Agregado, apiShort(res.Body))
		}
	}
}
