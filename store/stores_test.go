package store_test

import (
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"geohub/app"
	"geohub/store"
	"geohub/store/storetest"
)

// The contracts of every store but the outbox's and the integrators', as
// every backend runs them (storetest), on this build's SQLite driver.
func TestStoresConformance(t *testing.T) {
	storetest.StoresConformance(t, func(t *testing.T, now func() time.Time) storetest.StoresUnderTest {
		path := filepath.Join(t.TempDir(), store.FileName)
		db, err := store.Open(t.Context(), path, store.Options{Now: now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		raw, err := sql.Open(store.DriverName, store.DSN(path, false))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { raw.Close() })
		return storetest.StoresUnderTest{DB: db,
			AddIntegrator: func(t *testing.T, id string) {
				now := time.Now()
				in := app.Integrator{ID: id, Nome: id, CallbackURL: "https://" + id + ".exemplo.gov.br", Ativo: true,
					HostsPermitidos: []string{id + ".exemplo.gov.br"}, Eventos: []string{"*"}, CriadoEm: now, AtualizadoEm: now}
				if err := db.InsertIntegrator(t.Context(), in, []byte("sealed"), "hash-"+id, nil); err != nil {
					t.Fatal(err)
				}
			},
			Exec: func(t *testing.T, stmt string) error {
				_, err := raw.ExecContext(t.Context(), stmt)
				return err
			},
			DLQRow: func(t *testing.T, eventID, colonia string) (string, int, bool) {
				var st string
				var n int
				var resolvido sql.NullInt64
				if err := raw.QueryRowContext(t.Context(), `SELECT status, tentativas, resolvido_em FROM dead_letter_queue
					WHERE event_id = ? AND colonia = ?`, eventID, colonia).Scan(&st, &n, &resolvido); err != nil {
					t.Fatal(err)
				}
				return st, n, resolvido.Valid
			},
		}
	})
}

func TestKeyCheckConformance(t *testing.T) { storetest.KeyCheckConformance(t, "sqlite") }
