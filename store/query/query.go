// Package query is what the two stores share (SPEC 12, "One store, two
// dialects"): the read queries with their filter builders and row
// scanners, each written once over a thin Dialect. Package store runs them
// on SQLite through database/sql, package store/postgres on PostgreSQL
// through pgx; the conformance suites (storetest and each store's tests)
// hold both to one contract. Statements are written with ? placeholders;
// PostgreSQL's connection numbers them.
package query

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"time"
)

// Row is one result row, or the error that there is none.
type Row interface {
	Scan(dest ...any) error
}

// Rows are a result being read.
type Rows interface {
	Row
	Next() bool
	Err() error
	Close()
}

// Conn runs read statements (a pool of either dialect).
type Conn interface {
	Query(ctx context.Context, sql string, args ...any) (Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) Row
	// Snapshot runs fn's reads on one snapshot of the database.
	Snapshot(ctx context.Context, fn func(Conn) error) error
}

// Dialect is what the shared statements write differently per database.
type Dialect struct {
	// Family is the condition that column holds a type of the family
	// whose names run from lo, its prefix, up to hi (app.TypeFamily).
	Family func(column, lo, hi string) (cond string, args []any)
	// Indexed names table read through index: SQLite's INDEXED BY, where
	// its planner must be told; the bare table where the planner chooses.
	Indexed func(table, index string) string
	// Join joins in the written order: SQLite's CROSS JOIN, which pins
	// it; a plain JOIN where the planner orders joins well.
	Join string
	// SkipLocked ends a subquery that picks rows to change, so that rows
	// another transaction holds are passed over: PostgreSQL's FOR UPDATE
	// SKIP LOCKED; nothing where one writer holds every row.
	SkipLocked string
	// Least is the function of the smaller of two values (min, LEAST).
	Least string
	// Bytes orders text by its bytes, as SQLite's BINARY collation does,
	// whatever the database's collation: PostgreSQL's COLLATE "C".
	Bytes string
}

// Reads are the read methods both stores share; each store embeds them.
type Reads struct {
	c Conn
	d Dialect
}

// NewReads runs the shared reads on c in dialect d.
func NewReads(c Conn, d Dialect) *Reads { return &Reads{c: c, d: d} }

// Numbered rewrites q's ? placeholders as $1, $2, ... for PostgreSQL,
// leaving quoted text alone.
func Numbered(q string) string {
	var b strings.Builder
	b.Grow(len(q) + 16)
	n := 0
	quote := byte(0)
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '?':
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// MS is t in unix milliseconds, as both schemas keep times.
func MS(t time.Time) int64 { return t.UnixMilli() }

// FromMS is MS's inverse, in UTC.
func FromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }

// fromNullMS is FromMS of a column that may be NULL: nil for NULL.
func fromNullMS(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := FromMS(v.Int64)
	return &t
}

// Collect reads every row with scan into a slice, never nil, and closes
// rows.
func Collect[T any](rows Rows, scan func(Row) (T, error)) ([]T, error) {
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	rows.Close()
	return out, rows.Err()
}
