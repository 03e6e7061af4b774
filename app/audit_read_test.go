package app_test

import (
	"context"
	"testing"

	"geohub/app"
	"geohub/store/storetest"
)

// An operador reads the trail without the admin's rows; anyone may leave
// out what the integrators' keys did. On both stores.
func TestTheTrailAsEachRoleReadsIt(t *testing.T) {
	k := storetest.New(t, storetest.Options{})
	ctx := context.Background()
	as := func(tipo, id string) context.Context {
		return app.WithActor(ctx, app.Actor{Tipo: tipo, ID: id, Nome: id})
	}
	for _, e := range []struct {
		ctx  context.Context
		acao string
	}{
		{as(app.ActorOperador, "ana"), app.AcaoLogin},
		{as(app.ActorOperador, "ana"), app.AcaoTokenCriar},
		{as(app.ActorOperador, "ana"), app.AcaoEntregaReenviar},
		{as(app.ActorIntegrador, "cad"), app.AcaoIntegradorSegredoRotacionar},
	} {
		if err := k.AuditTrail.Record(e.ctx, app.NewAudit(e.ctx, e.acao, app.AuditTarget{Tipo: "teste", ID: "x"})); err != nil {
			t.Fatal(err)
		}
	}
	acoes := func(p app.AuditPage) map[string]bool {
		m := map[string]bool{}
		for _, r := range p.Linhas {
			m[r.Acao] = true
		}
		return m
	}
	all, err := k.AuditTrail.ListFor(ctx, app.PapelAdmin, "", app.AuditFilter{})
	if err != nil || len(all.Linhas) != 4 {
		t.Fatalf("the admin reads %d rows (%v), want 4", len(all.Linhas), err)
	}
	op, err := k.AuditTrail.ListFor(ctx, app.PapelOperador, "", app.AuditFilter{})
	if got := acoes(op); err != nil || len(op.Linhas) != 2 || got[app.AcaoLogin] || got[app.AcaoTokenCriar] {
		t.Fatalf("the operador reads %v (%v)", got, err)
	}
	sem, err := k.AuditTrail.ListFor(ctx, app.PapelOperador, "", app.AuditFilter{SemIntegradores: true})
	if got := acoes(sem); err != nil || len(sem.Linhas) != 1 || !got[app.AcaoEntregaReenviar] {
		t.Fatalf("without the CADs' rows: %v (%v)", got, err)
	}
}
