package postgres

import (
	"context"
)

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
