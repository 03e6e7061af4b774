package postgres

import (
	"context"
	"time"
)

// Test hooks into the writer, for the package's external tests.

// OnBeforeCommit calls fn in the writer goroutine with the number of
// operations of each batch about to commit; fn may block the writer.
func OnBeforeCommit(db *DB, fn func(ops int)) { db.hooks.beforeCommit = fn }

// OnRetry calls fn in the writer goroutine before each retry of a batch.
func OnRetry(db *DB, fn func(n int, err error)) { db.hooks.retry = fn }

// Queued is the number of operations waiting for the writer.
func Queued(db *DB) int { return len(db.ops) }

// MaxRetries is how many times a batch is retried.
const MaxRetries = maxRetries

// ClaimCandidatesSQL is the claim's first statement, for its plan.
const ClaimCandidatesSQL = claimCandidatesSQL

// ClaimHeadsSQL is the claim's look by aggregate, for its plan.
const ClaimHeadsSQL = claimHeadsSQL

// WriterNoop runs an empty operation through the writer: a batch to hold.
func WriterNoop(ctx context.Context, db *DB) error {
	return db.do(ctx, func(*wtx) error { return nil })
}

// OpenWithLocalClock is Open on a replica whose own clock is local.
func OpenWithLocalClock(ctx context.Context, url string, local func() time.Time) (*DB, error) {
	return open(ctx, url, Options{}, local)
}

// WaitingBehindSQL is a finish's look for rows behind the finished, for its plan.
const WaitingBehindSQL = waitingBehindSQL

// ClaimSQL is the claim's lease, for its plan.
const ClaimSQL = claimSQL

// WriterSettings are the writer's session settings, for plans as it sees them.
var WriterSettings = writerSettings
