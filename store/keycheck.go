package store

import (
	"context"
)

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
