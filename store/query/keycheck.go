package query

import (
	"context"
	"database/sql"
	"errors"

	"geohub/app"
)

// KeyCheck implements app.KeyCheckStore: nil before the first open pins it.
func (r *Reads) KeyCheck(ctx context.Context) ([]byte, error) {
	var v []byte
	err := r.c.QueryRow(ctx, `SELECT hmac FROM verificacao_chave WHERE id = 1`).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return v, err
}

// SealedSamples implements app.KeyCheckStore: two primary-key seeks. The
// newest body is the one most likely sealed when an earlier version left
// older ones in clear.
func (r *Reads) SealedSamples(ctx context.Context) (app.SealedSamples, error) {
	var s app.SealedSamples
	err := r.c.QueryRow(ctx, `SELECT id, segredo FROM integrator ORDER BY id LIMIT 1`).Scan(&s.IntegratorID, &s.Secret)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return s, err
	}
	err = r.c.QueryRow(ctx, `SELECT o.event_id, c.corpo FROM outbox_corpo AS c
		JOIN outbox AS o ON o.id = c.outbox_id ORDER BY c.outbox_id DESC LIMIT 1`).Scan(&s.EventID, &s.Body)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return s, err
	}
	return s, nil
}
