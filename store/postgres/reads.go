package postgres

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"geohub/store/query"
)

// The shared reads (package query) run on the read pool, their
// placeholders numbered.

// dialect writes a type family with starts_with: a range's order is the
// database's collation, where ';' may sort before ':'.
var dialect = query.Dialect{
	Family: func(column, lo, _ string) (string, []any) {
		return "starts_with(" + column + ", ?)", []any{lo}
	},
	Indexed: func(table, _ string) string { return table },
	Join:    "JOIN",
}

// conn is a pool as query.Conn.
type conn struct{ p *pgxpool.Pool }

func (c conn) Query(ctx context.Context, q string, args ...any) (query.Rows, error) {
	return c.p.Query(ctx, query.Numbered(q), args...)
}

func (c conn) QueryRow(ctx context.Context, q string, args ...any) query.Row {
	return c.p.QueryRow(ctx, query.Numbered(q), args...)
}
