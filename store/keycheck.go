package store

import (
	"context"
	"database/sql"
	"errors"

	"geohub/app"
)

// KeyCheck implements app.KeyCheckStore.
func (db *DB) KeyCheck(ctx context.Context) ([]byte, error) {
	var v []byte
	err := db.read.QueryRowContext(ctx, `SELECT hmac FROM verificacao_chave WHERE id = 1`).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return v, err
}

// PinKeyCheck implements app.KeyCheckStore. One writer serialises this
// process's opens; another process on the same file waits for the write
// lock, and then finds the row.
func (db *DB) PinKeyCheck(ctx context.Context, check []byte) ([]byte, error) {
	var stored []byte
	err := db.do(ctx, func(tx *wtx) error {
		if _, err := tx.Exec(`INSERT INTO verificacao_chave (id, hmac, gravada_em) VALUES (1, ?, ?)
			ON CONFLICT (id) DO NOTHING`, check, ms(db.now())); err != nil {
			return err
		}
		return tx.QueryRow(`SELECT hmac FROM verificacao_chave WHERE id = 1`).Scan(&stored)
	})
	return stored, err
}

// SealedSamples implements app.KeyCheckStore: two primary-key seeks. The
// newest body is the one most likely sealed when an earlier version left
// older ones in clear.
func (db *DB) SealedSamples(ctx context.Context) (app.SealedSamples, error) {
	var s app.SealedSamples
	err := db.read.QueryRowContext(ctx, `SELECT id, segredo FROM integrator ORDER BY id LIMIT 1`).Scan(&s.IntegratorID, &s.Secret)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return s, err
	}
	err = db.read.QueryRowContext(ctx, `SELECT o.event_id, c.corpo FROM outbox_corpo AS c
		JOIN outbox AS o ON o.id = c.outbox_id ORDER BY c.outbox_id DESC LIMIT 1`).Scan(&s.EventID, &s.Body)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return s, err
	}
	return s, nil
}
