package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"geohub/app"
	"geohub/app/callback"
	sdk "geohub/receiver"
)

// sdkReceiver is the Go SDK's receiver, which keeps every obligation, with
// secret; mod changes its Config.
func sdkReceiver(secret string, mod func(*sdk.Config)) http.Handler {
	cfg := sdk.Config{Secrets: func() [][]byte { return [][]byte{[]byte(secret)} }}
	if mod != nil {
		mod(&cfg)
	}
	return sdk.New(cfg, sdk.HandlerFunc(func(context.Context, sdk.Delivery) error { return nil }))
}

// answerInstead answers with what change makes of the SDK's status.
func answerInstead(h http.Handler, change func(status int, r *http.Request, body []byte) int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		w.WriteHeader(change(rec.Code, r, body))
	})
}

// before answers status when refuse says so, and lets the SDK answer
// otherwise.
func before(h http.Handler, refuse func(r *http.Request, body []byte) int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if status := refuse(r, body); status != 0 {
			w.WriteHeader(status)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		h.ServeHTTP(w, r)
	})
}

func failed(rep app.TestReport) []string {
	var ids []string
	for _, c := range rep.Verificacoes {
		if c.Resultado == app.TesteFalhou {
			ids = append(ids, c.ID)
		}
	}
	return ids
}

