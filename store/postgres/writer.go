package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"geohub/app"
)

// The writer runs the operations of this process in group commits, one
// transaction per batch, as package store's does on SQLite. Here several
// replicas' writers share one database, so a batch must not wait for a
// lock while holding one that another replica's batch waits for. Each
// batch therefore takes its locks in one global order, in phases:
//
//  1. keys: every advisory lock its operations declared (op.keys), sorted
//     and taken at once, before anything else. A key stands for the rows
//     behind it (a consumer cursor, an ocorrência, an integrator, an
//     aggregate's owner and sequences, the accounts): every writer of
//     those rows declares it, so no statement of the batch then waits for
//     another replica on them.
//  2. main: the staged operations' steps (the appends', op.stages), each
//     step of all of them on one pipe, then each other operation's fn, in
//     arrival order; isolated, every operation in arrival order in its own
//     savepoint. What they lock beyond their keys they lock without
//     waiting (SKIP LOCKED, pg_try_advisory_xact_lock) or on rows of their
//     own (a row just inserted). The operations of one batch are
//     concurrent, so running the appends' steps first is one of the orders
//     they could have had: a cadastro change batched with a publish may
//     commit with it either before or after (checkCadastro).
//  3. late: attempt_head's row lock, then the operations' attempts
//     (op.late), so attempt ids are given in commit order.
//  4. seq: log_head's row lock, then the operations' appends (op.seq),
//     which give sequence numbers from it.
//
// The late and seq phases are pipelined: their statements go in one round
// trip each, so the counters' locks, which every replica queues for, are
// held for a round trip or two and the commit. A transaction holding them
// never waits for anything but a transaction running alone (see
// op.alone), which itself waits for nothing once it holds its row.
//
// Whatever order an unforeseen pair of statements still takes, PostgreSQL
// detects the deadlock and aborts one side; that, a serialization failure
// or a lock timeout (lock_timeout, see settings) retries the whole batch a
// few times with jitter (retryable), then answers its callers with code
// indisponivel (503).

// op is one unit of work for the writer.
type op struct {
	ctx  context.Context
	keys []lockKey
	// fn runs in the main phase, inside a savepoint of the group
	// transaction when the batch runs isolated, so its failure undoes only
	// its own changes.
	fn func(tx *wtx) error
	// stages, instead of fn, are a main phase in steps that queue their
	// statements on a pipe, each step's results read before the next step
	// runs. The steps of the batch's staged operations share one pipe a
	// step, in arrival order: a batch of appends takes a round trip a step,
	// not one a step and operation (issue 28: 0.7 ms an append in a busy
	// writer, most of its transaction). Not isolated, they run before the
	// batch's fn operations; isolated, each operation runs its own steps
	// in its savepoint, in arrival order.
	stages []func(tx *wtx, p *pipe) error
	// late and seq queue statements for the late and seq phases (nil:
	// none). They run only when the main phase (fn or stages) succeeded;
	// a failure of theirs rolls the batch back, answers this operation and
	// runs the others again.
	late func(tx *wtx, p *pipe) error
	seq  func(tx *wtx, p *pipe) error
	// alone runs the operation in a transaction of its own, never batched:
	// for a statement that takes a lock others' batches wait for while they
	// hold log_head (see SetIntegratorAPIKey).
	alone bool
	done  chan error
}

// main runs o's main phase on its own: fn, or each of its stages on a
// pipe of its own.
func (o *op) main(tx *wtx, i int) error {
	if o.fn != nil {
		return o.fn(tx)
	}
	for _, stage := range o.stages {
		p := &pipe{cur: i}
		if err := stage(tx, p); err != nil {
			return err
		}
		if _, err := p.send(tx); err != nil {
			return err
		}
	}
	return nil
}

// wtx is the writer's transaction as an op sees it. Statements inside an
// op take ctx, the batch's deadline, never the caller's context: a
// cancelled statement aborts the whole group transaction, other callers'
// work included. The writer checks each op's context before running it
// instead.
type wtx struct {
	pgx.Tx
	ctx      context.Context
	appended []app.Appended
	// head is the last sequence number given, read under log_head's lock
	// in the seq phase and written back before COMMIT.
	head int64
	// planned are the events this transaction inserts, by event_id, so
	// that a duplicate later in the batch is answered with the first; op
	// is the index in the batch of the operation running.
	planned map[string]*plannedEvent
	op      int
	// attempts says the late phase recorded delivery attempts.
	attempts bool
	// cadastro is the integrators' cadastro version as this transaction
	// read it (checkCadastro); -1 before it does.
	cadastro int64
	// freed says the transaction made rows claimable that other replicas'
	// dispatchers may be waiting for: leases handed back or reaped, or a
	// finish that left due rows behind it (see announce).
	freed bool
}

