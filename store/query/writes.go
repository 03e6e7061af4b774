package query

import (
	"context"
	"slices"
	"time"

	"geohub/app"
)

// Tx is one writer transaction of either store, its statements written
// with ? placeholders.
type Tx interface {
	// Exec runs a statement and says how many rows it changed.
	Exec(sql string, args ...any) (int64, error)
	QueryRow(sql string, args ...any) Row
	// Audit records e in the transaction, dated by the store's clock; nil
	// records nothing.
	Audit(e *app.AuditEntry) error
	// Now is the store's clock.
	Now() time.Time
}

// Lock names what a write changes: a class, then its identifying parts.
// PostgreSQL's replicas take each as an advisory key, in one order with
// the batch's others, before any statement (store/postgres/writer.go);
// SQLite's one writer needs none.
type Lock []string

// Op is how a write runs in the store's writer.
type Op struct {
	Locks []Lock
	// Alone runs it in a transaction of its own, not in a group commit
	// (PostgreSQL: see SetIntegratorAPIKey).
	Alone bool
}

// Writer runs fn in the store's writer, in one transaction.
type Writer interface {
	Write(ctx context.Context, op Op, fn func(Tx) error) error
}

// Writes are the write methods both stores share; each store embeds them.
type Writes struct {
	w Writer
	d Dialect
}

// NewWrites runs the shared writes through w in dialect d.
func NewWrites(w Writer, d Dialect) *Writes { return &Writes{w: w, d: d} }

// sweep is a DELETE of table's rows that match cond, skipping those that
// another transaction holds where the database can (PostgreSQL): a sweep
// on the way of a login never waits for another replica's.
func (w *Writes) sweep(table, key, cond string) string {
	return "DELETE FROM " + table + " WHERE " + key + " IN (SELECT " + key + " FROM " + table + " WHERE " + cond +
		w.d.SkipLocked + ")"
}

// sortedLocks are locks of one class for ids, in order.
func sortedLocks(class string, ids []string) []Lock {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	out := make([]Lock, len(ids))
	for i, id := range ids {
		out[i] = Lock{class, id}
	}
	return out
}
