package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"geohub/app"
	"geohub/store/query"
)

// The outbox's writer statements, prepared once (see writeStmts).
const (
	claimOwnerSQL = `INSERT INTO aggregate_owner (agregado, integrador_id, criado_em) VALUES (?, ?, ?)
				ON CONFLICT (agregado) DO NOTHING`
	ownerSQL        = `SELECT integrador_id FROM aggregate_owner WHERE agregado = ?`
	nextSequenceSQL = `INSERT INTO outbox_sequence (integrador_id, agregado, ultima) VALUES (?, ?, 1)
			ON CONFLICT (integrador_id, agregado) DO UPDATE SET ultima = ultima + 1 RETURNING ultima`
	insertOutboxSQL = `INSERT INTO outbox (event_id, sequence_number, integrador_id, tipo, agregado,
			sequencia, proxima_tentativa, criado_em) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`
	insertCorpoSQL = `INSERT INTO outbox_corpo (outbox_id, corpo) VALUES (?, ?)`
	finishSQL      = `UPDATE outbox SET status = ?, tentativas = tentativas + 1,
				proxima_tentativa = ?, lease_ate = NULL, worker = NULL, ultimo_status = ?, ultimo_erro = ?,
				entregue_em = ?, falhou_em = ?, lease_token = NULL
				WHERE id = ? AND worker = ? AND lease_token = ? AND status = 'processando'`
	deferSQL = `UPDATE outbox SET status = 'pendente', proxima_tentativa = ?, lease_ate = NULL, worker = NULL,
				lease_token = NULL WHERE id = ? AND worker = ? AND lease_token = ? AND status = 'processando'`
	insertAttemptSQL = `INSERT INTO delivery_attempt (outbox_id, entrega_id, tentativa, inicio,
				duracao_ms, status_code, erro, resposta_selada) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`
	clearFailingSQL = `UPDATE integrator SET falhando_desde = NULL,
					ultimo_sucesso_em = max(coalesce(ultimo_sucesso_em, 0), ?) WHERE id = ?`
	markFailingSQL = `UPDATE integrator SET falhando_desde = coalesce(falhando_desde, ?)
				WHERE id = ? RETURNING falhando_desde`
)

// enqueue writes ev's outbox rows inside its append transaction, each with
// the next gapless sequence of its (integrator, aggregate).
func (tx *wtx) enqueue(ev app.Event, out *app.Outbox, now time.Time) (int, error) {
	var owner string
	if out.NeedsOwner {
		if out.Claim != "" {
			if _, err := tx.stmt(tx.stmts.claimOwner).Exec(out.Agregado, out.Claim, ms(now)); err != nil {
				return 0, fmt.Errorf("claim aggregate: %w", err)
			}
		}
		err := tx.stmt(tx.stmts.owner).QueryRow(out.Agregado).Scan(&owner)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return 0, fmt.Errorf("read aggregate owner: %w", err)
		}
	}
	recipients := out.Recipients(owner)
	for _, id := range recipients {
		var seq int64
		if err := tx.stmt(tx.stmts.nextSequence).QueryRow(id, out.Agregado).Scan(&seq); err != nil {
			return 0, fmt.Errorf("next sequence: %w", err)
		}
		res, err := tx.stmt(tx.stmts.insertOutbox).Exec(ev.EventID, ev.Sequence, id, ev.Tipo, out.Agregado, seq,
			ms(now), ms(now))
		if err != nil {
			return 0, fmt.Errorf("enqueue delivery: %w", err)
		}
		row, err := res.LastInsertId()
		if err != nil {
			return 0, err
		}
		if _, err := tx.stmt(tx.stmts.insertCorpo).Exec(row, out.Body); err != nil {
			return 0, fmt.Errorf("store delivery body: %w", err)
		}
	}
	return len(recipients), nil
}

