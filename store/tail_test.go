package store

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"geohub/app"
)

// tailSeed records n events delivered to two integrators, one attempt each:
// 2n attempts, alternating integrators, tipos t:0..t:2, agregados x:0..x:1.
func tailSeed(t *testing.T, n int) (*DB, string) {
	t.Helper()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), FileName)
	db, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	now := time.Now().UTC().Truncate(time.Millisecond)
	ids := []string{"int-a", "int-b"}
	for _, id := range ids {
		in := app.Integrator{ID: id, Nome: id, CallbackURL: "https://" + id + ".exemplo.gov.br", Ativo: true,
			HostsPermitidos: []string{id + ".exemplo.gov.br"}, Eventos: []string{"*"}, CriadoEm: now, AtualizadoEm: now}
		if err := db.InsertIntegrator(ctx, in, []byte("sealed"), "hash-"+id, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		id := uuid.Must(uuid.NewV7()).String()
		ev := app.Event{EventID: id, Tipo: fmt.Sprintf("t:%d", i%3), VersaoSchema: "1.0.0", Timestamp: now,
			Origem: "teste", CorrelacaoID: id, Payload: json.RawMessage(`{}`)}
		out := &app.Outbox{Body: []byte(`{}`), Agregado: fmt.Sprintf("x:%d", i%2),
			Recipients: func(string) []string { return ids }}
		if _, err := db.Append(ctx, []app.Pending{{Event: ev, Full: ev.Payload, Outbox: out}}); err != nil {
			t.Fatal(err)
		}
	}
	// Finish in small batches, as the dispatcher does, so attempt ids
	// interleave the integrators.
	for {
		claimed, err := db.ClaimDeliveries(ctx, "w", now.Add(time.Second), time.Minute,
			[]app.Quota{{Integrador: "int-a", N: 1}, {Integrador: "int-b", N: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if len(claimed) == 0 {
			break
		}
		var results []app.DeliveryResult
		for _, d := range claimed {
			results = append(results, app.DeliveryResult{ID: d.ID, Token: d.Token, Worker: "w", Status: app.EntregaEntregue, Proxima: now,
				Integrador: d.Integrador, Attempt: app.Attempt{EntregaID: uuid.NewString(), Tentativa: 1, Inicio: now,
					DuracaoMS: 3, StatusCode: 204}})
		}
		if _, _, err := db.FinishDeliveries(ctx, results, "w", now, time.Minute, nil); err != nil {
			t.Fatal(err)
		}
	}
	return db, path
}

func TestAttemptsAfterIsAResumableCursor(t *testing.T) {
	ctx := t.Context()
	db, _ := tailSeed(t, 30)
	top, err := db.MaxAttemptID(ctx)
	if err != nil || top != 60 {
		t.Fatalf("max attempt id %d %v, want 60", top, err)
	}

	all, next, err := db.AttemptsAfter(ctx, 0, app.AttemptFilter{}, 1000)
	if err != nil || len(all) != 60 || next != top {
		t.Fatalf("all attempts: %d rows, next %d, %v", len(all), next, err)
	}
	if r := all[0]; r.Delivery.Integrador == "" || r.Delivery.Tipo == "" || r.Delivery.Agregado == "" ||
		r.Delivery.Sequencia != 1 || r.Attempt.StatusCode != 204 || r.Attempt.Tentativa != 1 || r.Attempt.Inicio.IsZero() {
		t.Fatalf("first line lacks fields: %+v", r)
	}

	// Reading in small batches from each returned cursor yields every
	// attempt once, in order.
	var got []int64
	for cursor := int64(0); ; {
		batch, n, err := db.AttemptsAfter(ctx, cursor, app.AttemptFilter{}, 7)
		if err != nil {
			t.Fatal(err)
		}
		if len(batch) == 0 {
			if n != top {
				t.Fatalf("an empty read ends at %d, want the max %d", n, top)
			}
			break
		}
		for _, r := range batch {
			got = append(got, r.ID)
		}
		cursor = n
	}
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("batched read repeats or reorders: %v", got)
		}
	}
	if len(got) != 60 || got[59] != top {
		t.Fatalf("batched read: %v", got)
	}

	// A filter returns its matches only, and the cursor still moves past
	// every attempt it examined.
	b, next, err := db.AttemptsAfter(ctx, 0, app.AttemptFilter{Integrador: "int-b"}, 1000)
	if err != nil || len(b) != 30 || next != top {
		t.Fatalf("int-b: %d rows, next %d, %v", len(b), next, err)
	}
	for _, r := range b {
		if r.Delivery.Integrador != "int-b" {
			t.Fatalf("int-b filter returned %+v", r.Delivery)
		}
	}
	some, _, _ := db.AttemptsAfter(ctx, 0, app.AttemptFilter{Integrador: "int-a", Tipo: "t:1", Agregado: "x:0"}, 1000)
	for _, r := range some {
		if d := r.Delivery; d.Integrador != "int-a" || d.Tipo != "t:1" || d.Agregado != "x:0" {
			t.Fatalf("combined filter returned %+v", d)
		}
	}
	if len(some) != 5 { // events i ≡ 1 (mod 3) and i ≡ 0 (mod 2): 4, 10, 16, 22, 28
		t.Fatalf("combined filter: %d rows, want 5", len(some))
	}
	none, next, err := db.AttemptsAfter(ctx, 0, app.AttemptFilter{Integrador: "ninguem"}, 1000)
	if err != nil || len(none) != 0 || next != top {
		t.Fatalf("a filter matching nothing: %d rows, next %d (want %d), %v", len(none), next, top, err)
	}
	// A full batch stops at its last row: what follows is read next time.
	first, next, _ := db.AttemptsAfter(ctx, 0, app.AttemptFilter{Integrador: "int-a"}, 10)
	if len(first) != 10 || next != first[9].ID {
		t.Fatalf("a full batch must resume after its last row: next %d, last %d", next, first[len(first)-1].ID)
	}
	if again, n, _ := db.AttemptsAfter(ctx, top, app.AttemptFilter{}, 10); len(again) != 0 || n != top {
		t.Fatalf("after the last attempt: %d rows, next %d", len(again), n)
	}
}

// The tail's reads are served by indexes (SPEC 11), whatever the filter:
// the walk is by delivery_attempt's rowid from the cursor, each row joined
// to its delivery by primary key.
func TestAttemptsAfterPlan(t *testing.T) {
	ctx := t.Context()
	db, path := tailSeed(t, 20)
	rec := &planRecorder{}
	recorded := planRecordingPool(t, path, rec)
	orig := db.read
	useRead(db, recorded)
	t.Cleanup(func() { useRead(db, orig); recorded.Close() })
	explain, err := sql.Open(DriverName, DSN(path, true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { explain.Close() })

	for _, f := range []app.AttemptFilter{{}, {Integrador: "int-a"}, {Tipo: "t:1"}, {Agregado: "x:1"},
		{Integrador: "int-b", Tipo: "t:2", Agregado: "x:0"}} {
		t.Run(fmt.Sprintf("%+v", f), func(t *testing.T) {
			rec.reset()
			if _, _, err := db.AttemptsAfter(ctx, 5, f, 200); err != nil {
				t.Fatal(err)
			}
			stmts := rec.take()
			if len(stmts) != 2 {
				t.Fatalf("want the max read and the tail read, got %d statements", len(stmts))
			}
			for _, st := range stmts {
				steps := planExplain(t, explain, st)
				t.Logf("%s\n  plan: %s", planOneLine(st.query), strings.Join(steps, " | "))
				// max(id) is one seek to the end of the rowid b-tree.
				unfiltered := strings.HasPrefix(st.query, "SELECT max(id)")
				if p := planProblems(steps, unfiltered); len(p) > 0 {
					t.Errorf("not served by an index: %s", strings.Join(p, "; "))
				}
				if !unfiltered && !strings.Contains(strings.Join(steps, " | "), "SEARCH a USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)") {
					t.Errorf("the tail must walk delivery_attempt by rowid from the cursor: %v", steps)
				}
			}
		})
	}
}
