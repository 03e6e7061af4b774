package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"geohub/app"
)

// op is one unit of work for the writer: it runs inside a savepoint of the
// group transaction, so its failure undoes only its own changes. seq says
// it gives sequence numbers (it appends events), so the transaction must
// hold log_head's lock while it runs.
type op struct {
	ctx  context.Context
	fn   func(tx *wtx) error
	seq  bool
	done chan error
}

// wtx is the writer's transaction as an op sees it. Statements inside an
// op never take the caller's context: a cancelled statement aborts the
// whole group transaction, other callers' work included. The writer checks
// each op's context before running it instead.
type wtx struct {
	pgx.Tx
	appended []app.Appended
	// head is the last sequence number given, read under log_head's lock
	// (locked) and written back before COMMIT; from is its value at the lock.
	head, from int64
	locked     bool
}

// bg is the context of statements inside the group transaction (see wtx).
var bg = context.Background()

// lockHead takes log_head's row lock, which the transaction holds until it
// ends, and reads the last sequence given. It runs outside any savepoint:
// a row lock taken in a subtransaction that rolls back is released.
//
// Under READ COMMITTED (PostgreSQL's default, which the writer uses) every
// later statement of the transaction reads a snapshot taken after the lock
// was granted, hence after the previous holder committed: the idempotency
// check sees every event any process committed before.
func (tx *wtx) lockHead() error {
	if tx.locked {
		return nil
	}
	if err := tx.QueryRow(bg, "SELECT ultima FROM log_head WHERE id = 1 FOR UPDATE").Scan(&tx.head); err != nil {
		return fmt.Errorf("lock log head: %w", err)
	}
	tx.from, tx.locked = tx.head, true
	return nil
}

// errClosed answers operations that arrive after Close.
var errClosed = app.Errorf(app.EUnavailable, "banco de dados fechado")

// do queues fn for the next group commit and waits for its outcome, as
// package store's do does: once queued, it waits even if ctx ends.
func (db *DB) do(ctx context.Context, fn func(tx *wtx) error) error {
	return db.queue(ctx, false, fn)
}

// doSeq queues an operation that gives sequence numbers.
func (db *DB) doSeq(ctx context.Context, fn func(tx *wtx) error) error {
	return db.queue(ctx, true, fn)
}

func (db *DB) queue(ctx context.Context, seq bool, fn func(tx *wtx) error) error {
	select {
	case <-db.stop:
		return errClosed
	default:
	}
	o := &op{ctx: ctx, fn: fn, seq: seq, done: make(chan error, 1)}
	select {
	case db.ops <- o:
	case <-db.stop:
		return errClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-o.done:
		return storageError(err)
	case <-db.done:
		select {
		case err := <-o.done:
			return storageError(err)
		default:
			return errClosed
		}
	}
}

// storageError turns a failure of the server or of the way to it (it is
// down, out of disk, shutting down, unreachable) into an app error with
// code indisponivel (503), so that the client knows to retry later; the
// wrapped error still reaches the server's log. Whether a commit that
// failed this way reached the disk is not known, so the message promises
// nothing: a publish is safely retried with the same event_id.
func storageError(err error) error {
	var ae *app.Error
	if err == nil || errors.As(err, &ae) {
		return err
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "53100": // disk_full
			return &app.Error{Code: app.EUnavailable, Err: err,
				Message: "sem espaço em disco para gravar no banco de dados; tente de novo mais tarde"}
		case pe.Code == "25006", // read_only_sql_transaction: a standby
			pe.Code[:2] == "53", // insufficient resources
			pe.Code[:2] == "57", // operator intervention: shutdown, cancel
			pe.Code[:2] == "58", // system error: I/O
			pe.Code[:2] == "08": // connection exception
			return &app.Error{Code: app.EUnavailable, Err: err,
				Message: "o banco de dados não aceita gravações agora; tente de novo mais tarde"}
		}
		return err
	}
	var ne net.Error
	if errors.As(err, &ne) || pgconn.SafeToRetry(err) || errors.Is(err, net.ErrClosed) {
		return &app.Error{Code: app.EUnavailable, Err: err,
			Message: "sem conexão com o banco de dados; tente de novo mais tarde"}
	}
	return err
}

