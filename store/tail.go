package store

import (
	"context"
	"database/sql"
	"fmt"

	"geohub/app"
)

// attemptsAfterSQL walks delivery_attempt in id order from the cursor and
// joins each attempt to its delivery. CROSS JOIN pins that order: without
// it a filter on the integrator could make SQLite start from the outbox's
// index and sort all of that integrator's attempts for each read. The upper
// bound (?2) is the highest id when the read began, see AttemptsAfter.
const attemptsAfterSQL = `SELECT a.id, a.entrega_id, a.tentativa, a.inicio, a.duracao_ms, a.status_code, a.erro,
		o.id, o.event_id, o.integrador_id, o.tipo, o.agregado, o.sequencia, o.status, o.tentativas, o.proxima_tentativa
	FROM delivery_attempt a CROSS JOIN outbox o ON o.id = a.outbox_id
	WHERE a.id > ?1 AND a.id <= ?2`

// AttemptsAfter implements app.AttemptLog. It first reads the highest
// attempt id, then the matching attempts up to it: when fewer than limit
// match, every attempt up to that id was examined (ids are given in commit
// order by the one writer), so the cursor moves past it even if the last
// ones did not match.
func (db *DB) AttemptsAfter(ctx context.Context, after int64, f app.AttemptFilter, limit int) ([]app.RecordedAttempt, int64, error) {
	top, err := db.MaxAttemptID(ctx)
	if err != nil {
		return nil, after, err
	}
	if top <= after {
		return nil, after, nil
	}
	q := attemptsAfterSQL
	args := []any{after, top}
	tipo := f.Tipo
	if lo, hi, ok := app.TypeFamily(f.Tipo); ok {
		args = append(args, lo, hi)
		q += fmt.Sprintf(" AND o.tipo >= ?%d AND o.tipo < ?%d", len(args)-1, len(args))
		tipo = ""
	}
	for _, c := range []struct{ col, v string }{{"o.integrador_id", f.Integrador}, {"o.tipo", tipo}, {"o.agregado", f.Agregado}} {
		if c.v != "" {
			args = append(args, c.v)
			q += fmt.Sprintf(" AND %s = ?%d", c.col, len(args))
		}
	}
	args = append(args, limit)
	q += fmt.Sprintf(" ORDER BY a.id LIMIT ?%d", len(args))
	rows, err := db.read.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, after, fmt.Errorf("tail delivery attempts: %w", err)
	}
	defer rows.Close()
	out := []app.RecordedAttempt{}
	for rows.Next() {
		var r app.RecordedAttempt
		var inicio, proxima int64
		var code sql.NullInt64
		d := &r.Delivery
		if err := rows.Scan(&r.ID, &r.Attempt.EntregaID, &r.Attempt.Tentativa, &inicio, &r.Attempt.DuracaoMS, &code,
			&r.Attempt.Erro, &d.ID, &d.EventID, &d.Integrador, &d.Tipo, &d.Agregado, &d.Sequencia, &d.Status,
			&d.Tentativas, &proxima); err != nil {
			return nil, after, err
		}
		r.Attempt.Inicio, r.Attempt.StatusCode = fromMS(inicio), int(code.Int64)
		d.ProximaTentativa = fromMS(proxima)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, after, err
	}
	next := top
	if len(out) == limit {
		next = out[len(out)-1].ID
	}
	return out, next, nil
}

// MaxAttemptID implements app.AttemptLog.
func (db *DB) MaxAttemptID(ctx context.Context) (int64, error) {
	var n sql.NullInt64
	err := db.read.QueryRowContext(ctx, "SELECT max(id) FROM delivery_attempt").Scan(&n)
	return n.Int64, err
}