// bg is the context of statements that run outside any batch.
var bg = context.Background()

// pipe is a phase's statements, sent in one round trip. Each statement
// names the operation it belongs to, so that its failure is that
// operation's.
type pipe struct {
	b      pgx.Batch
	owner  []int
	checks []func(pgx.BatchResults) error
	cur    int // the operation queueing now; -1 the writer itself
}

func (p *pipe) exec(sql string, args ...any) {
	p.b.Queue(sql, args...)
	p.owner = append(p.owner, p.cur)
	p.checks = append(p.checks, func(br pgx.BatchResults) error { _, err := br.Exec(); return err })
}

// queryRow queues a statement whose one row scan reads; ErrNoRows goes to
// scan too.
func (p *pipe) queryRow(scan func(pgx.Row) error, sql string, args ...any) {
	p.b.Queue(sql, args...)
	p.owner = append(p.owner, p.cur)
	p.checks = append(p.checks, func(br pgx.BatchResults) error { return scan(br.QueryRow()) })
}

// query queues a statement whose rows read reads (and closes).
func (p *pipe) query(read func(pgx.Rows) error, sql string, args ...any) {
	p.b.Queue(sql, args...)
	p.owner = append(p.owner, p.cur)
	p.checks = append(p.checks, func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		defer rows.Close()
		return read(rows)
	})
}

// send runs the queued statements; on failure it says whose statement
// failed (-1: the writer's).
func (p *pipe) send(tx *wtx) (int, error) {
	if len(p.checks) == 0 {
		return 0, nil
	}
	br := tx.SendBatch(tx.ctx, &p.b)
	for i, check := range p.checks {
		if err := check(br); err != nil {
			br.Close()
			return p.owner[i], err
		}
	}
	return -1, br.Close()
}

// lockKey is a transaction advisory lock (one-key form) standing for the
// rows an operation writes; see the phases above. Keys are hashes, so two
// resources rarely share one, and when they do they only take turns.
type lockKey int64

// key names a resource: a class and its identifying parts.
func key(class string, parts ...string) lockKey {
	h := fnv.New64a()
	h.Write([]byte(class))
	for _, p := range parts {
		h.Write([]byte{0})
		h.Write([]byte(p))
	}
	return lockKey(h.Sum64())
}

// do queues fn for the next group commit and waits for its outcome, as
// package store's do does: once queued, it waits even if ctx ends.
func (db *DB) do(ctx context.Context, fn func(tx *wtx) error) error {
	return db.submit(ctx, &op{fn: fn})
}

// locked is do with the advisory keys of the rows fn writes.
func (db *DB) locked(ctx context.Context, keys []lockKey, fn func(tx *wtx) error) error {
	return db.submit(ctx, &op{keys: keys, fn: fn})
}

