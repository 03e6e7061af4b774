package web_test

import (
	"net/http"
	"slices"
	"strconv"
	"testing"

	"geohub/app"
)

// pageAll follows proximo from the first page of route?query, calling
// between after each page, and returns every row's key in page order.
func pageAll[T any](t *testing.T, e *apiEnv, route, query, cursorParam string, key func(T) int64, between func()) []int64 {
	t.Helper()
	var keys []int64
	cursor := ""
	for range 100 {
		q := query
		if cursor != "" {
			q += "&" + cursorParam + "=" + cursor
		}
		var p app.Page[T]
		e.do(t, http.MethodGet, route+"?"+q, app.PapelLeitor, nil).want(t, http.StatusOK).decode(t, &p)
		for _, row := range p.Linhas {
			keys = append(keys, key(row))
		}
		between()
		if p.Proximo == "" {
			return keys
		}
		cursor = p.Proximo
	}
	t.Fatal("more than 100 pages")
	return nil
}

// SPEC 9: lists page by keyset, so paging while events arrive neither
// repeats nor skips rows (with deslocamento, every event that arrived
// moved the next page by one).
func TestEventsAndDeliveriesPageByKeysetWhileRowsArrive(t *testing.T) {
	t.Parallel()
	env := apiSetupWithDispatcher(t)
	env.delRegisterTypes(t)
	rc := delNewReceiver(t, http.StatusNoContent)
	a := env.delCreateIntegrator(t, rc, "CAD Polícia")
	var first []int64
	for i := range 7 {
		first = append(first, env.delPublish(t, "lote:"+strconv.Itoa(i), i).Sequence)
	}
	arrive := func() { env.delPublish(t, "lote:novo", 0) }
	seq := func(ev app.Event) int64 { return ev.Sequence }

	// Newest first, from the head: the page boundaries hold still, and what
	// arrives after the first page is above it, not in the next.
	got := pageAll(t, env.apiEnv, "/api/events", "tipo=teste:todos&ordem=desc&limite=3", "sequence_fim", seq, arrive)
	want := slices.Clone(first)
	slices.Reverse(want)
	if !slices.Equal(got, want) {
		t.Fatalf("newest first while events arrive: %v, want %v", got, want)
	}
	// Oldest first: every event once, those that arrived meanwhile at the end.
	before := len(got) + 3 // the three pages above each published one
	got = pageAll(t, env.apiEnv, "/api/events", "tipo=teste:todos&limite=4", "sequence_inicio", seq, func() {})
	if len(got) != before || len(slices.Compact(slices.Clone(got))) != before || !slices.IsSorted(got) {
		t.Fatalf("oldest first: %v (want %d distinct, ascending)", got, before)
	}

	env.waitRecorded(t, "every delivery", func() bool {
		return env.delList(t, "status=entregue&integrador="+a.ID).Total == before
	})
	id := func(d app.Delivery) int64 { return d.ID }
	all := pageAll(t, env.apiEnv, "/api/entregas", "integrador="+a.ID+"&limite=500", "id_inicio", id, func() {})
	newest := pageAll(t, env.apiEnv, "/api/entregas", "integrador="+a.ID+"&ordem=desc&limite=2", "id_fim", id, arrive)
	slices.Reverse(all)
	if !slices.Equal(newest, all) {
		t.Fatalf("deliveries newest first while deliveries arrive: %v, want %v", newest, all)
	}
	for _, q := range []string{"ordem=novo", "id_inicio=x"} {
		env.do(t, http.MethodGet, "/api/entregas?"+q, app.PapelLeitor, nil).want(t, 422)
	}
	env.do(t, http.MethodGet, "/api/events?ordem=subindo", app.PapelLeitor, nil).want(t, 422)
}