// The tester passes the Go SDK's receiver, and fails each receiver written
// to break one obligation on that obligation's check, and on no other.
func TestTheTesterFailsEachBrokenReceiverOnItsCheck(t *testing.T) {
	t.Parallel()
	secret := app.NewSecret()
	seen := func() func(id string) bool {
		var mu sync.Mutex
		ids := map[string]bool{}
		return func(id string) bool {
			mu.Lock()
			defer mu.Unlock()
			was := ids[id]
			ids[id] = true
			return was
		}
	}
	sequences := func() func(agregado, seq string) bool {
		var mu sync.Mutex
		last := map[string]string{}
		return func(agregado, seq string) bool {
			mu.Lock()
			defer mu.Unlock()
			early := seq == "3" && last[agregado] != "2"
			last[agregado] = seq
			return early
		}
	}
	// The slow receiver's answers: each waits for the next tick, so the run
	// spends its budget with no sleep here.
	slow := time.Tick(100 * time.Millisecond)
	for _, c := range []struct {
		name     string
		handler  func() http.Handler
		insecure bool
		want     []string // the checks that fail
	}{
		{"the Go SDK", func() http.Handler { return sdkReceiver(secret, nil) }, true, nil},
		{"answers 204 to everything", func() http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })
		}, true, []string{"recusa-assinatura", "recusa-timestamp", "recusa-corpo-invalido"}},
		{"no timestamp window", func() http.Handler {
			return sdkReceiver(secret, func(c *sdk.Config) { c.Tolerance = 24 * time.Hour })
		}, true, []string{"recusa-timestamp"}},
		{"accepts a signed body that is no envelope", func() http.Handler {
			return answerInstead(sdkReceiver(secret, nil), func(status int, _ *http.Request, _ []byte) int {
				if status == 400 {
					return 204
				}
				return status
			})
		}, true, []string{"recusa-corpo-invalido"}},
		{"express.raw's default 100 KB limit", func() http.Handler {
			return sdkReceiver(secret, func(c *sdk.Config) { c.MaxBody = 100 << 10 })
		}, true, []string{"aceita-corpo-grande"}},
		{"409 for a repeat", func() http.Handler {
			again := seen()
			return before(sdkReceiver(secret, nil), func(r *http.Request, _ []byte) int {
				if again(r.Header.Get("X-Geohub-Evento-Id")) {
					return 409
				}
				return 0
			})
		}, true, []string{"aceita-repetido"}},
		{"409 for an early sequence", func() http.Handler {
			early := sequences()
			return before(sdkReceiver(secret, nil), func(r *http.Request, _ []byte) int {
				if early(r.Header.Get("X-Geohub-Agregado"), r.Header.Get("X-Geohub-Sequencia")) {
					return 409
				}
				return 0
			})
		}, true, []string{"aceita-fora-de-ordem"}},
		{"400 without a sequence", func() http.Handler {
			return before(sdkReceiver(secret, nil), func(r *http.Request, _ []byte) int {
				if r.Header.Get("X-Geohub-Sequencia") == "" {
					return 400
				}
				return 0
			})
		}, true, []string{"aceita-sem-sequencia"}},
		{"422 for a type it does not know", func() http.Handler {
			return before(sdkReceiver(secret, nil), func(_ *http.Request, body []byte) int {
				var env struct{ Tipo string }
				if json.Unmarshal(body, &env) == nil && env.Tipo != "" && env.Tipo != app.TestEventType {
					return 422
				}
				return 0
			})
		}, true, []string{"aceita-tipo-desconhecido"}},
		{"refuses a delivery signed also with the previous secret", func() http.Handler {
			return before(sdkReceiver(secret, nil), func(r *http.Request, _ []byte) int {
				if r.Header.Get("X-Geohub-Assinatura-Anterior") != "" {
					return 400
				}
				return 0
			})
		}, true, []string{"aceita-rotacao"}},
		{"never answers a repeat", func() http.Handler {
			again := seen()
			return before(sdkReceiver(secret, nil), func(r *http.Request, _ []byte) int {
				if again(r.Header.Get("X-Geohub-Evento-Id")) {
					<-r.Context().Done() // until the tester gives up
					return 204
				}
				return 0
			})
		}, true, []string{"aceita-repetido", "responde-a-tempo"}},
		{"http without --insecure-callbacks", func() http.Handler { return sdkReceiver(secret, nil) }, false, []string{"https"}},
		{"answers each request slowly", func() http.Handler {
			return before(sdkReceiver(secret, nil), func(r *http.Request, _ []byte) int {
				<-slow
				return 0
			})
		}, true, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(c.handler())
			defer srv.Close()
			// The dispatcher's timeout, but for the receiver that never
			// answers: its run waits for it once.
			timeout := app.DeliveryTimeout
			if len(c.want) > 0 && c.want[len(c.want)-1] == "responde-a-tempo" {
				timeout = 500 * time.Millisecond
			}
			tester := app.NewTester(callback.Policy{Insecure: c.insecure}, timeout, nil, "teste")
			if c.name == "answers each request slowly" {
				// A budget its answers spend before the last check.
				tester.Budget = 300 * time.Millisecond
			}
			rep := tester.Run(context.Background(), app.TestTarget{URL: srv.URL + "/geohub", Secret: []byte(secret)})
			if c.name == "answers each request slowly" {
				notRun := 0
				for _, v := range rep.Verificacoes {
					if strings.HasPrefix(v.Detalhe, "não executada") {
						notRun++
					}
				}
				if rep.Aprovado || notRun == 0 || len(failed(rep)) != 0 {
					js, _ := json.MarshalIndent(rep, "", "  ")
					t.Fatalf("a run cut by its budget: %d not run\n%s", notRun, js)
				}
				return
			}
			if got := failed(rep); !slices.Equal(got, c.want) || rep.Aprovado != (len(c.want) == 0) {
				js, _ := json.MarshalIndent(rep, "", "  ")
				t.Fatalf("failed %v, want %v\n%s", got, c.want, js)
			}
			if c.insecure && len(rep.Verificacoes) != len(app.TestChecks) {
				t.Fatalf("%d checks, want %d", len(rep.Verificacoes), len(app.TestChecks))
			}
			for _, v := range rep.Verificacoes {
				if v.Resultado != app.TesteOK && v.Detalhe == "" {
					t.Errorf("%s is %s and says nothing of what to fix", v.ID, v.Resultado)
				}
				if v.Resultado == app.TesteFalhou && !strings.Contains(strings.Join(c.want, " "), v.ID) {
					t.Errorf("%s failed: %s", v.ID, v.Detalhe)
				}
			}
		})
	}
}

// A receiver that is not up fails aceita-valido with the reason, and the
// checks after it are not run rather than each failing the same way.
func TestTheTesterStopsAtAReceiverThatIsNotUp(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	rep := app.NewTester(callback.Policy{Insecure: true}, 0, nil, "teste").Run(context.Background(),
		app.TestTarget{URL: url, Secret: []byte(app.NewSecret())})
	if got := failed(rep); rep.Aprovado || !slices.Equal(got, []string{"aceita-valido"}) {
		t.Fatalf("failed %v, aprovado %v", got, rep.Aprovado)
	}
	for _, c := range rep.Verificacoes[1:] {
		if c.ID != "https" && !strings.HasPrefix(c.Detalhe, "não executada") {
			t.Errorf("%s ran against a receiver that is not up: %s", c.ID, c.Detalhe)
		}
	}
}
