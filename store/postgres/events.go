package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"geohub/app"
	"geohub/store/query"
)

var _ app.PageLog = (*DB)(nil)

// insertEventSQL inserts one event with the sequence number the writer
// gives it. Its conflict clause meets only an event another replica
// committed after this batch looked for it (Append's main phase): every
// event is inserted under log_head's lock, so no other transaction is
// inserting one meanwhile, and one committed before the lock was granted
// is visible to this statement. No row back is errRaced, and the batch
// runs again.
const insertEventSQL = `INSERT INTO event_log (sequence_number, event_id, tipo, versao_schema,
		timestamp, origem, correlacao_id, agregado, autoria_id, autoria_tipo, solicitacao, payload, criado_em)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
		ON CONFLICT (event_id) DO NOTHING RETURNING 1`

// insertOutboxSQL writes one delivery and its body in one statement.
const insertOutboxSQL = `WITH o AS (INSERT INTO outbox (event_id, sequence_number, integrador_id, tipo, agregado,
			sequencia, proxima_tentativa, criado_em) VALUES ($1, $2, $3, $4, $5, $6, $7, $7) RETURNING id)
		INSERT INTO outbox_corpo (outbox_id, corpo) SELECT id, $8 FROM o`

// ownerSQL claims the aggregate for $2 unless it has an owner (or $2 is
// empty) and reads its owner: the claim's row when it inserted one (the
// outer SELECT's snapshot does not see it), the stored row otherwise, no
// row when it has none.
const ownerSQL = `WITH c AS (INSERT INTO aggregate_owner (agregado, integrador_id, criado_em)
			SELECT $1, $2, $3 WHERE $2 <> '' ON CONFLICT (agregado) DO NOTHING RETURNING integrador_id)
		SELECT integrador_id FROM c UNION ALL SELECT integrador_id FROM aggregate_owner WHERE agregado = $1`

// nextSequenceSQL gives the next gapless X-Geohub-Sequencia of an
// (integrator, aggregate).
const nextSequenceSQL = `INSERT INTO outbox_sequence (integrador_id, agregado, ultima) VALUES ($1, $2, 1)
		ON CONFLICT (integrador_id, agregado) DO UPDATE SET ultima = outbox_sequence.ultima + 1
		RETURNING ultima`

// plannedEvent is an event a batch inserts: planned in Append's main
// phase, numbered and written in its seq phase.
type plannedEvent struct {
	op    int // the batch's operation that inserts it
	ev    app.Event
	full  json.RawMessage
	audit *app.AuditEntry
	out   *app.Outbox
	rows  []plannedRow
}

type plannedRow struct {
	integrador string
	sequencia  int64
}

// unplan forgets the events operation i planned: its main phase failed
// and was rolled back to its savepoint.
func (tx *wtx) unplan(i int) {
	for id, p := range tx.planned {
		if p.op == i {
			delete(tx.planned, id)
		}
	}
}

