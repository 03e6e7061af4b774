package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"geohub/app"
)

// The state a process used to keep in memory (app.SharedStore), on SQLite:
// migration 13's tables, written by the one writer, which serialises every
// check-and-count.

var _ app.SharedStore = (*DB)(nil)

// ReserveLoginAttempt implements app.LoginLimitStore.
func (db *DB) ReserveLoginAttempt(ctx context.Context, keys []string, at time.Time, window time.Duration, limit int) (string, time.Duration, error) {
	id := uuid.NewString()
	var wait time.Duration
	err := db.do(ctx, func(tx *wtx) error {
		wait = 0
		from := ms(at.Add(-window))
		if _, err := tx.Exec(`DELETE FROM login_tentativa WHERE em <= ?`, from); err != nil {
			return err
		}
		for _, k := range keys {
			var n int
			var oldest sql.NullInt64
			if err := tx.QueryRow(`SELECT count(*), min(em) FROM login_tentativa WHERE chave = ? AND em > ?`,
				k, from).Scan(&n, &oldest); err != nil {
				return err
			}
			if n >= limit {
				wait = max(wait, fromMS(oldest.Int64).Add(window).Sub(at))
			}
		}
		if wait > 0 {
			return nil
		}
		for _, k := range keys {
			if _, err := tx.Exec(`INSERT OR IGNORE INTO login_tentativa (chave, em, tentativa) VALUES (?, ?, ?)`,
				k, ms(at), id); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return "", 0, fmt.Errorf("count login attempt: %w", err)
	}
	return id, wait, nil
}

// ReleaseLoginAttempt implements app.LoginLimitStore.
func (db *DB) ReleaseLoginAttempt(ctx context.Context, id string, forgive []string) error {
	err := db.do(ctx, func(tx *wtx) error {
		if id != "" {
			if _, err := tx.Exec(`DELETE FROM login_tentativa WHERE tentativa = ?`, id); err != nil {
				return err
			}
		}
		for _, k := range forgive {
			if _, err := tx.Exec(`DELETE FROM login_tentativa WHERE chave = ?`, k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("release login attempt: %w", err)
	}
	return nil
}

// ClaimReprocess implements app.ReprocessLimitStore.
func (db *DB) ClaimReprocess(ctx context.Context, colonia string, at time.Time, interval time.Duration) (time.Duration, error) {
	var wait time.Duration
	err := db.do(ctx, func(tx *wtx) error {
		wait = 0
		var last int64
		err := tx.QueryRow(`SELECT em FROM dlq_reprocesso WHERE colonia = ?`, colonia).Scan(&last)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		default:
			if w := fromMS(last).Add(interval).Sub(at); w > 0 {
				wait = w
				return nil
			}
		}
		_, err = tx.Exec(`INSERT INTO dlq_reprocesso (colonia, em) VALUES (?, ?)
			ON CONFLICT (colonia) DO UPDATE SET em = excluded.em`, colonia, ms(at))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("claim reprocess: %w", err)
	}
	return wait, nil
}