// ClaimDeliveries implements app.OutboxStore: per integrator, a range seek
// on outbox_due_idx with one prepared statement, taking at most one row per
// aggregate (see claimSQL).
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
		list, err := json.Marshal(ids)
		if err != nil {
			return nil, err
		}
		rows, err := tx.stmt(tx.stmts.claimRows).Query(ms(now.Add(lease)), worker, newLeaseToken(), string(list))
		if err != nil {
			return nil, fmt.Errorf("claim deliveries: %w", err)
		}
		var got []app.Delivery
		for rows.Next() {
			d, err := query.ScanDelivery(rows, true)
			if err != nil {
				rows.Close()
				return nil, err
			}
			got = append(got, d)
		}
		if err := rows.Close(); err != nil {
			return nil, err
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

// candidates are up to q.N rows of q's integrator the claim rule allows,
// oldest due first: from the window of the oldest due rows, and, when that
// window is full and short of heads, from each aggregate's first row.
func (tx *wtx) candidates(q app.Quota, now time.Time) ([]int64, error) {
	window := claimWindow(q.N)
	rows, err := tx.stmt(tx.stmts.claimWindow).Query(q.Integrador, ms(now), q.N, window)
	if err != nil {
		return nil, err
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, err
		}
		ids = append(ids, id)
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	if len(ids) >= q.N {
		return ids, nil
	}
	var due int
	if err := tx.stmt(tx.stmts.claimWindowFull).QueryRow(q.Integrador, ms(now), window).Scan(&due); err != nil {
		return nil, err
	}
	if due < window {
		return ids, nil // every due row was looked at
	}
	rows, err = tx.stmt(tx.stmts.claimHeads).Query(q.Integrador, ms(now), q.N)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() && len(ids) < q.N {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids, rows.Err()
}

// FinishDeliveries implements app.OutboxStore: one transaction for a batch
// of outcomes. A row whose lease this worker lost (the reaper gave it to
// another) is left alone, but its attempt is still recorded. A deferred row
// goes back to pendente with no attempt.
func (db *DB) FinishDeliveries(ctx context.Context, results []app.DeliveryResult, worker string, now time.Time,
	lease time.Duration, quotas []app.Quota) (map[string]time.Time, []app.Delivery, error) {
	failing := map[string]time.Time{}
	var claimed []app.Delivery
	err := db.do(ctx, func(tx *wtx) error {
		clear(failing)
		cleared := map[string]bool{}
		lastOK := map[string]int64{} // each integrator's latest success in the batch
		for _, r := range results {
			if r.Kind != app.ResultDeferred && r.Status == app.EntregaEntregue {
				lastOK[r.Integrador] = max(lastOK[r.Integrador], ms(r.Attempt.Inicio.Add(time.Duration(r.Attempt.DuracaoMS)*time.Millisecond)))
			}
		}
		for _, r := range results {
			if r.Kind == app.ResultDeferred {
				if _, err := tx.stmt(tx.stmts.deferRow).Exec(ms(r.Proxima), r.ID, r.Worker, r.Token); err != nil {
					return fmt.Errorf("defer delivery %d: %w", r.ID, err)
				}
				continue
			}
			var entregue, falhou any // when it was delivered, or dead-lettered
			end := ms(r.Attempt.Inicio.Add(time.Duration(r.Attempt.DuracaoMS) * time.Millisecond))
			switch r.Status {
			case app.EntregaEntregue:
				entregue = end
			case app.EntregaFalhou:
				falhou = end
			}
			var code any
			if r.Attempt.StatusCode != 0 {
				code = r.Attempt.StatusCode
			}
			if _, err := tx.stmt(tx.stmts.finish).Exec(r.Status, ms(r.Proxima), code, r.UltimoErr, entregue, falhou,
				r.ID, r.Worker, r.Token); err != nil {
				return fmt.Errorf("finish delivery %d: %w", r.ID, err)
			}
			a := r.Attempt
			if _, err := tx.stmt(tx.stmts.insertAttempt).Exec(r.ID, a.EntregaID, a.Tentativa, ms(a.Inicio),
				a.DuracaoMS, code, a.Erro, a.RespostaSelada); err != nil {
				return fmt.Errorf("record attempt of %d: %w", r.ID, err)
			}
			if !r.Kind.OfReceiver() {
				continue // says nothing of the receiver
			}
			if !r.Kind.Failed() {
				delete(failing, r.Integrador)
				if cleared[r.Integrador] {
					continue // once per integrator and batch
				}
				cleared[r.Integrador] = true
				if _, err := tx.stmt(tx.stmts.clearFailing).Exec(lastOK[r.Integrador], r.Integrador); err != nil {
					return err
				}
				continue
			}
			delete(cleared, r.Integrador)
			var since int64
			if err := tx.stmt(tx.stmts.markFailing).QueryRow(ms(a.Inicio), r.Integrador).Scan(&since); err != nil {
				return fmt.Errorf("record failing period: %w", err)
			}
			failing[r.Integrador] = fromMS(since)
		}
		var err error
		claimed, err = tx.claim(worker, now, lease, quotas)
		return err
	})
	if err != nil {
		return nil, nil, err // nothing of it was committed
	}
	return failing, claimed, nil
}

// renewSQL moves a worker's live leases: a seek in outbox_status_idx to
// the few rows in flight.
const renewSQL = `UPDATE outbox SET lease_ate = ?1
	WHERE status = 'processando' AND worker = ?2 AND lease_ate >= ?3
	RETURNING id, lease_token`

// RenewDeliveries implements app.OutboxStore.
func (db *DB) RenewDeliveries(ctx context.Context, worker string, now time.Time, lease time.Duration) ([]app.Leased, error) {
	var out []app.Leased
	err := db.do(ctx, func(tx *wtx) error {
		out = out[:0]
		rows, err := tx.Query(renewSQL, ms(now.Add(lease)), worker, ms(now))
		if err != nil {
			return fmt.Errorf("renew leases: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var l app.Leased
			if err := rows.Scan(&l.ID, &l.Token); err != nil {
				return fmt.Errorf("renew leases: %w", err)
			}
			out = append(out, l)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// newLeaseToken names one claim (app.Delivery.Token): random, so that no
// two claims of any worker, before or after a restart, share one.
func newLeaseToken() int64 { return rand.Int64N(math.MaxInt64) + 1 }

// ReapDeliveries implements app.OutboxStore.
func (db *DB) ReapDeliveries(ctx context.Context, now time.Time, maxQuedas int) (int, error) {
	var n int64
	err := db.do(ctx, func(tx *wtx) error {
		res, err := tx.Exec(`UPDATE outbox SET
				quedas = quedas + 1, lease_ate = NULL, worker = NULL, lease_token = NULL,
				status = CASE WHEN quedas + 1 >= ?1 THEN 'falhou' ELSE 'pendente' END,
				ultimo_erro = CASE WHEN quedas + 1 >= ?1 THEN ?3 || (quedas + 1) || ?4 ELSE ultimo_erro END,
				falhou_em = CASE WHEN quedas + 1 >= ?1 THEN ?2 END
			WHERE status = 'processando' AND lease_ate < ?2`, maxQuedas, ms(now), app.PoisonPrefix, app.PoisonSuffix)
		if err != nil {
			return fmt.Errorf("reap deliveries: %w", err)
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

// ReleaseDeliveries implements app.OutboxStore: on shutdown, this worker's
// leases go back to pendente at once instead of waiting to expire.
func (db *DB) ReleaseDeliveries(ctx context.Context, worker string) error {
	return db.do(ctx, func(tx *wtx) error {
		_, err := tx.Exec(`UPDATE outbox SET status = 'pendente', lease_ate = NULL, worker = NULL, lease_token = NULL
			WHERE status = 'processando' AND worker = ?`, worker)
		return err
	})
}

// ReconcileDeliveries implements app.OutboxStore: like ReleaseDeliveries,
// for the rows of worker that it does not hold.
func (db *DB) ReconcileDeliveries(ctx context.Context, worker string, held []int64) (int, error) {
	keep := make(map[int64]bool, len(held))
	for _, id := range held {
		keep[id] = true
	}
	var n int
	err := db.do(ctx, func(tx *wtx) error {
		n = 0
		rows, err := tx.Query(`SELECT id FROM outbox WHERE status = 'processando' AND worker = ?`, worker)
		if err != nil {
			return fmt.Errorf("reconcile leases: %w", err)
		}
		var free []int64
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return fmt.Errorf("reconcile leases: %w", err)
			}
			if !keep[id] {
				free = append(free, id)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("reconcile leases: %w", err)
		}
		for _, id := range free {
			if _, err := tx.Exec(`UPDATE outbox SET status = 'pendente', lease_ate = NULL, worker = NULL, lease_token = NULL
				WHERE id = ? AND status = 'processando' AND worker = ?`, id, worker); err != nil {
				return fmt.Errorf("reconcile leases: %w", err)
			}
		}
		n = len(free)
		return nil
	})
	return n, err
}

// Purging walks outbox_purge_idx: delivered rows whose body is still kept.
// Named, because without statistics the planner prefers walking every
// delivered row in outbox_status_idx.
// The receivers' answers to a row's attempts go with its body (issue 26,
// L5): they may quote it, and are kept no longer than what they answered.
const (
	purgeAnswersSQL = `UPDATE delivery_attempt SET resposta = '', resposta_selada = NULL
			WHERE outbox_id IN (SELECT id FROM outbox INDEXED BY outbox_purge_idx
				WHERE status = 'entregue' AND expurgado = 0 AND entregue_em < ?)
			AND (resposta <> '' OR resposta_selada IS NOT NULL)`
	purgeBodiesSQL = `DELETE FROM outbox_corpo WHERE outbox_id IN (SELECT id FROM outbox INDEXED BY outbox_purge_idx
			WHERE status = 'entregue' AND expurgado = 0 AND entregue_em < ?)`
	markPurgedSQL = `UPDATE outbox INDEXED BY outbox_purge_idx SET expurgado = 1
			WHERE status = 'entregue' AND expurgado = 0 AND entregue_em < ?`
)

// PurgeDelivered implements app.OutboxStore.
func (db *DB) PurgeDelivered(ctx context.Context, before time.Time) (int, error) {
	var n int64
	err := db.do(ctx, func(tx *wtx) error {
		if _, err := tx.Exec(purgeAnswersSQL, ms(before)); err != nil {
			return err
		}
		if _, err := tx.Exec(purgeBodiesSQL, ms(before)); err != nil {
			return err
		}
		res, err := tx.Exec(markPurgedSQL, ms(before))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

// Dead letters keep their body for a retention of their own, counted from
// falhou_em; both statements walk outbox_falhou_idx, which holds only the
// dead letters that still have one.
const (
	purgeDeadAnswersSQL = `UPDATE delivery_attempt SET resposta = '', resposta_selada = NULL
			WHERE outbox_id IN (SELECT id FROM outbox INDEXED BY outbox_falhou_idx
				WHERE status = 'falhou' AND expurgado = 0 AND falhou_em < ?)
			AND (resposta <> '' OR resposta_selada IS NOT NULL)`
	purgeDeadBodiesSQL = `DELETE FROM outbox_corpo WHERE outbox_id IN (SELECT id FROM outbox INDEXED BY outbox_falhou_idx
			WHERE status = 'falhou' AND expurgado = 0 AND falhou_em < ?)`
	markDeadPurgedSQL = `UPDATE outbox INDEXED BY outbox_falhou_idx SET expurgado = 1
			WHERE status = 'falhou' AND expurgado = 0 AND falhou_em < ?`
)

// PurgeDeadLetters implements app.OutboxStore.
func (db *DB) PurgeDeadLetters(ctx context.Context, before time.Time) (int, error) {
	var n int64
	err := db.do(ctx, func(tx *wtx) error {
		if _, err := tx.Exec(purgeDeadAnswersSQL, ms(before)); err != nil {
			return err
		}
		if _, err := tx.Exec(purgeDeadBodiesSQL, ms(before)); err != nil {
			return err
		}
		res, err := tx.Exec(markDeadPurgedSQL, ms(before))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

// Resend implements app.OutboxStore: a dead letter goes back to pendente
// with its body and sequence; a purged body cannot be resent.
func (db *DB) Resend(ctx context.Context, id int64, now time.Time, audit *app.AuditEntry) error {
	return db.do(ctx, func(tx *wtx) error {
		var status string
		var purged bool
		err := tx.QueryRow(`SELECT status, expurgado FROM outbox WHERE id = ?`, id).Scan(&status, &purged)
		if errors.Is(err, sql.ErrNoRows) {
			return app.ErrNotFound
		}
		if err != nil {
			return err
		}
		if status != app.EntregaFalhou {
			return &app.StateConflict{Status: status}
		}
		if purged {
			return &app.StateConflict{Status: status, Purged: true}
		}
		if _, err = tx.Exec(`UPDATE outbox SET status = 'pendente', proxima_tentativa = ?, tentativas_antes = tentativas,
			quedas = 0, falhou_em = NULL WHERE id = ?`, ms(now), id); err != nil {
			return err
		}
		return tx.audit(audit, ms(db.now()))
	})
}

// Bulk resend reads one integrator's dead letters in outbox_mortas_idx: those
// with their body go back in line, the purged ones are counted.
const (
	resendAllSQL = `UPDATE outbox INDEXED BY outbox_mortas_idx SET status = 'pendente', proxima_tentativa = ?,
			tentativas_antes = tentativas, quedas = 0, falhou_em = NULL
			WHERE integrador_id = ? AND status = 'falhou' AND expurgado = 0`
	countPurgedDeadSQL = `SELECT count(*) FROM outbox INDEXED BY outbox_mortas_idx
			WHERE integrador_id = ? AND status = 'falhou' AND expurgado = 1`
)

// ResendAll implements app.OutboxStore: only dead letters are resent.
func (db *DB) ResendAll(ctx context.Context, integrador, status string, now time.Time, audit *app.AuditEntry) (int, int, error) {
	if status != app.EntregaFalhou {
		return 0, 0, app.ErrResendNotFailed
	}
	var n, purged int64
	err := db.do(ctx, func(tx *wtx) error {
		res, err := tx.Exec(resendAllSQL, ms(now), integrador)
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
		if err := tx.QueryRow(countPurgedDeadSQL, integrador).Scan(&purged); err != nil {
			return err
		}
		return tx.audit(audit.Counted(n), ms(db.now()))
	})
	return int(n), int(purged), err
}

// A gap repair reads one integrator's rows by aggregate from a sequence
// (the UNIQUE (integrador_id, agregado, sequencia) index) or by the time
// they were enqueued; rows pending or in flight are on their way already.
const (
	redeliverByAggregate = `integrador_id = ? AND agregado = ? AND sequencia >= ? AND status IN ('entregue', 'falhou')`
	redeliverByTime      = `integrador_id = ? AND criado_em >= ? AND criado_em <= ? AND status IN ('entregue', 'falhou')`
	redeliverCount       = `SELECT count(*), coalesce(sum(expurgado), 0) FROM (SELECT expurgado FROM outbox WHERE `
	redeliverSet         = `UPDATE outbox SET status = 'pendente', proxima_tentativa = ?, tentativas_antes = tentativas,
			quedas = 0, falhou_em = NULL WHERE `
	redeliverAggregateCountSQL = redeliverCount + redeliverByAggregate + ` LIMIT ?)`
	redeliverTimeCountSQL      = redeliverCount + redeliverByTime + ` LIMIT ?)`
	redeliverAggregateSQL      = redeliverSet + redeliverByAggregate + ` AND expurgado = 0`
	redeliverTimeSQL           = redeliverSet + redeliverByTime + ` AND expurgado = 0`
)

// Redeliver implements app.OutboxStore.
func (db *DB) Redeliver(ctx context.Context, integrador string, r app.Redelivery, now time.Time, audit *app.AuditEntry) (int, int, error) {
	count, update, args := redeliverTimeCountSQL, redeliverTimeSQL, []any{integrador, ms(r.Desde), ms(r.Ate)}
	if r.Agregado != "" {
		count, update, args = redeliverAggregateCountSQL, redeliverAggregateSQL, []any{integrador, r.Agregado, r.SequenciaDesde}
	}
	var n, purged int64
	err := db.do(ctx, func(tx *wtx) error {
		var total int64
		if err := tx.QueryRow(count, append(args, app.MaxRedeliver+1)...).Scan(&total, &purged); err != nil {
			return err
		}
		if total > app.MaxRedeliver {
			return &app.TooMany{Limit: app.MaxRedeliver}
		}
		res, err := tx.Exec(update, append([]any{ms(now)}, args...)...)
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
		return tx.audit(audit.Counted(n), ms(db.now()))
	})
	return int(n), int(purged), err
}

// DueNow implements app.OutboxStore: a range of outbox_due_idx, the rows
// not yet due.
func (db *DB) DueNow(ctx context.Context, integrador string, id int64, now time.Time, audit *app.AuditEntry) (int, error) {
	var n int64
	err := db.do(ctx, func(tx *wtx) error {
		if id > 0 {
			var status string
			err := tx.QueryRow(`SELECT status FROM outbox WHERE id = ? AND integrador_id = ?`, id, integrador).Scan(&status)
			if errors.Is(err, sql.ErrNoRows) {
				return app.ErrNotFound
			}
			if err != nil {
				return err
			}
			if status != app.EntregaPendente {
				return &app.StateConflict{Status: status}
			}
		}
		q := `UPDATE outbox SET proxima_tentativa = ? WHERE integrador_id = ? AND status = 'pendente'
			AND proxima_tentativa > ?`
		args := []any{ms(now), integrador, ms(now)}
		if id > 0 {
			q += ` AND id = ?`
			args = append(args, id)
		}
		res, err := tx.Exec(q, args...)
		if err != nil {
			return fmt.Errorf("make deliveries due: %w", err)
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
		return tx.audit(audit.Counted(n), ms(db.now()))
	})
	return int(n), err
}