func (db *DB) submit(ctx context.Context, o *op) error {
	select {
	case <-db.stop:
		return app.ErrStoreClosed
	default:
	}
	o.ctx, o.done = ctx, make(chan error, 1)
	if o.fn == nil && o.stages == nil {
		o.fn = func(*wtx) error { return nil }
	}
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
		select {
		case err := <-o.done:
			return storageError(err)
		default:
			return app.ErrStoreClosed
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
		case retryable(err):
			return busy(err)
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

// retryable says err aborted the transaction for a reason that running it
// again can clear: a deadlock (40P01), a serialization failure (40001), a
// lock wait longer than lock_timeout (55P03), the server ending the
// transaction after idleInTransaction (25P03: this process was paused or
// starved between two statements, never past COMMIT), or an event
// committed by another replica since this batch looked (errRaced).
func retryable(err error) bool {
	if errors.Is(err, errRaced) {
		return true
	}
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001" || pe.Code == "55P03" || pe.Code == "25P03")
}

// errRaced: an append met, at its insert, an event_id another replica
// committed after this batch checked for it; the batch runs again and
// finds it.
var errRaced = errors.New("event committed concurrently by another replica")

// busy is what callers get when a batch still failed for a retryable
// reason after maxRetries more tries: the database is contended, not
// broken, and nothing of the batch was committed.
func busy(err error) error {
	return &app.Error{Code: app.EUnavailable, Err: err,
		Message: "o banco de dados está ocupado demais agora; tente de novo em instantes"}
}

// maxRetries is how many times a batch runs again after a retryable
// failure; retryDelay is the first pause, doubled each time, with jitter.
const (
	maxRetries = 4
	retryDelay = 5 * time.Millisecond
)

// writerWorst is the longest one batch can take before its callers are
// answered: every run to the batch deadline, and the longest pause
// between runs (a delay and its full jitter).
func writerWorst(batchTimeout time.Duration) time.Duration {
	d := time.Duration(maxRetries+1) * batchTimeout
	for n := 1; n <= maxRetries; n++ {
		d += 2 * (retryDelay << (n - 1))
	}
	return d
}

// writer is the single writer of this process: it takes whatever
// operations are waiting (up to maxBatch), runs them in one transaction
// and commits once, so one WAL flush serves them all. An operation that
// runs alone ends the batch being gathered and then runs by itself.
func (db *DB) writer(maxBatch int) {
	defer close(db.done)
	batch := make([]*op, 0, maxBatch)
	var next *op // taken from the queue, for the batch after this one
	for {
		batch = batch[:0]
		if next != nil {
			batch, next = append(batch, next), nil
		} else {
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
		}
	fill:
		for len(batch) < maxBatch && !batch[0].alone {
			select {
			case o := <-db.ops:
				if o.alone {
					next = o
					break fill
				}
				batch = append(batch, o)
			default:
				break fill
			}
		}
		db.commit(batch)
	}
}

// outcome is how one run of a batch ended.
type outcome struct {
	retry  error // a retryable failure: run the batch again
	failed int   // with err: this operation failed outside the main phase
	err    error
	redo   bool // an operation failed in the main phase of an optimistic run
}

// commit runs batch until every operation is answered: optimistically in
// one transaction without savepoints first; if an operation fails there,
// again with a savepoint around each operation's main phase, so only the
// failing one is undone. An operation failing in a pipelined phase is
// answered and the others run again without it.
func (db *DB) commit(batch []*op) {
	isolate := len(batch) == 1
	retries := 0
	batch = slices.Clone(batch)
	for len(batch) > 0 {
		out := db.run(batch, isolate)
		switch {
		case out.retry != nil:
			if retries == maxRetries {
				for _, o := range batch {
					o.done <- busy(out.retry)
				}
				return
			}
			retries++
			if h := db.hooks.retry; h != nil {
				h(retries, out.retry)
			}
			time.Sleep(retryDelay<<(retries-1) + rand.N(retryDelay<<(retries-1)))
			// Nothing of the batch committed: a caller that has gone away
			// meanwhile is answered now, not after every retry to come.
			batch = slices.DeleteFunc(batch, func(o *op) bool {
				if err := o.ctx.Err(); err != nil {
					o.done <- err
					return true
				}
				return false
			})
			isolate = isolate || len(batch) == 1
		case out.redo:
			isolate = true
		case out.err != nil:
			batch[out.failed].done <- out.err
			batch = slices.Delete(batch, out.failed, out.failed+1)
			isolate = isolate || len(batch) == 1
		default:
			return
		}
	}
}

// run executes batch in one transaction and answers every caller, unless
// the outcome says otherwise (then it rolled back and answered no one).
func (db *DB) run(batch []*op, isolate bool) outcome {
	ctx, cancel := context.WithTimeout(context.Background(), db.batchTimeout)
	defer cancel()
	errs := make([]error, len(batch))
	// fail answers everyone with err, a failure of the transaction itself.
	fail := func(err error) outcome {
		if retryable(err) {
			return outcome{retry: err}
		}
		if ctx.Err() != nil {
			err = &app.Error{Code: app.EUnavailable, Err: err,
				Message: "o banco de dados não respondeu a tempo; tente de novo mais tarde"}
		}
		for _, o := range batch {
			o.done <- err
		}
		return outcome{}
	}
	ptx, err := db.write.Begin(ctx)
	if err != nil {
		return fail(fmt.Errorf("begin: %w", err))
	}
	defer ptx.Rollback(context.Background()) // after Commit, a no-op
	tx := &wtx{Tx: ptx, ctx: ctx, planned: map[string]*plannedEvent{}, cadastro: -1}
	live := make([]bool, len(batch))
	var keys []lockKey
	for i, o := range batch {
		if o.ctx.Err() != nil {
			errs[i] = o.ctx.Err() // abandoned before it ran: do nothing
			continue
		}
		live[i] = true
		keys = append(keys, o.keys...)
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	if len(keys) > 0 {
		p := &pipe{cur: -1}
		for _, k := range keys {
			p.exec("SELECT pg_advisory_xact_lock($1)", int64(k))
		}
		if _, err := p.send(tx); err != nil {
			return fail(fmt.Errorf("lock keys: %w", err))
		}
	}

	// failed is the outcome of a main phase whose operation failed with err
	// in a batch not isolated: it runs again, isolated.
	failed := func(err error) outcome {
		if retryable(err) {
			return outcome{retry: err}
		}
		if ctx.Err() != nil {
			return fail(err)
		}
		return outcome{redo: true}
	}
	if !isolate {
		for k := 0; ; k++ {
			p, more := &pipe{}, false
			for i, o := range batch {
				if !live[i] || k >= len(o.stages) {
					continue
				}
				tx.op, p.cur, more = i, i, true
				if err := o.stages[k](tx, p); err != nil {
					return failed(err)
				}
			}
			if !more {
				break
			}
			if _, err := p.send(tx); err != nil {
				return failed(err)
			}
		}
	}
	for i, o := range batch {
		if !live[i] || !isolate && o.fn == nil {
			continue
		}
		tx.op = i
		if !isolate {
			if err := o.fn(tx); err != nil {
				return failed(err)
			}
			continue
		}
		if len(batch) == 1 {
			// Alone, the transaction is the operation's savepoint.
			if err := o.main(tx, i); err != nil {
				return fail(err)
			}
			continue
		}
		if _, err := ptx.Exec(ctx, "SAVEPOINT op"); err != nil {
			return fail(fmt.Errorf("savepoint: %w", err))
		}
		if err := o.main(tx, i); err != nil {
			if retryable(err) || ctx.Err() != nil {
				return fail(err)
			}
			errs[i], live[i] = err, false
			tx.unplan(i)
			if _, rerr := ptx.Exec(ctx, "ROLLBACK TO SAVEPOINT op"); rerr != nil {
				return fail(fmt.Errorf("rollback to savepoint: %w", rerr))
			}
		}
		if _, err := ptx.Exec(ctx, "RELEASE SAVEPOINT op"); err != nil {
			return fail(fmt.Errorf("release savepoint: %w", err))
		}
	}

	// The late phase, then log_head's lock, in one round trip.
	lateP, anySeq := &pipe{cur: -1}, false
	var late, seq []int
	for i, o := range batch {
		if live[i] && o.late != nil {
			late = append(late, i)
		}
		if live[i] && o.seq != nil {
			seq = append(seq, i)
			anySeq = true
		}
	}
	if len(late) > 0 {
		lateP.exec("SELECT id FROM attempt_head WHERE id = 1 FOR UPDATE")
		for _, i := range late {
			lateP.cur = i
			if err := batch[i].late(tx, lateP); err != nil {
				return outcome{failed: i, err: err}
			}
		}
		lateP.cur = -1
	}
	if anySeq {
		lateP.queryRow(func(r pgx.Row) error { return r.Scan(&tx.head) },
			"SELECT ultima FROM log_head WHERE id = 1 FOR UPDATE")
	}
	if who, err := lateP.send(tx); err != nil {
		return db.pipeFailed(fail, who, err)
	}
	tx.attempts = len(late) > 0
	if anySeq {
		from := tx.head
		seqP := &pipe{}
		for _, i := range seq {
			seqP.cur = i
			if err := batch[i].seq(tx, seqP); err != nil {
				return outcome{failed: i, err: err}
			}
		}
		if tx.head != from {
			seqP.cur = -1
			seqP.exec("UPDATE log_head SET ultima = $1 WHERE id = 1", tx.head)
		}
		if who, err := seqP.send(tx); err != nil {
			return db.pipeFailed(fail, who, err)
		}
	}
	if h := db.hooks.beforeCommit; h != nil {
		h(len(batch))
	}
	if slices.Contains(live, true) {
		if err := db.announce(tx, tx.attempts); err != nil {
			return fail(err)
		}
		if err := ptx.Commit(ctx); err != nil {
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
	return outcome{}
}

// pipeFailed is the outcome of a pipelined phase whose statement of
// operation who (-1: the writer's) failed with err.
func (db *DB) pipeFailed(fail func(error) outcome, who int, err error) outcome {
	if retryable(err) || who < 0 {
		return fail(err)
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return fail(err) // the connection, not the statement
	}
	return outcome{failed: who, err: err}
}

// hooks are test hooks (export_test.go); nil in production. They run in
// the writer goroutine.
type hooks struct {
	beforeCommit func(ops int)          // a batch of ops is about to commit
	retry        func(n int, err error) // the nth retry of a batch, after err
}
