package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"geohub/app"
)

var _ app.PageLog = (*DB)(nil)

const eventColumns = `sequence_number, event_id, tipo, versao_schema, timestamp, origem,
	correlacao_id, agregado, autoria_id, autoria_tipo, solicitacao, payload, criado_em`

// insertEventSQL inserts one event with the sequence number the writer
// gives it. The conflict clause only meets an event inserted earlier in
// this same transaction: every event is inserted under log_head's lock, so
// no other transaction can be inserting one meanwhile, and an event_id
// committed before the lock was granted is found here too (the statement's
// snapshot is newer than that commit).
const insertEventSQL = `INSERT INTO event_log (sequence_number, event_id, tipo, versao_schema,
		timestamp, origem, correlacao_id, agregado, autoria_id, autoria_tipo, solicitacao, payload, criado_em)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
		ON CONFLICT (event_id) DO NOTHING`

// Append implements app.EventLog: the batch is one writer operation, so it
// commits or fails as a whole.
//
// Sequence numbers must be monotonic in commit order across replicas
// (SPEC 12): a reader that has seen sequence n+1 must already see n, or the
// live tail and replay, which follow the log by "sequence > last seen",
// would skip n forever. A PostgreSQL sequence gives numbers when nextval
// runs, not when the transaction commits: two replicas can take 7 and 8
// and commit 8 first. So the numbers come from a counter row, log_head,
// whose row lock the writer takes (lockHead) before the operation's first
// event and keeps until COMMIT: a transaction that gives sequence numbers
// waits for the previous one to commit (and become visible, which
// PostgreSQL does before it releases locks) and then continues from its
// last number. Commits that give numbers are thereby serialised in the
// order of their numbers, and the numbers stay gapless (a rolled-back
// operation gives its numbers back, see run). The price is that the
// replicas' group commits take turns; group commit keeps that one WAL
// flush per batch, not per event. Idempotency is checked under the same
// lock, so two replicas appending one event_id store it once, without a
// unique-violation race.
func (db *DB) Append(ctx context.Context, batch []app.Pending) ([]app.Stored, error) {
	out := make([]app.Stored, len(batch))
	err := db.doSeq(ctx, func(tx *wtx) error {
		now := db.now()
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

// appendEvent inserts ev with the next sequence number or, when its
// event_id exists (also earlier in the same group transaction), returns
// the stored record.
func (tx *wtx) appendEvent(ev app.Event, full json.RawMessage, now time.Time) (app.Event, bool, error) {
	var autoriaID, autoriaTipo string
	if ev.Autoria != nil {
		autoriaID, autoriaTipo = ev.Autoria.ID, ev.Autoria.Tipo
	}
	criado := now.UnixMilli()
	seq := tx.head + 1
	tag, err := tx.Exec(bg, insertEventSQL, seq, ev.EventID, ev.Tipo, ev.VersaoSchema, ms(ev.Timestamp),
		ev.Origem, ev.CorrelacaoID, null(ev.Agregado), null(autoriaID), null(autoriaTipo),
		null(ev.Solicitacao), string(ev.Payload), criado)
	if err != nil {
		return app.Event{}, false, fmt.Errorf("insert event: %w", err)
	}
	if tag.RowsAffected() == 0 {
		existing, err := scanEvent(tx.QueryRow(bg, `SELECT `+eventColumns+` FROM event_log WHERE event_id = $1`, ev.EventID))
		if err != nil {
			return app.Event{}, false, fmt.Errorf("read duplicate event: %w", err)
		}
		return existing, false, nil
	}
	tx.head = seq
	ev.Sequence = seq
	ev.CriadoEm = fromMS(criado)
	ev.Timestamp = fromMS(ms(ev.Timestamp))
	tx.appended = append(tx.appended, app.Appended{Event: ev, FullPayload: full})
	return ev, true, nil
}

func scanEvent(row pgx.Row) (app.Event, error) {
	var ev app.Event
	var ts, criado int64
	var agregado, autoriaID, autoriaTipo, solicitacao *string
	var payload []byte
	err := row.Scan(&ev.Sequence, &ev.EventID, &ev.Tipo, &ev.VersaoSchema, &ts, &ev.Origem,
		&ev.CorrelacaoID, &agregado, &autoriaID, &autoriaTipo, &solicitacao, &payload, &criado)
	if isNoRows(err) {
		return app.Event{}, app.ErrNotFound
	}
	if err != nil {
		return app.Event{}, err
	}
	ev.Timestamp, ev.CriadoEm = fromMS(ts), fromMS(criado)
	if agregado != nil {
		ev.Agregado = *agregado
	}
	if solicitacao != nil {
		ev.Solicitacao = *solicitacao
	}
	if autoriaID != nil {
		ev.Autoria = &app.Autoria{ID: *autoriaID}
		if autoriaTipo != nil {
			ev.Autoria.Tipo = *autoriaTipo
		}
	}
	ev.Payload = payload
	return ev, nil
}

// Event implements app.EventLog.
func (db *DB) Event(ctx context.Context, eventID string) (app.Event, error) {
	return scanEvent(db.read.QueryRow(ctx, `SELECT `+eventColumns+` FROM event_log WHERE event_id = $1`, eventID))
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

// eventWhere is the WHERE clause of f's filters, paging aside, with its
// placeholders numbered from 1.
func eventWhere(f app.EventFilter) (string, []any) {
	var where []string
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, cond+" $"+strconv.Itoa(len(args)))
	}
	if f.Tipo != "" {
		add("tipo =", f.Tipo)
	}
	if f.Origem != "" {
		add("origem =", f.Origem)
	}
	if f.CorrelacaoID != "" {
		add("correlacao_id =", f.CorrelacaoID)
	}
	if f.Agregado != "" {
		add("agregado =", f.Agregado)
	}
	if !f.TimestampInicio.IsZero() || !f.TimestampFim.IsZero() {
		lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
		if !f.TimestampInicio.IsZero() {
			lo = ms(f.TimestampInicio)
		}
		if !f.TimestampFim.IsZero() {
			hi = ms(f.TimestampFim)
		}
		add("timestamp >=", lo)
		add("timestamp <=", hi)
	}
	if f.SequenceInicio > 0 {
		add("sequence_number >=", f.SequenceInicio)
	}
	if f.SequenceFim > 0 {
		add("sequence_number <=", f.SequenceFim)
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
	if err := db.read.QueryRow(ctx, "SELECT count(*) FROM event_log"+cond, args...).Scan(&total); err != nil {
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
	n := len(args)
	q := "SELECT " + eventColumns + " FROM event_log" + cond + order +
		" LIMIT $" + strconv.Itoa(n+1) + " OFFSET $" + strconv.Itoa(n+2)
	rows, err := db.read.Query(ctx, q, append(args, f.Limite, f.Deslocamento)...)
	if err != nil {
		return nil, false, fmt.Errorf("query events: %w", err)
	}
	return collectEvents(rows, maxBytes)
}

// EventsAfter implements app.EventLog: the replay read, a range scan on the
// primary key (or on the tipo index when filtering by a few types).
func (db *DB) EventsAfter(ctx context.Context, after int64, tipos []string, limit, maxBytes int) ([]app.Event, bool, error) {
	q := "SELECT " + eventColumns + " FROM event_log WHERE sequence_number > $1"
	args := []any{after}
	if len(tipos) > 0 {
		q += " AND tipo = ANY($2)"
		args = append(args, tipos)
	}
	q += " ORDER BY sequence_number LIMIT $" + strconv.Itoa(len(args)+1)
	rows, err := db.read.Query(ctx, q, append(args, limit)...)
	if err != nil {
		return nil, false, fmt.Errorf("replay events: %w", err)
	}
	return collectEvents(rows, maxBytes)
}

// collectEvents reads rows until they end or, with maxBytes > 0, until the
// records read reach maxBytes. Closing the rows there discards the rest of
// the result as it arrives, so memory holds one chunk, though the server
// still sends up to the limit: readers that cut by size ask for few rows.
func collectEvents(rows pgx.Rows, maxBytes int) ([]app.Event, bool, error) {
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
			rows.Close()
			return out, true, rows.Err()
		}
	}
	rows.Close()
	return out, false, rows.Err()
}

// MaxSequence implements app.EventLog.
func (db *DB) MaxSequence(ctx context.Context) (int64, error) {
	var n *int64
	if err := db.read.QueryRow(ctx, "SELECT max(sequence_number) FROM event_log").Scan(&n); err != nil || n == nil {
		return 0, err
	}
	return *n, nil
}

// CountEvents implements app.EventLog.
func (db *DB) CountEvents(ctx context.Context) (int64, error) {
	var n int64
	err := db.read.QueryRow(ctx, "SELECT count(*) FROM event_log").Scan(&n)
	return n, err
}

// audit writes e inside the operation's transaction, so it commits or
// rolls back with the change it records; nil writes nothing. em is the
// later of the clock and the last row's em, as in SQLite's store, so that
// the trail's id order is its time order.
func (tx *wtx) audit(e *app.AuditEntry, now int64) error {
	if e == nil {
		return nil
	}
	campos := e.Campos
	if campos == nil {
		campos = []app.AuditField{}
	}
	raw, err := json.Marshal(campos)
	if err != nil {
		return fmt.Errorf("encode audit fields: %w", err)
	}
	if _, err := tx.Exec(bg, insertAuditSQL, now, e.Quem.Tipo, e.Quem.ID, e.Quem.Nome, string(e.Quem.Papel), e.Endereco,
		e.Acao, e.Alvo.Tipo, e.Alvo.ID, e.Alvo.Nome, string(raw), e.Resultado, string(e.Codigo), e.Detalhe); err != nil {
		return fmt.Errorf("append audit entry: %w", err)
	}
	return nil
}

const insertAuditSQL = `INSERT INTO audit_log (em, quem_tipo, quem_id, quem_nome, quem_papel, endereco, acao,
		alvo_tipo, alvo_id, alvo_nome, campos, resultado, codigo, detalhe)
	VALUES (greatest($1::bigint, coalesce((SELECT em FROM audit_log ORDER BY id DESC LIMIT 1), $1::bigint)),
		$2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`

// enqueue writes ev's outbox rows inside its append transaction, each with
// the next gapless sequence of its (integrator, aggregate). It runs under
// log_head's lock, which serialises it with every other replica's
// enqueue: the owner it reads and the sequences it bumps are the latest.
func (tx *wtx) enqueue(ev app.Event, out *app.Outbox, now time.Time) (int, error) {
	var owner string
	if out.NeedsOwner {
		if out.Claim != "" {
			if _, err := tx.Exec(bg, `INSERT INTO aggregate_owner (agregado, integrador_id, criado_em)
				VALUES ($1, $2, $3) ON CONFLICT (agregado) DO NOTHING`, out.Agregado, out.Claim, ms(now)); err != nil {
				return 0, fmt.Errorf("claim aggregate: %w", err)
			}
		}
		err := tx.QueryRow(bg, `SELECT integrador_id FROM aggregate_owner WHERE agregado = $1`, out.Agregado).Scan(&owner)
		if err != nil && !isNoRows(err) {
			return 0, fmt.Errorf("read aggregate owner: %w", err)
		}
	}
	recipients := out.Recipients(owner)
	for _, id := range recipients {
		var seq, row int64
		if err := tx.QueryRow(bg, `INSERT INTO outbox_sequence (integrador_id, agregado, ultima) VALUES ($1, $2, 1)
			ON CONFLICT (integrador_id, agregado) DO UPDATE SET ultima = outbox_sequence.ultima + 1
			RETURNING ultima`, id, out.Agregado).Scan(&seq); err != nil {
			return 0, fmt.Errorf("next sequence: %w", err)
		}
		if err := tx.QueryRow(bg, `INSERT INTO outbox (event_id, sequence_number, integrador_id, tipo, agregado,
			sequencia, proxima_tentativa, criado_em) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id`,
			ev.EventID, ev.Sequence, id, ev.Tipo, out.Agregado, seq, ms(now), ms(now)).Scan(&row); err != nil {
			return 0, fmt.Errorf("enqueue delivery: %w", err)
		}
		if _, err := tx.Exec(bg, `INSERT INTO outbox_corpo (outbox_id, corpo) VALUES ($1, $2)`, row, out.Body); err != nil {
			return 0, fmt.Errorf("store delivery body: %w", err)
		}
	}
	return len(recipients), nil
}
