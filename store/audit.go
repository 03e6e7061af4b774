package store

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"geohub/app"
)

// insertAuditSQL appends one audit row. em is the later of the clock and
// the last row's em, so that the trail's id order is its time order even
// when the clock steps back: a time range is then an id range (see
// AuditEntries). The last row is one seek at the end of the rowid b-tree.
const insertAuditSQL = `INSERT INTO audit_log (em, quem_tipo, quem_id, quem_nome, quem_papel, endereco, acao,
		alvo_tipo, alvo_id, alvo_nome, campos, resultado, codigo, detalhe)
	VALUES (max(?1, coalesce((SELECT em FROM audit_log ORDER BY id DESC LIMIT 1), ?1)),
		?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)`

// audit writes e inside the operation's transaction, so it commits or
// rolls back with the change it records; nil writes nothing. It runs after
// the change's own statements: a change that fails returns before it.
func (tx *wtx) audit(e *app.AuditEntry, now int64) error {
	if e == nil {
		return nil
	}
	b := e.Bounded()
	e = &b
	campos := e.Campos
	if campos == nil {
		campos = []app.AuditField{}
	}
	raw, err := json.Marshal(campos)
	if err != nil {
		return fmt.Errorf("encode audit fields: %w", err)
	}
	if _, err := tx.Exec(insertAuditSQL, now, e.Quem.Tipo, e.Quem.ID, e.Quem.Nome, string(e.Quem.Papel), e.Endereco,
		e.Acao, e.Alvo.Tipo, e.Alvo.ID, e.Alvo.Nome, string(raw), e.Resultado, string(e.Codigo), e.Detalhe); err != nil {
		return fmt.Errorf("append audit entry: %w", err)
	}
	return nil
}

// AppendAudit implements app.AuditLog: an entry that joins no change.
func (db *DB) AppendAudit(ctx context.Context, e app.AuditEntry) error {
	return db.do(ctx, func(tx *wtx) error { return tx.audit(&e, ms(db.now())) })
}

const auditColumns = `id, em, quem_tipo, quem_id, quem_nome, quem_papel, endereco, acao, alvo_tipo, alvo_id,
	alvo_nome, campos, resultado, codigo, detalhe`

// The bounds of a time range as ids: em grows with id, so the first row at
// or after a time and the last row before one are each one seek of
// audit_log_em_idx, and the page itself is a range on the rowid (or on the
// rowid inside one value of a filter's index).
const (
	auditFromSQL  = `id >= coalesce((SELECT id FROM audit_log WHERE em >= ? ORDER BY em, id LIMIT 1), ?)`
	auditUntilSQL = `id <= coalesce((SELECT id FROM audit_log WHERE em < ? ORDER BY em DESC, id DESC LIMIT 1), 0)`
)

// AuditEntries implements app.AuditStore: newest first, by keyset on the
// rowid. One row more than the page is read to know whether another follows.
func (db *DB) AuditEntries(ctx context.Context, f app.AuditFilter) ([]app.AuditEntry, bool, error) {
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
		add("acao NOT IN ("+strings.Repeat("?, ", len(f.SemAcoes)-1)+"?)", toAny(f.SemAcoes)...)
	}
	if f.SemIntegradores {
		add("quem_tipo <> ?", app.ActorIntegrador)
	}
	if !f.Inicio.IsZero() {
		add(auditFromSQL, ms(f.Inicio), int64(math.MaxInt64))
	}
	if !f.Fim.IsZero() {
		add(auditUntilSQL, ms(f.Fim))
	}
	q := "SELECT " + auditColumns + " FROM audit_log"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	rows, err := db.read.QueryContext(ctx, q+" ORDER BY id DESC LIMIT ?", append(args, f.Limite+1)...)
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

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
