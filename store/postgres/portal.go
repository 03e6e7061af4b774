package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

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

const portalLinkColumns = `id, integrador_id, criado_em, expira_em, usado_em, revogado_em`

func scanPortalLink(row pgx.Row) (app.PortalLink, error) {
	var l app.PortalLink
	var criado, expira int64
	var usado, revogado *int64
	if err := row.Scan(&l.ID, &l.Integrador, &criado, &expira, &usado, &revogado); err != nil {
		return l, err
	}
	l.CriadoEm, l.ExpiraEm = fromMS(criado), fromMS(expira)
	if usado != nil {
		t := fromMS(*usado)
		l.UsadoEm = &t
	}
	if revogado != nil {
		t := fromMS(*revogado)
		l.RevogadoEm = &t
	}
	return l, nil
}

// PortalLinks implements app.PortalStore.
func (db *DB) PortalLinks(ctx context.Context, integrador string, now time.Time) ([]app.PortalLink, error) {
	rows, err := db.read.Query(ctx, `SELECT `+portalLinkColumns+` FROM portal_link
		WHERE integrador_id = $1 AND usado_em IS NULL AND revogado_em IS NULL AND expira_em > $2 ORDER BY criado_em`,
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
	l, err := scanPortalLink(db.read.QueryRow(ctx, `SELECT `+portalLinkColumns+` FROM portal_link WHERE hash = $1`, hash))
	if isNoRows(err) {
		return l, app.ErrNotFound
	}
	return l, err
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

// PortalSessionIntegrator implements app.PortalStore.
func (db *DB) PortalSessionIntegrator(ctx context.Context, hash string, now time.Time) (string, error) {
	var id string
	err := db.read.QueryRow(ctx, `SELECT integrador_id FROM portal_session WHERE hash = $1 AND expira_em > $2`,
		hash, ms(now)).Scan(&id)
	if isNoRows(err) {
		return "", app.ErrNotFound
	}
	return id, err
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
