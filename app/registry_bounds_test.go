package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"geohub/app"
	"geohub/app/keys"
	"geohub/app/redact"
	"geohub/store/storetest"
)

// boundsChainSchema is the reviewer's schema of n anyOf links under /x,
// each two $refs to the next, the last a string: it expands to 2^(n+2)-1
// subschemas, and a wrong x meets all but the root, 2^n of them the string.
func boundsChainSchema(n int) json.RawMessage {
	var defs []string
	for i := range n {
		next := fmt.Sprintf(`{"$ref":"#/$defs/d_%d"}`, i+1)
		defs = append(defs, fmt.Sprintf(`"d_%d":{"anyOf":[%s,%s]}`, i, next, next))
	}
	defs = append(defs, fmt.Sprintf(`"d_%d":{"type":"string"}`, n))
	return json.RawMessage(`{"type":"object","properties":{"x":{"$ref":"#/$defs/d_0"}},"$defs":{` + strings.Join(defs, ",") + `}}`)
}

func boundsType(tipo string, schema json.RawMessage) app.TypeVersion {
	return app.TypeVersion{Tipo: tipo, Versao: "1.0.0", Status: app.StatusAtivo, Audiencia: app.AudienciaTodos,
		Schema: schema, Redacao: redact.Rules{Manter: []string{""}}}
}

func TestSchemaStoredPastTheBoundStillLoadsAndItsPublishesAreBounded(t *testing.T) {
	ctx := context.Background()
	db := storetest.Open(t, time.Now)
	// Written as an older Geohub would have: straight to the store.
	wide, wider := boundsType("teste:largo", boundsChainSchema(16)), boundsType("teste:mais-largo", boundsChainSchema(20))
	for _, tv := range []app.TypeVersion{wide, wider} {
		tv.CriadoEm = time.Now().UTC()
		if _, _, err := db.InsertTypeVersion(ctx, tv, nil); err != nil {
			t.Fatal(err)
		}
	}
	reg, err := app.NewRegistry(ctx, db, time.Now)
	if err != nil {
		t.Fatalf("a data directory holding a schema past the bound must still start: %v", err)
	}
	if _, created, err := reg.Register(ctx, wide); err != nil || created {
		t.Fatalf("identical re-registration: created=%v, %v; want 200", created, err)
	}
	next := wide
	next.Versao = "1.0.1"
	_, _, err = reg.Register(ctx, next)
	if e := (*app.Error)(nil); !errors.As(err, &e) || e.Code != app.EInvalid || len(e.Details) != 1 ||
		e.Details[0].Caminho != "/schema/$defs/d_4" {
		t.Fatalf("a new version of it: %v, want 422 at /schema/$defs/d_4", err)
	}

	pub := &app.Publisher{Log: db, Registry: reg, RedactionKey: keys.Redaction(make([]byte, 32)), Now: time.Now}
	publish := func(tipo string) *app.Error {
		_, _, err := pub.Publish(ctx, app.PublishRequest{Tipo: tipo, Origem: "rh", Payload: json.RawMessage(`{"x":1}`)})
		var e *app.Error
		if !errors.As(err, &e) || e.Code != app.EInvalid {
			t.Fatalf("publish %s: %v, want 422", tipo, err)
		}
		return e
	}
	// 2^18 steps: validated, 2^16 findings (one per path to the string),
	// 100 of them in the answer.
	e := publish(wide.Tipo)
	if len(e.Details) != app.MaxDetalhes || e.Details[app.MaxDetalhes-1] != (app.Detail{Caminho: "/payload",
		Mensagem: fmt.Sprintf("e mais %d erros não listados", 1<<16-(app.MaxDetalhes-1))}) {
		t.Fatalf("findings: %d, last %+v", len(e.Details), e.Details[len(e.Details)-1])
	}
	// 2^22 steps: refused before the validator runs, where the count passed.
	e = publish(wider.Tipo)
	if len(e.Details) != 1 || e.Details[0].Caminho != "/payload/x" ||
		!strings.Contains(e.Details[0].Mensagem, fmt.Sprint(app.MaxValidationSteps)) {
		t.Fatalf("findings %+v, want one at /payload/x naming %d steps", e.Details, app.MaxValidationSteps)
	}
	if n, err := db.CountEvents(ctx); err != nil || n != 0 {
		t.Fatalf("log holds %d events (%v)", n, err)
	}
}
