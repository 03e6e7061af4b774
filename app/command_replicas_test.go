package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"geohub/app"
	"geohub/app/keys"
	"geohub/store/storetest"
)

// The same command run on replica B while A runs it (sent to both at
// once, or retried on B while A's answer was on its way): B finds no
// outcome, runs the handler and appends its own domain events, but A's
// outcome committed first. B's append must then store nothing and answer
// A's outcome, or the domain events, whose ids are fresh, are stored and
// delivered twice. No lock keeps the two runs apart (issue 27): the
// outcome decides the append.
func TestACommandRunOnTwoReplicasAtOnceIsStoredOnce(t *testing.T) {
	t.Parallel()
	url := storetest.PostgresDatabase(t)
	a := storetest.New(t, storetest.Options{Postgres: url, BuiltinTypes: true})
	for _, tv := range testTypes {
		if _, _, err := a.Registry.Register(t.Context(), tv); err != nil {
			t.Fatal(err)
		}
	}
	b := storetest.New(t, storetest.Options{Postgres: url, BuiltinTypes: true}) // loads A's types at its start
	onB := &app.Commands{Publisher: b.Publisher, Log: b.DB, Key: keys.Command(make([]byte, 32)), Now: time.Now}
	cmd := app.Command{Integrador: "cad-1", Solicitacao: uuid.NewString(), Metodo: "POST", Rota: "/api/teste",
		Body: []byte(`{"n":1}`)}
	handler := func(n int) func(context.Context) (app.Result, error) {
		return func(context.Context) (app.Result, error) {
			return app.Result{Status: 201, Body: map[string]int{"n": n}, Events: []app.PublishRequest{
				{Tipo: "teste:b", Origem: "t", Agregado: "teste:1", Payload: json.RawMessage(fmt.Sprintf(`{"run":%d}`, n))}}}, nil
		}
	}
	var first app.Outcome
	second, err := onB.Run(t.Context(), cmd, func(ctx context.Context) (app.Result, error) {
		// B has looked the outcome up and found none; A runs the whole
		// command now and commits before B appends.
		var err error
		if first, err = a.Commands.Run(ctx, cmd, handler(1)); err != nil {
			t.Errorf("the command on A: %v", err)
		}
		return handler(2)(ctx)
	})
	if err != nil {
		t.Fatalf("the command on B: %v", err)
	}
	if first.Repeat || !second.Repeat || string(second.Body) != string(first.Body) || second.Status != first.Status {
		t.Fatalf("A answered %+v (%s), B %+v (%s): want B to answer A's outcome as a repeat",
			first, first.Body, second, second.Body)
	}
	evs, _, err := a.DB.Events(t.Context(), app.EventFilter{Tipo: "teste:b", Limite: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || string(evs[0].Payload) != `{"run":1}` {
		t.Fatalf("domain events stored: %+v, want A's one", evs)
	}
}

// A command whose ocorrência gets a new event every time it is decided
// (others keep changing it) is not stored on stale state: after its runs
// it answers 503, having published nothing, and the same id runs again.
func TestACommandWhoseAggregateKeepsMovingIsRefusedWithoutStoringAnything(t *testing.T) {
	t.Parallel()
	k := storetest.New(t, storetest.Options{BuiltinTypes: true})
	for _, tv := range testTypes {
		if _, _, err := k.Registry.Register(t.Context(), tv); err != nil {
			t.Fatal(err)
		}
	}
	cmd := app.Command{Integrador: "cad-1", Solicitacao: uuid.NewString(), Metodo: "POST", Rota: "/api/teste",
		Body: []byte(`{"n":1}`)}
	runs := 0
	_, err := k.Commands.Run(t.Context(), cmd, func(ctx context.Context) (app.Result, error) {
		runs++
		read := app.ReadAggregate(ctx, "teste:1")
		evs, _, err := k.DB.Events(ctx, app.EventFilter{Agregado: "teste:1", Limite: 100})
		if err != nil {
			return app.Result{}, err
		}
		last := int64(0)
		if len(evs) > 0 {
			last = evs[len(evs)-1].Sequence
		}
		read(last)
		// Another command changes the aggregate after this one read it.
		if _, _, err := k.Publisher.Publish(ctx, app.PublishRequest{Tipo: "teste:b", Origem: "outro", Agregado: "teste:1",
			Payload: json.RawMessage(`{}`)}); err != nil {
			return app.Result{}, err
		}
		return app.Result{Status: 201, Body: map[string]int{"run": runs}, Events: []app.PublishRequest{
			{Tipo: "teste:b", Origem: "t", Agregado: "teste:1", Payload: json.RawMessage(fmt.Sprintf(`{"run":%d}`, runs))}}}, nil
	})
	if app.ErrorCode(err) != app.EUnavailable || runs < 2 {
		t.Fatalf("after %d runs: %v; want %s", runs, err, app.EUnavailable)
	}
	evs, _, err := k.DB.Events(t.Context(), app.EventFilter{CorrelacaoID: cmd.Solicitacao, Limite: 10})
	if err != nil || len(evs) != 0 {
		t.Fatalf("the refused command stored %+v (%v)", evs, err)
	}
	// Left alone, the same id runs and is stored.
	out, err := k.Commands.Run(t.Context(), cmd, func(ctx context.Context) (app.Result, error) {
		return app.Result{Status: 201, Body: map[string]int{"n": 1}}, nil
	})
	if err != nil || out.Status != 201 || out.Repeat {
		t.Fatalf("the same id once the ocorrência is still: %+v %v", out, err)
	}
}
