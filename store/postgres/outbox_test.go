package postgres_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"geohub/store/storetest"
)

// The outbox's delivery side, the integrators and the attempts' tail, as
// every backend runs them (storetest).
func TestOutboxConformance(t *testing.T) {
	storetest.OutboxConformance(t, func(t *testing.T) storetest.OutboxUnderTest {
		url := freshDatabase(t)
		db := open(t, url)
		c := raw(t, url)
		return storetest.OutboxUnderTest{DB: db, Audits: func(t *testing.T) []string {
			rows, err := c.Query(t.Context(), `SELECT acao FROM audit_log ORDER BY id`)
			if err != nil {
				t.Fatal(err)
			}
			out, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			return out
		}, AgeLeases: func(t *testing.T, d time.Duration) {
			if _, err := c.Exec(t.Context(), `UPDATE outbox SET lease_ate = lease_ate - $1 WHERE lease_ate IS NOT NULL`,
				d.Milliseconds()); err != nil {
				t.Fatal(err)
			}
		}}
	})
}
