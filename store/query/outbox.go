package query

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"geohub/app"
)

// DeliveryColumns are what ScanDelivery reads, in its order.
const DeliveryColumns = `id, event_id, integrador_id, tipo, agregado, sequencia, status, tentativas, quedas,
	proxima_tentativa, ultimo_status, ultimo_erro, entregue_em, criado_em, tentativas_antes, expurgado,
	coalesce(lease_token, 0)`

// CorpoColumn reads a delivery's body beside its row: NULL once purged.
const CorpoColumn = `(SELECT corpo FROM outbox_corpo WHERE outbox_id = outbox.id)`

// ScanDelivery reads one outbox row of DeliveryColumns, and CorpoColumn
// after them withBody; no row is app.ErrNotFound.
func ScanDelivery(row Row, withBody bool) (app.Delivery, error) {
	var d app.Delivery
	var proxima, criado int64
	var ultimo, entregue sql.NullInt64
	dest := []any{&d.ID, &d.EventID, &d.Integrador, &d.Tipo, &d.Agregado, &d.Sequencia, &d.Status, &d.Tentativas,
		&d.Quedas, &proxima, &ultimo, &d.UltimoErro, &entregue, &criado, &d.TentativasAntes, &d.CorpoExpurgado, &d.Token}
	if withBody {
		dest = append(dest, &d.Corpo)
	}
	if err := row.Scan(dest...); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return d, app.ErrNotFound
		}
		return d, err
	}
	d.ProximaTentativa, d.CriadoEm = FromMS(proxima), FromMS(criado)
	d.UltimoStatus = int(ultimo.Int64)
	d.EntregueEm = fromNullMS(entregue)
	return d, nil
}

// NextDue implements app.OutboxStore: one min over outbox_due_idx per
// integrator.
func (r *Reads) NextDue(ctx context.Context, integrators []string, after time.Time) (time.Time, bool, error) {
	var first time.Time
	found := false
	for _, id := range integrators {
		var next sql.NullInt64
		if err := r.c.QueryRow(ctx, `SELECT min(proxima_tentativa) FROM `+r.d.Indexed("outbox", "outbox_due_idx")+`
			WHERE integrador_id = ? AND status = 'pendente' AND proxima_tentativa > ?`, id, MS(after)).Scan(&next); err != nil {
			return first, false, err
		}
		if next.Valid && (!found || FromMS(next.Int64).Before(first)) {
			first, found = FromMS(next.Int64), true
		}
	}
	return first, found, nil
}

// Deliveries implements app.OutboxStore.
func (r *Reads) Deliveries(ctx context.Context, f app.DeliveryFilter) ([]app.Delivery, int, error) {
	var where []string
	var args []any
	add := func(cond string, v any) {
		where, args = append(where, cond), append(args, v)
	}
	tipo := f.Tipo
	if lo, hi, ok := app.TypeFamily(f.Tipo); ok {
		cond, a := r.d.Family("tipo", lo, hi)
		where, args, tipo = append(where, cond), append(args, a...), ""
	}
	for _, c := range []struct{ col, v string }{{"integrador_id", f.Integrador}, {"status", f.Status},
		{"tipo", tipo}, {"agregado", f.Agregado}, {"event_id", f.EventID}} {
		if c.v != "" {
			add(c.col+" = ?", c.v)
		}
	}
	if !f.CriadoInicio.IsZero() {
		add("criado_em >= ?", MS(f.CriadoInicio))
	}
	if !f.CriadoFim.IsZero() {
		add("criado_em <= ?", MS(f.CriadoFim))
	}
	if f.IDInicio > 0 {
		add("id >= ?", f.IDInicio)
	}
	if f.IDFim > 0 {
		add("id <= ?", f.IDFim)
	}
	cond := ""
	if len(where) > 0 {
		cond = " WHERE " + strings.Join(where, " AND ")
	}
	var total int
	if err := r.c.QueryRow(ctx, "SELECT count(*) FROM outbox"+cond, args...).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("count deliveries: %w", err)
	}
	order := " ORDER BY id"
	if f.Desc {
		order += " DESC"
	}
	rows, err := r.c.Query(ctx, "SELECT "+DeliveryColumns+" FROM outbox"+cond+order+" LIMIT ? OFFSET ?",
		append(args, f.Limite, f.Deslocamento)...)
	if err != nil {
		return nil, 0, fmt.Errorf("query deliveries: %w", err)
	}
	out, err := Collect(rows, func(row Row) (app.Delivery, error) { return ScanDelivery(row, false) })
	if err != nil {
		return nil, 0, fmt.Errorf("query deliveries: %w", err)
	}
	return out, total, nil
}

