package simulator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestRunScenarios runs the trickle against the fake API, which answers
// the commands and delivers the webhooks (the CAD's echoes and the
// outcomes) to the CAD's receiver. An operator dispatches one more recurso
// just before the first close, which is therefore refused: that scenario
// ends there and the others go on. In the end the CAD's projection of
// every ocorrência equals the API's.
func TestRunScenarios(t *testing.T) {
	api := newFakeAPI(t, nil)
	logs := &lockedWriter{w: &strings.Builder{}}
	c, _ := newTestCAD(t, api, func(cfg *Config) {
		cfg.Rand = rand.New(rand.NewPCG(7, 7))
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	api.deliver = c.Handler()
	api.fail = 1 // the very first command meets a 503
	api.beforeClose = func(f *fakeAPI, ocID string) { f.operatorDispatch(ocID, "VTR-99") }

	const count = 4
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := c.Run(ctx, RunConfig{Count: count, MaxLive: 2, Interval: time.Millisecond,
		StepMin: time.Millisecond, StepMax: 2 * time.Millisecond, CancelChance: 0.3, SecondChance: 0.5})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}

	p := c.Projection()
	ocs := p.Ocorrencias()
	if len(ocs) != count {
		t.Fatalf("%d ocorrências, want %d", len(ocs), count)
	}
	closed, refused := 0, 0
	for _, o := range ocs {
		server, err := c.Get(ctx, o.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(o, server) {
			t.Errorf("CAD projection differs from Geohub's:\n%s\nwant:\n%s", mustJSON(t, o), mustJSON(t, server))
		}
		if !strings.Contains("incendio acidente_transito resgate atendimento_medico alagamento queda_arvore", o.Natureza) {
			t.Errorf("natureza %q", o.Natureza)
		}
		if o.Status == StatusEncerrada {
			closed++
		}
		for _, d := range o.Despachos {
			switch {
			case d.Recurso.Identificador == "VTR-99":
				refused++
				if o.Status == StatusEncerrada || d.Status != DespachoEmDeslocamento {
					t.Errorf("operator's despacho: %+v in %s", d, o.Status)
				}
			case d.Status != DespachoLiberado && d.Status != DespachoCancelado:
				t.Errorf("despacho left %s: %+v", d.Status, d)
			}
		}
		if n := len(o.Despachos); n < 1 || n > 3 {
			t.Errorf("%d despachos", n)
		}
	}
	if closed != count-1 || refused != 1 {
		t.Errorf("%d closed, %d refused; want %d and 1", closed, refused, count-1)
	}
	outs := p.Outcomes()
	if len(outs) != api.executed() {
		t.Errorf("%d outcomes for %d commands", len(outs), api.executed())
	}
	for sol, o := range outs {
		if !o.FromResponse || !o.FromEvent {
			t.Errorf("outcome %s came by one path only: %+v", sol, o)
		}
	}
	if !strings.Contains(logs.String(), "scenario failed") {
		t.Errorf("the refused close was not logged:\n%s", logs.String())
	}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprint(l.w)
}

// TestRunStopsOnCancel: with slow steps, Run fills MaxLive scenarios and
// starts no more; on cancel it returns once every scenario has returned,
// and nothing sends after. It runs in a synctest bubble, with the API
// served in memory: synctest.Wait returns once every goroutine is blocked,
// which is the moment a fourth scenario or a leftover sender would have
// shown itself, with no wall time spent waiting for it.
func TestRunStopsOnCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newFakeAPI(t, nil)
		c := New(Config{BaseURL: "http://geohub.invalid/", APIKey: apiKey, Secret: secret, Self: self,
			HTTPClient: &http.Client{Transport: inMemory{api}}})
		var waiting atomic.Int32
		c.wait = func(ctx context.Context, d time.Duration) error {
			waiting.Add(1)
			defer waiting.Add(-1)
			return sleep(ctx, d)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- c.Run(ctx, RunConfig{MaxLive: 3, Interval: time.Millisecond, StepMin: time.Hour})
		}()
		// The bubble's clock: three intervals pass at once, and the
		// scenarios' hour-long steps do not.
		<-time.After(3 * time.Millisecond)
		synctest.Wait()
		if n := len(c.Projection().Ocorrencias()); n != 3 {
			t.Errorf("%d live scenarios, MaxLive is 3", n)
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v", err)
		}
		if n := waiting.Load(); n != 0 {
			t.Errorf("%d goroutines still waiting after Run returned", n)
		}
		before := api.executed()
		synctest.Wait()
		if api.executed() != before {
			t.Error("commands sent after Run returned")
		}
	})
}

// inMemory serves a client's requests with a handler in this process, so
// that a test in a synctest bubble has no network to wait on.
type inMemory struct{ h http.Handler }

func (m inMemory) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body == nil {
		r.Body = http.NoBody
	}
	rec := httptest.NewRecorder()
	m.h.ServeHTTP(rec, r)
	return rec.Result(), nil
}

func TestRunConfigDefaults(t *testing.T) {
	r := RunConfig{}.withDefaults()
	if r.Interval != 8*time.Second || r.MaxLive != 5 || r.StepMin != 2*time.Second || r.StepMax != 6*time.Second ||
		r.Center != (Local{Lat: -22.9056, Lng: -47.0608}) || r.CancelChance != 0.15 {
		t.Errorf("defaults: %+v", r)
	}
	c := New(Config{Rand: rand.New(rand.NewPCG(1, 2))})
	for range 200 {
		req, recursos := c.newRegister(r)
		if req.Natureza == "" || req.Descricao == "" || req.Endereco == "" || req.Local == nil {
			t.Fatalf("register: %+v", req)
		}
		if d := (req.Local.Lat-r.Center.Lat)*(req.Local.Lat-r.Center.Lat) + (req.Local.Lng-r.Center.Lng)*(req.Local.Lng-r.Center.Lng); d > r.Radius*r.Radius*1.0001 {
			t.Fatalf("local %+v outside the radius", req.Local)
		}
		if len(recursos) < 1 || len(recursos) > 2 || (len(recursos) == 2 && recursos[0] == recursos[1]) {
			t.Fatalf("recursos %v", recursos)
		}
	}
}
