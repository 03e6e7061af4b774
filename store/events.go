package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"geohub/app"
	"geohub/store/query"
)

// writeStmts are prepared once on the writer's connection: the publish and
// delivery paths run them thousands of times a second, and preparing a
// statement costs more than running it.
type writeStmts struct {
	insertEvent, eventByID                           *sql.Stmt
	claimWindow, claimWindowFull, claimHeads         *sql.Stmt
	claimRows                                        *sql.Stmt
	claimOwner, owner, nextSequence, insertOutbox    *sql.Stmt
	insertCorpo                                      *sql.Stmt
	finish, insertAttempt, clearFailing, markFailing *sql.Stmt
	deferRow                                         *sql.Stmt
}

// A claim leases one integrator's oldest due rows, keeping each aggregate
// in order (SPEC 6.4): a row is taken only when no row of its (integrator,
// aggregate) is processando, and no earlier row of it is pendente and either
// due or still without its first attempt (claimable). So at most one row per
// aggregate is in flight, rows go in sequence order, and a row whose attempt
// failed (retry scheduled later) lets the next one go. Both checks seek the
// partial indexes of live rows, so a long delivered history costs nothing.
//
// The candidates come from a window of the claimWindow oldest due rows
// (claimWindowSQL), as on PostgreSQL (issue 27, B3): a backlog of a few
// aggregates with many rows each made every claim check the whole backlog
// for heads that were not there (4-12 ms a claim over 10,000 rows, inside
// the one writer's transaction, which publishes wait for). When the window
// is full and holds fewer heads than the quota, claimHeadsSQL finds the
// rest by aggregate: one seek per aggregate with pending rows (a loose scan
// of outbox_waiting_idx), not one per row. claimRowsSQL then leases the
// candidates. One writer runs every claim here, so the checks see every
// earlier claim; PostgreSQL's keeps the same rule across replicas with an
// advisory lock per aggregate (store/postgres/outbox.go).
//
// The limits are subqueries because SQLite plans with a bare LIMIT
// parameter's value: each new value would re-prepare the statement.
const (
	claimable = `NOT EXISTS (SELECT 1 FROM outbox AS f INDEXED BY outbox_inflight_idx
			WHERE f.integrador_id = o.integrador_id AND f.agregado = o.agregado AND f.status = 'processando')
		AND NOT EXISTS (SELECT 1 FROM outbox AS e INDEXED BY outbox_waiting_idx
			WHERE e.integrador_id = o.integrador_id AND e.agregado = o.agregado AND e.status = 'pendente'
			AND e.sequencia < o.sequencia AND (e.proxima_tentativa <= ?2 OR e.tentativas = e.tentativas_antes))`
	// The window's rows come in its order, and the look stops at the
	// quota (?3): where every row is its aggregate's head, it reads no
	// more than the quota.
	claimWindowSQL = `SELECT o.id FROM (SELECT id, integrador_id, agregado, sequencia
			FROM outbox INDEXED BY outbox_due_idx
			WHERE integrador_id = ?1 AND status = 'pendente' AND proxima_tentativa <= ?2
			ORDER BY proxima_tentativa, id LIMIT (SELECT ?4)) AS o
		WHERE ` + claimable + ` LIMIT (SELECT ?3)`
	claimWindowFullSQL = `SELECT count(*) FROM (SELECT 1 FROM outbox INDEXED BY outbox_due_idx
			WHERE integrador_id = ?1 AND status = 'pendente' AND proxima_tentativa <= ?2 LIMIT (SELECT ?3))`
	claimHeadsSQL = `WITH RECURSIVE a(agregado) AS (
			SELECT (SELECT min(agregado) FROM outbox INDEXED BY outbox_waiting_idx
				WHERE integrador_id = ?1 AND status = 'pendente')
			UNION ALL
			SELECT (SELECT min(p.agregado) FROM outbox AS p INDEXED BY outbox_waiting_idx
				WHERE p.integrador_id = ?1 AND p.status = 'pendente' AND p.agregado > a.agregado)
			FROM a WHERE a.agregado IS NOT NULL)
		SELECT o.id FROM a JOIN outbox AS o ON o.id = (SELECT x.id FROM outbox AS x INDEXED BY outbox_waiting_idx
				WHERE x.integrador_id = ?1 AND x.agregado = a.agregado AND x.status = 'pendente'
				AND (x.proxima_tentativa <= ?2 OR x.tentativas = x.tentativas_antes)
				ORDER BY x.sequencia LIMIT 1)
		WHERE o.proxima_tentativa <= ?2 AND NOT EXISTS (SELECT 1 FROM outbox AS f INDEXED BY outbox_inflight_idx
			WHERE f.integrador_id = o.integrador_id AND f.agregado = o.agregado AND f.status = 'processando')
		ORDER BY o.proxima_tentativa, o.id LIMIT (SELECT ?3)`
	claimRowsSQL = `UPDATE outbox SET status = 'processando', lease_ate = ?1, worker = ?2, lease_token = ?3
		WHERE id IN (SELECT value FROM json_each(?4)) AND status = 'pendente'
		RETURNING ` + query.DeliveryColumns + `, ` + query.CorpoColumn
)

