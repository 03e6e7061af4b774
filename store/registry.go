package store

import (
	"context"
	"encoding/json"
	"fmt"

	"geohub/app"
	"geohub/store/query"
)

// InsertTypeVersion implements app.RegistryStore.
func (db *DB) InsertTypeVersion(ctx context.Context, tv app.TypeVersion, audit *app.AuditEntry) (app.TypeVersion, bool, error) {
	redacao, err := json.Marshal(tv.Redacao)
	if err != nil {
		return tv, false, err
	}
	out, created := tv, false
	err = db.do(ctx, func(tx *wtx) error {
		res, err := tx.Exec(`INSERT INTO registry (tipo, versao, status, audiencia, schema, redacao, criado_em)
			VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tipo, versao) DO NOTHING`,
			tv.Tipo, tv.Versao, tv.Status, tv.Audiencia, string(tv.Schema), string(redacao), ms(tv.CriadoEm))
		if err != nil {
			return fmt.Errorf("insert type version: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			created = true
			return tx.audit(audit, ms(db.now()))
		}
		out, err = query.ScanTypeVersion(tx.QueryRow(`SELECT tipo, versao, status, audiencia, schema, redacao, criado_em
			FROM registry WHERE tipo = ? AND versao = ?`, tv.Tipo, tv.Versao))
		return err
	})
	return out, created, err
}

// SetTypeStatus implements app.RegistryStore.
func (db *DB) SetTypeStatus(ctx context.Context, tipo, versao, status string, audit *app.AuditEntry) error {
	return db.do(ctx, func(tx *wtx) error {
		res, err := tx.Exec(`UPDATE registry SET status = ? WHERE tipo = ? AND versao = ?`, status, tipo, versao)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return app.ErrNotFound
		}
		return tx.audit(audit, ms(db.now()))
	})
}