// writer is the single writer of this process: it takes whatever
// operations are waiting (up to maxBatch), runs them in one transaction
// and commits once, so one WAL flush serves them all.
func (db *DB) writer(maxBatch int) {
	defer close(db.done)
	batch := make([]*op, 0, maxBatch)
	for {
		batch = batch[:0]
		select {
		case o := <-db.ops:
			batch = append(batch, o)
		case <-db.stop:
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
		// Operations that give no sequence run first, before the lock on
		// log_head is taken: the lock serialises every replica's appends,
		// so the less the transaction does while holding it, the better.
		slices.SortStableFunc(batch, func(a, b *op) int {
			switch {
			case a.seq == b.seq:
				return 0
			case b.seq:
				return -1
			}
			return 1
		})
		db.commit(batch)
	}
}

// commit runs a batch optimistically in one transaction without savepoints;
// if one operation fails, the transaction is rolled back and the batch runs
// again with a savepoint around each operation, so only the failing one is
// undone.
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
	errs := make([]error, len(batch))
	fail := func(err error) bool {
		for _, o := range batch {
			o.done <- err
		}
		return true
	}
	ptx, err := db.write.Begin(bg)
	if err != nil {
		return fail(fmt.Errorf("begin: %w", err))
	}
	tx := &wtx{Tx: ptx}
	live := 0
	for i, o := range batch {
		if o.ctx.Err() != nil {
			errs[i] = o.ctx.Err() // abandoned before it ran: do nothing
			continue
		}
		if o.seq {
			if err := tx.lockHead(); err != nil {
				ptx.Rollback(bg)
				return fail(err)
			}
		}
		if !isolate || len(batch) == 1 {
			// Alone, the transaction is the operation's savepoint.
			if errs[i] = o.fn(tx); errs[i] != nil {
				ptx.Rollback(bg)
				if !isolate {
					return false
				}
				return fail(errs[i])
			}
			live++
			continue
		}
		mark, head := len(tx.appended), tx.head
		if _, err := ptx.Exec(bg, "SAVEPOINT op"); err != nil {
			ptx.Rollback(bg)
			return fail(fmt.Errorf("savepoint: %w", err))
		}
		if err := o.fn(tx); err != nil {
			errs[i] = err
			// The numbers the failed operation took go back: the log stays
			// gapless.
			tx.appended, tx.head = tx.appended[:mark], head
			if _, rerr := ptx.Exec(bg, "ROLLBACK TO SAVEPOINT op"); rerr != nil {
				ptx.Rollback(bg)
				return fail(fmt.Errorf("rollback to savepoint: %w", rerr))
			}
		} else {
			live++
		}
		if _, err := ptx.Exec(bg, "RELEASE SAVEPOINT op"); err != nil {
			ptx.Rollback(bg)
			return fail(fmt.Errorf("release savepoint: %w", err))
		}
	}
	if live == 0 {
		ptx.Rollback(bg)
	} else {
		if tx.head != tx.from {
			if _, err := ptx.Exec(bg, "UPDATE log_head SET ultima = $1 WHERE id = 1", tx.head); err != nil {
				ptx.Rollback(bg)
				return fail(fmt.Errorf("advance log head: %w", err))
			}
		}
		if err := ptx.Commit(bg); err != nil {
			return fail(fmt.Errorf("commit: %w", err))
		}
	}
	if len(tx.appended) > 0 {
		db.hookMu.RLock()
		hook := db.hook
		db.hookMu.RUnlock()
		if hook != nil {
			hook(tx.appended)
		}
	}
	for i, o := range batch {
		o.done <- errs[i]
	}
	return true
}