// claimWindow is how many of the oldest due rows the claim's first look
// reads: enough to find a quota of heads where aggregates interleave.
func claimWindow(n int) int { return max(4*n, 128) }

const insertEventSQL = `INSERT INTO event_log (event_id, tipo, versao_schema,
		timestamp, origem, correlacao_id, agregado, autoria_id, autoria_tipo, solicitacao, payload, criado_em)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (event_id) DO NOTHING`

func (s *writeStmts) prepare(ctx context.Context, db *sql.DB) error {
	for _, p := range []struct {
		dst  **sql.Stmt
		name string
		sql  string
	}{
		{&s.insertEvent, "insert event", insertEventSQL},
		{&s.eventByID, "event by id", `SELECT ` + query.EventColumns + ` FROM event_log WHERE event_id = ?`},
		{&s.claimWindow, "claim window", claimWindowSQL},
		{&s.claimWindowFull, "claim window full", claimWindowFullSQL},
		{&s.claimHeads, "claim heads", claimHeadsSQL},
		{&s.claimRows, "claim rows", claimRowsSQL},
		{&s.claimOwner, "claim aggregate", claimOwnerSQL},
		{&s.owner, "aggregate owner", ownerSQL},
		{&s.nextSequence, "next sequence", nextSequenceSQL},
		{&s.insertOutbox, "enqueue delivery", insertOutboxSQL},
		{&s.insertCorpo, "store delivery body", insertCorpoSQL},
		{&s.finish, "finish delivery", finishSQL},
		{&s.deferRow, "defer delivery", deferSQL},
		{&s.insertAttempt, "record attempt", insertAttemptSQL},
		{&s.clearFailing, "clear failing period", clearFailingSQL},
		{&s.markFailing, "mark failing period", markFailingSQL},
	} {
		st, err := db.PrepareContext(ctx, p.sql)
		if err != nil {
			return fmt.Errorf("prepare %s: %w", p.name, err)
		}
		*p.dst = st
	}
	return nil
}

func (s *writeStmts) close() {
	for _, st := range []*sql.Stmt{s.insertEvent, s.eventByID, s.claimWindow, s.claimWindowFull, s.claimHeads, s.claimRows, s.claimOwner, s.owner, s.nextSequence,
		s.insertOutbox, s.insertCorpo, s.finish, s.insertAttempt, s.clearFailing, s.markFailing, s.deferRow} {
		if st != nil {
			st.Close()
		}
	}
}

// checkExpected refuses a batch whose expectations (app.Pending.Expect)
// no longer hold: an event of the aggregate stored, in this transaction
// too, past what the command read.
func (tx *wtx) checkExpected(batch []app.Pending) error {
	for _, p := range batch {
		for _, e := range p.Expect {
			var last int64
			if err := tx.QueryRow(`SELECT coalesce(max(sequence_number), 0) FROM event_log WHERE agregado = ?`,
				e.Agregado).Scan(&last); err != nil {
				return fmt.Errorf("read aggregate %s: %w", e.Agregado, err)
			}
			if last > e.Ultima {
				return app.ErrAggregateMoved
			}
		}
	}
	return nil
}

