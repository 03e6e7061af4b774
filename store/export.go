package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	"geohub"
	"geohub/app"
)

// Export reads a stopped data directory's database for geohub migrate-data
// (app.MigrationSource). It holds the database's write lock from open to
// Close, so nothing changes under the copy, and reads on a query-only
// connection.
type Export struct {
	path   string
	lock   *sql.DB
	conn   *sql.Conn // lock's, inside BEGIN IMMEDIATE (held) until Close
	held   *sql.Tx
	read   *sql.DB
	tables map[string]app.MigrationTable
}

var _ app.MigrationSource = (*Export)(nil)

// sourceOnly are tables that describe this SQLite file, not the data:
// outbox_selagem is the state of the upgrade that sealed clear bodies,
// which OpenExport requires finished.
var sourceOnly = map[string]bool{"outbox_selagem": true}

// OpenExport opens the database at path for export. It refuses
// (app.ErrMigrationRefused) a database that another process has open (on
// Linux, seen through the lock SQLite's processes hold on the -shm file),
// whose write lock another connection holds, whose schema is not this
// binary's, or whose outbox bodies are not all sealed yet: the copy must
// be of an appliance at rest, in the form the PostgreSQL replicas read.
//
// The check of other processes uses POSIX locks, which a process loses
// on every descriptor of the file when it closes any one: call OpenExport
// before anything else in this process opens the database.
func OpenExport(ctx context.Context, path string) (*Export, error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: no database at %s: check --from", app.ErrMigrationRefused, path)
	} else if err != nil {
		return nil, err
	}
	if pid, err := otherProcess(path); err != nil {
		return nil, err
	} else if pid != 0 {
		return nil, fmt.Errorf("%w: %s is open in process %d (a geohub serve or another command): stop it, then run migrate-data again",
			app.ErrMigrationRefused, path, pid)
	}
	e := &Export{path: path, tables: map[string]app.MigrationTable{}}
	var err error
	if e.lock, err = sql.Open(DriverName, DSN(path, false)); err != nil {
		return nil, err
	}
	e.lock.SetMaxOpenConns(1)
	if err := e.takeLock(ctx); err != nil {
		e.lock.Close()
		return nil, err
	}
	if e.read, err = sql.Open(DriverName, DSN(path, true)); err != nil {
		e.Close()
		return nil, err
	}
	e.read.SetMaxOpenConns(1)
	if err := e.checkSchema(ctx); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// takeLock begins the write transaction held until Close (the DSN makes
// BEGIN immediate), waiting a little only: a writer that holds the lock
// longer than a group commit is a server at work.
func (e *Export) takeLock(ctx context.Context) error {
	conn, err := e.lock.Conn(ctx)
	if err != nil {
		return fmt.Errorf("open %s: %w", e.path, err)
	}
	if _, err := conn.ExecContext(ctx, "PRAGMA busy_timeout = 2000"); err != nil {
		conn.Close()
		return fmt.Errorf("open %s: %w", e.path, err)
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		conn.Close()
		if code, ok := sqliteCode(err); ok && (code == sqliteBusy || code == sqliteLocked) {
			return fmt.Errorf("%w: the write lock of %s is held by another connection (a running geohub serve?): stop it, then run migrate-data again",
				app.ErrMigrationRefused, e.path)
		}
		return fmt.Errorf("lock %s: %w", e.path, err)
	}
	e.conn, e.held = conn, tx
	return nil
}

// SQLite's primary result codes that mean someone else holds a lock.
const (
	sqliteBusy   = 5
	sqliteLocked = 6
)

// checkSchema refuses a database this binary would still migrate or
// upgrade: its tables would not be the ones PostgreSQL's schema mirrors,
// and bodies stored in clear before migration 12 would be copied so.
func (e *Export) checkSchema(ctx context.Context) error {
	blocks, err := migrations(geohub.Schema)
	if err != nil {
		return err
	}
	var v int
	if err := e.read.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	switch {
	case v < len(blocks):
		return fmt.Errorf("%w: %s is at schema version %d, this binary's is %d: run `geohub migrate --data DIR` with this binary first",
			app.ErrMigrationRefused, e.path, v, len(blocks))
	case v > len(blocks):
		return fmt.Errorf("%w: %s is at schema version %d, newer than this binary's %d: run the migration with the binary that wrote it",
			app.ErrMigrationRefused, e.path, v, len(blocks))
	}
	var etapa int
	if err := e.read.QueryRowContext(ctx, "SELECT etapa FROM outbox_selagem WHERE id = 1").Scan(&etapa); err != nil {
		return fmt.Errorf("read the sealing state: %w", err)
	}
	if etapa < 1 {
		return fmt.Errorf("%w: %s still holds outbox bodies stored in clear by an older version: run `geohub migrate --data DIR` first, which seals them",
			app.ErrMigrationRefused, e.path)
	}
	return nil
}

