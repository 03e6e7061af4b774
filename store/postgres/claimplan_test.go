package postgres_test

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"geohub/app"
	"geohub/store/postgres"
	"geohub/store/storetest"
)

// The claim stays an index search whatever the statistics say (issue 27,
// B3): on a database whose outbox was analyzed while empty (its normal
// state, idle) and then took a backlog of 10,000 rows, as after a CAD
// outage, the check "no earlier pending row of this aggregate" must look
// the aggregate up in outbox_waiting_idx, not walk every pending row
// (921,910 rows removed for one claim of 5; here 48 million and 23 s
// before OFFSET 0 kept the checks from being flattened into joins).
func TestClaimPlanHoldsAfterAnEmptyAnalyze(t *testing.T) {
	t.Parallel()
	url := freshDatabase(t)
	db := open(t, url)
	c := raw(t, url)
	ctx := t.Context()
	now := time.Now()
	later := now.Add(time.Hour)
	// Two CADs with 30 aggregates of 334 rows each: one backlog as a CAD
	// outage leaves it (the aggregates' events interleaved in time, as
	// they were published), the other as one burst per aggregate in turn,
	// whose oldest rows all belong to one aggregate.
	const aggregates, perAggregate = 30, 334
	var backlog []app.Pending
	for _, cad := range []struct {
		id          string
		interleaved bool
	}{{"intercalado", true}, {"seguido", false}} {
		in := app.Integrator{ID: cad.id, Nome: cad.id, CallbackURL: "https://cad.exemplo.gov.br", Ativo: true,
			HostsPermitidos: []string{"cad.exemplo.gov.br"}, Eventos: []string{"*"}, CriadoEm: now, AtualizadoEm: now}
		if err := db.InsertIntegrator(ctx, in, []byte("sealed"), "hash-"+cad.id, nil); err != nil {
			t.Fatal(err)
		}
		for i := range aggregates * perAggregate {
			a := i / perAggregate
			if cad.interleaved {
				a = i % aggregates
			}
			ev := storetest.NewEvent("teste:a")
			backlog = append(backlog, app.Pending{Event: ev, Full: ev.Payload, Outbox: &app.Outbox{Body: []byte(`{}`),
				Agregado: fmt.Sprintf("x:%d", a), Recipients: func(string) []string { return []string{cad.id} }}})
		}
	}
	if _, err := c.Exec(ctx, "ANALYZE"); err != nil {
		t.Fatal(err)
	}
	// The claim's statements are the writer's, planned with its settings.
	for k, v := range postgres.WriterSettings {
		if _, err := c.Exec(ctx, "SET "+k+" = "+v); err != nil {
			t.Fatal(err)
		}
	}
	for batch := range slices.Chunk(backlog, 1000) {
		if _, err := db.Append(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	explain := func(q string, args ...any) string {
		t.Helper()
		rows, err := c.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+q, args...)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(lines, "\n")
	}
	for _, cad := range []string{"intercalado", "seguido"} {
		plan := explain(postgres.ClaimCandidatesSQL, cad, later.UnixMilli(), 32, 128)
		t.Logf("%s: the window over %d pending rows, outbox analyzed while empty:\n%s", cad, aggregates*perAggregate, plan)
		// The check of earlier pending rows looks the candidate's own
		// aggregate up (an index condition on its agregado and sequencia),
		// as a subplan per candidate, never a join that filters every
		// pending row.
		if strings.Contains(plan, "Seq Scan on outbox") || strings.Contains(plan, "Rows Removed by Join Filter") ||
			!ownAggregate.MatchString(plan) {
			t.Errorf("%s: the claim walks the pending rows:\n%s", cad, plan)
		}
		heads := explain(postgres.ClaimHeadsSQL, cad, later.UnixMilli(), 32, []int64{})
		t.Logf("%s: the look by aggregate:\n%s", cad, heads)
		// Timed without EXPLAIN's instrumentation, for the README (a log,
		// not an assertion: a busy machine is slower).
		median := func(q string, args ...any) time.Duration {
			var ds []time.Duration
			for range 9 {
				began := time.Now()
				rows, err := c.Query(ctx, q, args...)
				if err != nil {
					t.Fatal(err)
				}
				rows.Close()
				ds = append(ds, time.Since(began))
			}
			slices.Sort(ds)
			return ds[len(ds)/2]
		}
		t.Logf("%s: the window takes %v, the look by aggregate %v (medians of 9)", cad,
			median(postgres.ClaimCandidatesSQL, cad, later.UnixMilli(), 32, 128),
			median(postgres.ClaimHeadsSQL, cad, later.UnixMilli(), 32, []int64{}))
		if strings.Contains(heads, "Seq Scan on outbox") || strings.Contains(heads, "Rows Removed by Join Filter") {
			t.Errorf("%s: the look by aggregate walks the pending rows:\n%s", cad, heads)
		}
		// A finish's look for due rows behind the finished ones starts from
		// the finished rows, never from the backlog's due rows.
		var finished []int64
		if err := c.QueryRow(ctx, `SELECT array_agg(id) FROM (SELECT id FROM outbox WHERE integrador_id = $1
			ORDER BY id LIMIT 32) AS f`, cad).Scan(&finished); err != nil {
			t.Fatal(err)
		}
		behind := explain(postgres.WaitingBehindSQL, finished, later.UnixMilli())
		t.Logf("%s: the look behind 32 finished rows:\n%s", cad, behind)
		if strings.Contains(behind, "outbox_due_idx") || strings.Contains(behind, "Seq Scan on outbox") {
			t.Errorf("%s: the look behind the finished rows walks the due rows:\n%s", cad, behind)
		}
		// The lease itself numbers each row's attempt from those recorded
		// by an index: the attempts, analyzed while empty, look like a
		// table to scan whole. (EXPLAIN ANALYZE runs it: rolled back.)
		if _, err := c.Exec(ctx, "BEGIN"); err != nil {
			t.Fatal(err)
		}
		lease := explain(postgres.ClaimSQL, finished, later.UnixMilli(), 60000, "w", 1)
		t.Logf("%s: the lease of 32 rows:\n%s", cad, lease)
		// And it reads its candidates by id, never an index of every
		// pending row beside the primary key.
		if strings.Contains(lease, "Seq Scan") || strings.Contains(lease, "BitmapAnd") ||
			strings.Contains(lease, "outbox_due_idx on outbox o") || strings.Contains(lease, "outbox_waiting_idx on outbox o ") {
			t.Errorf("%s: the lease scans a table or every pending row:\n%s", cad, lease)
		}
		if _, err := c.Exec(ctx, "ROLLBACK"); err != nil {
			t.Fatal(err)
		}
		// Every aggregate's first row goes, however the backlog is laid out.
		got, err := db.ClaimDeliveries(ctx, "w", later, time.Minute, []app.Quota{{Integrador: cad, N: 32}})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]int64{}
		for _, d := range got {
			seen[d.Agregado] = d.Sequencia
		}
		if len(got) != aggregates || len(seen) != aggregates {
			t.Fatalf("%s: claimed %d rows of %d aggregates, want the first row of each of %d", cad, len(got), len(seen), aggregates)
		}
		for a, seq := range seen {
			if seq != 1 {
				t.Fatalf("%s: claimed %s's row %d", cad, a, seq)
			}
		}
	}
}

// ownAggregate is the index condition of a check that looks up the
// candidate's own aggregate (o is the candidate, as the planner names it).
var ownAggregate = regexp.MustCompile(`\(agregado = o(_\d+)?\.agregado\) AND \(sequencia < o(_\d+)?\.sequencia\)`)
