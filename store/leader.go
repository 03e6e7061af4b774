package store

import (
	"context"
	"time"

	"geohub/app"
)

// A SQLite database belongs to the one process that serves it: replicas
// share PostgreSQL, never a SQLite file. So there is no one to elect
// against and nothing to share: the store grants the one term to whoever
// asks, keeps no table for it, and has no other replica to hear from.
var (
	_ app.LeaderStore = (*DB)(nil)
	_ app.Wakeups     = (*DB)(nil)
)

// soleTerm is the term a lone process holds for as long as it runs.
const soleTerm = 1

// Elect implements app.LeaderStore: the lone process always leads.
func (db *DB) Elect(ctx context.Context, replica string, ttl time.Duration) (int64, error) {
	return soleTerm, nil
}

// Renew implements app.LeaderStore: the term never ends.
func (db *DB) Renew(ctx context.Context, replica string, term int64, ttl time.Duration) (bool, error) {
	return term == soleTerm, nil
}

// Resign implements app.LeaderStore: nobody else waits for the term.
func (db *DB) Resign(ctx context.Context, replica string, term int64) error { return nil }

// OnRemote implements app.Wakeups: every commit is this process's, and
// OnCommit reports it.
func (db *DB) OnRemote(fn func(app.Wakeup)) {}