// Close releases the write lock and the connections.
func (e *Export) Close() error {
	var errs []error
	if e.held != nil {
		errs = append(errs, e.held.Rollback(), e.conn.Close())
	}
	if e.read != nil {
		errs = append(errs, e.read.Close())
	}
	errs = append(errs, e.lock.Close())
	return errors.Join(errs...)
}

// Snapshot implements app.MigrationSource. Tables come in an order in
// which each follows those its foreign keys name, ties by name.
func (e *Export) Snapshot(ctx context.Context) (app.MigrationSnapshot, error) {
	var s app.MigrationSnapshot
	names, err := e.tableNames(ctx)
	if err != nil {
		return s, err
	}
	refs := map[string][]string{}
	for _, name := range names {
		t, err := e.describe(ctx, name)
		if err != nil {
			return s, err
		}
		e.tables[name] = t
		if refs[name], err = e.references(ctx, name); err != nil {
			return s, err
		}
	}
	order, err := dependencyOrder(names, refs)
	if err != nil {
		return s, err
	}
	for _, name := range order {
		s.Tables = append(s.Tables, e.tables[name])
	}
	err = e.read.QueryRowContext(ctx, `SELECT sequence_number, event_id FROM event_log
		ORDER BY sequence_number DESC LIMIT 1`).Scan(&s.LastSequence, &s.LastEventID)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return s, fmt.Errorf("read the log's head: %w", err)
	}
	return s, nil
}

