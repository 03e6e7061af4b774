package postgres

import (
	"context"

	"geohub/app"
)

var _ app.AuditStore = (*DB)(nil)

// AppendAudit implements app.AuditLog: an entry that joins no change. The
// entries that do are written by tx.audit (events.go) inside their change.
func (db *DB) AppendAudit(ctx context.Context, e app.AuditEntry) error {
	return db.do(ctx, func(tx *wtx) error { return tx.audit(&e, ms(db.now())) })
}
