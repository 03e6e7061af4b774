package app_test

import (
	"testing"
	"time"

	"geohub/app"
	"geohub/app/redact"
	"geohub/store/storetest"
)

// twoRegistries are two replicas' registries on one database.
func twoRegistries(t *testing.T) (storetest.Store, *app.Registry, *app.Registry) {
	t.Helper()
	db := storetest.Open(t, time.Now)
	var regs [2]*app.Registry
	for i := range regs {
		var err error
		if regs[i], err = app.NewRegistry(t.Context(), db, time.Now); err != nil {
			t.Fatal(err)
		}
	}
	return db, regs[0], regs[1]
}

// Two registries on one database, as two replicas have (issue 27, B1): a
// version the other stored first is taken as stored, not left unknown
// until a restart, and what one registers or descontinues, the other
// adopts at its next Refresh (Follow runs it every SharedRefresh).
func TestRegistriesOnOneDatabaseAgree(t *testing.T) {
	_, a, b := twoRegistries(t)
	status := func(r *app.Registry, key string) string {
		for _, tv := range r.List() {
			if tv.Tipo+"@"+tv.Versao == key {
				return tv.Status
			}
		}
		return ""
	}
	tv := app.TypeVersion{Tipo: "teste:replica", Versao: "1.0.0", Audiencia: app.AudienciaTodos,
		Schema: []byte(`{"type":"object"}`), Redacao: redact.Rules{Manter: []string{""}}}
	if _, created, err := a.Register(t.Context(), tv); err != nil || !created {
		t.Fatalf("register on A: %v %v", created, err)
	}
	if _, created, err := b.Register(t.Context(), tv); err != nil || created {
		t.Fatalf("the same registration on B: %v %v", created, err)
	}
	if got := status(b, "teste:replica@1.0.0"); got != app.StatusAtivo {
		t.Fatalf("B refuses the version A stored first: %q", got)
	}

	other := tv
	other.Tipo = "teste:outra"
	if _, _, err := a.Register(t.Context(), other); err != nil {
		t.Fatal(err)
	}
	if _, err := a.SetStatus(t.Context(), "teste:replica", "1.0.0", app.StatusDeprecado); err != nil {
		t.Fatal(err)
	}
	if err := b.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := status(b, "teste:outra@1.0.0"); got != app.StatusAtivo {
		t.Fatalf("B does not know a type A registered: %q", got)
	}
	if got := status(b, "teste:replica@1.0.0"); got != app.StatusDeprecado {
		t.Fatalf("B still takes a version A descontinued: %q", got)
	}
}

// A token revoked on one replica is refused on another within a second
// (issue 27): the other's cache held it for 30 s.
func TestRevokedTokenStopsOnEveryReplicaWithinASecond(t *testing.T) {
	db := storetest.Open(t, time.Now)
	clock := &fakeClock{now: time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)}
	a := &app.Auth{Store: db, Now: clock.Now}
	b := &app.Auth{Store: db, Now: clock.Now}
	secret, tok, err := a.CreateToken(t.Context(), app.PapelLeitor, "painel")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Authenticate(t.Context(), secret); err != nil {
		t.Fatal(err) // now in B's cache
	}
	if err := a.RevokeToken(t.Context(), tok.ID); err != nil {
		t.Fatal(err)
	}
	clock.Add(app.SharedRefresh + time.Millisecond)
	if _, err := b.Authenticate(t.Context(), secret); app.ErrorCode(err) != app.EUnauthorized {
		t.Fatalf("B still accepts the token revoked on A a second later: %v", err)
	}
}

// A publish on B of a type A registered a moment ago is accepted though
// B has not refreshed yet (read-through on a miss, issue 27): the
// notification of the registration may come after the publish.
func TestAVersionRegisteredElsewhereIsReadThroughOnAMiss(t *testing.T) {
	db, a, b := twoRegistries(t)
	if _, _, err := a.Register(t.Context(), app.TypeVersion{Tipo: "teste:leitura", Versao: "1.0.0", Audiencia: app.AudienciaTodos,
		Schema: []byte(`{"type":"object"}`), Redacao: redact.Rules{Manter: []string{""}}}); err != nil {
		t.Fatal(err)
	}
	pub := &app.Publisher{Log: db, Registry: b, Now: time.Now}
	if _, created, err := pub.Publish(t.Context(), app.PublishRequest{Tipo: "teste:leitura", Origem: "teste",
		Payload: []byte(`{}`)}); err != nil || !created {
		t.Fatalf("publish on B of a type registered on A: %v %v", created, err)
	}
}
