package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"geohub/app"
)

// InsertPortalLink implements app.PortalStore.
func (db *DB) InsertPortalLink(ctx context.Context, l app.PortalLink, hash string, audit *app.AuditEntry) error {
	return db.do(ctx, func(tx *wtx) error {
		// Links past their day go with each new one: no sweeper needed.
		if _, err := tx.Exec(`DELETE FROM portal_link WHERE expira_em <= ?`, ms(l.CriadoEm)); err != nil {
			return err
		}
		if _, err := tx.Exec(`INSERT INTO portal_link (id, hash, integrador_id, criado_em, expira_em) VALUES (?, ?, ?, ?, ?)`,
			l.ID, hash, l.Integrador, ms(l.CriadoEm), ms(l.ExpiraEm)); err != nil {
			return err
		}
		return tx.audit(audit, ms(db.now()))
	})
}

// RevokePortalLink implements app.PortalStore.
func (db *DB) RevokePortalLink(ctx context.Context, integrador, id string, now time.Time, audit *app.AuditEntry) error {
	return db.do(ctx, func(tx *wtx) error {
		res, err := tx.Exec(`UPDATE portal_link SET revogado_em = ? WHERE id = ? AND integrador_id = ?
			AND usado_em IS NULL AND revogado_em IS NULL AND expira_em > ?`, ms(now), id, integrador, ms(now))
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return app.ErrNotFound
		}
		return tx.audit(audit, ms(db.now()))
	})
}

// UsePortalLink implements app.PortalStore.
func (db *DB) UsePortalLink(ctx context.Context, id, sessionHash string, criado, expira time.Time, audit *app.AuditEntry) error {
	return db.do(ctx, func(tx *wtx) error {
		var integrador string
		err := tx.QueryRow(`UPDATE portal_link SET usado_em = ? WHERE id = ? AND usado_em IS NULL AND revogado_em IS NULL
			AND expira_em > ? RETURNING integrador_id`, ms(criado), id, ms(criado)).Scan(&integrador)
		if errors.Is(err, sql.ErrNoRows) {
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
	// Expired sessions go with each sign-in: no sweeper needed.
	if _, err := tx.Exec(`DELETE FROM portal_session WHERE expira_em <= ?`, ms(criado)); err != nil {
		return err
	}
	if _, err := tx.Exec(`INSERT INTO portal_session (hash, integrador_id, criado_em, expira_em) VALUES (?, ?, ?, ?)`,
		hash, integrador, ms(criado), ms(expira)); err != nil {
		return err
	}
	return tx.audit(audit, at)
}

// DeletePortalSession implements app.PortalStore.
func (db *DB) DeletePortalSession(ctx context.Context, hash string, audit *app.AuditEntry) error {
	return db.do(ctx, func(tx *wtx) error {
		res, err := tx.Exec(`DELETE FROM portal_session WHERE hash = ?`, hash)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return nil // gone already: nothing to record
		}
		return tx.audit(audit, ms(db.now()))
	})
}

// EndPortalSessions implements app.PortalStore.
func (db *DB) EndPortalSessions(ctx context.Context, integrador string, audit *app.AuditEntry) (int, error) {
	var n int64
	err := db.do(ctx, func(tx *wtx) error {
		res, err := tx.Exec(`DELETE FROM portal_session WHERE integrador_id = ?`, integrador)
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
		return tx.audit(audit.Counted(n), ms(db.now()))
	})
	return int(n), err
}
