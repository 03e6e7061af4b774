package query

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"geohub/app"
)

const auditColumns = `id, em, quem_tipo, quem_id, quem_nome, quem_papel, endereco, acao, alvo_tipo, alvo_id,
	alvo_nome, campos, resultado, codigo, detalhe`

// The bounds of a time range as ids: em grows with id (an insert takes the
// later of the clock and the last row's em), so the first row at or after
// a time and the last row before one are each one seek of audit_log_em_idx
// (em, id), and the page itself is a backward range of the primary key or
// of a filter's index, which each end in id.
//
// Across PostgreSQL replicas em grows with id only as far as each insert
// sees the last committed row: two replicas' transactions in flight at
// once, or replicas whose clocks differ, can store a row whose em is a few
// milliseconds before its predecessor's. A time range then places such a
// row by its neighbours' times, within that skew.
const (
	AuditFromSQL  = `id >= coalesce((SELECT id FROM audit_log WHERE em >= ? ORDER BY em, id LIMIT 1), ?)`
	AuditUntilSQL = `id <= coalesce((SELECT id FROM audit_log WHERE em < ? ORDER BY em DESC, id DESC LIMIT 1), 0)`
)

// AuditEntries implements app.AuditStore: newest first, by keyset on id.
// One row more than the page is read to know whether another follows.
func (r *Reads) AuditEntries(ctx context.Context, f app.AuditFilter) ([]app.AuditEntry, bool, error) {
	var where []string
	var args []any
	add := func(cond string, v ...any) {
		where = append(where, cond)
		args = append(args, v...)
	}
	if f.Antes > 0 {
		add("id < ?", f.Antes)
	}
	if f.QuemID != "" {
		add("quem_id = ?", f.QuemID)
	}
	if f.QuemNome != "" {
		add("quem_nome = ?", f.QuemNome)
	}
	if f.Acao != "" {
		add("acao = ?", f.Acao)
	}
	if f.Alvo != "" {
		add("alvo_id = ?", f.Alvo)
	}
	if len(f.SemAcoes) > 0 {
		add("acao NOT IN ("+strings.Repeat("?, ", len(f.SemAcoes)-1)+"?)", Args(f.SemAcoes)...)
	}
	if f.SemIntegradores {
		add("quem_tipo <> ?", app.ActorIntegrador)
	}
	if !f.Inicio.IsZero() {
		add(AuditFromSQL, MS(f.Inicio), int64(math.MaxInt64))
	}
	if !f.Fim.IsZero() {
		add(AuditUntilSQL, MS(f.Fim))
	}
	q := "SELECT " + auditColumns + " FROM audit_log"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	rows, err := r.c.Query(ctx, q+" ORDER BY id DESC LIMIT ?", append(args, f.Limite+1)...)
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
		e.Em, e.Quem.Papel, e.Codigo = FromMS(em), app.Papel(papel), app.Code(codigo)
		if err := json.Unmarshal([]byte(campos), &e.Campos); err != nil {
			return nil, false, fmt.Errorf("decode audit entry %d: %w", e.ID, err)
		}
		size += e.Size()
		out = append(out, e)
	}
	return out, false, rows.Err()
}

// Args are ss as statement arguments.
func Args(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
