package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"geohub/app"
)

var _ app.AuditStore = (*DB)(nil)

// AppendAudit implements app.AuditLog: an entry that joins no change. The
// entries that do are written by tx.audit (events.go) inside their change.
func (db *DB) AppendAudit(ctx context.Context, e app.AuditEntry) error {
	return db.do(ctx, func(tx *wtx) error { return tx.audit(&e, ms(db.now())) })
}

const auditColumns = `id, em, quem_tipo, quem_id, quem_nome, quem_papel, endereco, acao, alvo_tipo, alvo_id,
	alvo_nome, campos, resultado, codigo, detalhe`

// The bounds of a time range as ids, as in SQLite's store: em grows with
// id (the insert takes the later of the clock and the last row's em), so
// the first row at or after a time and the last row before one are each
// one seek of audit_log_em_idx (em, id), and the page itself is a backward
// range of the primary key or of a filter's index, which each end in id.
//
// Across replicas em grows with id only as far as each insert sees the
// last committed row: two replicas' transactions in flight at once, or
// replicas whose clocks differ, can store a row whose em is a few
// milliseconds before its predecessor's. A time range then places such a
// row by its neighbours' times, within that skew.
const (
	auditFromSQL  = `id >= coalesce((SELECT id FROM audit_log WHERE em >= %s ORDER BY em, id LIMIT 1), %s)`
	auditUntilSQL = `id <= coalesce((SELECT id FROM audit_log WHERE em < %s ORDER BY em DESC, id DESC LIMIT 1), 0)`
)

// AuditEntries implements app.AuditStore: newest first, by keyset on id.
// One row more than the page is read to know whether another follows.
func (db *DB) AuditEntries(ctx context.Context, f app.AuditFilter) ([]app.AuditEntry, bool, error) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if f.Antes > 0 {
		where = append(where, "id < "+arg(f.Antes))
	}
	if f.QuemID != "" {
		where = append(where, "quem_id = "+arg(f.QuemID))
	}
	if f.QuemNome != "" {
		where = append(where, "quem_nome = "+arg(f.QuemNome))
	}
	if f.Acao != "" {
		where = append(where, "acao = "+arg(f.Acao))
	}
	if f.Alvo != "" {
		where = append(where, "alvo_id = "+arg(f.Alvo))
	}
	if len(f.SemAcoes) > 0 {
		where = append(where, "NOT (acao = ANY("+arg(f.SemAcoes)+"))")
	}
	if f.SemIntegradores {
		where = append(where, "quem_tipo <> "+arg(app.ActorIntegrador))
	}
	if !f.Inicio.IsZero() {
		where = append(where, fmt.Sprintf(auditFromSQL, arg(ms(f.Inicio)), arg(int64(math.MaxInt64))))
	}
	if !f.Fim.IsZero() {
		where = append(where, fmt.Sprintf(auditUntilSQL, arg(ms(f.Fim))))
	}
	q := "SELECT " + auditColumns + " FROM audit_log"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY id DESC LIMIT " + arg(f.Limite+1)
	rows, err := db.read.Query(ctx, q, args...)
	if err != nil {
		return nil, false, fmt.Errorf("list audit entries: %w", err)
	}
	defer rows.Close()
	out := []app.AuditEntry{}
	size := 0
	for rows.Next() {
		if len(out) == f.Limite || size >= app.AuditPageBytes {
			return out, true, nil
		}
		var e app.AuditEntry
		var em int64
		var papel, campos, codigo string
		if err := rows.Scan(&e.ID, &em, &e.Quem.Tipo, &e.Quem.ID, &e.Quem.Nome, &papel, &e.Endereco, &e.Acao,
			&e.Alvo.Tipo, &e.Alvo.ID, &e.Alvo.Nome, &campos, &e.Resultado, &codigo, &e.Detalhe); err != nil {
			return nil, false, fmt.Errorf("list audit entries: %w", err)
		}
		e.Em, e.Quem.Papel, e.Codigo = fromMS(em), app.Papel(papel), app.Code(codigo)
		if err := json.Unmarshal([]byte(campos), &e.Campos); err != nil {
			return nil, false, fmt.Errorf("decode audit entry %d: %w", e.ID, err)
		}
		size += e.Size()
		out = append(out, e)
	}
	return out, false, rows.Err()
}
