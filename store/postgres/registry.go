package postgres

import (
	"context"
	"encoding/json"
	"fmt"

	"geohub/app"
	"geohub/store/query"
)

var _ app.RegistryStore = (*DB)(nil)

// InsertTypeVersion implements app.RegistryStore. Two replicas registering
// the same version at once store it once: the loser's insert waits for the
// winner's commit and does nothing, and its next statement (a newer
// snapshot, READ COMMITTED) reads the winner's row.
func (db *DB) InsertTypeVersion(ctx context.Context, tv app.TypeVersion, audit *app.AuditEntry) (app.TypeVersion, bool, error) {
	redacao, err := json.Marshal(tv.Redacao)
	if err != nil {
		return tv, false, err
	}
	out, created := tv, false
	err = db.locked(ctx, []lockKey{key("registry", tv.Tipo, tv.Versao)}, func(tx *wtx) error {
		out, created = tv, false
		tag, err := tx.Exec(tx.ctx, `INSERT INTO registry (`+query.TypeVersionColumns+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (tipo, versao) DO NOTHING`,
			tv.Tipo, tv.Versao, tv.Status, tv.Audiencia, string(tv.Schema), string(redacao), ms(tv.CriadoEm))
		if err != nil {
			return fmt.Errorf("insert type version: %w", err)
		}
		if tag.RowsAffected() == 1 {
			created = true
			return tx.audit(audit, ms(db.now()))
		}
		out, err = query.ScanTypeVersion(tx.QueryRow(tx.ctx, `SELECT `+query.TypeVersionColumns+`
			FROM registry WHERE tipo = $1 AND versao = $2`, tv.Tipo, tv.Versao))
		return err
	})
	return out, created, err
}

// SetTypeStatus implements app.RegistryStore.
func (db *DB) SetTypeStatus(ctx context.Context, tipo, versao, status string, audit *app.AuditEntry) error {
	return db.locked(ctx, []lockKey{key("registry", tipo, versao)}, func(tx *wtx) error {
		tag, err := tx.Exec(tx.ctx, `UPDATE registry SET status = $1 WHERE tipo = $2 AND versao = $3`, status, tipo, versao)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return app.ErrNotFound
		}
		return tx.audit(audit, ms(db.now()))
	})
}
