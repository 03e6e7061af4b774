package postgres

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"geohub/app"
	"geohub/store/query"
)

// The outbox's delivery side (SPEC 6.4) on PostgreSQL: claims, outcomes,
// leases and the reaper, purges, resends and the operator's reads, with the
// same meanings as package store's SQLite (store/outbox.go). The rows are
// written by Append (events.go).
//
// OutboxStore's AuditLog (AppendAudit) is the audit trail's, not this
// file's; once it is there, *DB is an app.OutboxStore.
var _ app.AttemptLog = (*DB)(nil)

// claimable is SPEC 6.4's rule for a pending, due row o, as SQLite's
// claimSQL has it: no row of its (integrator, aggregate) is processando,
// and no earlier row of it is pendente and either due or still without its
// first attempt (since its last resend). $2 is now. Both checks are seeks
// in the partial indexes of live rows (outbox_inflight_idx,
// outbox_waiting_idx), so a long delivered history costs nothing.
const claimable = `o.status = 'pendente' AND ` + claimRule

// claimRule is claimable but for the row's own status.
const claimRule = `o.proxima_tentativa <= $2
		AND NOT EXISTS (SELECT 1 FROM outbox AS f
			WHERE f.integrador_id = o.integrador_id AND f.agregado = o.agregado AND f.status = 'processando' OFFSET 0)
		AND NOT EXISTS (SELECT 1 FROM outbox AS e
			WHERE e.integrador_id = o.integrador_id AND e.agregado = o.agregado AND e.status = 'pendente'
			AND e.sequencia < o.sequencia AND (e.proxima_tentativa <= $2 OR e.tentativas = e.tentativas_antes) OFFSET 0)`

