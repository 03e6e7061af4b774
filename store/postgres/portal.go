package postgres

import (
	"context"
	"time"

	"geohub/app"
)

var _ app.PortalStore = (*DB)(nil)

// InsertPortalLink implements app.PortalStore. Links past their day go
// with each new one; one another transaction holds is skipped.
func (db *DB) InsertPortalLink(ctx context.Context, l app.PortalLink, hash string, audit *app.AuditEntry) error {
	return db.do(ctx, func(tx *wtx) error {
		if _, err := tx.Exec(tx.ctx, `DELETE FROM portal_link WHERE id IN (SELECT id FROM portal_link
			WHERE expira_em <= $1 FOR UPDATE SKIP LOCKED)`, ms(l.CriadoEm)); err != nil {
			return err
		}
		if _, err := tx.Exec(tx.ctx, `INSERT INTO portal_link (id, hash, integrador_id, criado_em, expira_em)
			VALUES ($1, $2, $3, $4, $5)`, l.ID, hash, l.Integrador, ms(l.CriadoEm), ms(l.ExpiraEm)); err != nil {
			return err
		}
		return tx.audit(audit, ms(db.now()))
	})
}

// RevokePortalLink implements app.PortalStore.
func (db *DB) RevokePortalLink(ctx context.Context, integrador, id string, now time.Time, audit *app.AuditEntry) error {
	return db.do(ctx, func(tx *wtx) error {
		tag, err := tx.Exec(tx.ctx, `UPDATE portal_link SET revogado_em = $1 WHERE id = $2 AND integrador_id = $3
			AND usado_em IS NULL AND revogado_em IS NULL AND expira_em > $1`, ms(now), id, integrador)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return app.ErrNotFound
		}
		return tx.audit(audit, ms(db.now()))
	})
}

// UsePortalLink implements app.PortalStore: the UPDATE's row lock makes
// two replicas spending one link at once open one session, not two.
func (db *DB) UsePortalLink(ctx context.Context, id, sessionHash string, criado, expira time.Time, audit *app.AuditEntry) error {
	return db.do(ctx, func(tx *wtx) error {
		var integrador string
		err := tx.QueryRow(tx.ctx, `UPDATE portal_link SET usado_em = $1 WHERE id = $2 AND usado_em IS NULL
			AND revogado_em IS NULL AND expira_em > $1 RETURNING integrador_id`, ms(criado), id).Scan(&integrador)
		if isNoRows(err) {
			return app.ErrNotFound
		}
		if err != nil {
			return err
		}
		return insertPortalSession(tx, sessionHash, integrador, criado, expira, audit, ms(db.now()))
	})
}

// InsertPortalSession implements app.PortalStore.
func (db *DB) InsertPortalSession(ctx context.Context, hash, integrador string, criado, expira time.Time, audit *app.AuditEntry) error {
	return db.do(ctx, func(tx *wtx) error {
		return insertPortalSession(tx, hash, integrador, criado, expira, audit, ms(db.now()))
	})
}

func insertPortalSession(tx *wtx, hash, integrador string, criado, expira time.Time, audit *app.AuditEntry, at int64) error {
	if _, err := tx.Exec(tx.ctx, `DELETE FROM portal_session WHERE hash IN (SELECT hash FROM portal_session
		WHERE expira_em <= $1 FOR UPDATE SKIP LOCKED)`, ms(criado)); err != nil {
		return err
	}
	if _, err := tx.Exec(tx.ctx, `INSERT INTO portal_session (hash, integrador_id, criado_em, expira_em)
		VALUES ($1, $2, $3, $4)`, hash, integrador, ms(criado), ms(expira)); err != nil {
		return err
	}
	return tx.audit(audit, at)
}

// DeletePortalSession implements app.PortalStore.
func (db *DB) DeletePortalSession(ctx context.Context, hash string, audit *app.AuditEntry) error {
	return db.do(ctx, func(tx *wtx) error {
		tag, err := tx.Exec(tx.ctx, `DELETE FROM portal_session WHERE hash = $1`, hash)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return nil // gone already: nothing to record
		}
		return tx.audit(audit, ms(db.now()))
	})
}

// EndPortalSessions implements app.PortalStore.
func (db *DB) EndPortalSessions(ctx context.Context, integrador string, audit *app.AuditEntry) (int, error) {
	var n int64
	err := db.do(ctx, func(tx *wtx) error {
		tag, err := tx.Exec(tx.ctx, `DELETE FROM portal_session WHERE integrador_id = $1`, integrador)
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		return tx.audit(audit.Counted(n), ms(db.now()))
	})
	return int(n), err
}
