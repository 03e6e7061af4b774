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
	if usado.Valid {
		t := FromMS(usado.Int64)
		l.UsadoEm = &t
	}
	if revogado.Valid {
		t := FromMS(revogado.Int64)
		l.RevogadoEm = &t
	}
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
