// Package store is Geohub's SQLite backend: every SQL statement and every
// transaction of the product lives here, behind the interfaces package app
// owns. One connection writes, and concurrent writes share its transactions
// (group commit); a pool of read-only connections serves queries.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"geohub"
	"geohub/app"
	"geohub/store/query"
)

// DB is every store interface app owns: app.New builds the services on it.
var _ app.Store = (*DB)(nil)

// FileName is the database file inside the data directory.
const FileName = "geohub.db"

// DB is an open Geohub database.
type DB struct {
	*query.Reads  // the queries both dialects share
	*query.Writes // and the writes
	Path          string
	now           func() time.Time

	write *sql.DB // exactly one connection, owned by the writer goroutine
	read  *sql.DB

	ops    chan *op
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
	hookMu sync.RWMutex
	hook   func([]app.Appended)
	stmts  writeStmts
}

// Options tune Open.
type Options struct {
	Now      func() time.Time // clock; default time.Now
	MaxBatch int              // most operations in one group commit; default 512
}

// Open opens (creating if needed) the database at path, applies pending
// migrations and starts the writer.
func Open(ctx context.Context, path string, opt Options) (*DB, error) {
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.MaxBatch == 0 {
		opt.MaxBatch = 512
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	// The database holds operators' and integrators' records: owner-only,
	// and SQLite gives its -wal and -shm files the same mode.
	if f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600); err != nil {
		return nil, fmt.Errorf("open database file: %w", err)
	} else {
		f.Close()
	}
	w, err := sql.Open(DriverName, DSN(path, false))
	if err != nil {
		return nil, err
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	if err := migrate(ctx, w); err != nil {
		w.Close()
		return nil, openError(path, err)
	}
	r, err := sql.Open(DriverName, DSN(path, true))
	if err != nil {
		w.Close()
		return nil, err
	}
	n := max(4, runtime.GOMAXPROCS(0)*2)
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)
	db := &DB{Reads: query.NewReads(conn{r}, sqliteDialect), Path: path, now: opt.Now, write: w, read: r,
		ops: make(chan *op, opt.MaxBatch), stop: make(chan struct{}), done: make(chan struct{})}
	db.Writes = query.NewWrites(writer{db}, sqliteDialect)
	if err := db.stmts.prepare(ctx, w); err != nil {
		db.write.Close()
		db.read.Close()
		return nil, openError(path, err)
	}
	go db.writer(opt.MaxBatch)
	return db, nil
}

// openError names the database in a failure to open it, which SQLite's own
// messages ("attempt to write a readonly database", "disk I/O error") do
// not, and names the cause when it can: SQLite creates geohub.db-wal and
// geohub.db-shm beside the database, so a writable file in a read-only
// directory cannot be opened either.
func openError(path string, err error) error {
	err = fmt.Errorf("%s: %w", path, err)
	dir := filepath.Dir(path)
	// Only on this failure path: an empty file, removed at once.
	probe, perr := os.CreateTemp(dir, ".geohub-probe-*")
	if perr != nil {
		var pe *fs.PathError
		if errors.As(perr, &pe) {
			perr = pe.Err
		}
		return fmt.Errorf("%w: the data directory %s is not writable (%v); SQLite must create %s-wal and %s-shm in it",
			err, dir, perr, filepath.Base(path), filepath.Base(path))
	}
	probe.Close()
	os.Remove(probe.Name())
	if code, ok := sqliteCode(err); ok && (code == sqliteFull || code == sqliteIOErr) {
		return fmt.Errorf("%w: is the disk full or failing?", err)
	}
	return err
}

// OnCommit sets the function the writer calls, in sequence order, with the
// events each group commit made durable, before it answers their callers.
// It must not block.
func (db *DB) OnCommit(fn func([]app.Appended)) {
	db.hookMu.Lock()
	db.hook = fn
	db.hookMu.Unlock()
}

// Close stops the writer after the operations already queued, checkpoints the
// WAL into the main file and closes every connection.
func (db *DB) Close() error {
	var err error
	db.once.Do(func() {
		close(db.stop)
		<-db.done
		db.stmts.close()
		_, cerr := db.write.Exec("PRAGMA wal_checkpoint(TRUNCATE)")
		err = errors.Join(cerr, db.read.Close(), db.write.Close())
	})
	return err
}

// Writable is /readyz's check: the writer takes a write transaction, and
// the files would take a write. The second half matters because a running
// writer keeps working on files made read-only under it (its descriptors
// stay open) and a commit can reuse WAL space on a full disk: neither shows
// in the transaction, yet the next restart fails or the next new page does.
func (db *DB) Writable(ctx context.Context) error {
	err := db.do(ctx, func(tx *wtx) error {
		_, err := tx.Exec("SELECT 1")
		return err
	})
	if err != nil {
		return err
	}
	return filesWritable(db.Path)
}

// Pragma reads one pragma on the writer or on a reader connection. Tests use
// it to prove durability settings hold on every connection.
func (db *DB) Pragma(ctx context.Context, name string, writer bool) (string, error) {
	var v string
	if writer {
		err := db.do(ctx, func(tx *wtx) error {
			return tx.QueryRow("PRAGMA " + name).Scan(&v)
		})
		return v, err
	}
	err := db.read.QueryRowContext(ctx, "PRAGMA "+name).Scan(&v)
	return v, err
}

// Backup writes a consistent copy of the live database to path. VACUUM INTO
// reads one snapshot, so writers carry on meanwhile.
func (db *DB) Backup(ctx context.Context, path string) error {
	// The copy holds what the database holds: owner-only, created here so
	// VACUUM INTO (which accepts an empty file) never makes it world-readable.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	f.Close()
	conn, err := sql.Open(DriverName, DSN(db.Path, false))
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = conn.ExecContext(ctx, "VACUUM INTO ?", path)
	return err
}

// migrate applies the numbered blocks of schema.sql newer than user_version.
func migrate(ctx context.Context, db *sql.DB) error {
	blocks, err := migrations(geohub.Schema)
	if err != nil {
		return err
	}
	return apply(ctx, db, blocks)
}

func apply(ctx context.Context, db *sql.DB, blocks []migration) error {
	var current int
	if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&current); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	for _, m := range blocks {
		if m.version <= current {
			continue
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(m.sql); err != nil {
			tx.Rollback()
			return fmt.Errorf("migration %d: %w", m.version, err)
		}
		if _, err := tx.Exec("PRAGMA user_version = " + strconv.Itoa(m.version)); err != nil {
			tx.Rollback()
			return fmt.Errorf("migration %d: %w", m.version, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("migration %d: %w", m.version, err)
		}
	}
	return nil
}

type migration struct {
	version int
	sql     string
}

// migrations splits schema.sql at its "-- migration: N" lines.
func migrations(schema string) ([]migration, error) {
	var out []migration
	const marker = "-- migration: "
	for _, line := range strings.SplitAfter(schema, "\n") {
		if strings.HasPrefix(line, marker) {
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, marker)))
			if err != nil || n != len(out)+1 {
				return nil, fmt.Errorf("schema.sql: bad migration marker %q", strings.TrimSpace(line))
			}
			out = append(out, migration{version: n})
			continue
		}
		if len(out) > 0 {
			out[len(out)-1].sql += line
		}
	}
	return out, nil
}

// ms converts between time and the unix milliseconds the schema stores.
func ms(t time.Time) int64     { return t.UnixMilli() }
func fromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }
func nullString(s string) any  { return sql.NullString{String: s, Valid: s != ""} }
