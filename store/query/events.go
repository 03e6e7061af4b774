package query

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"

	"geohub/app"
)

// EventColumns are what ScanEvent reads, in its order.
const EventColumns = `sequence_number, event_id, tipo, versao_schema, timestamp, origem,
	correlacao_id, agregado, autoria_id, autoria_tipo, solicitacao, payload, criado_em`

// ScanEvent reads one event_log row of EventColumns; no row is
// app.ErrNotFound.
func ScanEvent(row Row) (app.Event, error) {
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
	ev.Timestamp, ev.CriadoEm = FromMS(ts), FromMS(criado)
	ev.Agregado, ev.Solicitacao = agregado.String, solicitacao.String
	if autoriaID.Valid {
		ev.Autoria = &app.Autoria{ID: autoriaID.String, Tipo: autoriaTipo.String}
	}
	ev.Payload = payload
	return ev, nil
}

// Event implements app.EventLog.
func (r *Reads) Event(ctx context.Context, eventID string) (app.Event, error) {
	return ScanEvent(r.c.QueryRow(ctx, `SELECT `+EventColumns+` FROM event_log WHERE event_id = ?`, eventID))
}

// Events implements app.EventLog: one page and the total matching count.
func (r *Reads) Events(ctx context.Context, f app.EventFilter) ([]app.Event, int, error) {
	total, err := r.CountMatching(ctx, f)
	if err != nil {
		return nil, 0, err
	}
	out, _, err := r.EventChunk(ctx, f, 0)
	return out, total, err
}

// eventWhere is the WHERE clause of f's filters, paging aside.
func (r *Reads) eventWhere(f app.EventFilter) (string, []any) {
	var where []string
	var args []any
	add := func(cond string, v any) {
		where = append(where, cond)
		args = append(args, v)
	}
	if lo, hi, ok := app.TypeFamily(f.Tipo); ok {
		cond, a := r.d.Family("tipo", lo, hi)
		where, args = append(where, cond), append(args, a...)
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
	// A time range binds both ends: with one bound and ORDER BY the
	// sequence, SQLite's planner prefers walking the whole table to the
	// timestamp index.
	if !f.TimestampInicio.IsZero() || !f.TimestampFim.IsZero() {
		lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
		if !f.TimestampInicio.IsZero() {
			lo = MS(f.TimestampInicio)
		}
		if !f.TimestampFim.IsZero() {
			hi = MS(f.TimestampFim)
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
func (r *Reads) CountMatching(ctx context.Context, f app.EventFilter) (int, error) {
	cond, args := r.eventWhere(f)
	var total int
	if err := r.c.QueryRow(ctx, "SELECT count(*) FROM event_log"+cond, args...).Scan(&total); err != nil {
		return 0, fmt.Errorf("count events: %w", err)
	}
	return total, nil
}

// EventChunk implements app.PageLog; maxBytes 0 reads the whole page.
func (r *Reads) EventChunk(ctx context.Context, f app.EventFilter, maxBytes int) ([]app.Event, bool, error) {
	cond, args := r.eventWhere(f)
	order := " ORDER BY sequence_number"
	if f.Desc {
		order += " DESC"
	}
	rows, err := r.c.Query(ctx, "SELECT "+EventColumns+" FROM event_log"+cond+order+" LIMIT ? OFFSET ?",
		append(args, f.Limite, f.Deslocamento)...)
	if err != nil {
		return nil, false, fmt.Errorf("query events: %w", err)
	}
	return collectEvents(rows, maxBytes)
}

// EventsAfter implements app.EventLog: the replay read, a range scan on the
// primary key (or on the tipo index when filtering by a few types).
func (r *Reads) EventsAfter(ctx context.Context, after int64, tipos []string, limit, maxBytes int) ([]app.Event, bool, error) {
	q := "SELECT " + EventColumns + " FROM event_log WHERE sequence_number > ?"
	args := []any{after}
	if len(tipos) > 0 {
		q += " AND tipo IN (?" + strings.Repeat(", ?", len(tipos)-1) + ")"
		for _, t := range tipos {
			args = append(args, t)
		}
	}
	rows, err := r.c.Query(ctx, q+" ORDER BY sequence_number LIMIT ?", append(args, limit)...)
	if err != nil {
		return nil, false, fmt.Errorf("replay events: %w", err)
	}
	return collectEvents(rows, maxBytes)
}

// collectEvents reads rows until they end or, with maxBytes > 0, until the
// records read reach maxBytes. Closing the rows there stops SQLite before
// it reads the next payload; PostgreSQL's rows are discarded as they
// arrive, so memory holds one chunk (readers that cut by size ask for few
// rows).
func collectEvents(rows Rows, maxBytes int) ([]app.Event, bool, error) {
	defer rows.Close()
	out := []app.Event{}
	size := 0
	for rows.Next() {
		ev, err := ScanEvent(rows)
		if err != nil {
			return nil, false, err
		}
		out = append(out, ev)
		if size += ev.Size(); maxBytes > 0 && size >= maxBytes {
			rows.Close()
			return out, true, rows.Err()
		}
	}
	rows.Close()
	return out, false, rows.Err()
}

// MaxSequence implements app.EventLog.
func (r *Reads) MaxSequence(ctx context.Context) (int64, error) {
	var n sql.NullInt64
	err := r.c.QueryRow(ctx, "SELECT max(sequence_number) FROM event_log").Scan(&n)
	return n.Int64, err
}

// CountEvents implements app.EventLog.
func (r *Reads) CountEvents(ctx context.Context) (int64, error) {
	var n int64
	err := r.c.QueryRow(ctx, "SELECT count(*) FROM event_log").Scan(&n)
	return n, err
}
