package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"geohub/app"
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

const eventColumns = `sequence_number, event_id, tipo, versao_schema, timestamp, origem,
	correlacao_id, agregado, autoria_id, autoria_tipo, solicitacao, payload, criado_em`

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
		RETURNING ` + deliveryColumns + `, ` + corpoColumn
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
		{&s.eventByID, "event by id", `SELECT ` + eventColumns + ` FROM event_log WHERE event_id = ?`},
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
			ev, err := scanEvent(tx.stmt(tx.stmts.eventByID).QueryRow(p.Event.EventID))
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
		existing, err := scanEvent(tx.stmt(tx.stmts.eventByID).QueryRow(ev.EventID))
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

type scanner interface{ Scan(dest ...any) error }

func scanEvent(row scanner) (app.Event, error) {
	var ev app.Event
	var ts, criado int64
	var agregado, autoriaID, autoriaTipo, solicitacao sql.NullString
	// Scanned into a byte slice: through a string, a MiB payload would be
	// copied twice.
	var payload []byte
	err := row.Scan(&ev.Sequence, &ev.EventID, &ev.Tipo, &ev.VersaoSchema, &ts, &ev.Origem,
		&ev.CorrelacaoID, &agregado, &autoriaID, &autoriaTipo, &solicitacao, &payload, &criado)
	if errors.Is(err, sql.ErrNoRows) {
		return app.Event{}, app.ErrNotFound
	}
	if err != nil {
		return app.Event{}, err
	}
	ev.Timestamp, ev.CriadoEm = fromMS(ts), fromMS(criado)
	ev.Agregado, ev.Solicitacao = agregado.String, solicitacao.String
	if autoriaID.Valid {
		ev.Autoria = &app.Autoria{ID: autoriaID.String, Tipo: autoriaTipo.String}
	}
	ev.Payload = payload
	return ev, nil
}

// Event implements app.EventLog.
func (db *DB) Event(ctx context.Context, eventID string) (app.Event, error) {
	return scanEvent(db.read.QueryRowContext(ctx, `SELECT `+eventColumns+` FROM event_log WHERE event_id = ?`, eventID))
}

// Events implements app.EventLog: one page and the total matching count.
func (db *DB) Events(ctx context.Context, f app.EventFilter) ([]app.Event, int, error) {
	total, err := db.CountMatching(ctx, f)
	if err != nil {
		return nil, 0, err
	}
	out, _, err := db.EventChunk(ctx, f, 0)
	return out, total, err
}

// eventWhere is the WHERE clause of f's filters, paging aside.
func eventWhere(f app.EventFilter) (string, []any) {
	var where []string
	var args []any
	add := func(cond string, v any) {
		where = append(where, cond)
		args = append(args, v)
	}
	if lo, hi, ok := app.TypeFamily(f.Tipo); ok {
		add("tipo >= ?", lo)
		add("tipo < ?", hi)
	} else if f.Tipo != "" {
		add("tipo = ?", f.Tipo)
	}
	if f.Origem != "" {
		add("origem = ?", f.Origem)
	}
	if f.CorrelacaoID != "" {
		add("correlacao_id = ?", f.CorrelacaoID)
	}
	if f.Agregado != "" {
		add("agregado = ?", f.Agregado)
	}
	// A time range binds both ends: with one bound and ORDER BY rowid the
	// planner prefers walking the whole table to the timestamp index.
	if !f.TimestampInicio.IsZero() || !f.TimestampFim.IsZero() {
		lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
		if !f.TimestampInicio.IsZero() {
			lo = ms(f.TimestampInicio)
		}
		if !f.TimestampFim.IsZero() {
			hi = ms(f.TimestampFim)
		}
		add("timestamp >= ?", lo)
		add("timestamp <= ?", hi)
	}
	if f.SequenceInicio > 0 {
		add("sequence_number >= ?", f.SequenceInicio)
	}
	if f.SequenceFim > 0 {
		add("sequence_number <= ?", f.SequenceFim)
	}
	if len(where) == 0 {
		return "", nil
	}
	return " WHERE " + strings.Join(where, " AND "), args
}

// CountMatching implements app.PageLog.
func (db *DB) CountMatching(ctx context.Context, f app.EventFilter) (int, error) {
	cond, args := eventWhere(f)
	var total int
	if err := db.read.QueryRowContext(ctx, "SELECT count(*) FROM event_log"+cond, args...).Scan(&total); err != nil {
		return 0, fmt.Errorf("count events: %w", err)
	}
	return total, nil
}

// EventChunk implements app.PageLog; maxBytes 0 reads the whole page.
func (db *DB) EventChunk(ctx context.Context, f app.EventFilter, maxBytes int) ([]app.Event, bool, error) {
	cond, args := eventWhere(f)
	order := " ORDER BY sequence_number"
	if f.Desc {
		order += " DESC"
	}
	rows, err := db.read.QueryContext(ctx, "SELECT "+eventColumns+" FROM event_log"+cond+
		order+" LIMIT ? OFFSET ?", append(args, f.Limite, f.Deslocamento)...)
	if err != nil {
		return nil, false, fmt.Errorf("query events: %w", err)
	}
	return collectEvents(rows, maxBytes)
}

// EventsAfter implements app.EventLog: the replay read, a range scan on the
// primary key (or on the tipo index when filtering by a few types).
func (db *DB) EventsAfter(ctx context.Context, after int64, tipos []string, limit, maxBytes int) ([]app.Event, bool, error) {
	q := "SELECT " + eventColumns + " FROM event_log WHERE sequence_number > ?"
	args := []any{after}
	if len(tipos) > 0 {
		q += " AND tipo IN (?" + strings.Repeat(", ?", len(tipos)-1) + ")"
		for _, t := range tipos {
			args = append(args, t)
		}
	}
	q += " ORDER BY sequence_number LIMIT ?"
	rows, err := db.read.QueryContext(ctx, q, append(args, limit)...)
	if err != nil {
		return nil, false, fmt.Errorf("replay events: %w", err)
	}
	return collectEvents(rows, maxBytes)
}

// collectEvents reads rows until they end or, with maxBytes > 0, until the
// records read reach maxBytes: closing the rows there stops SQLite before
// it reads the next payload.
func collectEvents(rows *sql.Rows, maxBytes int) ([]app.Event, bool, error) {
	defer rows.Close()
	out := []app.Event{}
	size := 0
	for rows.Next() {
		ev, err := scanEvent(rows)
		if err != nil {
			return nil, false, err
		}
		out = append(out, ev)
		if size += ev.Size(); maxBytes > 0 && size >= maxBytes {
			return out, true, rows.Err()
		}
	}
	return out, false, rows.Err()
}

// MaxSequence implements app.EventLog.
func (db *DB) MaxSequence(ctx context.Context) (int64, error) {
	var n sql.NullInt64
	err := db.read.QueryRowContext(ctx, "SELECT max(sequence_number) FROM event_log").Scan(&n)
	return n.Int64, err
}

// CountEvents implements app.EventLog.
func (db *DB) CountEvents(ctx context.Context) (int64, error) {
	var n int64
	err := db.read.QueryRowContext(ctx, "SELECT count(*) FROM event_log").Scan(&n)
	return n, err
}
