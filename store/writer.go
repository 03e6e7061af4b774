package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"geohub/app"
)

// op is one unit of work for the writer: it runs inside a savepoint of the
// group transaction, so its failure undoes only its own changes.
type op struct {
	ctx  context.Context
	fn   func(tx *wtx) error
	done chan error
}

// wtx is the writer's transaction as an op sees it: the events it appends are
// collected for the commit hook. Statements inside an op never take the
// caller's context: cancelling one statement would make SQLite roll back the
// whole group transaction, other callers' work included. The writer checks
// each op's context before running it instead.
type wtx struct {
	*sql.Tx
	stmts    *writeStmts
	appended []app.Appended
	bound    map[*sql.Stmt]*sql.Stmt
	// cadastro is the integrators' cadastro version as this transaction
	// read it (checkCadastro); -1 before it does.
	cadastro int64
}

// stmt binds a prepared statement to the transaction once per transaction:
// a group commit runs the same few statements hundreds of times.
func (t *wtx) stmt(s *sql.Stmt) *sql.Stmt {
	if b, ok := t.bound[s]; ok {
		return b
	}
	if t.bound == nil {
		t.bound = map[*sql.Stmt]*sql.Stmt{}
	}
	b := t.Tx.Stmt(s)
	t.bound[s] = b
	return b
}

// do queues fn for the next group commit and waits for its outcome. Once
// queued, it waits even if ctx ends: the writer skips an operation whose
// context ended before it ran, and an operation already running writes into
// its caller's variables, which the caller must not read concurrently.
func (db *DB) do(ctx context.Context, fn func(tx *wtx) error) error {
	select {
	case <-db.stop:
		return app.ErrStoreClosed
	default:
	}
	o := &op{ctx: ctx, fn: fn, done: make(chan error, 1)}
	select {
	case db.ops <- o:
	case <-db.stop:
		return app.ErrStoreClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-o.done:
		return storageError(err)
	case <-db.done:
		// The writer is gone; it may have answered just before leaving.
		select {
		case err := <-o.done:
			return storageError(err)
		default:
			return app.ErrStoreClosed
		}
	}
}

// SQLite's primary result codes for a storage that cannot take a write.
const (
	sqliteReadOnly = 8
	sqliteIOErr    = 10
	sqliteFull     = 13
	sqliteCantOpen = 14
)

// storageError turns a write that failed because of the storage itself (a
// full disk, an I/O error, files that became read-only) into an app error
// with code indisponivel (503) and a message saying so: without it the
// client got "erro interno" (500) and no hint that retrying later is the
// remedy. The wrapped SQLite error still reaches the server's log. Whether
// a failed commit reached the disk is not always known (a failed fsync),
// so the message promises nothing about it: a publish is safely retried
// with the same event_id.
func storageError(err error) error {
	var ae *app.Error
	if err == nil || errors.As(err, &ae) {
		return err
	}
	code, ok := sqliteCode(err)
	if !ok {
		return err
	}
	var msg string
	switch code {
	case sqliteFull:
		msg = "sem espaço em disco para gravar no banco de dados; tente de novo mais tarde"
	case sqliteIOErr:
		msg = "erro de E/S ao gravar no banco de dados (disco cheio ou com falha); tente de novo mais tarde"
	case sqliteReadOnly, sqliteCantOpen:
		msg = "o banco de dados não aceita gravações (somente leitura); tente de novo mais tarde"
	default:
		return err
	}
	return &app.Error{Code: app.EUnavailable, Message: msg, Err: err}
}

// writer is the single writer: it takes whatever operations are waiting
// (up to maxBatch), runs them in one transaction and commits once, so one
// fsync serves them all. Each caller gets its own result.
func (db *DB) writer(maxBatch int) {
	defer close(db.done)
	batch := make([]*op, 0, maxBatch)
	for {
		batch = batch[:0]
		select {
		case o := <-db.ops:
			batch = append(batch, o)
		case <-db.stop:
			// Finish what was queued before Close.
			for {
				select {
				case o := <-db.ops:
					db.commit([]*op{o})
					continue
				default:
				}
				return
			}
		}
	fill:
		for len(batch) < maxBatch {
			select {
			case o := <-db.ops:
				batch = append(batch, o)
			default:
				break fill
			}
		}
		db.commit(batch)
	}
}

// commit runs a batch optimistically in one transaction without savepoints:
// operations rarely fail, and savepoints cost a journal write per operation.
// If one fails, the whole transaction is rolled back and the batch runs again
// with a savepoint around each operation, so only the failing one is undone.
func (db *DB) commit(batch []*op) {
	if len(batch) > 1 && db.run(batch, false) {
		return
	}
	db.run(batch, true)
}

// run executes batch in one transaction and answers every caller, unless
// isolate is false and an operation failed: then it rolls back, answers no
// one and returns false.
func (db *DB) run(batch []*op, isolate bool) bool {
	ctx := context.Background()
	errs := make([]error, len(batch))
	fail := func(err error) bool {
		for _, o := range batch {
			o.done <- err
		}
		return true
	}
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return fail(fmt.Errorf("begin: %w", err))
	}
	t := &wtx{Tx: tx, stmts: &db.stmts, cadastro: -1}
	live := 0
	for i, o := range batch {
		if o.ctx.Err() != nil {
			errs[i] = o.ctx.Err() // abandoned before it ran: do nothing
			continue
		}
		if !isolate || len(batch) == 1 {
			// Alone, the transaction is the operation's savepoint.
			if errs[i] = o.fn(t); errs[i] != nil {
				tx.Rollback()
				if !isolate {
					return false
				}
				return fail(errs[i])
			}
			live++
			continue
		}
		mark := len(t.appended)
		if _, err := tx.Exec("SAVEPOINT op"); err != nil {
			tx.Rollback()
			return fail(fmt.Errorf("savepoint: %w", err))
		}
		if err := o.fn(t); err != nil {
			errs[i] = err
			t.appended = t.appended[:mark]
			if _, rerr := tx.Exec("ROLLBACK TO op"); rerr != nil {
				tx.Rollback()
				return fail(fmt.Errorf("rollback to savepoint: %w", rerr))
			}
		} else {
			live++
		}
		if _, err := tx.Exec("RELEASE op"); err != nil {
			tx.Rollback()
			return fail(fmt.Errorf("release savepoint: %w", err))
		}
	}
	if live == 0 {
		tx.Rollback()
	} else if err := tx.Commit(); err != nil {
		return fail(fmt.Errorf("commit: %w", err))
	}
	if len(t.appended) > 0 {
		db.hookMu.RLock()
		hook := db.hook
		db.hookMu.RUnlock()
		if hook != nil {
			hook(t.appended)
		}
	}
	for i, o := range batch {
		o.done <- errs[i]
	}
	return true
}
