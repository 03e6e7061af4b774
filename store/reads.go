package store

import (
	"context"
	"database/sql"

	"geohub/store/query"
)

// The shared reads (package query) run on SQLite's read pool.

// sqliteDialect writes a type family as a range of the tipo index.
var sqliteDialect = query.Dialect{
	Family: func(column, lo, hi string) (string, []any) {
		return column + " >= ? AND " + column + " < ?", []any{lo, hi}
	},
	Indexed: func(table, index string) string { return table + " INDEXED BY " + index },
	Join:    "CROSS JOIN",
}

// conn is the read pool as query.Conn.
type conn struct{ db *sql.DB }

func (c conn) Query(ctx context.Context, q string, args ...any) (query.Rows, error) {
	r, err := c.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return rows{r}, nil
}

func (c conn) QueryRow(ctx context.Context, q string, args ...any) query.Row {
	return c.db.QueryRowContext(ctx, q, args...)
}

// rows close as pgx's do: an error closing is the reading's, in Err.
type rows struct{ *sql.Rows }

func (r rows) Close() { r.Rows.Close() }
