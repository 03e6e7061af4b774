// Package postgres is Geohub's PostgreSQL backend, for several replicas on
// one database (SPEC 12): the same tables and meanings as package store's
// SQLite, in PostgreSQL's dialect, behind the interfaces package app owns.
// As with SQLite, one writer goroutine per process batches concurrent
// writes into one transaction (group commit), and a pool serves reads.
//
// This first slice holds the event log and what an append writes (outbox
// rows, their sequences, aggregate owners, audit entries).
package postgres

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"geohub/app"
	"geohub/store/query"
)

// Schema is schema.sql: numbered migration blocks applied in order at open.
//
//go:embed schema.sql
var Schema string

// DB is an open Geohub database on PostgreSQL.
type DB struct {
	*query.Reads  // the queries both dialects share
	*query.Writes // and the writes
	now           func() time.Time
	write         *pgxpool.Pool // one connection, used by the writer goroutine only
	read          *pgxpool.Pool

	ops    chan *op
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
	hookMu sync.RWMutex
	hook   func([]app.Appended)
	hooks  hooks // tests' (writer.go)

	batchTimeout time.Duration
	notify       notifier // the other replicas' wake-ups (notify.go)
	offsetClock           // the database's clock (clock.go)
}

// Options tune Open.
type Options struct {
	// Now is the store's clock; default the database's (Clock). Tests set
	// their own.
	Now      func() time.Time
	MaxBatch int // most operations in one group commit; default 512
	MaxReads int // reader pool size; default max(4, 2*GOMAXPROCS)
	// LockTimeout bounds every lock wait of every statement (lock_timeout):
	// a wait that long retries the batch (see retryable); default 5 s.
	LockTimeout time.Duration
	// BatchTimeout is the deadline of one run of a group commit: past it
	// the batch fails with code indisponivel and nothing of it is
	// committed; default 15 s.
	BatchTimeout time.Duration
}

// settings are set on every connection, in its startup packet, so that no
// server or role default can weaken them: an acknowledged append is on
// disk (SPEC 11), and every timestamp the server itself reads is UTC.
//
// A replica whose link to the database hangs must fail, not hang, and must
// not keep the locks every replica queues for (log_head's): its batch has
// a deadline (Options.BatchTimeout), each lock wait a bound (lock_timeout,
// from Options.LockTimeout), and both ends of the connection give up on a
// silent peer: the client through TCP keepalives and TCP_USER_TIMEOUT on
// its socket (dial), the server through the same settings on its own (the
// tcp_* below; ignored over a Unix socket, where a hang is not the
// network's). A transaction left open by a replica that hangs (not one
// that dies: its connection closes and the server rolls it back) is ended
// by the server after idleInTransaction, far above the milliseconds a
// group commit sits between two statements.
var settings = map[string]string{
	"synchronous_commit":                  "on",
	"TimeZone":                            "UTC",
	"application_name":                    "geohub",
	"idle_in_transaction_session_timeout": idleInTransaction,
	"tcp_keepalives_idle":                 "10",
	"tcp_keepalives_interval":             "5",
	"tcp_keepalives_count":                "3",
	"tcp_user_timeout":                    "20000", // milliseconds
}

// writerSettings are the writer's own. Its statements each touch a few
// rows through an index, and a plan that scans a table is always wrong for
// them; but an outbox analyzed while idle (empty) looks empty to the
// planner until autovacuum analyzes it again, and then a sequential scan
// looks cheapest: every claim read every recorded attempt to number a row's
// next one (a drain at 0.6 of the rate of a fresh database), and every
// append read the whole log to find its event id. Priced out, a scan
// remains only where no index serves (issue 28).
var writerSettings = map[string]string{"enable_seqscan": "off"}

