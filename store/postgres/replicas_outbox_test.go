package postgres_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"geohub/app"
	"geohub/store/postgres"
	"geohub/store/storetest"
)

// SPEC 6.4's order per (integrator, aggregate) across replicas: three
// *postgres.DB on one database, as three replicas whose clocks differ by a
// few milliseconds, each with two workers, claim and finish concurrently
// over many aggregates, with a third of the attempts failing and retrying
// a few milliseconds later (so that a row's retry comes due on one replica
// while another still sees it waiting and the next row of its aggregate
// claimable: the race that FOR UPDATE SKIP LOCKED alone loses). Every claim and finish is
// stamped from one counter: a row's recorded interval, from the stamp
// after its claim returned to the stamp before its finish was sent, lies
// inside the time it really was processando, so two overlapping recorded
// intervals of one aggregate are two rows in flight at once. It checks
// that no aggregate ever had that, that each row's first claim came after
// the previous row's first attempt ended (sequence order), and that every
// row was delivered.
func TestReplicasKeepEachAggregateInOrder(t *testing.T) {
	url := freshDatabase(t)
	replicas := []*postgres.DB{open(t, url), open(t, url), open(t, url)}
	ctx := t.Context()
	now := time.Now()
	integrators := []string{"int-a", "int-b"}
	for _, id := range integrators {
		if err := replicas[0].InsertIntegrator(ctx, storetest.NewIntegrator(id, now), []byte("s"), "hash-"+id, nil); err != nil {
			t.Fatal(err)
		}
	}
	const rounds, aggregates, perAggregate = 4, 40, 6
	// Rounds of fresh aggregates, each enqueued in full before the workers
	// start on it, so that every round opens with every aggregate contended.
	enqueue := func(round int) {
		for s := range perAggregate {
			var batch []app.Pending
			for a := range aggregates {
				out := &app.Outbox{Body: []byte(`{}`), Agregado: fmt.Sprintf("r%d-x:%d", round, a),
					Recipients: func(string) []string { return integrators }}
				batch = append(batch, app.Pending{Event: storetest.NewEvent(fmt.Sprintf("t:%d", s)), Outbox: out})
			}
			if _, err := replicas[s%3].Append(ctx, batch); err != nil {
				t.Fatal(err)
			}
		}
	}
	perRound := aggregates * perAggregate * len(integrators)
	total := rounds * perRound

	type span struct{ claim, finish int64 }
	type rowKey struct {
		integrador, agregado string
		sequencia            int64
	}
	var (
		clock     atomic.Int64
		mu        sync.Mutex
		spans     = map[rowKey][]span{}
		inFlight  = map[int64]int{} // row id -> index of its open span
		keys      = map[int64]rowKey{}
		delivered atomic.Int64
		attempts  atomic.Int64
	)
	claimed := func(ds []app.Delivery) {
		mu.Lock()
		defer mu.Unlock()
		for _, d := range ds {
			k := rowKey{d.Integrador, d.Agregado, d.Sequencia}
			keys[d.ID] = k
			if _, dup := inFlight[d.ID]; dup {
				t.Errorf("%v claimed while its own previous claim was open", k)
			}
			inFlight[d.ID] = len(spans[k])
			spans[k] = append(spans[k], span{claim: clock.Add(1)})
		}
	}
	finished := func(rs []app.DeliveryResult) {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range rs {
			k := keys[r.ID]
			spans[k][inFlight[r.ID]].finish = clock.Add(1)
			delete(inFlight, r.ID)
		}
	}
	quotas := []app.Quota{{Integrador: "int-a", N: 4}, {Integrador: "int-b", N: 4}}
	deadline := time.Now().Add(90 * time.Second)
	for round := range rounds {
		enqueue(round)
		goal := int64((round + 1) * perRound)
		var wg sync.WaitGroup
		for r, db := range replicas {
			for w := range 2 {
				worker := fmt.Sprintf("r%d-w%d", r, w)
				// Replicas' clocks differ by a few milliseconds, as servers'
				// do: one may see a retry due that another does not yet.
				skew := time.Duration(r) * 2 * time.Millisecond
				clock := func() time.Time { return time.Now().Add(skew) }
				wg.Go(func() {
					rows, err := db.ClaimDeliveries(ctx, worker, clock(), time.Hour, quotas)
					if err != nil {
						t.Error(err)
						return
					}
					claimed(rows)
					for delivered.Load() < goal && time.Now().Before(deadline) {
						var results []app.DeliveryResult
						for _, d := range rows {
							// Wall time on purpose: the request.
							time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
							start := clock()
							res := app.DeliveryResult{ID: d.ID, Token: d.Token, Worker: worker, Integrador: d.Integrador,
								Status: app.EntregaEntregue, Proxima: start,
								Attempt: app.Attempt{EntregaID: fmt.Sprint(d.ID, "-", d.Tentativas), Tentativa: d.Tentativas + 1,
									Inicio: start, StatusCode: 204}}
							if d.Tentativas < 3 && rand.IntN(3) == 0 {
								res.Status, res.Kind, res.Attempt.StatusCode = app.EntregaPendente, app.ResultRefused, 503
								res.Proxima = start.Add(time.Duration(rand.IntN(4)) * time.Millisecond)
							}
							results = append(results, res)
						}
						finished(results)
						if len(rows) == 0 {
							// Wall time on purpose: nothing was due, and a
							// dispatcher waits before it claims again.
							time.Sleep(time.Millisecond)
						}
						// Half the rounds finish and claim in one commit, as the
						// dispatcher does; the others finish, then claim apart.
						combined := rand.IntN(2) == 0
						q := quotas
						if !combined {
							q = nil
						}
						_, next, err := db.FinishDeliveries(ctx, results, worker, clock(), time.Hour, q)
						if err == nil && !combined {
							next, err = db.ClaimDeliveries(ctx, worker, clock(), time.Hour, quotas)
						}
						if err != nil {
							t.Error(err)
							return
						}
						attempts.Add(int64(len(results)))
						for _, res := range results {
							if res.Status == app.EntregaEntregue {
								delivered.Add(1)
							}
						}
						claimed(next)
						rows = next
					}
				})
			}
		}
		wg.Wait()
		if t.Failed() {
			return
		}
	}
	if n := delivered.Load(); n != int64(total) {
		t.Fatalf("%d of %d rows delivered before the deadline", n, total)
	}
	if n, _ := replicas[1].OutboxBacklog(ctx); n != 0 {
		t.Fatalf("backlog %d after every row was delivered", n)
	}
	if top, _ := replicas[2].MaxAttemptID(ctx); top < attempts.Load() {
		t.Fatalf("%d attempts recorded, %d made", top, attempts.Load())
	}

	type agg struct{ integrador, agregado string }
	byAgg := map[agg][]rowKey{}
	for k := range spans {
		byAgg[agg{k.integrador, k.agregado}] = append(byAgg[agg{k.integrador, k.agregado}], k)
	}
	overlaps, outOfOrder, retries := 0, 0, 0
	for a, ks := range byAgg {
		slices.SortFunc(ks, func(x, y rowKey) int { return int(x.sequencia - y.sequencia) })
		if len(ks) != perAggregate {
			t.Errorf("%v: %d rows claimed, want %d", a, len(ks), perAggregate)
		}
		var all []span
		for i, k := range ks {
			if k.sequencia != int64(i+1) {
				t.Errorf("%v: row %d has sequence %d", a, i, k.sequencia)
			}
			all = append(all, spans[k]...)
			retries += len(spans[k]) - 1
			// Row n+1's first claim comes after row n's first attempt ended.
			if i > 0 && spans[k][0].claim < spans[ks[i-1]][0].finish {
				if outOfOrder++; outOfOrder <= 5 {
					t.Errorf("%v: #%d first claimed at %d, before #%d's first attempt ended at %d",
						a, k.sequencia, spans[k][0].claim, ks[i-1].sequencia, spans[ks[i-1]][0].finish)
				}
			}
		}
		slices.SortFunc(all, func(x, y span) int { return int(x.claim - y.claim) })
		for i := 1; i < len(all); i++ {
			if all[i].claim < all[i-1].finish {
				if overlaps++; overlaps <= 5 {
					t.Errorf("%v: two rows in flight at once: claimed at %d while the one claimed at %d was open until %d",
						a, all[i].claim, all[i-1].claim, all[i-1].finish)
				}
			}
		}
	}
	t.Logf("%d rows, %d attempts (%d retries), %d overlaps, %d out of order", total, attempts.Load(), retries, overlaps, outOfOrder)
	if retries == 0 {
		t.Fatal("no attempt failed: the test did not exercise retries")
	}
}
