package store

import (
	"context"
	"database/sql"
	"time"

	"geohub/app"
	"geohub/store/query"
)

// SQLite's side of package query: its dialect, its read pool as a
// query.Conn and its writer as a query.Writer.

// sqliteDialect writes a type family as a range of the tipo index.
var sqliteDialect = query.Dialect{
	Family: func(column, lo, hi string) (string, []any) {
		return column + " >= ? AND " + column + " < ?", []any{lo, hi}
	},
	Indexed:    func(table, index string) string { return table + " INDEXED BY " + index },
	Join:       "CROSS JOIN",
	SkipLocked: "",
	Least:      "min",
}

// conn is the read pool as query.Conn.
type conn struct{ db *sql.DB }

func (c conn) Query(ctx context.Context, q string, args ...any) (query.Rows, error) {
	return txConn{c.db}.Query(ctx, q, args...)
}

func (c conn) QueryRow(ctx context.Context, q string, args ...any) query.Row {
	return c.db.QueryRowContext(ctx, q, args...)
}

// Snapshot is a read transaction: WAL gives it one snapshot from its first
// read.
func (c conn) Snapshot(ctx context.Context, fn func(query.Conn) error) error {
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	return fn(txConn{tx})
}

// txConn is one read transaction (or the pool) as query.Conn.
type txConn struct {
	q interface {
		QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
		QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	}
}

func (c txConn) Query(ctx context.Context, q string, args ...any) (query.Rows, error) {
	r, err := c.q.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return rows{r}, nil
}

func (c txConn) QueryRow(ctx context.Context, q string, args ...any) query.Row {
	return c.q.QueryRowContext(ctx, q, args...)
}

func (c txConn) Snapshot(_ context.Context, fn func(query.Conn) error) error { return fn(c) }

// rows close as pgx's do: an error closing is the reading's, in Err.
type rows struct{ *sql.Rows }

func (r rows) Close() { r.Rows.Close() }

// The shared writes (package query) run in the one writer; SQLite needs
// no locks.
type writer struct{ db *DB }

func (w writer) Write(ctx context.Context, _ query.Op, fn func(query.Tx) error) error {
	return w.db.do(ctx, func(tx *wtx) error { return fn(qtx{tx, w.db}) })
}

// qtx is a writer transaction as query.Tx.
type qtx struct {
	tx *wtx
	db *DB
}

func (t qtx) Exec(q string, args ...any) (int64, error) {
	res, err := t.tx.Exec(q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (t qtx) QueryRow(q string, args ...any) query.Row { return t.tx.QueryRow(q, args...) }

func (t qtx) Audit(e *app.AuditEntry) error { return t.tx.audit(e, ms(t.db.now())) }

func (t qtx) Now() time.Time { return t.db.now() }
