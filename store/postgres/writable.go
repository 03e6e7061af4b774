package postgres

import (
	"context"

	"geohub/app"
)

// Writable is /readyz's check (app.Store): the writer runs a transaction
// on its connection, so a server that is down or unreachable answers 503
// (storageError), and the transaction is not read-only, which it is on a
// standby or a server in default_transaction_read_only (after a failover
// that left the URL pointing at a replica, say). Disk space is the
// server's to watch: a full disk shows as the 503 of the next write.
func (db *DB) Writable(ctx context.Context) error {
	return db.do(ctx, func(tx *wtx) error {
		var ro string
		if err := tx.QueryRow(tx.ctx, `SELECT current_setting('transaction_read_only')`).Scan(&ro); err != nil {
			return err
		}
		if ro == "on" {
			return &app.Error{Code: app.EUnavailable, Message: "o banco de dados não aceita gravações agora; tente de novo mais tarde"}
		}
		return nil
	})
}
