package postgres

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"geohub/app"
)

// The state one process used to keep in memory (app.SharedStore), shared
// by every replica through migration 2's tables.
//
// The login limits and the reprocess limit run in short
// transactions of their own on the pool, not in the writer's group
// transaction: they take locks that other replicas wait on, and a lock
// taken inside a group transaction is held until the whole batch commits,
// beside whatever row locks the batch's other operations hold, which is how
// two replicas' batches deadlock. Alone, each takes its locks in one order.

var _ app.SharedStore = (*DB)(nil)

// Advisory lock keys. The login keys use the two-int4 form, whose key
// space does not overlap the bigint one (PostgreSQL's documentation).
const (
	loginLockClass = 0x676c6f67 // "glog"
)

// lockKeys takes the transaction-level advisory lock of every key, in key
// order, so that two transactions locking overlapping keys never deadlock.
func lockKeys(ctx context.Context, tx pgx.Tx, keys []string) error {
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	for _, k := range slices.Compact(sorted) {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, int32(loginLockClass), k); err != nil {
			return err
		}
	}
	return nil
}

// ReserveLoginAttempt implements app.LoginLimitStore: the keys' locks make
// the count and the insert one step across replicas.
func (db *DB) ReserveLoginAttempt(ctx context.Context, keys []string, at time.Time, window time.Duration, limit int) (string, time.Duration, error) {
	id := uuid.NewString()
	var wait time.Duration
	err := pgx.BeginFunc(ctx, db.read, func(tx pgx.Tx) error {
		if err := lockKeys(ctx, tx, keys); err != nil {
			return err
		}
		from := ms(at.Add(-window))
		// The expired rows of these keys, which this transaction holds;
		// and a few of anyone else's, skipping those another one holds,
		// so that keys never tried again do not stay forever.
		if _, err := tx.Exec(ctx, `DELETE FROM login_tentativa WHERE chave = ANY($1) AND em <= $2`, keys, from); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM login_tentativa WHERE ctid IN (SELECT ctid FROM login_tentativa
			WHERE em <= $1 LIMIT 64 FOR UPDATE SKIP LOCKED)`, from); err != nil {
			return err
		}
		for _, k := range keys {
			var n int
			var oldest *int64
			if err := tx.QueryRow(ctx, `SELECT count(*), min(em) FROM login_tentativa WHERE chave = $1 AND em > $2`,
				k, from).Scan(&n, &oldest); err != nil {
				return err
			}
			if n >= limit && oldest != nil {
				wait = max(wait, fromMS(*oldest).Add(window).Sub(at))
			}
		}
		if wait > 0 {
			return nil
		}
		for _, k := range keys {
			if _, err := tx.Exec(ctx, `INSERT INTO login_tentativa (chave, em, tentativa) VALUES ($1, $2, $3)
				ON CONFLICT DO NOTHING`, k, ms(at), id); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return "", 0, fmt.Errorf("count login attempt: %w", storageError(err))
	}
	return id, wait, nil
}

// ReleaseLoginAttempt implements app.LoginLimitStore.
func (db *DB) ReleaseLoginAttempt(ctx context.Context, id string, forgive []string) error {
	err := pgx.BeginFunc(ctx, db.read, func(tx pgx.Tx) error {
		if err := lockKeys(ctx, tx, forgive); err != nil {
			return err
		}
		if id != "" {
			if _, err := tx.Exec(ctx, `DELETE FROM login_tentativa WHERE tentativa = $1`, id); err != nil {
				return err
			}
		}
		if len(forgive) > 0 {
			if _, err := tx.Exec(ctx, `DELETE FROM login_tentativa WHERE chave = ANY($1)`, forgive); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("release login attempt: %w", storageError(err))
	}
	return nil
}

// ClaimReprocess implements app.ReprocessLimitStore in one statement: the
// upsert's row lock decides between replicas claiming the same colônia.
func (db *DB) ClaimReprocess(ctx context.Context, colonia string, at time.Time, interval time.Duration) (time.Duration, error) {
	var claimed int64
	err := db.read.QueryRow(ctx, `INSERT INTO dlq_reprocesso (colonia, em) VALUES ($1, $2)
		ON CONFLICT (colonia) DO UPDATE SET em = excluded.em WHERE dlq_reprocesso.em <= $3
		RETURNING em`, colonia, ms(at), ms(at)-interval.Milliseconds()).Scan(&claimed)
	if err == nil {
		return 0, nil
	}
	if !isNoRows(err) {
		return 0, fmt.Errorf("claim reprocess: %w", storageError(err))
	}
	var last int64
	if err := db.read.QueryRow(ctx, `SELECT em FROM dlq_reprocesso WHERE colonia = $1`, colonia).Scan(&last); err != nil {
		return 0, fmt.Errorf("claim reprocess: %w", storageError(err))
	}
	// At least a millisecond: the claim was refused, whatever a clock
	// running behind another replica's makes of the row.
	return max(fromMS(last).Add(interval).Sub(at), time.Millisecond), nil
}
