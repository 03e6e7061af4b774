package store_test

import (
	"slices"
	"testing"

	"geohub/app"
	"geohub/store/storetest"
)

// The outbox's delivery side, the integrators and the attempts' tail, as
// every backend runs them (storetest), on this build's SQLite driver.
func TestOutboxConformance(t *testing.T) {
	storetest.OutboxConformance(t, func(t *testing.T) storetest.OutboxUnderTest {
		db := mustOpen(t)
		return storetest.OutboxUnderTest{DB: db, Audits: func(t *testing.T) []string {
			rows, _, err := db.AuditEntries(t.Context(), app.AuditFilter{Limite: app.MaxLimite})
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, e := range rows {
				out = append(out, e.Acao)
			}
			slices.Reverse(out) // newest first there
			return out
		}}
	})
}
