package postgres

import (
	"context"
	"time"

	"geohub/app"
)

var _ app.AuthStore = (*DB)(nil)

// InsertToken implements app.AuthStore.
func (db *DB) InsertToken(ctx context.Context, t app.Token, hash string, audit *app.AuditEntry) error {
	return db.do(ctx, func(tx *wtx) error {
		if _, err := tx.Exec(tx.ctx, `INSERT INTO api_token (id, nome, papel, hash, criado_em) VALUES ($1, $2, $3, $4, $5)`,
			t.ID, t.Nome, string(t.Papel), hash, ms(t.CriadoEm)); err != nil {
			return err
		}
		return tx.audit(audit, ms(db.now()))
	})
}

// RevokeToken implements app.AuthStore.
func (db *DB) RevokeToken(ctx context.Context, id string, at time.Time, audit *app.AuditEntry) error {
	return db.locked(ctx, []lockKey{key("token", id)}, func(tx *wtx) error {
		var nome string
		err := tx.QueryRow(tx.ctx, `UPDATE api_token SET revogado_em = $1 WHERE id = $2 AND revogado_em IS NULL
			RETURNING nome`, ms(at), id).Scan(&nome)
		if isNoRows(err) {
			return app.ErrNotFound
		}
		if err != nil {
			return err
		}
		if audit != nil && audit.Alvo.Nome == "" {
			audit.Alvo.Nome = nome
		}
		return tx.audit(audit, ms(db.now()))
	})
}

// InsertOperator implements app.AuthStore; false when the login exists.
func (db *DB) InsertOperator(ctx context.Context, actorID string, o app.Operator, senhaHash string, audit *app.AuditEntry) (bool, error) {
	var created bool
	err := db.locked(ctx, accountKeys, func(tx *wtx) error {
		created = false
		if actorID != "" {
			if err := requireActiveAdmin(tx, actorID); err != nil {
				return err
			}
		}
		tag, err := tx.Exec(tx.ctx, `INSERT INTO operator (id, login, senha_hash, papel, criado_em)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT (login) DO NOTHING`,
			o.ID, o.Login, senhaHash, string(o.Papel), ms(o.CriadoEm))
		if err != nil {
			return err
		}
		if created = tag.RowsAffected() == 1; !created {
			return nil
		}
		return tx.audit(audit, ms(db.now()))
	})
	return created, err
}
