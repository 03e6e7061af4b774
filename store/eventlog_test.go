package store_test

import (
	"testing"
	"time"

	"geohub/app"
	"geohub/store/storetest"
)

// The event log's contract, as every backend runs it (storetest), on this
// build's SQLite driver.
func TestEventLogConformance(t *testing.T) {
	storetest.EventLogConformance(t, func(t *testing.T) storetest.EventLogUnderTest {
		db := mustOpen(t)
		return storetest.EventLogUnderTest{Log: db,
			AddIntegrator: func(t *testing.T, id string) {
				now := time.Now()
				in := app.Integrator{ID: id, Nome: id, CallbackURL: "https://" + id + ".exemplo.gov.br", Ativo: true,
					HostsPermitidos: []string{id + ".exemplo.gov.br"}, Eventos: []string{"*"}, CriadoEm: now, AtualizadoEm: now}
				if err := db.InsertIntegrator(t.Context(), in, []byte("sealed"), "hash-"+id, nil); err != nil {
					t.Fatal(err)
				}
			},
			Outbox: func(t *testing.T, eventID string) []storetest.OutboxRow {
				dels, _, err := db.Deliveries(t.Context(), app.DeliveryFilter{EventID: eventID, Limite: app.MaxLimite})
				if err != nil {
					t.Fatal(err)
				}
				var out []storetest.OutboxRow
				for _, d := range dels {
					out = append(out, storetest.OutboxRow{Integrador: d.Integrador, Agregado: d.Agregado, Sequencia: d.Sequencia})
				}
				return out
			}}
	})
}
