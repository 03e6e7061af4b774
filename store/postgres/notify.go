package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"geohub/app"
)

var _ app.Wakeups = (*DB)(nil)

// The channels replicas wake one another on (SPEC 12). A payload names the
// writer that sent it, so a replica skips its own: its commit hook already
// woke its services.
//
//   - eventsChannel: "<writer> <last sequence> <1 if deliveries were enqueued or freed, else 0>",
//     sent by every group commit that appended events, and with sequence 0
//     by one that appended none but freed deliveries (wtx.freed);
//   - attemptsChannel: "<writer>", by every group commit that recorded
//     delivery attempts;
//   - leaderChannel: the app's replica id, by a leader that resigned;
//   - consumedChannel: "<writer>", by the leader's in-process consumers
//     after they saved their cursors (AnnounceConsumed);
//   - sharedChannel: the table's name, by triggers (schema.sql, migration
//     9) on every change of what replicas keep in memory: an integrator's
//     record, a registry version, a token, a circuit. The writer's own are
//     heard too: a read more, not a missed change.
const (
	eventsChannel   = "geohub_eventos"
	attemptsChannel = "geohub_tentativas"
	leaderChannel   = "geohub_lider"
	consumedChannel = "geohub_consumidos"
	sharedChannel   = "geohub_compartilhado"
)

// listenerName is the listening connection's application_name, apart from
// the pools' "geohub", so an operator can tell it in pg_stat_activity.
const listenerName = "geohub-escuta"

// The listener's reconnection backoff.
const (
	listenRetryMin = 100 * time.Millisecond
	listenRetryMax = 5 * time.Second
)

// notifier is a DB's side of the wake-ups: the id its writer signs
// notifications with, and the listening connection's goroutine, started
// by OnRemote and stopped by Close.
type notifier struct {
	idOnce sync.Once
	id     string

	mu     sync.Mutex
	fn     func(app.Wakeup)
	cancel context.CancelFunc
	done   chan struct{}
	closed bool
}

// self is the writer's id: random per DB, as a process's replica id.
func (n *notifier) self() string {
	n.idOnce.Do(func() {
		b := make([]byte, 8)
		rand.Read(b)
		n.id = hex.EncodeToString(b)
	})
	return n.id
}

func (n *notifier) deliver(w app.Wakeup) {
	n.mu.Lock()
	fn := n.fn
	n.mu.Unlock()
	if fn != nil {
		fn(w)
	}
}