// A claim keeps each (integrator, aggregate) in order across replicas
// (SPEC 6.4 and 12): at most one row of it in flight, the lowest pending
// sequence first, never row n+1 while n is processando. The rule above
// says which row may go; what makes it hold across replicas is that the
// claims of one (integrator, aggregate) are serialised, and that each one
// checks the rule on a snapshot taken after the previous one committed.
//
// FOR UPDATE SKIP LOCKED alone does not give that. Under READ COMMITTED a
// claim's statement reads the snapshot of its start: replica B can read
// row n as failed and not yet due (so n+1 may go), while replica A, whose
// clock has reached n's retry time (or after an operator's "Tentar agora"),
// claims n; B then locks n+1, which nobody holds, and both are in flight.
// Row locks only stop two claims of the same row.
//
// So a claim runs in two statements, inside the writer's transaction:
//
//  1. claimCandidatesSQL picks up to N rows that the rule allows on its
//     snapshot, one per aggregate at most (the rule allows only the lowest
//     claimable row of an aggregate), and takes for each a transaction
//     advisory lock on (hashtext(integrator), hashtext(aggregate)) with
//     pg_try_advisory_xact_lock: an aggregate that another replica is
//     claiming right now (its transaction holds the lock) is skipped, as
//     SKIP LOCKED skips a row, and retried at the next round. The lock is
//     held until this transaction commits or rolls back; PostgreSQL makes
//     a commit visible before it releases the locks.
//  2. claimSQL, a new statement with a new snapshot, hence one that sees
//     every claim committed by an earlier holder of these locks, checks
//     the rule again for the locked candidates only and leases those that
//     still pass, with FOR NO KEY UPDATE SKIP LOCKED against the other
//     writers of a pending row (a "Tentar agora"). NO KEY: the claim
//     changes no key, and FOR UPDATE would block the foreign-key checks
//     (FOR KEY SHARE) of other replicas' inserts that reference the row,
//     the attempts recorded under attempt_head's lock.
//
// The lease reads its candidates by id alone: its check of their status
// is written so that no partial index of pending rows matches it (an
// expression, not the column). Otherwise a planner that believes the
// pending rows few (an outbox analyzed while empty) reads one of those
// indexes whole beside the primary key: 1.5 ms a lease over 20,000
// pending rows, 35 ms with bitmaps priced out, growing with the backlog.
//
// Only claims turn a row processando, and every claim of an aggregate
// holds its lock from before its check until its commit: no two claims of
// one aggregate overlap, and each sees the previous one's outcome. A
// snapshot older than a finish or a reap can only see a row still
// processando, which holds the aggregate back (safe, and undone at the
// next round). A hash collision only makes two aggregates take turns.
//
// Why not wait for a lock per aggregate? The claim runs in the main phase
// of a group commit (writer.go), where nothing may wait for another
// replica beyond the batch's sorted keys: its locks are held until COMMIT,
// past the waits for attempt_head and log_head. The try-lock never waits,
// so it adds no edge to the lock graph. Locks on
// outbox rows themselves would not do either: the row to guard (n+1) is
// not the row whose state changed (n). It is a transaction lock, not a
// session lock, so a pooler in transaction mode cannot leave it held.
//
// A claim counts the row's attempts from what was recorded as well as from
// tentativas: an attempt whose lease was lost meanwhile (see finishSQL) is
// recorded without moving tentativas, and the next one must not go out
// with its number (X-Geohub-Tentativa) again.
//
// The candidates are the oldest due first (outbox_due_idx), as SQLite's,
// and the lease is returned in that order. The lease ends by the
// database's clock (lease_ate, see dbNowMS), which is the reaper's: a
// replica whose clock runs ahead never takes another's live lease.
//
// The candidates come from a window of the claimWindow oldest due rows
// (issue 27, B3): only the first pending row of an aggregate can go, and
// a backlog of a few aggregates with many rows each made every claim walk
// the whole backlog looking for heads it could not find. When the window
// is full and holds fewer heads than the quota, claimHeadsSQL finds the
// rest by aggregate: one index probe per aggregate with pending rows
// (a loose scan of outbox_waiting_idx), not one per row. Heads that
// another replica's claim holds the locks of do not count as missing:
// with a backlog of many aggregates of one row each, the look would walk
// them all (90 ms a claim over 4,000) to find what that claim is taking.
const (
	claimCandidatesSQL = `WITH w AS MATERIALIZED (
			SELECT o.id, o.integrador_id, o.agregado, o.sequencia, o.proxima_tentativa, o.status FROM outbox AS o
			WHERE o.integrador_id = $1 AND o.status = 'pendente' AND o.proxima_tentativa <= $2
			ORDER BY o.proxima_tentativa, o.id LIMIT $4),
		c AS MATERIALIZED (
			SELECT o.id, o.agregado, o.proxima_tentativa FROM w AS o
			WHERE ` + claimable + `
			ORDER BY o.proxima_tentativa, o.id LIMIT $3),
		l AS (SELECT id, proxima_tentativa FROM c WHERE pg_try_advisory_xact_lock(hashtext($1), hashtext(c.agregado)))
		SELECT l.id, f.olhar FROM (SELECT (SELECT count(*) FROM w) >= $4 AND (SELECT count(*) FROM c) < $3 AS olhar) AS f
			LEFT JOIN l ON true
		ORDER BY l.proxima_tentativa, l.id`
	claimHeadsSQL = `WITH RECURSIVE a(agregado) AS (
			SELECT min(agregado) FROM outbox WHERE integrador_id = $1 AND status = 'pendente'
			UNION ALL
			SELECT (SELECT min(p.agregado) FROM outbox AS p
				WHERE p.integrador_id = $1 AND p.status = 'pendente' AND p.agregado > a.agregado)
			FROM a WHERE a.agregado IS NOT NULL),
		h AS MATERIALIZED (
			SELECT o.id, o.agregado, o.proxima_tentativa FROM a CROSS JOIN LATERAL (
				SELECT o.id, o.integrador_id, o.agregado, o.sequencia, o.proxima_tentativa, o.status FROM outbox AS o
				WHERE o.integrador_id = $1 AND o.agregado = a.agregado AND o.status = 'pendente'
				AND (o.proxima_tentativa <= $2 OR o.tentativas = o.tentativas_antes)
				ORDER BY o.sequencia LIMIT 1) AS o
			WHERE ` + claimable + ` AND o.id <> ALL($4)
			ORDER BY o.proxima_tentativa, o.id LIMIT $3)
		SELECT id FROM h WHERE pg_try_advisory_xact_lock(hashtext($1), hashtext(h.agregado))
		ORDER BY proxima_tentativa, id`
	claimSQL = `UPDATE outbox SET status = 'processando', lease_ate = ` + dbNowMS + ` + $3, worker = $4, lease_token = $5,
			tentativas = greatest(tentativas,
				(SELECT coalesce(max(tentativa), 0) FROM delivery_attempt WHERE outbox_id = outbox.id))
		WHERE id IN (SELECT o.id FROM outbox AS o
			WHERE o.id = ANY($1) AND o.status || '' = 'pendente' AND ` + claimRule + `
			FOR NO KEY UPDATE OF o SKIP LOCKED)
		RETURNING ` + query.DeliveryColumns + `, ` + query.CorpoColumn
)

// ClaimDeliveries implements app.OutboxStore: per integrator in quotas, up
// to N rows, one writer operation (see claimSQL for the order across
// replicas).
func (db *DB) ClaimDeliveries(ctx context.Context, worker string, now time.Time, lease time.Duration,
	quotas []app.Quota) ([]app.Delivery, error) {
	var out []app.Delivery
	err := db.do(ctx, func(tx *wtx) error {
		var err error
		out, err = tx.claim(worker, now, lease, quotas)
		return err
	})
	if err != nil {
		return nil, err // the claim ran, but its commit failed: the rows are not leased
	}
	return out, nil
}

