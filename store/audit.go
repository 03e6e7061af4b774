package store

import (
	"context"
	"encoding/json"
	"fmt"

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