// Delivery implements app.OutboxStore: the row with its body, and its
// attempts.
func (r *Reads) Delivery(ctx context.Context, id int64) (app.Delivery, []app.Attempt, error) {
	d, err := ScanDelivery(r.c.QueryRow(ctx, "SELECT "+DeliveryColumns+", "+CorpoColumn+" FROM outbox WHERE id = ?", id), true)
	if err != nil {
		return d, nil, err
	}
	rows, err := r.c.Query(ctx, `SELECT entrega_id, tentativa, inicio, duracao_ms, status_code, erro, resposta, resposta_selada
		FROM delivery_attempt WHERE outbox_id = ? ORDER BY id`, id)
	if err != nil {
		return d, nil, err
	}
	attempts, err := Collect(rows, func(row Row) (app.Attempt, error) {
		var a app.Attempt
		var inicio int64
		var code sql.NullInt64
		if err := row.Scan(&a.EntregaID, &a.Tentativa, &inicio, &a.DuracaoMS, &code, &a.Erro, &a.Resposta, &a.RespostaSelada); err != nil {
			return a, err
		}
		a.Inicio, a.StatusCode = FromMS(inicio), int(code.Int64)
		return a, nil
	})
	return d, attempts, err
}

// OutboxBacklog counts deliveries not yet finished (pendente or
// processando), each status in its partial index.
func (r *Reads) OutboxBacklog(ctx context.Context) (int64, error) {
	var n int64
	err := r.c.QueryRow(ctx, `SELECT (SELECT count(*) FROM outbox WHERE status = 'pendente')
		+ (SELECT count(*) FROM outbox WHERE status = 'processando')`).Scan(&n)
	return n, err
}

// attemptsAfterSQL walks delivery_attempt in id order from the cursor and
// joins each attempt to its delivery, in that order (on SQLite a filter on
// the integrator could make the planner start from the outbox's index and
// sort all of that integrator's attempts for each read). The upper bound
// is the highest id when the read began, see AttemptsAfter.
const attemptsAfterSQL = `SELECT a.id, a.entrega_id, a.tentativa, a.inicio, a.duracao_ms, a.status_code, a.erro,
		o.id, o.event_id, o.integrador_id, o.tipo, o.agregado, o.sequencia, o.status, o.tentativas, o.proxima_tentativa
	FROM delivery_attempt a %s outbox o ON o.id = a.outbox_id
	WHERE a.id > ? AND a.id <= ?`

// AttemptsAfter implements app.AttemptLog. It first reads the highest
// attempt id, then the matching attempts up to it: when fewer than limit
// match, every attempt up to that id was examined, so the cursor moves past
// it even if the last ones did not match. Attempt ids are given in commit
// order (by SQLite's one writer; on PostgreSQL under attempt_head's lock,
// see its FinishDeliveries): once the highest is visible, so is every
// lower one.
func (r *Reads) AttemptsAfter(ctx context.Context, after int64, f app.AttemptFilter, limit int) ([]app.RecordedAttempt, int64, error) {
	top, err := r.MaxAttemptID(ctx)
	if err != nil {
		return nil, after, err
	}
	if top <= after {
		return nil, after, nil
	}
	q := fmt.Sprintf(attemptsAfterSQL, r.d.Join)
	args := []any{after, top}
	tipo := f.Tipo
	if lo, hi, ok := app.TypeFamily(f.Tipo); ok {
		cond, a := r.d.Family("o.tipo", lo, hi)
		q, args, tipo = q+" AND "+cond, append(args, a...), ""
	}
	for _, c := range []struct{ col, v string }{{"o.integrador_id", f.Integrador}, {"o.tipo", tipo}, {"o.agregado", f.Agregado}} {
		if c.v != "" {
			q, args = q+" AND "+c.col+" = ?", append(args, c.v)
		}
	}
	rows, err := r.c.Query(ctx, q+" ORDER BY a.id LIMIT ?", append(args, limit)...)
	if err != nil {
		return nil, after, fmt.Errorf("tail delivery attempts: %w", err)
	}
	out, err := Collect(rows, func(row Row) (app.RecordedAttempt, error) {
		var r app.RecordedAttempt
		var inicio, proxima int64
		var code sql.NullInt64
		d := &r.Delivery
		if err := row.Scan(&r.ID, &r.Attempt.EntregaID, &r.Attempt.Tentativa, &inicio, &r.Attempt.DuracaoMS, &code,
			&r.Attempt.Erro, &d.ID, &d.EventID, &d.Integrador, &d.Tipo, &d.Agregado, &d.Sequencia, &d.Status,
			&d.Tentativas, &proxima); err != nil {
			return r, err
		}
		r.Attempt.Inicio, r.Attempt.StatusCode = FromMS(inicio), int(code.Int64)
		d.ProximaTentativa = FromMS(proxima)
		return r, nil
	})
	if err != nil {
		return nil, after, fmt.Errorf("tail delivery attempts: %w", err)
	}
	next := top
	if len(out) == limit {
		next = out[len(out)-1].ID
	}
	return out, next, nil
}

// MaxAttemptID implements app.AttemptLog.
func (r *Reads) MaxAttemptID(ctx context.Context) (int64, error) {
	var n sql.NullInt64
	err := r.c.QueryRow(ctx, "SELECT max(id) FROM delivery_attempt").Scan(&n)
	return n.Int64, err
}
