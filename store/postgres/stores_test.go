package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"geohub/app"
	"geohub/app/ocorrencia"
	"geohub/store/postgres"
	"geohub/store/storetest"
)

func TestStoresConformance(t *testing.T) {
	storetest.StoresConformance(t, func(t *testing.T, now func() time.Time) storetest.StoresUnderTest {
		url := freshDatabase(t)
		db, err := postgres.Open(context.Background(), url, postgres.Options{Now: now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		c := raw(t, url)
		var mu sync.Mutex // a pgx.Conn serves one statement at a time
		return storetest.StoresUnderTest{DB: db,
			AddIntegrator: func(t *testing.T, id string) {
				mu.Lock()
				defer mu.Unlock()
				now := time.Now().UnixMilli()
				if _, err := c.Exec(t.Context(), `INSERT INTO integrator (id, nome, callback_url, hosts_permitidos,
					eventos, ativo, segredo, api_key_hash, criado_em, atualizado_em)
					VALUES ($1, $1, 'https://x.exemplo.gov.br', '[]', '["*"]', true, 'sealed', 'hash-' || $1, $2, $2)`,
					id, now); err != nil {
					t.Fatal(err)
				}
			},
			Exec: func(t *testing.T, stmt string) error {
				mu.Lock()
				defer mu.Unlock()
				_, err := c.Exec(t.Context(), stmt)
				return err
			},
			DLQRow: func(t *testing.T, eventID, colonia string) (string, int, bool) {
				mu.Lock()
				defer mu.Unlock()
				var st string
				var n int
				var resolvido *int64
				if err := c.QueryRow(t.Context(), `SELECT status, tentativas, resolvido_em FROM dead_letter_queue
					WHERE event_id = $1 AND colonia = $2`, eventID, colonia).Scan(&st, &n, &resolvido); err != nil {
					t.Fatal(err)
				}
				return st, n, resolvido != nil
			},
		}
	})
}

// Two admins on two replicas deactivating each other at once: in SQLite
// the one writer serialises the two changes, so the second finds its actor
// no longer an admin. Across replicas the accounts lock does: at most one
// of each pair succeeds, and an active admin always remains.
func TestAdminsDeactivatingEachOtherOnTwoReplicasLeaveOne(t *testing.T) {
	t.Parallel()
	url := freshDatabase(t)
	a, b := open(t, url), open(t, url)
	ctx := t.Context()
	now := time.Now()
	for round := range 20 {
		x := app.Operator{ID: uuid.NewString(), Login: "x" + uuid.NewString()[:8], Papel: app.PapelAdmin, CriadoEm: now, Ativo: true}
		y := app.Operator{ID: uuid.NewString(), Login: "y" + uuid.NewString()[:8], Papel: app.PapelAdmin, CriadoEm: now, Ativo: true}
		for _, o := range []app.Operator{x, y} {
			if _, err := a.InsertOperator(ctx, "", o, "h", nil); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		var errX, errY error
		wg.Go(func() { errX = a.SetOperatorActive(ctx, x.ID, y.ID, false, nil) })
		wg.Go(func() { errY = b.SetOperatorActive(ctx, y.ID, x.ID, false, nil) })
		wg.Wait()
		for _, err := range []error{errX, errY} {
			if err != nil && app.ErrorCode(err) != app.EForbidden {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if (errX == nil) == (errY == nil) {
			t.Fatalf("round %d: x's change %v, y's %v; want exactly one to succeed", round, errX, errY)
		}
	}
}

// Replicas projecting one ocorrência at once: the newest fold stays,
// whichever commits last.
func TestConcurrentSavesAcrossReplicasKeepTheNewestFold(t *testing.T) {
	t.Parallel()
	url := freshDatabase(t)
	replicas := []*postgres.DB{open(t, url), open(t, url), open(t, url)}
	ctx := t.Context()
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	id := uuid.NewString()
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Go(func() {
			db := replicas[i%len(replicas)]
			var d []ocorrencia.Despacho
			for j := range i % 5 {
				d = append(d, ocorrencia.Despacho{ID: fmt.Sprintf("d%d", j), OcorrenciaID: id,
					Recurso: ocorrencia.Recurso{Identificador: "UR"}, Status: ocorrencia.NoLocal})
			}
			s := ocorrencia.Summary{Ocorrencia: ocorrencia.Ocorrencia{ID: id, Natureza: "incendio",
				Status: ocorrencia.EmAtendimento, Versao: 1 + i, Despachos: d},
				RegistradaEm: at, AtualizadaEm: at, Cursor: 1, UltimaSequencia: int64(100 + i)}
			if err := db.SaveOcorrencia(ctx, s); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	got, _, err := replicas[0].Ocorrencias(ctx, ocorrencia.Filter{Limite: 10})
	if err != nil || len(got) != 1 {
		t.Fatalf("%d rows, %v", len(got), err)
	}
	if got[0].UltimaSequencia != 159 || len(got[0].Despachos) != 59%5 {
		t.Fatalf("stored fold of sequence %d with %d despachos, want 159 with %d", got[0].UltimaSequencia,
			len(got[0].Despachos), 59%5)
	}
}
