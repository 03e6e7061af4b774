package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"geohub/app"
	"geohub/store/query"
)

// TypeVersions implements app.RegistryStore.
func (db *DB) TypeVersions(ctx context.Context) ([]app.TypeVersion, error) {
	rows, err := db.read.QueryContext(ctx, `SELECT tipo, versao, status, audiencia, schema, redacao, criado_em
		FROM registry ORDER BY tipo, versao`)
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

func scanTypeVersion(row query.Row) (app.TypeVersion, error) {
	var tv app.TypeVersion
	var schema, redacao string
	var criado int64
	if err := row.Scan(&tv.Tipo, &tv.Versao, &tv.Status, &tv.Audiencia, &schema, &redacao, &criado); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
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
		out, err = scanTypeVersion(tx.QueryRow(`SELECT tipo, versao, status, audiencia, schema, redacao, criado_em
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
