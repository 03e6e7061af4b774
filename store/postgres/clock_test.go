package postgres_test

import (
	"testing"
	"time"

	"geohub/app"
	"geohub/store/postgres"
)

// A replica whose clock runs ten minutes ahead tells the time by the
// database's (issue 27): its store, and every service app.New builds on
// it, read the database's clock, within half a round trip, so it neither
// retries early nor dates the audit trail or the login window in the
// future.
func TestAReplicaWithAClockAheadReadsTheDatabasesClock(t *testing.T) {
	t.Parallel()
	url := freshDatabase(t)
	ahead := func() time.Time { return time.Now().Add(10 * time.Minute) }
	db, err := postgres.OpenWithLocalClock(t.Context(), url, ahead)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	near := func(what string, got time.Time) {
		t.Helper()
		if d := got.Sub(time.Now()).Abs(); d > time.Second {
			t.Errorf("%s is %v off the database's clock (its own runs 10 min ahead)", what, d)
		}
	}
	near("the store's clock", db.Clock())
	svc, err := app.New(t.Context(), app.Deps{Store: db, MasterKey: make([]byte, 32)})
	if err != nil {
		t.Fatal(err)
	}
	near("the services' clock", svc.Now())
	if _, _, err := app.RegisterBuiltinTypes(t.Context(), svc.Registry); err != nil {
		t.Fatal(err)
	}
	ev, _, err := svc.Publisher.Publish(t.Context(), app.PublishRequest{Tipo: "integracao:teste", Origem: "teste",
		Payload: []byte(`{"mensagem":"relógio"}`)})
	if err != nil {
		t.Fatal(err)
	}
	near("an event's criado_em", ev.CriadoEm)
}
