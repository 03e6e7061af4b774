package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"geohub/app"
)

// KeyCheck implements app.KeyCheckStore.
func (db *DB) KeyCheck(ctx context.Context) ([]byte, error) {
	var v []byte
	err := db.read.QueryRow(ctx, `SELECT hmac FROM verificacao_chave WHERE id = 1`).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return v, err
}

// PinKeyCheck implements app.KeyCheckStore in two statements on the pool,
// not one: an INSERT that meets another replica's uncommitted row waits for
// it and then does nothing, and only a statement that starts after that
// has a snapshot which sees the row that won. Past the writer, since
// opening a replica is no group commit's business.
func (db *DB) PinKeyCheck(ctx context.Context, check []byte) ([]byte, error) {
	if _, err := db.read.Exec(ctx, `INSERT INTO verificacao_chave (id, hmac, gravada_em) VALUES (1, $1, $2)
		ON CONFLICT (id) DO NOTHING`, check, ms(db.now())); err != nil {
		return nil, err
	}
	var stored []byte
	err := db.read.QueryRow(ctx, `SELECT hmac FROM verificacao_chave WHERE id = 1`).Scan(&stored)
	return stored, err
}

// SealedSamples implements app.KeyCheckStore: two primary-key scans of one
// row each.
func (db *DB) SealedSamples(ctx context.Context) (app.SealedSamples, error) {
	var s app.SealedSamples
	err := db.read.QueryRow(ctx, `SELECT id, segredo FROM integrator ORDER BY id LIMIT 1`).Scan(&s.IntegratorID, &s.Secret)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return s, err
	}
	err = db.read.QueryRow(ctx, `SELECT o.event_id, c.corpo FROM outbox_corpo AS c
		JOIN outbox AS o ON o.id = c.outbox_id ORDER BY c.outbox_id DESC LIMIT 1`).Scan(&s.EventID, &s.Body)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return s, err
	}
	return s, nil
}
