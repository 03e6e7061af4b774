package query

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"geohub/app"
)

const portalLinkColumns = `id, integrador_id, criado_em, expira_em, usado_em, revogado_em`

func scanPortalLink(row Row) (app.PortalLink, error) {
	var l app.PortalLink
	var criado, expira int64
	var usado, revogado sql.NullInt64
	if err := row.Scan(&l.ID, &l.Integrador, &criado, &expira, &usado, &revogado); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return l, app.ErrNotFound
		}
		return l, err
	}
	l.CriadoEm, l.ExpiraEm = FromMS(criado), FromMS(expira)
	l.UsadoEm = fromNullMS(usado)
	l.RevogadoEm = fromNullMS(revogado)
	return l, nil
}

// PortalLinks implements app.PortalStore: an integrator's links still
// usable at now.
func (r *Reads) PortalLinks(ctx context.Context, integrador string, now time.Time) ([]app.PortalLink, error) {
	rows, err := r.c.Query(ctx, `SELECT `+portalLinkColumns+` FROM portal_link
		WHERE integrador_id = ? AND usado_em IS NULL AND revogado_em IS NULL AND expira_em > ? ORDER BY criado_em`,
		integrador, MS(now))
	if err != nil {
		return nil, err
	}
	out, err := Collect(rows, scanPortalLink)
	if len(out) == 0 {
		out = nil
	}
	return out, err
}

// PortalLinkByHash implements app.PortalStore.
func (r *Reads) PortalLinkByHash(ctx context.Context, hash string) (app.PortalLink, error) {
	return scanPortalLink(r.c.QueryRow(ctx, `SELECT `+portalLinkColumns+` FROM portal_link WHERE hash = ?`, hash))
}

// PortalSessionIntegrator implements app.PortalStore.
func (r *Reads) PortalSessionIntegrator(ctx context.Context, hash string, now time.Time) (string, error) {
	var id string
	err := r.c.QueryRow(ctx, `SELECT integrador_id FROM portal_session WHERE hash = ? AND expira_em > ?`,
		hash, MS(now)).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", app.ErrNotFound
	}
	return id, err
}

// InsertPortalLink implements app.PortalStore. Links past their day go
// with each new one: no sweeper needed.
func (w *Writes) InsertPortalLink(ctx context.Context, l app.PortalLink, hash string, audit *app.AuditEntry) error {
	return w.w.Write(ctx, Op{}, func(tx Tx) error {
		if _, err := tx.Exec(w.sweep("portal_link", "id", "expira_em <= ?"), MS(l.CriadoEm)); err != nil {
			return err
		}
		if _, err := tx.Exec(`INSERT INTO portal_link (id, hash, integrador_id, criado_em, expira_em) VALUES (?, ?, ?, ?, ?)`,
			l.ID, hash, l.Integrador, MS(l.CriadoEm), MS(l.ExpiraEm)); err != nil {
			return err
		}
		return tx.Audit(audit)
	})
}

// RevokePortalLink implements app.PortalStore.
func (w *Writes) RevokePortalLink(ctx context.Context, integrador, id string, now time.Time, audit *app.AuditEntry) error {
	return w.w.Write(ctx, Op{}, func(tx Tx) error {
		n, err := tx.Exec(`UPDATE portal_link SET revogado_em = ? WHERE id = ? AND integrador_id = ?
			AND usado_em IS NULL AND revogado_em IS NULL AND expira_em > ?`, MS(now), id, integrador, MS(now))
		if err != nil {
			return err
		}
		if n == 0 {
			return app.ErrNotFound
		}
		return tx.Audit(audit)
	})
}

// UsePortalLink implements app.PortalStore: the UPDATE's row lock makes
// two replicas spending one link at once open one session, not two.
func (w *Writes) UsePortalLink(ctx context.Context, id, sessionHash string, criado, expira time.Time, audit *app.AuditEntry) error {
	return w.w.Write(ctx, Op{}, func(tx Tx) error {
		var integrador string
		err := tx.QueryRow(`UPDATE portal_link SET usado_em = ? WHERE id = ? AND usado_em IS NULL AND revogado_em IS NULL
			AND expira_em > ? RETURNING integrador_id`, MS(criado), id, MS(criado)).Scan(&integrador)
		if errors.Is(err, sql.ErrNoRows) {
			return app.ErrNotFound
		}
		if err != nil {
			return err
		}
		return w.insertPortalSession(tx, sessionHash, integrador, criado, expira, audit)
	})
}

// InsertPortalSession implements app.PortalStore.
func (w *Writes) InsertPortalSession(ctx context.Context, hash, integrador string, criado, expira time.Time, audit *app.AuditEntry) error {
	return w.w.Write(ctx, Op{}, func(tx Tx) error {
		return w.insertPortalSession(tx, hash, integrador, criado, expira, audit)
	})
}

// insertPortalSession opens a session; expired ones go with each sign-in,
// no sweeper needed.
func (w *Writes) insertPortalSession(tx Tx, hash, integrador string, criado, expira time.Time, audit *app.AuditEntry) error {
	if _, err := tx.Exec(w.sweep("portal_session", "hash", "expira_em <= ?"), MS(criado)); err != nil {
		return err
	}
	if _, err := tx.Exec(`INSERT INTO portal_session (hash, integrador_id, criado_em, expira_em) VALUES (?, ?, ?, ?)`,
		hash, integrador, MS(criado), MS(expira)); err != nil {
		return err
	}
	return tx.Audit(audit)
}

// DeletePortalSession implements app.PortalStore.
func (w *Writes) DeletePortalSession(ctx context.Context, hash string, audit *app.AuditEntry) error {
	return w.w.Write(ctx, Op{}, func(tx Tx) error {
		n, err := tx.Exec(`DELETE FROM portal_session WHERE hash = ?`, hash)
		if err != nil || n == 0 {
			return err // none: gone already, nothing to record
		}
		return tx.Audit(audit)
	})
}

// EndPortalSessions implements app.PortalStore.
func (w *Writes) EndPortalSessions(ctx context.Context, integrador string, audit *app.AuditEntry) (int, error) {
	var n int64
	err := w.w.Write(ctx, Op{}, func(tx Tx) error {
		var err error
		if n, err = tx.Exec(`DELETE FROM portal_session WHERE integrador_id = ?`, integrador); err != nil {
			return err
		}
		return tx.Audit(audit.Counted(n))
	})
	return int(n), err
}
