package postgres_test

import (
	"fmt"
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
	in := app.Integrator{ID: "cad", Nome: "cad", CallbackURL: "https://cad.exemplo.gov.br", Ativo: true,
		HostsPermitidos: []string{"cad.exemplo.gov.br"}, Eventos: []string{"*"}, CriadoEm: now, AtualizadoEm: now}
	if err := db.InsertIntegrator(ctx, in, []byte("sealed"), "hash-cad", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "ANALYZE outbox"); err != nil {
		t.Fatal(err)
	}
	// A backlog as a CAD outage leaves it: the aggregates' events
	// interleaved in time, as they were published.
	const aggregates, perAggregate = 30, 334
	var backlog []app.Pending
	for range perAggregate {
		for a := range aggregates {
			ev := storetest.NewEvent("teste:a")
			backlog = append(backlog, app.Pending{Event: ev, Full: ev.Payload, Outbox: &app.Outbox{Body: []byte(`{}`),
				Agregado: fmt.Sprintf("x:%d", a), Recipients: func(string) []string { return []string{in.ID} }}})
		}
	}
	for batch := range slices.Chunk(backlog, 1000) {
		if _, err := db.Append(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := c.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+postgres.ClaimCandidatesSQL, in.ID, time.Now().Add(time.Hour).UnixMilli(), 32)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	plan := strings.Join(lines, "\n")
	t.Logf("claim on %d pending rows, outbox analyzed while empty:\n%s", aggregates*perAggregate, plan)
	// The check of earlier pending rows looks the candidate's own
	// aggregate up (an index condition on its agregado and sequencia), as
	// a subplan per candidate, never a join that filters every pending
	// row. (The in-flight check may read outbox_status_idx: processando
	// rows are few, bounded by the in-flight limit.)
	if strings.Contains(plan, "Seq Scan on outbox") || strings.Contains(plan, "Rows Removed by Join Filter") ||
		!strings.Contains(plan, "(agregado = o.agregado) AND (sequencia < o.sequencia)") {
		t.Errorf("the claim walks the pending rows:\n%s", plan)
	}
}