func (e *Export) tableNames(ctx context.Context) ([]string, error) {
	rows, err := e.read.QueryContext(ctx, `SELECT name FROM sqlite_schema
		WHERE type = 'table' AND name NOT LIKE 'sqlite\_%' ESCAPE '\' ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		if !sourceOnly[n] {
			names = append(names, n)
		}
	}
	return names, rows.Err()
}

// describe reads a table's columns, primary key, row count and last key.
func (e *Export) describe(ctx context.Context, name string) (app.MigrationTable, error) {
	t := app.MigrationTable{Name: name}
	rows, err := e.read.QueryContext(ctx, `SELECT name, pk FROM pragma_table_info(?) ORDER BY cid`, name)
	if err != nil {
		return t, fmt.Errorf("describe %s: %w", name, err)
	}
	type keyCol struct {
		name string
		pos  int
	}
	var key []keyCol
	for rows.Next() {
		var col string
		var pk int
		if err := rows.Scan(&col, &pk); err != nil {
			rows.Close()
			return t, err
		}
		t.Columns = append(t.Columns, col)
		if pk > 0 {
			key = append(key, keyCol{col, pk})
		}
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return t, err
	}
	if len(key) == 0 {
		// Every table of schema.sql has one; a table without would have no
		// order to resume in.
		return t, fmt.Errorf("table %s has no primary key to copy it in order", name)
	}
	slices.SortFunc(key, func(a, b keyCol) int { return a.pos - b.pos })
	for _, k := range key {
		t.Key = append(t.Key, k.name)
	}
	if err := e.read.QueryRowContext(ctx, "SELECT count(*) FROM "+quote(name)).Scan(&t.Rows); err != nil {
		return t, fmt.Errorf("count %s: %w", name, err)
	}
	if t.Rows > 0 {
		desc := make([]string, len(t.Key))
		for i, k := range t.Key {
			desc[i] = quote(k) + " DESC"
		}
		last := make([]any, len(t.Key))
		ptrs := make([]any, len(t.Key))
		for i := range last {
			ptrs[i] = &last[i]
		}
		q := "SELECT " + quoteAll(t.Key) + " FROM " + quote(name) + " ORDER BY " + strings.Join(desc, ", ") + " LIMIT 1"
		if err := e.read.QueryRowContext(ctx, q).Scan(ptrs...); err != nil {
			return t, fmt.Errorf("last key of %s: %w", name, err)
		}
		if t.Last, err = keyOf(last); err != nil {
			return t, fmt.Errorf("%s: %w", name, err)
		}
	}
	return t, nil
}

func (e *Export) references(ctx context.Context, name string) ([]string, error) {
	rows, err := e.read.QueryContext(ctx, `SELECT DISTINCT "table" FROM pragma_foreign_key_list(?)`, name)
	if err != nil {
		return nil, fmt.Errorf("foreign keys of %s: %w", name, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var r string
		if err := rows.Scan(&r); err != nil {
			return nil, err
		}
		if r != name {
			out = append(out, r)
		}
	}
	return out, rows.Err()
}

// dependencyOrder sorts names so that each comes after the tables it
// references, taking the first name in order among those ready.
func dependencyOrder(names []string, refs map[string][]string) ([]string, error) {
	done := map[string]bool{}
	var out []string
	for len(out) < len(names) {
		progressed := false
		for _, n := range names {
			if done[n] {
				continue
			}
			ready := true
			for _, r := range refs[n] {
				if !done[r] && slices.Contains(names, r) {
					ready = false
				}
			}
			if ready {
				done[n], progressed = true, true
				out = append(out, n)
				break
			}
		}
		if !progressed {
			return nil, fmt.Errorf("the tables' foreign keys form a cycle")
		}
	}
	return out, nil
}

// ReadBatch implements app.MigrationSource: one keyset range read.
func (e *Export) ReadBatch(ctx context.Context, t app.MigrationTable, after app.MigrationKey, maxRows, maxBytes int) (app.MigrationBatch, error) {
	b := app.MigrationBatch{Table: t.Name, After: after}
	known, ok := e.tables[t.Name]
	if !ok || !slices.Equal(known.Columns, t.Columns) || !slices.Equal(known.Key, t.Key) {
		return b, fmt.Errorf("table %s is not as the snapshot described it", t.Name)
	}
	var args []any
	q := "SELECT " + quoteAll(t.Columns) + " FROM " + quote(t.Name)
	if after != nil {
		if len(after) != len(t.Key) {
			return b, fmt.Errorf("key %v does not fit %s's key %v", after, t.Name, t.Key)
		}
		marks := strings.TrimSuffix(strings.Repeat("?, ", len(after)), ", ")
		q += " WHERE (" + quoteAll(t.Key) + ") > (" + marks + ")"
		args = append(args, after...)
	}
	q += " ORDER BY " + quoteAll(t.Key) + " LIMIT ?"
	args = append(args, maxRows)
	rows, err := e.read.QueryContext(ctx, q, args...)
	if err != nil {
		return b, err
	}
	defer rows.Close()
	keyAt := make([]int, len(t.Key))
	for i, k := range t.Key {
		keyAt[i] = slices.Index(t.Columns, k)
	}
	size := 0
	for rows.Next() {
		vals := make([]any, len(t.Columns))
		ptrs := make([]any, len(vals))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return b, err
		}
		b.Rows = append(b.Rows, vals)
		key := make([]any, len(keyAt))
		for i, at := range keyAt {
			key[i] = vals[at]
		}
		if b.Last, err = keyOf(key); err != nil {
			return b, fmt.Errorf("%s: %w", t.Name, err)
		}
		for _, v := range vals {
			switch v := v.(type) {
			case string:
				size += len(v)
			case []byte:
				size += len(v)
			default:
				size += 8
			}
		}
		if size >= maxBytes {
			break
		}
	}
	return b, rows.Err()
}

// keyOf normalises a key as app.MigrationKey holds it: int64 or string
// (a driver may give TEXT as bytes).
func keyOf(vals []any) (app.MigrationKey, error) {
	k := make(app.MigrationKey, len(vals))
	for i, v := range vals {
		switch v := v.(type) {
		case int64:
			k[i] = v
		case string:
			k[i] = v
		case []byte:
			k[i] = string(v)
		default:
			return nil, fmt.Errorf("primary key value %v (%T) is neither an integer nor text", v, v)
		}
	}
	return k, nil
}

func quote(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }

func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = quote(n)
	}
	return strings.Join(q, ", ")
}
