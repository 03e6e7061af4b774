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

const portalLinkColumns = `id, integrador_id, criado_em, expira_em, usado_em, revogado_em`

func scanPortalLink(row interface{ Scan(...any) error }) (app.PortalLink, error) {
	var l app.PortalLink
	var criado, expira int64
	var usado, revogado sql.NullInt64
	if err := row.Scan(&l.ID, &l.Integrador, &criado, &expira, &usado, &revogado); err != nil {
		return l, err
	}
	l.CriadoEm, l.ExpiraEm = fromMS(criado), fromMS(expira)
	if usado.Valid {
		t := fromMS(usado.Int64)
		l.UsadoEm = &t
	}
	if revogado.Valid {
		t := fromMS(revogado.Int64)
		l.RevogadoEm = &t
	}
	return l, nil
}

// PortalLinks implements app.PortalStore.
func (db *DB) PortalLinks(ctx context.Context, integrador string, now time.Time) ([]app.PortalLink, error) {
	rows, err := db.read.QueryContext(ctx, `SELECT `+portalLinkColumns+` FROM portal_link
		WHERE integrador_id = ? AND usado_em IS NULL AND revogado_em IS NULL AND expira_em > ? ORDER BY criado_em`,
		integrador, ms(now))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []app.PortalLink
	for rows.Next() {
		l, err := scanPortalLink(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

// PortalLinkByHash implements app.PortalStore.
func (db *DB) PortalLinkByHash(ctx context.Context, hash string) (app.PortalLink, error) {
	l, err := scanPortalLink(db.read.QueryRowContext(ctx, `SELECT `+portalLinkColumns+` FROM portal_link WHERE hash = ?`, hash))
	if errors.Is(err, sql.ErrNoRows) {
		return l, app.ErrNotFound
	}
	return l, err
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

// PortalSessionIntegrator implements app.PortalStore.
func (db *DB) PortalSessionIntegrator(ctx context.Context, hash string, now time.Time) (string, error) {
	var id string
	err := db.read.QueryRowContext(ctx, `SELECT integrador_id FROM portal_session WHERE hash = ? AND expira_em > ?`,
		hash, ms(now)).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", app.ErrNotFound
	}
	return id, err
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