// idleInTransaction is how long a frozen replica (SIGSTOP, a VM pause, CPU
// starvation) can hold the locks every replica queues for, log_head's
// among them: the others' writes wait that long and no longer (issue 27,
// B2: at 15 s, one frozen replica stopped every replica's publishes for
// 15 s). The writer runs a batch that the server ended this way again
// (retryable): the server rolled it back, since it had not seen COMMIT.
const idleInTransaction = "2s"

// The client side of a silent link: keepalives from 10 s idle, every 5 s,
// 3 lost; and unacknowledged data dropped after 20 s (userTimeout).
const (
	keepAliveIdle     = 10 * time.Second
	keepAliveInterval = 5 * time.Second
	keepAliveCount    = 3
	userTimeout       = 20 * time.Second
	connectTimeout    = 5 * time.Second // unless the URL's connect_timeout says otherwise
)

// Open connects to the database at url, applies pending migrations and
// starts the writer.
func Open(ctx context.Context, url string, opt Options) (*DB, error) {
	return open(ctx, url, opt, time.Now)
}

// open is Open with the local clock the database's is measured against.
func open(ctx context.Context, url string, opt Options, local func() time.Time) (*DB, error) {
	if opt.MaxBatch == 0 {
		opt.MaxBatch = 512
	}
	if opt.MaxReads == 0 {
		opt.MaxReads = max(4, runtime.GOMAXPROCS(0)*2)
	}
	if opt.LockTimeout == 0 {
		opt.LockTimeout = 5 * time.Second
	}
	if opt.BatchTimeout == 0 {
		opt.BatchTimeout = 15 * time.Second
	}
	lockTimeout := strconv.FormatInt(opt.LockTimeout.Milliseconds(), 10) + "ms"
	w, err := openPool(ctx, url, 1, lockTimeout, writerSettings)
	if err != nil {
		return nil, err
	}
	if err := migrate(ctx, w); err != nil {
		w.Close()
		return nil, err
	}
	if err := refuseUnfinishedImport(ctx, w); err != nil {
		w.Close()
		return nil, err
	}
	r, err := openPool(ctx, url, opt.MaxReads, lockTimeout, nil)
	if err != nil {
		w.Close()
		return nil, err
	}
	db := &DB{Reads: query.NewReads(conn{r}, dialect), now: opt.Now, write: w, read: r, batchTimeout: opt.BatchTimeout,
		ops: make(chan *op, opt.MaxBatch), stop: make(chan struct{}), done: make(chan struct{}),
		offsetClock: offsetClock{local: local}}
	db.Writes = query.NewWrites(writer{db}, dialect)
	if err := db.syncClock(ctx); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if db.now == nil {
		db.now = db.Clock
	}
	go db.followClock()
	go db.writer(opt.MaxBatch)
	return db, nil
}

// pool opens a pool of n connections with settings and the default lock
// timeout.
func pool(ctx context.Context, url string, n int) (*pgxpool.Pool, error) {
	return openPool(ctx, url, n, "5000ms", nil)
}

