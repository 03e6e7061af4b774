package store

import (
	"context"
	"time"

	"geohub/app"
)

// InsertToken implements app.AuthStore.
func (db *DB) InsertToken(ctx context.Context, t app.Token, hash string, audit *app.AuditEntry) error {
	return db.do(ctx, func(tx *wtx) error {
		if _, err := tx.Exec(`INSERT INTO api_token (id, nome, papel, hash, criado_em) VALUES (?, ?, ?, ?, ?)`,
			t.ID, t.Nome, string(t.Papel), hash, ms(t.CriadoEm)); err != nil {
			return err
		}
		return tx.audit(audit, ms(db.now()))
	})
}

// RevokeToken implements app.AuthStore.
func (db *DB) RevokeToken(ctx context.Context, id string, at time.Time, audit *app.AuditEntry) error {
	return db.do(ctx, func(tx *wtx) error {
		res, err := tx.Exec(`UPDATE api_token SET revogado_em = ? WHERE id = ? AND revogado_em IS NULL`, ms(at), id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return app.ErrNotFound
		}
		if audit != nil && audit.Alvo.Nome == "" {
			if err := tx.QueryRow(`SELECT nome FROM api_token WHERE id = ?`, id).Scan(&audit.Alvo.Nome); err != nil {
				return err
			}
		}
		return tx.audit(audit, ms(db.now()))
	})
}

// InsertOperator implements app.AuthStore; false when the login exists.
func (db *DB) InsertOperator(ctx context.Context, actorID string, o app.Operator, senhaHash string, audit *app.AuditEntry) (bool, error) {
	var created bool
	err := db.do(ctx, func(tx *wtx) error {
		if actorID != "" {
			if err := requireActiveAdmin(tx, actorID); err != nil {
				return err
			}
		}
		res, err := tx.Exec(`INSERT INTO operator (id, login, senha_hash, papel, criado_em)
			VALUES (?, ?, ?, ?, ?) ON CONFLICT (login) DO NOTHING`, o.ID, o.Login, senhaHash, string(o.Papel), ms(o.CriadoEm))
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		if created = n == 1; !created {
			return nil
		}
		return tx.audit(audit, ms(db.now()))
	})
	return created, err
}