// stop ends the listener and waits for it to close its connection.
func (n *notifier) stop() {
	n.mu.Lock()
	n.closed = true
	cancel, done := n.cancel, n.done
	n.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// announce sends, inside the group transaction about to commit, the
// notifications of what it holds (attempts: it recorded delivery
// attempts): PostgreSQL delivers them only if the COMMIT succeeds, and in
// commit order.
func (db *DB) announce(tx *wtx, attempts bool) error {
	var args []any
	var q []string
	if n := len(tx.appended); n > 0 || tx.freed {
		d, seq := 0, int64(0)
		if tx.freed {
			d = 1
		}
		for _, a := range tx.appended {
			if a.Deliveries > 0 {
				d = 1
				break
			}
		}
		if n > 0 {
			seq = tx.appended[n-1].Event.Sequence
		}
		args = append(args, fmt.Sprintf("%s %d %d", db.notify.self(), seq, d))
		q = append(q, fmt.Sprintf("pg_notify('%s', $%d)", eventsChannel, len(args)))
	}
	if attempts {
		args = append(args, db.notify.self())
		q = append(q, fmt.Sprintf("pg_notify('%s', $%d)", attemptsChannel, len(args)))
	}
	if len(q) == 0 {
		return nil
	}
	if _, err := tx.Exec(tx.ctx, "SELECT "+strings.Join(q, ", "), args...); err != nil {
		return fmt.Errorf("notify the other replicas: %w", err)
	}
	return nil
}

// OnRemote implements app.Wakeups. The first call with a function starts
// the listener: one connection of its own, outside the pools, since
// LISTEN is session state (so it must reach PostgreSQL directly, not
// through a transaction-pooling PgBouncer). When the connection drops, it
// connects again, backing off up to 5 s; on every (re)connection it wakes
// everything once, up to the log's head, since notifications sent while
// it was not listening are lost.
func (db *DB) OnRemote(fn func(app.Wakeup)) {
	n := &db.notify
	n.mu.Lock()
	defer n.mu.Unlock()
	n.fn = fn
	if fn == nil || n.done != nil || n.closed {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel, n.done = cancel, make(chan struct{})
	go func() {
		defer close(n.done)
		db.listen(ctx)
	}()
}

func (db *DB) listen(ctx context.Context) {
	cfg := db.read.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = listenerName
	wait := listenRetryMin
	for {
		began := time.Now()
		listened, err := db.listenOnce(ctx, cfg)
		if ctx.Err() != nil {
			return
		}
		db.notify.deliver(app.Wakeup{Err: err})
		// Only a connection that lasted starts the backoff over: one cut
		// right after LISTEN (a proxy or a server in trouble) must not be
		// retried, with a full wake-up each time, ten times a second. The
		// jitter keeps the replicas from reconnecting in step.
		if listened && time.Since(began) > listenRetryMax {
			wait = listenRetryMin
		}
		t := time.NewTimer(wait/2 + mrand.N(wait/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, listenRetryMax)
	}
}

// listenOnce connects, listens and hands on notifications until the
// connection fails; listened says it got as far as listening.
func (db *DB) listenOnce(ctx context.Context, cfg *pgx.ConnConfig) (listened bool, err error) {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return false, fmt.Errorf("connect: %w", err)
	}
	defer func() {
		// A connection that broke may not take the goodbye: do not wait.
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn.Close(cctx)
	}()
	for _, ch := range []string{eventsChannel, attemptsChannel, leaderChannel, consumedChannel, sharedChannel} {
		if _, err := conn.Exec(ctx, "LISTEN "+ch); err != nil {
			return false, fmt.Errorf("listen %s: %w", ch, err)
		}
	}
	// Read after LISTEN: a commit after this read is notified, one
	// before it is within the head.
	var head int64
	if err := conn.QueryRow(ctx, "SELECT ultima FROM log_head WHERE id = 1").Scan(&head); err != nil {
		return false, fmt.Errorf("read log head: %w", err)
	}
	db.notify.deliver(app.Wakeup{Sequence: head, Deliveries: true, Attempts: true, Resigned: true, Resync: true})
	for {
		msg, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, fmt.Errorf("wait for notifications: %w", err)
		}
		if w, ok := db.notify.decode(msg); ok {
			db.notify.deliver(w)
		}
	}
}

// decode reads a notification; false for this DB's own, or one it cannot
// read (a newer binary's format: the next wake-up or poll covers it).
func (n *notifier) decode(msg *pgconn.Notification) (app.Wakeup, bool) {
	fields := strings.Fields(msg.Payload)
	switch msg.Channel {
	case eventsChannel:
		if len(fields) != 3 || fields[0] == n.self() {
			return app.Wakeup{}, false
		}
		seq, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil || seq < 0 || seq == 0 && fields[2] != "1" {
			return app.Wakeup{}, false
		}
		return app.Wakeup{Sequence: seq, Deliveries: fields[2] == "1"}, true
	case attemptsChannel:
		if len(fields) != 1 || fields[0] == n.self() {
			return app.Wakeup{}, false
		}
		return app.Wakeup{Attempts: true}, true
	case leaderChannel:
		return app.Wakeup{Resigned: true}, true
	case consumedChannel:
		if len(fields) != 1 || fields[0] == n.self() {
			return app.Wakeup{}, false
		}
		return app.Wakeup{Consumed: true}, true
	case sharedChannel:
		return app.Wakeup{Shared: true}, true
	}
	return app.Wakeup{}, false
}

var _ app.ConsumedAnnouncer = (*DB)(nil)

// AnnounceConsumed implements app.ConsumedAnnouncer: a statement of its
// own, after the read models' writes committed, on the pool rather than
// through the writer, since it commits nothing.
func (db *DB) AnnounceConsumed(ctx context.Context) error {
	if _, err := db.read.Exec(ctx, "SELECT pg_notify('"+consumedChannel+"', $1)", db.notify.self()); err != nil {
		return fmt.Errorf("notify the other replicas of the consumers' progress: %w", err)
	}
	return nil
}
