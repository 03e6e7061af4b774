package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"geohub/app"
	"geohub/app/callback"
	"geohub/app/redact"
	"geohub/store/storetest"
)

// Two replicas of one PostgreSQL database (SPEC 12), each its own pool,
// writer and service graph: the limits and locks one process used to hold
// in memory hold across them.
func TestSharedStateHoldsAcrossReplicas(t *testing.T) {
	url := storetest.PostgresDatabase(t)
	const senha = "senha-do-admin-1"
	replica := func(name string, tune func(*app.Services)) *storetest.Kit {
		return storetest.New(t, storetest.Options{Postgres: url, AdminPassword: senha, BuiltinTypes: true,
			Deps: app.Deps{Policy: callback.Policy{Insecure: true}, Version: name},
			Tune: func(s *app.Services) {
				s.Dispatcher.Signals.Circuit.Init()
				if tune != nil {
					tune(s)
				}
			}})
	}
	a := replica("replica-a", nil)
	ctx := t.Context()
	// Registered before B starts: B's registry reads it at New.
	if _, _, err := a.Registry.Register(ctx, app.TypeVersion{Tipo: "teste:b", Versao: "1.0.0", Audiencia: app.AudienciaTodos,
		Schema: json.RawMessage(`{"type":"object"}`), Redacao: redact.Rules{Manter: []string{""}}}); err != nil {
		t.Fatal(err)
	}
	b := replica("replica-b", nil)
	both := []*storetest.Kit{a, b}

	t.Run("failed logins split across replicas lock the login", func(t *testing.T) {
		for i := range 5 {
			_, _, err := both[i%2].Sessions.Login(ctx, "admin", "senha-errada-00", fmt.Sprintf("192.0.2.%d", i))
			if app.ErrorCode(err) != app.EUnauthorized {
				t.Fatalf("guess %d: %v", i+1, err)
			}
		}
		for _, k := range both {
			if _, _, err := k.Sessions.Login(ctx, "admin", senha, "198.51.100.7"); app.ErrorCode(err) != app.ERateLimited {
				t.Fatalf("the right password after five guesses on two replicas: %v, want %s", err, app.ERateLimited)
			}
		}
	})

	t.Run("a DLQ reprocess on one replica holds the other back for the minute", func(t *testing.T) {
		if _, err := a.Consumers.ReprocessDLQ(ctx, "ocorrencias"); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Consumers.ReprocessDLQ(ctx, "ocorrencias"); app.ErrorCode(err) != app.ERateLimited {
			t.Fatalf("second reprocess on the other replica: %v, want %s", err, app.ERateLimited)
		}
	})

	t.Run("one command sent to both replicas at once runs once, and both get its answer", func(t *testing.T) {
		for range 5 {
			cmd := app.Command{Operador: "operador-1", Solicitacao: uuid.NewString(), Metodo: http.MethodPost,
				Rota: "/api/ocorrencias", Body: []byte(`{"natureza": "incendio", "endereco": "Rua A, 10"}`)}
			outs := make([]app.Outcome, 2)
			var wg sync.WaitGroup
			for i, k := range both {
				wg.Go(func() {
					o, err := k.Ocorrencias.Register(context.Background(), cmd)
					if err != nil {
						t.Error(err)
					}
					outs[i] = o
				})
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			if outs[0].Status != http.StatusCreated || outs[0].Status != outs[1].Status ||
				!bytes.Equal(outs[0].Body, outs[1].Body) || outs[0].Repeat == outs[1].Repeat {
				t.Fatalf("answers differ: %d %s (repeat %v) and %d %s (repeat %v)", outs[0].Status, outs[0].Body,
					outs[0].Repeat, outs[1].Status, outs[1].Body, outs[1].Repeat)
			}
			evs, _, err := a.DB.Events(ctx, app.EventFilter{CorrelacaoID: cmd.Solicitacao, Limite: 100})
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) != 2 { // ocorrencia:registrada and its outcome, once
				t.Fatalf("%d events for one command, want 2", len(evs))
			}
		}
	})

	// No lock holds commands apart (issue 27): each decides on the
	// ocorrência as stored when it ran, and is stored only if nothing was
	// appended to it since, or runs again.
	t.Run("commands on one ocorrência sent to both replicas at once each decide on the other's result", func(t *testing.T) {
		out, err := a.Ocorrencias.Register(ctx, app.Command{Operador: "operador-1", Solicitacao: uuid.NewString(),
			Metodo: http.MethodPost, Rota: "/api/ocorrencias", Body: []byte(`{"natureza": "incendio"}`)})
		if err != nil || out.Status != http.StatusCreated {
			t.Fatalf("register: %d %s %v", out.Status, out.Body, err)
		}
		var created struct{ ID string }
		if err := json.Unmarshal(out.Body, &created); err != nil {
			t.Fatal(err)
		}
		dispatch := func(k *storetest.Kit, recurso string) app.Outcome {
			o, err := k.Ocorrencias.Dispatch(context.Background(), app.Command{Operador: "operador-1",
				Solicitacao: uuid.NewString(), Metodo: http.MethodPost, Rota: "/api/ocorrencias/" + created.ID + "/despachos",
				Body: []byte(`{"recurso": {"identificador": "` + recurso + `"}}`)}, created.ID)
			if err != nil {
				t.Error(err)
			}
			return o
		}
		const n = 8
		var mu sync.Mutex
		statuses := map[int]int{}
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				o := dispatch(both[i%2], "UR-01") // the same vehicle: one dispatch, the rest refused
				mu.Lock()
				statuses[o.Status]++
				mu.Unlock()
			})
			wg.Go(func() { dispatch(both[i%2], fmt.Sprintf("ABT-%02d", i)) }) // another vehicle each
		}
		wg.Wait()
		if statuses[http.StatusCreated] != 1 || statuses[http.StatusConflict] != n-1 {
			t.Fatalf("%d dispatches of one vehicle at once answered %v; want one 201 and the rest 409", n, statuses)
		}
		o, err := b.Ocorrencias.Get(ctx, created.ID, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(o.Despachos) != n+1 {
			t.Fatalf("the ocorrência has %d despachos, want %d: none lost, none twice", len(o.Despachos), n+1)
		}
	})

	t.Run("a circuit opened by one replica is open on the other, with the same cooldown", func(t *testing.T) {
		// A's requests fail; B's are held until the end, then succeed: B's
		// breaker can only open by adopting A's. (Answered at once, a
		// request B sent before it adopted the circuit would close it
		// again when its success landed, as any success does.)
		held := make(chan struct{})
		rc := newReceiver(t, func(_ int, r *http.Request) int {
			if strings.Contains(r.UserAgent(), "replica-b") {
				select {
				case <-held:
				case <-r.Context().Done():
				}
				return http.StatusNoContent
			}
			return http.StatusInternalServerError
		})
		t.Cleanup(func() { close(held) }) // before the receiver closes, which waits for its handlers
		in, err := a.Integrators.Create(ctx, app.NewIntegrator{Nome: "CAD falhando", CallbackURL: rc.URL + "/geohub/eventos",
			HostsPermitidos: []string{"127.0.0.1"}})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 20 {
			if _, _, err := a.Publisher.Publish(ctx, app.PublishRequest{Tipo: "teste:b", Origem: "teste",
				Agregado: fmt.Sprintf("unidade:%d", i), Payload: json.RawMessage(`{"n": 1}`)}); err != nil {
				t.Fatal(err)
			}
		}
		opened := func(k *storetest.Kit) {
			t.Helper()
			for {
				c, ok := k.Dispatcher.Signals.Circuit.Wait(30 * time.Second)
				if !ok {
					t.Fatal("the circuit did not open")
				}
				if c.Integrador == in.ID && c.Open {
					return
				}
			}
		}
		opened(a)
		opened(b) // adopted: B's own attempts all succeed
		ga, err := a.Integrators.Get(ctx, in.ID)
		if err != nil {
			t.Fatal(err)
		}
		gb, err := b.Integrators.Get(ctx, in.ID)
		if err != nil {
			t.Fatal(err)
		}
		ca, cb := ga.Circuito, gb.Circuito
		if cb.Estado != app.CircuitoAberto && cb.Estado != app.CircuitoMeioAberto || cb.Ate == nil && ca.Ate != nil ||
			ca.Ate != nil && !ca.Ate.Equal(*cb.Ate) || !ca.Desde.Equal(*cb.Desde) {
			t.Fatalf("circuits differ: A %+v, B %+v", ca, cb)
		}
	})
}