func (tx *wtx) claim(worker string, now time.Time, lease time.Duration, quotas []app.Quota) ([]app.Delivery, error) {
	var out []app.Delivery
	for _, q := range quotas {
		if q.N <= 0 {
			continue
		}
		ids, err := tx.candidates(q, now)
		if err != nil {
			return nil, fmt.Errorf("claim deliveries: %w", err)
		}
		if len(ids) == 0 {
			continue
		}
		rows, err := tx.Query(tx.ctx, claimSQL, ids, ms(now), lease.Milliseconds(), worker, newLeaseToken())
		if err != nil {
			return nil, fmt.Errorf("claim deliveries: %w", err)
		}
		got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (app.Delivery, error) { return query.ScanDelivery(r, true) })
		if err != nil {
			return nil, fmt.Errorf("claim deliveries: %w", err)
		}
		// RETURNING's order is the table's: put them back in the
		// candidates' (oldest due first).
		pos := make(map[int64]int, len(ids))
		for i, id := range ids {
			pos[id] = i
		}
		slices.SortFunc(got, func(a, b app.Delivery) int { return pos[a.ID] - pos[b.ID] })
		out = append(out, got...)
	}
	return out, nil
}

// claimWindow is how many of the oldest due rows the claim's first look
// reads: enough to find a quota of heads where aggregates interleave.
func claimWindow(n int) int { return max(4*n, 128) }

