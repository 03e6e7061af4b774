package query

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"geohub/app"
)

// TypeVersions implements app.RegistryStore.
func (r *Reads) TypeVersions(ctx context.Context) ([]app.TypeVersion, error) {
	rows, err := r.c.Query(ctx, `SELECT `+TypeVersionColumns+` FROM registry ORDER BY tipo, versao`)
	if err != nil {
		return nil, fmt.Errorf("list registry: %w", err)
	}
	out, err := Collect(rows, ScanTypeVersion)
	if len(out) == 0 {
		out = nil
	}
	return out, err
}

// TypeVersionColumns are what ScanTypeVersion reads, in its order.
const TypeVersionColumns = `tipo, versao, status, audiencia, schema, redacao, criado_em`

// ScanTypeVersion reads one registry row of TypeVersionColumns; no row is
// app.ErrNotFound.
func ScanTypeVersion(row Row) (app.TypeVersion, error) {
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
	tv.CriadoEm = FromMS(criado)
	if err := json.Unmarshal([]byte(redacao), &tv.Redacao); err != nil {
		return tv, fmt.Errorf("decode redaction rules of %s@%s: %w", tv.Tipo, tv.Versao, err)
	}
	return tv, nil
}