// checkCadastro refuses a batch routed by a cadastro older than the one
// committed (app.ErrStaleCadastro), as on PostgreSQL; here one process
// holds the cadastro, so only a change committed while the batch was
// prepared makes it stale.
func (tx *wtx) checkCadastro(batch []app.Pending) error {
	oldest, routed := app.RoutedAt(batch)
	if !routed {
		return nil
	}
	if tx.cadastro < 0 {
		if err := tx.QueryRow(`SELECT versao FROM cadastro_versao WHERE id = 1`).Scan(&tx.cadastro); err != nil {
			return fmt.Errorf("read cadastro version: %w", err)
		}
	}
	if oldest < tx.cadastro {
		return app.ErrStaleCadastro
	}
	return nil
}

// Append implements app.EventLog: the batch is one writer operation, so it
// commits or fails as a whole.
func (db *DB) Append(ctx context.Context, batch []app.Pending) ([]app.Stored, error) {
	out := make([]app.Stored, len(batch))
	err := db.do(ctx, func(tx *wtx) error {
		now := db.now()
		clear(out)
		if err := tx.checkCadastro(batch); err != nil {
			return err
		}
		// A deciding event already stored (app.Pending.Decides) stops the
		// batch, as on PostgreSQL; here the one writer makes the look-up
		// and the inserts one step.
		for i, p := range batch {
			if !p.Decides {
				continue
			}
			ev, err := query.ScanEvent(tx.stmt(tx.stmts.eventByID).QueryRow(p.Event.EventID))
			if err == nil {
				out[i] = app.Stored{Event: ev}
				return nil
			}
			if !errors.Is(err, app.ErrNotFound) {
				return fmt.Errorf("look up deciding event: %w", err)
			}
		}
		if err := tx.checkExpected(batch); err != nil {
			return err
		}
		for i, p := range batch {
			stored, created, err := tx.appendEvent(p.Event, p.Full, now)
			if err != nil {
				return err
			}
			out[i] = app.Stored{Event: stored, Created: created}
			if created {
				if err := tx.audit(p.Audit, ms(now)); err != nil {
					return err
				}
			}
			if !created || p.Outbox == nil {
				continue
			}
			n, err := tx.enqueue(stored, p.Outbox, now)
			if err != nil {
				return err
			}
			tx.appended[len(tx.appended)-1].Deliveries = n
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// appendEvent inserts ev or, when its event_id exists (also earlier in the
// same group transaction), returns the stored record.
func (tx *wtx) appendEvent(ev app.Event, full json.RawMessage, now time.Time) (app.Event, bool, error) {
	var autoriaID, autoriaTipo string
	if ev.Autoria != nil {
		autoriaID, autoriaTipo = ev.Autoria.ID, ev.Autoria.Tipo
	}
	criado := now.UnixMilli()
	res, err := tx.stmt(tx.stmts.insertEvent).Exec(ev.EventID, ev.Tipo, ev.VersaoSchema, ms(ev.Timestamp),
		ev.Origem, ev.CorrelacaoID, nullString(ev.Agregado), nullString(autoriaID), nullString(autoriaTipo),
		nullString(ev.Solicitacao), string(ev.Payload), criado)
	if err != nil {
		return app.Event{}, false, fmt.Errorf("insert event: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return app.Event{}, false, err
	} else if n == 0 {
		// The event_id exists, also when an earlier operation of this very
		// group transaction inserted it.
		existing, err := query.ScanEvent(tx.stmt(tx.stmts.eventByID).QueryRow(ev.EventID))
		if err != nil {
			return app.Event{}, false, fmt.Errorf("read duplicate event: %w", err)
		}
		return existing, false, nil
	}
	if ev.Sequence, err = res.LastInsertId(); err != nil {
		return app.Event{}, false, err
	}
	ev.CriadoEm = fromMS(criado)
	ev.Timestamp = fromMS(ms(ev.Timestamp))
	tx.appended = append(tx.appended, app.Appended{Event: ev, FullPayload: full})
	return ev, true, nil
}