func openPool(ctx context.Context, url string, n int, lockTimeout string, more map[string]string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	for k, v := range settings {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	maps.Copy(cfg.ConnConfig.RuntimeParams, more)
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = lockTimeout
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = connectTimeout
	}
	cfg.ConnConfig.DialFunc = dialer(cfg.ConnConfig.ConnectTimeout).DialContext
	cfg.MaxConns, cfg.MinConns = int32(n), 0
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if err := p.Ping(ctx); err != nil {
		p.Close()
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return p, nil
}

// OnCommit sets the function the writer calls, in sequence order, with the
// events each group commit made durable, before it answers their callers.
// It must not block. It sees this process's appends only.
func (db *DB) OnCommit(fn func([]app.Appended)) {
	db.hookMu.Lock()
	db.hook = fn
	db.hookMu.Unlock()
}

// Close stops the writer after the operations already queued and closes
// every connection.
func (db *DB) Close() error {
	db.once.Do(func() {
		close(db.stop)
		<-db.done
		db.notify.stop()
		db.read.Close()
		db.write.Close()
	})
	return nil
}

// Setting reads one run-time setting (SHOW name) on the writer's
// connection or on a reader's. Tests use it to prove that durability
// settings hold on every connection.
func (db *DB) Setting(ctx context.Context, name string, writer bool) (string, error) {
	if !validSetting(name) {
		return "", fmt.Errorf("bad setting name %q", name)
	}
	var v string
	if writer {
		err := db.do(ctx, func(tx *wtx) error {
			return tx.QueryRow(context.Background(), "SHOW "+name).Scan(&v)
		})
		return v, err
	}
	err := db.read.QueryRow(ctx, "SHOW "+name).Scan(&v)
	return v, err
}

func validSetting(name string) bool {
	for _, r := range name {
		if !(r == '_' || r == '.' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return name != ""
}

// migrationLock is the key of the advisory lock migrations run under. It
// is a transaction lock: it ends with the migrating transaction, so a
// connection pooler in transaction mode cannot leave it held.
const migrationLock = 0x67656f687562 // "geohub"

// migrate applies the numbered blocks of schema.sql not yet recorded in
// schema_migrations, all in one transaction under migrationLock: replicas
// that start together wait for the first, then find nothing to do.
// PostgreSQL's DDL is transactional, so a failing block leaves nothing.
func migrate(ctx context.Context, p *pgxpool.Pool) error {
	blocks, err := migrations(Schema)
	if err != nil {
		return err
	}
	tx, err := p.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback(ctx)
	// A replica waits for another's migration as long as it takes.
	if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = 0"); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(migrationLock)); err != nil {
		return fmt.Errorf("migrate: lock: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, aplicada_em BIGINT NOT NULL)`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	var current int
	if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM schema_migrations").Scan(&current); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if current > len(blocks) {
		return fmt.Errorf("migrate: the database is at version %d, newer than this binary's %d", current, len(blocks))
	}
	for _, m := range blocks[current:] {
		if _, err := tx.Exec(ctx, m.sql); err != nil {
			return fmt.Errorf("migration %d: %w", m.version, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, aplicada_em) VALUES ($1, $2)",
			m.version, time.Now().UnixMilli()); err != nil {
			return fmt.Errorf("migration %d: %w", m.version, err)
		}
	}
	return tx.Commit(ctx)
}

// SchemaVersion is the last migration applied.
func (db *DB) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := db.read.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM schema_migrations").Scan(&v)
	return v, err
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
				return nil, fmt.Errorf("postgres schema.sql: bad migration marker %q", strings.TrimSpace(line))
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

// null is s, or SQL NULL when empty, as SQLite's store writes optional text.
func null(s string) any {
	if s == "" {
		return nil
	}
	return s
}

var errNoRows = pgx.ErrNoRows

func isNoRows(err error) bool { return errors.Is(err, errNoRows) }

// Every interface app owns: the graph builds on PostgreSQL as on SQLite.
var _ app.Store = (*DB)(nil)

// refuseUnfinishedImport keeps a replica off a database that geohub
// migrate-data is still filling (or was killed filling): its counters are
// set only at the end, so a publish there could take an id the copy has
// yet to write.
func refuseUnfinishedImport(ctx context.Context, p *pgxpool.Pool) error {
	var unfinished bool
	err := p.QueryRow(ctx, `SELECT to_regclass('migracao_dados') IS NOT NULL`).Scan(&unfinished)
	if err != nil || !unfinished {
		return err
	}
	err = p.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM migracao_dados WHERE concluida_em IS NULL)`).Scan(&unfinished)
	if err != nil {
		return fmt.Errorf("read the state of migrate-data: %w", err)
	}
	if unfinished {
		return errors.New("geohub migrate-data has not finished copying into this database: run it again until it says done " +
			"(it resumes where it stopped), then start the replicas")
	}
	return nil
}
