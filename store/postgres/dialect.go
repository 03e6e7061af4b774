package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"geohub/app"
	"geohub/store/query"
)

// PostgreSQL's side of package query: its dialect, its read pool as a
// query.Conn (placeholders numbered) and its writer as a query.Writer.

// dialect writes a type family with starts_with: a range's order is the
// database's collation, where ';' may sort before ':'.
var dialect = query.Dialect{
	Family: func(column, lo, _ string) (string, []any) {
		return "starts_with(" + column + ", ?)", []any{lo}
	},
	Indexed:    func(table, _ string) string { return table },
	Join:       "JOIN",
	SkipLocked: " FOR UPDATE SKIP LOCKED",
	Least:      "LEAST",
	Bytes:      ` COLLATE "C"`,
}

// conn is the read pool as query.Conn.
type conn struct{ p *pgxpool.Pool }

func (c conn) Query(ctx context.Context, q string, args ...any) (query.Rows, error) {
	return c.p.Query(ctx, query.Numbered(q), args...)
}

func (c conn) QueryRow(ctx context.Context, q string, args ...any) query.Row {
	return c.p.QueryRow(ctx, query.Numbered(q), args...)
}

// Snapshot is a read-only REPEATABLE READ transaction: one snapshot for
// all its statements.
func (c conn) Snapshot(ctx context.Context, fn func(query.Conn) error) error {
	tx, err := c.p.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	return fn(txConn{tx})
}

// txConn is one transaction as query.Conn.
type txConn struct{ tx pgx.Tx }

func (c txConn) Query(ctx context.Context, q string, args ...any) (query.Rows, error) {
	return c.tx.Query(ctx, query.Numbered(q), args...)
}

func (c txConn) QueryRow(ctx context.Context, q string, args ...any) query.Row {
	return c.tx.QueryRow(ctx, query.Numbered(q), args...)
}

func (c txConn) Snapshot(_ context.Context, fn func(query.Conn) error) error { return fn(c) }

// The shared writes (package query) run in the writer, holding their
// locks as advisory keys.
type writer struct{ db *DB }

func (w writer) Write(ctx context.Context, o query.Op, fn func(query.Tx) error) error {
	keys := make([]lockKey, len(o.Locks))
	for i, l := range o.Locks {
		keys[i] = key(l[0], l[1:]...)
	}
	return w.db.submit(ctx, &op{alone: o.Alone, keys: keys, fn: func(tx *wtx) error { return fn(qtx{tx, w.db}) }})
}

// qtx is a writer transaction as query.Tx.
type qtx struct {
	tx *wtx
	db *DB
}

func (t qtx) Exec(q string, args ...any) (int64, error) {
	tag, err := t.tx.Exec(t.tx.ctx, query.Numbered(q), args...)
	return tag.RowsAffected(), err
}

func (t qtx) QueryRow(q string, args ...any) query.Row {
	return t.tx.QueryRow(t.tx.ctx, query.Numbered(q), args...)
}

func (t qtx) Audit(e *app.AuditEntry) error { return t.tx.audit(e, ms(t.db.now())) }

func (t qtx) Now() time.Time { return t.db.now() }
