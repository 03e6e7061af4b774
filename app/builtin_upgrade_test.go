package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"geohub/app"
	"geohub/app/keys"
	"geohub/store/storetest"
)

// TestUpgradeAddsTheBoundedBuiltinVersions starts on a data directory as
// the binary before the bounds left it (every built-in 1.0.0), as the
// upgraded binary does: the bounded versions are added beside the old
// ones, nothing conflicts, the old ones keep validating as they did, and
// commands record their outcomes in the bounded version, cut to it.
func TestUpgradeAddsTheBoundedBuiltinVersions(t *testing.T) {
	ctx := context.Background()
	db := storetest.Open(t, time.Now)
	reg, err := app.NewRegistry(ctx, db, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	types, err := app.BuiltinTypes()
	if err != nil {
		t.Fatal(err)
	}
	for _, tv := range types {
		if tv.Versao == app.DefaultVersao {
			if _, _, err := reg.Register(ctx, tv); err != nil {
				t.Fatal(err)
			}
		}
	}

	conflicts, reactivated, err := app.RegisterBuiltinTypes(ctx, reg)
	if err != nil || len(conflicts) != 0 || len(reactivated) != 0 {
		t.Fatalf("the upgrade's start: conflicts %v, reactivated %v, err %v", conflicts, reactivated, err)
	}
	for _, key := range []string{"jornada:iniciada", "jornada:encerrada", app.TipoComandoConcluido, app.TipoComandoRecusado} {
		versions, err := reg.Versions(key)
		if err != nil || len(versions) != 2 || versions[0].Status != app.StatusAtivo || versions[1].Status != app.StatusAtivo {
			t.Fatalf("%s after the upgrade: %+v (%v)", key, versions, err)
		}
	}

	pub := &app.Publisher{Log: db, Registry: reg, RedactionKey: keys.Redaction(make([]byte, 32)), Now: time.Now}
	jornada := func(versao string, unidade int) error {
		payload, _ := json.Marshal(map[string]any{"jornadaId": uuid.NewString(), "inicio": "2026-11-30T08:00:00Z",
			"servidor": map[string]any{"nome": "Ana", "cpf": "12345678901"}, "unidade": strings.Repeat("u", unidade)})
		_, _, err := pub.Publish(ctx, app.PublishRequest{Tipo: "jornada:iniciada", VersaoSchema: versao, Origem: "escala", Payload: payload})
		return err
	}
	if err := jornada("1.1.0", 120); err != nil {
		t.Fatalf("a 120-character unidade: %v", err)
	}
	err = jornada("1.1.0", 121)
	if e := (*app.Error)(nil); !errors.As(err, &e) || e.Code != app.EInvalid || len(e.Details) != 1 || e.Details[0].Caminho != "/payload/unidade" {
		t.Fatalf("a 121-character unidade in 1.1.0: %v, want a 422 at /payload/unidade", err)
	}
	// 1.0.0 is what was published: events of producers that name no
	// version are validated as they always were.
	if err := jornada("", 1000); err != nil {
		t.Fatalf("1.0.0 changed: %v", err)
	}

	// A refused command whose route and reason carry 5,000 characters of
	// the request: recorded, in the bounded version, cut to it.
	cmds := &app.Commands{Publisher: pub, Log: db, Key: keys.Command(make([]byte, 32)), Now: time.Now}
	junk := strings.Repeat("x", 5000)
	out, err := cmds.Run(ctx, app.Command{Integrador: "cad-1", Solicitacao: uuid.NewString(), Metodo: "POST",
		Rota: "/api/ocorrencias/" + junk + "/status", Body: []byte(`{"para":"encerrada"}`)},
		func(context.Context) (app.Result, error) {
			return app.Result{}, app.Errorf(app.ENotFound, "ocorrência %s não encontrada", junk)
		})
	if err != nil || out.Status != 404 {
		t.Fatalf("the command: %+v, %v; want its 404 recorded", out, err)
	}
	outcomes, _, err := db.Events(ctx, app.EventFilter{Tipo: app.TipoComandoRecusado, Limite: 10})
	if err != nil || len(outcomes) != 1 {
		t.Fatalf("outcomes: %+v, %v", outcomes, err)
	}
	rec := outcomes[0]
	var p struct {
		Comando struct{ Rota string } `json:"comando"`
		Motivo  struct{ Erro string } `json:"motivo"`
	}
	if err := json.Unmarshal(rec.Payload, &p); err != nil {
		t.Fatal(err)
	}
	if rec.VersaoSchema != app.OutcomeVersao || !strings.HasSuffix(p.Comando.Rota, "…") || len([]rune(p.Comando.Rota)) != 2048 ||
		len([]rune(p.Motivo.Erro)) != 2000 {
		t.Fatalf("outcome %s@%s with a %d-character route and a %d-character reason", rec.Tipo, rec.VersaoSchema,
			len([]rune(p.Comando.Rota)), len([]rune(p.Motivo.Erro)))
	}
}