// candidates are up to q.N rows the claim rule allows, each under its
// aggregate's transaction lock (see claimCandidatesSQL).
func (tx *wtx) candidates(q app.Quota, now time.Time) ([]int64, error) {
	window := claimWindow(q.N)
	rows, err := tx.Query(tx.ctx, claimCandidatesSQL, q.Integrador, ms(now), q.N, window)
	if err != nil {
		return nil, err
	}
	var ids []int64
	look := false // the window was full and short of heads
	var id *int64
	if _, err := pgx.ForEachRow(rows, []any{&id, &look}, func() error {
		if id != nil {
			ids = append(ids, *id)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if !look || len(ids) >= q.N {
		return ids, nil
	}
	taken := append([]int64{}, ids...) // never NULL: <> ALL(NULL) matches no row
	rows, err = tx.Query(tx.ctx, claimHeadsSQL, q.Integrador, ms(now), q.N-len(ids), taken)
	if err != nil {
		return nil, err
	}
	more, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, err
	}
	return append(ids, more...), nil
}

// dbNowMS is the database's clock in unix milliseconds. Leases are given
// and reaped by it, not by a replica's: two replicas' clocks may disagree,
// the database's is one.
const dbNowMS = `(extract(epoch FROM clock_timestamp()) * 1000)::bigint`

// The outcomes of a batch are two statements, whatever its size (River's
// batch completer): one finishes every attempted row, one puts every
// deferred row back, each from arrays of the rows' new values. Each locks
// its rows with SKIP LOCKED and only while still leased to the claim that
// sent them (worker and lease token): the only other writer of a
// processando row is the reaper taking back a lease that expired, and then
// the outcome is the lost lease's, left alone as when the reaper has
// committed (the attempt is still recorded). Only the outcome of the
// current lease applies: a batch can hold a row twice, the outcome of a
// lease it lost and that of the lease it claimed again since, and each
// joins back by its own position (n), not by the row; of two outcomes of
// one lease the first applies, as when each was its own statement (the
// arrays hold it once, see finishes). One statement a row cost 0.095 ms of
// the server's time a row; most of it was the statement's own.
const (
	finishSQL = `WITH r AS (SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bigint[], $5::text[],
					$6::bigint[], $7::bigint[], $8::text[], $9::bigint[]) WITH ORDINALITY
				AS r(id, status, proxima, ultimo_status, ultimo_erro, entregue_em, falhou_em, worker, token, n)),
			l AS (SELECT r.n FROM r JOIN outbox AS o ON o.id = r.id
				WHERE o.worker = r.worker AND o.lease_token = r.token AND o.status || '' = 'processando'
				FOR NO KEY UPDATE OF o SKIP LOCKED)
			UPDATE outbox AS o SET status = r.status, tentativas = o.tentativas + 1, proxima_tentativa = r.proxima,
				lease_ate = NULL, worker = NULL, lease_token = NULL, ultimo_status = r.ultimo_status::integer,
				ultimo_erro = r.ultimo_erro, entregue_em = r.entregue_em, falhou_em = r.falhou_em
			FROM r JOIN l ON l.n = r.n WHERE o.id = r.id`
	deferSQL = `WITH r AS (SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::bigint[]) WITH ORDINALITY
				AS r(id, proxima, worker, token, n)),
			l AS (SELECT r.n FROM r JOIN outbox AS o ON o.id = r.id
				WHERE o.worker = r.worker AND o.lease_token = r.token AND o.status || '' = 'processando'
				FOR NO KEY UPDATE OF o SKIP LOCKED)
			UPDATE outbox AS o SET status = 'pendente', proxima_tentativa = r.proxima, lease_ate = NULL,
				worker = NULL, lease_token = NULL
			FROM r JOIN l ON l.n = r.n WHERE o.id = r.id`
	// An attempt is recorded once, even when a finishing batch whose
	// commit was not confirmed is sent again (delivery_attempt_entrega_key).
	// A batch's attempts are one statement too, inserted in the batch's
	// order.
	insertAttemptSQL = `INSERT INTO delivery_attempt (outbox_id, entrega_id, tentativa, inicio,
				duracao_ms, status_code, erro, resposta_selada)
			SELECT outbox_id, entrega_id, tentativa, inicio, duracao_ms, status_code, erro, resposta_selada
			FROM unnest($1::bigint[], $2::text[], $3::integer[], $4::bigint[], $5::bigint[], $6::integer[], $7::text[],
				$8::bytea[]) WITH ORDINALITY
				AS a(outbox_id, entrega_id, tentativa, inicio, duracao_ms, status_code, erro, resposta_selada, n)
			ORDER BY n
			ON CONFLICT (outbox_id, entrega_id) DO NOTHING`
	// failingSQL is one integrator's failing period after a batch: cleared
	// ($2) means a success in it ended the period, which then restarts at
	// the first failure after the last success ($3, NULL for none) and
	// moves ultimo_sucesso_em to $4; otherwise the period starts at $3
	// unless it had started already.
	failingSQL = `UPDATE integrator SET
				falhando_desde = CASE WHEN $2::boolean THEN $3::bigint ELSE coalesce(falhando_desde, $3::bigint) END,
				ultimo_sucesso_em = CASE WHEN $2::boolean THEN greatest(coalesce(ultimo_sucesso_em, 0), $4::bigint)
					ELSE ultimo_sucesso_em END
				WHERE id = $1 RETURNING falhando_desde`
)

// waitingBehindSQL says whether a row of the aggregates of rows $1 is
// pendente and due at $2: a finish (or deferral) of a row frees its
// aggregate for the next, and a deferred row is itself pendente again.
// A seek in outbox_waiting_idx per finished row: the lateral subquery
// with its LIMIT is not flattened into a join, which a planner that
// thinks the outbox empty (analyzed while idle) drove from every due row
// of the backlog instead (16 ms a finish over 4,000 pending rows, most
// of PostgreSQL's time in a drain).
const waitingBehindSQL = `SELECT EXISTS (SELECT 1 FROM outbox AS f CROSS JOIN LATERAL (SELECT 1 FROM outbox AS o
		WHERE o.integrador_id = f.integrador_id AND o.agregado = f.agregado AND o.status = 'pendente'
			AND o.proxima_tentativa <= $2 LIMIT 1) AS w
		WHERE f.id = ANY($1))`

// FinishDeliveries implements app.OutboxStore: one transaction for a batch
// of outcomes, then the next claim. A row whose lease this worker lost (the
// reaper gave it to another) is left alone, but its attempt is still
// recorded (and the next claim numbers after it). A deferred row goes back
// to pendente with no attempt. When due rows of the finished rows'
// aggregates are left pendente, the commit wakes the other replicas'
// dispatchers (wtx.freed).
//
// The attempts are inserted in the batch's late phase (writer.go), under
// attempt_head's row lock, kept until COMMIT, so their ids are given in
// commit order across replicas (the live tail follows them by id, see
// AttemptsAfter). The integrators' failing periods are written under the
// integrators' keys, which the batch takes in one order with every other
// key: two replicas' batches never wait on each other in opposite orders.
func (db *DB) FinishDeliveries(ctx context.Context, results []app.DeliveryResult, worker string, now time.Time,
	lease time.Duration, quotas []app.Quota) (map[string]time.Time, []app.Delivery, error) {
	failing := map[string]time.Time{}
	var claimed []app.Delivery
	var keys []lockKey
	for _, r := range results {
		if r.Kind.OfReceiver() {
			keys = append(keys, key("integrator", r.Integrador))
		}
	}
	var fin finishes
	var def deferrals
	for _, r := range results {
		if r.Kind == app.ResultDeferred {
			def.add(r)
		} else {
			fin.add(r)
		}
	}
	main := func(tx *wtx) error {
		clear(failing)
		p := &pipe{}
		if len(fin.id) > 0 {
			p.exec(finishSQL, fin.id, fin.status, fin.proxima, fin.ultimoStatus, fin.ultimoErro, fin.entregue,
				fin.falhou, fin.worker, fin.token)
		}
		if len(def.id) > 0 {
			p.exec(deferSQL, def.id, def.proxima, def.worker, def.token)
		}
		if _, err := p.send(tx); err != nil {
			return fmt.Errorf("finish deliveries: %w", err)
		}
		// Each integrator's failing period, as SQLite's store leaves it
		// after applying the results one by one: a success clears it, the
		// next failure starts it again.
		type period struct {
			cleared bool
			since   *int64 // first failure since the last success in the batch
			lastOK  int64  // the latest success in the batch
			failed  bool   // some attempt of the batch failed
			failing bool   // and the batch ended on a failure
		}
		periods := map[string]*period{}
		lastOK := map[string]int64{}
		for _, r := range results {
			if r.Kind != app.ResultDeferred && r.Status == app.EntregaEntregue {
				lastOK[r.Integrador] = max(lastOK[r.Integrador], ms(r.Attempt.Inicio.Add(time.Duration(r.Attempt.DuracaoMS)*time.Millisecond)))
			}
		}
		for _, r := range results {
			if !r.Kind.OfReceiver() {
				continue // says nothing of the receiver
			}
			p := periods[r.Integrador]
			if p == nil {
				p = &period{}
				periods[r.Integrador] = p
			}
			if !r.Kind.Failed() {
				p.cleared, p.since, p.failing, p.lastOK = true, nil, false, lastOK[r.Integrador]
				continue
			}
			if p.since == nil {
				t := ms(r.Attempt.Inicio)
				p.since = &t
			}
			p.failed, p.failing = true, true
		}
		ids := make([]string, 0, len(periods))
		for id := range periods {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for _, id := range ids {
			p := periods[id]
			var since *int64
			err := tx.QueryRow(tx.ctx, failingSQL, id, p.cleared, p.since, p.lastOK).Scan(&since)
			if isNoRows(err) && !p.failed {
				err = nil // as SQLite's, clearing an unknown integrator's period is no error
			}
			if err != nil {
				return fmt.Errorf("record failing period: %w", err)
			}
			if p.failing && since != nil {
				failing[id] = fromMS(*since)
			}
		}
		var err error
		if claimed, err = tx.claim(worker, now, lease, quotas); err != nil {
			return err
		}
		// Rows due behind the finished ones that this claim left: another
		// replica's dispatcher may be the one with room for them, and it
		// does not see this finish.
		finished := make([]int64, len(results))
		for i, r := range results {
			finished[i] = r.ID
		}
		var waiting bool
		if err := tx.QueryRow(tx.ctx, waitingBehindSQL, finished, ms(now)).Scan(&waiting); err != nil {
			return fmt.Errorf("look for rows behind the finished: %w", err)
		}
		tx.freed = tx.freed || waiting
		return nil
	}
	late := func(tx *wtx, p *pipe) error {
		p.exec(insertAttemptSQL, fin.attemptRow, fin.entregaID, fin.tentativa, fin.inicio, fin.duracao,
			fin.attemptStatus, fin.erro, fin.resposta)
		return nil
	}
	o := &op{keys: keys, fn: main}
	if len(fin.attemptRow) > 0 {
		o.late = late
	}
	if err := db.submit(ctx, o); err != nil {
		return nil, nil, err // nothing of it was committed
	}
	return failing, claimed, nil
}

// finishes are a batch's attempted rows as the arrays of finishSQL, each
// lease's first outcome once, and every attempt as insertAttemptSQL's.
type finishes struct {
	leases                     map[app.Leased]bool
	id, proxima, token         []int64
	status, ultimoErro, worker []string
	ultimoStatus               []*int64
	entregue, falhou           []*int64 // when it was delivered, or dead-lettered
	// The attempts.
	attemptRow, inicio, duracao []int64
	attemptStatus               []*int64
	entregaID, erro             []string
	tentativa                   []int32
	resposta                    [][]byte
}

func (f *finishes) add(r app.DeliveryResult) {
	a := r.Attempt
	var code *int64
	if c := int64(a.StatusCode); c != 0 {
		code = &c
	}
	f.attemptRow, f.attemptStatus = append(f.attemptRow, r.ID), append(f.attemptStatus, code)
	f.entregaID, f.erro = append(f.entregaID, a.EntregaID), append(f.erro, a.Erro)
	f.tentativa, f.inicio = append(f.tentativa, int32(a.Tentativa)), append(f.inicio, ms(a.Inicio))
	f.duracao, f.resposta = append(f.duracao, a.DuracaoMS), append(f.resposta, a.RespostaSelada)
	if !firstOf(&f.leases, r) {
		return
	}
	end := ms(a.Inicio.Add(time.Duration(a.DuracaoMS) * time.Millisecond))
	var entregue, falhou *int64
	switch r.Status {
	case app.EntregaEntregue:
		entregue = &end
	case app.EntregaFalhou:
		falhou = &end
	}
	f.id, f.status, f.proxima = append(f.id, r.ID), append(f.status, r.Status), append(f.proxima, ms(r.Proxima))
	f.ultimoStatus, f.ultimoErro = append(f.ultimoStatus, code), append(f.ultimoErro, r.UltimoErr)
	f.entregue, f.falhou = append(f.entregue, entregue), append(f.falhou, falhou)
	f.worker, f.token = append(f.worker, r.Worker), append(f.token, r.Token)
}

// deferrals are a batch's deferred rows as deferSQL's arrays, each lease
// once.
type deferrals struct {
	leases             map[app.Leased]bool
	id, proxima, token []int64
	worker             []string
}

func (d *deferrals) add(r app.DeliveryResult) {
	if !firstOf(&d.leases, r) {
		return
	}
	d.id, d.proxima = append(d.id, r.ID), append(d.proxima, ms(r.Proxima))
	d.worker, d.token = append(d.worker, r.Worker), append(d.token, r.Token)
}

// firstOf says whether r is the first outcome of its lease in seen.
func firstOf(seen *map[app.Leased]bool, r app.DeliveryResult) bool {
	l := app.Leased{ID: r.ID, Token: r.Token}
	if (*seen)[l] {
		return false
	}
	if *seen == nil {
		*seen = map[app.Leased]bool{}
	}
	(*seen)[l] = true
	return true
}

// NextDue implements app.OutboxStore: one min over outbox_due_idx per
// integrator, in one statement (one round trip for every integrator, where
// query.Reads' loop, which this replaces, takes one each).
func (db *DB) NextDue(ctx context.Context, integrators []string, after time.Time) (time.Time, bool, error) {
	if len(integrators) == 0 {
		return time.Time{}, false, nil
	}
	var next *int64
	if err := db.read.QueryRow(ctx, `SELECT min(n) FROM unnest($1::text[]) AS i(id),
		LATERAL (SELECT min(proxima_tentativa) AS n FROM outbox
			WHERE integrador_id = i.id AND status = 'pendente' AND proxima_tentativa > $2) AS m`,
		integrators, ms(after)).Scan(&next); err != nil {
		return time.Time{}, false, err
	}
	if next == nil {
		return time.Time{}, false, nil
	}
	return fromMS(*next), true, nil
}

// RenewDeliveries implements app.OutboxStore, by the database's clock as
// the claim and the reaper: now is not read.
func (db *DB) RenewDeliveries(ctx context.Context, worker string, now time.Time, lease time.Duration) ([]app.Leased, error) {
	var out []app.Leased
	err := db.do(ctx, func(tx *wtx) error {
		rows, err := tx.Query(tx.ctx, `UPDATE outbox SET lease_ate = `+dbNowMS+` + $2
			WHERE id IN (SELECT id FROM outbox WHERE status = 'processando' AND worker = $1 AND lease_ate >= `+dbNowMS+`
				FOR NO KEY UPDATE SKIP LOCKED)
			RETURNING id, lease_token`, worker, lease.Milliseconds())
		if err != nil {
			return fmt.Errorf("renew leases: %w", err)
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (app.Leased, error) {
			var l app.Leased
			return l, r.Scan(&l.ID, &l.Token)
		})
		if err != nil {
			return fmt.Errorf("renew leases: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// newLeaseToken names one claim (app.Delivery.Token): random, so that no
// two claims of any replica share one.
func newLeaseToken() int64 { return rand.Int64N(math.MaxInt64) + 1 }

// ReapDeliveries implements app.OutboxStore. Leases end by the database's
// clock (see claimSQL), so the reaper takes back only those whose end has
// passed by that clock, whatever now says: now only dates a dead letter.
// On SQLite, ReapOnStart's cut-off (a lease and an hour ahead) takes back
// every lease, right for one node whose leases at start are all orphans;
// here the replica starting may be one of several, and another's lease is
// live, so the cut-off is ignored, and ReapOnStart makes one more ordinary
// reap. Rows another transaction is changing (a finish of the lease) are
// skipped: the next sweep sees them.
func (db *DB) ReapDeliveries(ctx context.Context, now time.Time, maxQuedas int) (int, error) {
	var n int64
	err := db.do(ctx, func(tx *wtx) error {
		tag, err := tx.Exec(tx.ctx, `UPDATE outbox SET
				quedas = quedas + 1, lease_ate = NULL, worker = NULL, lease_token = NULL,
				status = CASE WHEN quedas + 1 >= $1::integer THEN 'falhou' ELSE 'pendente' END,
				ultimo_erro = CASE WHEN quedas + 1 >= $1::integer THEN $3::text || (quedas + 1) || $4::text
					ELSE ultimo_erro END,
				falhou_em = CASE WHEN quedas + 1 >= $1::integer THEN $2::bigint END
			WHERE id IN (SELECT id FROM outbox WHERE status = 'processando' AND lease_ate < `+dbNowMS+`
				FOR NO KEY UPDATE SKIP LOCKED)`, maxQuedas, ms(now), app.PoisonPrefix, app.PoisonSuffix)
		if err != nil {
			return fmt.Errorf("reap deliveries: %w", err)
		}
		n = tag.RowsAffected()
		tx.freed = tx.freed || n > 0 // the other replicas' dispatchers claim them now, not at their sweep
		return nil
	})
	return int(n), err
}

// ReleaseDeliveries implements app.OutboxStore: on shutdown, this worker's
// leases go back to pendente at once instead of waiting to expire (one the
// reaper is taking back meanwhile is skipped: it goes back anyway), and the
// commit wakes the other replicas' dispatchers to take them.
func (db *DB) ReleaseDeliveries(ctx context.Context, worker string) error {
	return db.do(ctx, func(tx *wtx) error {
		tag, err := tx.Exec(tx.ctx, `UPDATE outbox SET status = 'pendente', lease_ate = NULL, worker = NULL,
			lease_token = NULL WHERE id IN (SELECT id FROM outbox WHERE status = 'processando' AND worker = $1
				FOR NO KEY UPDATE SKIP LOCKED)`, worker)
		tx.freed = tx.freed || tag.RowsAffected() > 0
		return err
	})
}

// ReconcileDeliveries implements app.OutboxStore: like ReleaseDeliveries,
// for the rows of worker that it does not hold.
func (db *DB) ReconcileDeliveries(ctx context.Context, worker string, held []int64) (int, error) {
	if held == nil {
		held = []int64{} // NULL would match no row
	}
	var n int64
	err := db.do(ctx, func(tx *wtx) error {
		tag, err := tx.Exec(tx.ctx, `UPDATE outbox SET status = 'pendente', lease_ate = NULL, worker = NULL,
			lease_token = NULL WHERE id IN (SELECT id FROM outbox WHERE status = 'processando' AND worker = $1 AND id <> ALL($2)
				FOR NO KEY UPDATE SKIP LOCKED)`, worker, held)
		if err != nil {
			return fmt.Errorf("reconcile leases: %w", err)
		}
		n = tag.RowsAffected()
		tx.freed = tx.freed || n > 0
		return nil
	})
	return int(n), err
}

// Purges walk the partial indexes of the rows that still keep a body
// (outbox_purge_idx for delivered rows, outbox_falhou_idx for dead
// letters): the planner picks them for these predicates without a hint.
// A row another transaction is changing (a resend) is skipped: the next
// purge sees it as it is then. The receivers' answers to a row's attempts
// go with its body: they may quote it (issue 26, L5).
const (
	purgeBodiesSQL = `WITH p AS (UPDATE outbox SET expurgado = true
			WHERE id IN (SELECT id FROM outbox WHERE status = 'entregue' AND NOT expurgado AND entregue_em < $1
				FOR NO KEY UPDATE SKIP LOCKED) RETURNING id),
		d AS (DELETE FROM outbox_corpo WHERE outbox_id IN (SELECT id FROM p)),
		a AS (UPDATE delivery_attempt SET resposta = '', resposta_selada = NULL
			WHERE outbox_id IN (SELECT id FROM p) AND (resposta <> '' OR resposta_selada IS NOT NULL))
		SELECT count(*) FROM p`
	purgeDeadBodiesSQL = `WITH p AS (UPDATE outbox SET expurgado = true
			WHERE id IN (SELECT id FROM outbox WHERE status = 'falhou' AND NOT expurgado AND falhou_em < $1
				FOR NO KEY UPDATE SKIP LOCKED) RETURNING id),
		d AS (DELETE FROM outbox_corpo WHERE outbox_id IN (SELECT id FROM p)),
		a AS (UPDATE delivery_attempt SET resposta = '', resposta_selada = NULL
			WHERE outbox_id IN (SELECT id FROM p) AND (resposta <> '' OR resposta_selada IS NOT NULL))
		SELECT count(*) FROM p`
)

// PurgeDelivered implements app.OutboxStore.
func (db *DB) PurgeDelivered(ctx context.Context, before time.Time) (int, error) {
	return db.purge(ctx, purgeBodiesSQL, before)
}

// PurgeDeadLetters implements app.OutboxStore: dead letters keep their body
// for a retention of their own, counted from falhou_em.
func (db *DB) PurgeDeadLetters(ctx context.Context, before time.Time) (int, error) {
	return db.purge(ctx, purgeDeadBodiesSQL, before)
}

func (db *DB) purge(ctx context.Context, q string, before time.Time) (int, error) {
	var n int
	err := db.do(ctx, func(tx *wtx) error {
		return tx.QueryRow(tx.ctx, q, ms(before)).Scan(&n)
	})
	return n, err
}

// Resend implements app.OutboxStore: a dead letter goes back to pendente
// with its body and sequence; a purged body cannot be resent. The update
// checks both in its WHERE, on the row as the last writer committed it,
// so two replicas resending it, or a purge meanwhile, cannot both act on
// what they read; its key keeps two resends of it in one lock order.
func (db *DB) Resend(ctx context.Context, id int64, now time.Time, audit *app.AuditEntry) error {
	return db.locked(ctx, []lockKey{key("delivery", strconv.FormatInt(id, 10))}, func(tx *wtx) error {
		tag, err := tx.Exec(tx.ctx, `UPDATE outbox SET status = 'pendente', proxima_tentativa = $1,
			tentativas_antes = tentativas, quedas = 0, falhou_em = NULL
			WHERE id = $2 AND status = 'falhou' AND NOT expurgado`, ms(now), id)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			var status string
			var purged bool
			err := tx.QueryRow(tx.ctx, `SELECT status, expurgado FROM outbox WHERE id = $1`, id).Scan(&status, &purged)
			switch {
			case isNoRows(err):
				return app.ErrNotFound
			case err != nil:
				return err
			case status != app.EntregaFalhou:
				return &app.StateConflict{Status: status}
			default:
				return &app.StateConflict{Status: status, Purged: true}
			}
		}
		return tx.audit(audit, ms(db.now()))
	})
}

// Bulk resend reads one integrator's dead letters in outbox_mortas_idx:
// those with their body go back in line, the purged ones are counted. A
// dead letter another transaction is changing (resent on its own, or
// purged) is skipped: it is being taken care of.
const (
	resendAllSQL = `UPDATE outbox SET status = 'pendente', proxima_tentativa = $1,
			tentativas_antes = tentativas, quedas = 0, falhou_em = NULL
			WHERE id IN (SELECT id FROM outbox WHERE integrador_id = $2 AND status = 'falhou' AND NOT expurgado
				FOR NO KEY UPDATE SKIP LOCKED)`
	countPurgedDeadSQL = `SELECT count(*) FROM outbox
			WHERE integrador_id = $1 AND status = 'falhou' AND expurgado`
)

// ResendAll implements app.OutboxStore: only dead letters are resent.
func (db *DB) ResendAll(ctx context.Context, integrador, status string, now time.Time, audit *app.AuditEntry) (int, int, error) {
	if status != app.EntregaFalhou {
		return 0, 0, app.ErrResendNotFailed
	}
	var n, purged int64
	err := db.do(ctx, func(tx *wtx) error {
		tag, err := tx.Exec(tx.ctx, resendAllSQL, ms(now), integrador)
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		if err := tx.QueryRow(tx.ctx, countPurgedDeadSQL, integrador).Scan(&purged); err != nil {
			return err
		}
		return tx.audit(audit.Counted(n), ms(db.now()))
	})
	return int(n), int(purged), err
}

// A gap repair reads one integrator's rows by aggregate from a sequence or
// by the time they were enqueued; rows pending or in flight are on their
// way already, and a row another transaction holds is being taken care of.
const (
	redeliverByAggregate = `integrador_id = $1 AND agregado = $2 AND sequencia >= $3 AND status IN ('entregue', 'falhou')`
	redeliverByTime      = `integrador_id = $1 AND criado_em >= $2 AND criado_em <= $3 AND status IN ('entregue', 'falhou')`
)

// Redeliver implements app.OutboxStore.
func (db *DB) Redeliver(ctx context.Context, integrador string, r app.Redelivery, now time.Time, audit *app.AuditEntry) (int, int, error) {
	where, args := redeliverByTime, []any{integrador, ms(r.Desde), ms(r.Ate)}
	if r.Agregado != "" {
		where, args = redeliverByAggregate, []any{integrador, r.Agregado, r.SequenciaDesde}
	}
	var n, purged int64
	err := db.do(ctx, func(tx *wtx) error {
		var total int64
		if err := tx.QueryRow(tx.ctx, `SELECT count(*), count(*) FILTER (WHERE expurgado) FROM (SELECT expurgado FROM outbox WHERE `+
			where+` LIMIT $4) AS r`, append(args, app.MaxRedeliver+1)...).Scan(&total, &purged); err != nil {
			return err
		}
		if total > app.MaxRedeliver {
			return &app.TooMany{Limit: app.MaxRedeliver}
		}
		tag, err := tx.Exec(tx.ctx, `UPDATE outbox SET status = 'pendente', proxima_tentativa = $4, tentativas_antes = tentativas,
			quedas = 0, falhou_em = NULL WHERE id IN (SELECT id FROM outbox WHERE `+where+` AND NOT expurgado
			FOR NO KEY UPDATE SKIP LOCKED)`, append(args, ms(now))...)
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		return tx.audit(audit.Counted(n), ms(db.now()))
	})
	return int(n), int(purged), err
}

// DueNow implements app.OutboxStore: a range of outbox_due_idx, the rows
// not yet due. A row another transaction holds is skipped: a claim is
// taking it, or another "Tentar agora" is making it due.
func (db *DB) DueNow(ctx context.Context, integrador string, id int64, now time.Time, audit *app.AuditEntry) (int, error) {
	var n int64
	err := db.do(ctx, func(tx *wtx) error {
		if id > 0 {
			var status string
			err := tx.QueryRow(tx.ctx, `SELECT status FROM outbox WHERE id = $1 AND integrador_id = $2`, id, integrador).Scan(&status)
			if isNoRows(err) {
				return app.ErrNotFound
			}
			if err != nil {
				return err
			}
			if status != app.EntregaPendente {
				return &app.StateConflict{Status: status}
			}
		}
		q := `UPDATE outbox SET proxima_tentativa = $1 WHERE id IN (SELECT id FROM outbox
			WHERE integrador_id = $2 AND status = 'pendente' AND proxima_tentativa > $1`
		args := []any{ms(now), integrador}
		if id > 0 {
			q += ` AND id = $3`
			args = append(args, id)
		}
		q += ` FOR NO KEY UPDATE SKIP LOCKED)`
		tag, err := tx.Exec(tx.ctx, q, args...)
		if err != nil {
			return fmt.Errorf("make deliveries due: %w", err)
		}
		n = tag.RowsAffected()
		return tx.audit(audit.Counted(n), ms(db.now()))
	})
	return int(n), err
}
