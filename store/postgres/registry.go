package postgres

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"geohub/app"
)

var _ app.RegistryStore = (*DB)(nil)

const typeVersionColumns = `tipo, versao, status, audiencia, schema, redacao, criado_em`

// TypeVersions implements app.RegistryStore.
func (db *DB) TypeVersions(ctx context.Context) ([]app.TypeVersion, error) {
	rows, err := db.read.Query(ctx, `SELECT `+typeVersionColumns+` FROM registry ORDER BY tipo, versao`)
	if err != nil {
		return nil, fmt.Errorf("list registry: %w", err)
	}
	defer rows.Close()
	var out []app.TypeVersion
	for rows.Next() {
		tv, err := scanTypeVersion(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, tv)
	}
	return out, rows.Err()
}

func scanTypeVersion(row pgx.Row) (app.TypeVersion, error) {
	var tv app.TypeVersion
	var schema, redacao string
	var criado int64
	if err := row.Scan(&tv.Tipo, &tv.Versao, &tv.Status, &tv.Audiencia, &schema, &redacao, &criado); err != nil {
		if isNoRows(err) {
			return tv, app.ErrNotFound
		}
		return tv, err
	}
	tv.Schema = json.RawMessage(schema)
	tv.CriadoEm = fromMS(criado)
	if err := json.Unmarshal([]byte(redacao), &tv.Redacao); err != nil {
		return tv, fmt.Errorf("decode redaction rules of %s@%s: %w", tv.Tipo, tv.Versao, err)
	}
	return tv, nil
}

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
		tag, err := tx.Exec(tx.ctx, `INSERT INTO registry (`+typeVersionColumns+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (tipo, versao) DO NOTHING`,
			tv.Tipo, tv.Versao, tv.Status, tv.Audiencia, string(tv.Schema), string(redacao), ms(tv.CriadoEm))
		if err != nil {
			return fmt.Errorf("insert type version: %w", err)
		}
		if tag.RowsAffected() == 1 {
			created = true
			return tx.audit(audit, ms(db.now()))
		}
		out, err = scanTypeVersion(tx.QueryRow(tx.ctx, `SELECT `+typeVersionColumns+`
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