// checkExpected refuses a batch whose expectations (app.Pending.Expect)
// no longer hold: an event of the aggregate committed, or planned by an
// earlier operation of this transaction, past what the command read. The
// batch holds the aggregates' keys, which every append to them takes, so
// nothing else appends to them until it commits.
func (tx *wtx) checkExpected(batch []app.Pending) error {
	for _, p := range batch {
		for _, e := range p.Expect {
			for _, pl := range tx.planned {
				if pl.ev.Agregado == e.Agregado {
					return app.ErrAggregateMoved
				}
			}
			var last int64
			if err := tx.QueryRow(tx.ctx, `SELECT coalesce(max(sequence_number), 0) FROM event_log WHERE agregado = $1`,
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
// committed (app.ErrStaleCadastro): an integrator created, changed or
// removed by another replica since this one read it. The version is read
// once per transaction, after every operation in it was submitted, so a
// publish that began after a change committed always sees it.
func (tx *wtx) checkCadastro(batch []app.Pending) error {
	oldest, routed := app.RoutedAt(batch)
	if !routed {
		return nil
	}
	if tx.cadastro < 0 {
		if err := tx.QueryRow(tx.ctx, `SELECT versao FROM cadastro_versao WHERE id = 1`).Scan(&tx.cadastro); err != nil {
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
//
// Sequence numbers must be monotonic in commit order across replicas
// (SPEC 12): a reader that has seen sequence n+1 must already see n, or the
// live tail and replay, which follow the log by "sequence > last seen",
// would skip n forever. A PostgreSQL sequence gives numbers when nextval
// runs, not when the transaction commits: two replicas can take 7 and 8
// and commit 8 first. So the numbers come from a counter row, log_head,
// whose row lock the writer takes in the batch's seq phase and keeps until
// COMMIT: a transaction that gives sequence numbers waits for the previous
// one to commit (and become visible, which PostgreSQL does before it
// releases locks) and then continues from its last number. Commits that
// give numbers are thereby serialised in the order of their numbers, and
// the numbers stay gapless (a failed operation gives its numbers back:
// the batch runs again without it). The price is that the replicas' group
// commits take turns; group commit keeps that one WAL flush per batch, not
// per event.
//
// So that the turn is short, what does not need the sequence runs before
// the lock, in the main phase: the look-up of event_ids already stored
// (idempotency), the aggregates' owners and their per-integrator
// sequences, serialised across replicas by the aggregates' keys. Under the
// lock, the events, their audit entries and their outbox rows go in one
// round trip. An event_id another replica committed in between fails its
// insert (errRaced): the batch runs again and finds it, so two replicas
// appending one event_id store it once.
//
// A batch with a deciding event (app.Pending.Decides: a command's outcome)
// inserts nothing when that event is stored: two replicas that both ran a
// command (it was sent to both at once; no lock keeps commands apart)
// store one outcome and one set of domain events. The look-up that decides
// runs under the event's key, which every append of it declares, so the
// second batch looks only after the first committed.
//
// A batch with expectations (app.Pending.Expect: what a command read)
// inserts nothing, and fails with app.ErrAggregateMoved, when one of those
// aggregates has an event past what the command read. Every append takes
// its aggregate's key, so none is appended between the check and the
// commit.
func (db *DB) Append(ctx context.Context, batch []app.Pending) ([]app.Stored, error) {
	out := make([]app.Stored, len(batch))
	var keys []lockKey
	for _, p := range batch {
		if p.Outbox != nil {
			keys = append(keys, key("aggregate", p.Outbox.Agregado))
		} else if p.Event.Agregado != "" {
			// Not routed, but a command's expectation on its aggregate
			// (app.Pending.Expect) must see it or wait for it.
			keys = append(keys, key("aggregate", p.Event.Agregado))
		}
		if p.Decides {
			keys = append(keys, key("event", p.Event.EventID))
		}
		for _, e := range p.Expect {
			keys = append(keys, key("aggregate", e.Agregado))
		}
	}
	plans := make([]*plannedEvent, len(batch)) // nil: stored before
	first := make([]bool, len(batch))          // this pending inserts its plan
	var now time.Time
	// The main phase in three steps, each queuing its statements on a pipe
	// the writer shares among the batch's appends (op.stages): the look-up
	// of stored events, the aggregates' owners, their sequences.
	var stored map[string]app.Event
	var decided bool
	var owned []*plannedEvent
	var owners map[*plannedEvent]string
	lookup := func(tx *wtx, p *pipe) error {
		now = db.now()
		clear(out)
		clear(plans)
		clear(first)
		stored, decided, owned, owners = map[string]app.Event{}, false, nil, nil
		if err := tx.checkCadastro(batch); err != nil {
			return err
		}
		var ids []string
		for _, p := range batch {
			if tx.planned[p.Event.EventID] == nil {
				ids = append(ids, p.Event.EventID)
			}
		}
		if len(ids) > 0 {
			p.query(func(rows pgx.Rows) error {
				evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (app.Event, error) { return query.ScanEvent(r) })
				if err != nil {
					return fmt.Errorf("look up events: %w", err)
				}
				for _, ev := range evs {
					stored[ev.EventID] = ev
				}
				return nil
			}, `SELECT `+query.EventColumns+` FROM event_log WHERE event_id = ANY($1)`, ids)
		}
		return nil
	}
	plan := func(tx *wtx, p *pipe) error {
		for i, pe := range batch {
			if !pe.Decides {
				continue
			}
			if ev, ok := stored[pe.Event.EventID]; ok {
				out[i], decided = app.Stored{Event: ev}, true
			} else if pl := tx.planned[pe.Event.EventID]; pl != nil {
				plans[i], decided = pl, true // an earlier operation of this batch inserts it
			}
		}
		if decided {
			return nil
		}
		if err := tx.checkExpected(batch); err != nil {
			return err
		}
		for i, pe := range batch {
			id := pe.Event.EventID
			if ev, ok := stored[id]; ok {
				out[i] = app.Stored{Event: ev}
				continue
			}
			if pl := tx.planned[id]; pl != nil {
				plans[i] = pl // a duplicate of an event this batch inserts
				continue
			}
			pl := &plannedEvent{op: tx.op, ev: pe.Event, full: pe.Full, audit: pe.Audit, out: pe.Outbox}
			tx.planned[id], plans[i], first[i] = pl, pl, true
			if pe.Outbox != nil && pe.Outbox.NeedsOwner {
				owned = append(owned, pl)
			}
		}
		owners = make(map[*plannedEvent]string, len(owned))
		for _, pl := range owned {
			p.queryRow(func(r pgx.Row) error {
				var owner string
				err := r.Scan(&owner)
				if isNoRows(err) {
					err = nil
				}
				owners[pl] = owner
				if err != nil {
					return fmt.Errorf("read aggregate owner: %w", err)
				}
				return nil
			}, ownerSQL, pl.out.Agregado, pl.out.Claim, ms(now))
		}
		return nil
	}
	sequences := func(tx *wtx, p *pipe) error {
		if decided {
			return nil
		}
		for i, pl := range plans {
			if !first[i] || pl.out == nil {
				continue
			}
			for _, id := range pl.out.Recipients(owners[pl]) {
				pl.rows = append(pl.rows, plannedRow{integrador: id})
			}
			for j := range pl.rows {
				p.queryRow(func(r pgx.Row) error {
					if err := r.Scan(&pl.rows[j].sequencia); err != nil {
						return fmt.Errorf("next sequence: %w", err)
					}
					return nil
				}, nextSequenceSQL, pl.rows[j].integrador, pl.out.Agregado)
			}
		}
		return nil
	}
	seq := func(tx *wtx, p *pipe) error {
		criado := ms(now)
		for i, pl := range plans {
			if !first[i] {
				continue
			}
			tx.head++
			ev := pl.ev
			ev.Sequence, ev.CriadoEm, ev.Timestamp = tx.head, fromMS(criado), fromMS(ms(ev.Timestamp))
			pl.ev = ev
			var autoriaID, autoriaTipo string
			if ev.Autoria != nil {
				autoriaID, autoriaTipo = ev.Autoria.ID, ev.Autoria.Tipo
			}
			p.queryRow(func(r pgx.Row) error {
				var one int
				if err := r.Scan(&one); isNoRows(err) {
					return errRaced
				} else if err != nil {
					return fmt.Errorf("insert event: %w", err)
				}
				return nil
			}, insertEventSQL, ev.Sequence, ev.EventID, ev.Tipo, ev.VersaoSchema, ms(ev.Timestamp),
				ev.Origem, ev.CorrelacaoID, null(ev.Agregado), null(autoriaID), null(autoriaTipo),
				null(ev.Solicitacao), string(ev.Payload), criado)
			if pl.audit != nil {
				args, err := auditArgs(pl.audit, criado)
				if err != nil {
					return err
				}
				p.exec(insertAuditSQL, args...)
			}
			for _, r := range pl.rows {
				p.exec(insertOutboxSQL, ev.EventID, ev.Sequence, r.integrador, ev.Tipo, pl.out.Agregado, r.sequencia,
					criado, pl.out.Body)
			}
			tx.appended = append(tx.appended, app.Appended{Event: ev, FullPayload: pl.full, Deliveries: len(pl.rows)})
		}
		for i, pl := range plans {
			if pl != nil {
				out[i] = app.Stored{Event: pl.ev, Created: first[i]}
			}
		}
		return nil
	}
	if err := db.submit(ctx, &op{keys: keys, stages: []func(*wtx, *pipe) error{lookup, plan, sequences}, seq: seq}); err != nil {
		return nil, err
	}
	return out, nil
}

// audit writes e inside the operation's transaction, so it commits or
// rolls back with the change it records; nil writes nothing. em is the
// later of the clock and the last row's em, as in SQLite's store, so that
// the trail's id order is its time order.
func (tx *wtx) audit(e *app.AuditEntry, now int64) error {
	if e == nil {
		return nil
	}
	args, err := auditArgs(e, now)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(tx.ctx, insertAuditSQL, args...); err != nil {
		return fmt.Errorf("append audit entry: %w", err)
	}
	return nil
}

// auditArgs are insertAuditSQL's arguments for e.
func auditArgs(entry *app.AuditEntry, now int64) ([]any, error) {
	b := entry.Bounded()
	e := &b
	campos := e.Campos
	if campos == nil {
		campos = []app.AuditField{}
	}
	raw, err := json.Marshal(campos)
	if err != nil {
		return nil, fmt.Errorf("encode audit fields: %w", err)
	}
	return []any{now, e.Quem.Tipo, e.Quem.ID, e.Quem.Nome, string(e.Quem.Papel), e.Endereco,
		e.Acao, e.Alvo.Tipo, e.Alvo.ID, e.Alvo.Nome, string(raw), e.Resultado, string(e.Codigo), e.Detalhe}, nil
}

const insertAuditSQL = `INSERT INTO audit_log (em, quem_tipo, quem_id, quem_nome, quem_papel, endereco, acao,
		alvo_tipo, alvo_id, alvo_nome, campos, resultado, codigo, detalhe)
	VALUES (greatest($1::bigint, coalesce((SELECT em FROM audit_log ORDER BY id DESC LIMIT 1), $1::bigint)),
		$2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`
