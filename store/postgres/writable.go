package postgres

import (
	"context"

	"geohub/app"
)

// Writable is /readyz's check (app.Store), on a connection of the read
// pool: a server that is down or unreachable answers 503 (storageError),
// and so does one that takes no writes, a standby or a server in
// default_transaction_read_only (after a failover that left the URL
// pointing at a replica, say). It does not go through the writer: a write
// waiting on another replica's lock (a frozen replica holds log_head until
// its session is cut) must not make every replica unready, so that a load
// balancer drops them all (issue 27, B2). Disk space is the server's to
// watch: a full disk shows as the 503 of the next write.
func (db *DB) Writable(ctx context.Context) error {
	var ro string
	var standby bool
	if err := db.read.QueryRow(ctx, `SELECT current_setting('transaction_read_only'), pg_is_in_recovery()`).Scan(&ro, &standby); err != nil {
		return storageError(err)
	}
	if ro == "on" || standby {
		return &app.Error{Code: app.EUnavailable, Message: "o banco de dados não aceita gravações agora; tente de novo mais tarde"}
	}
	return nil
}
