package postgres

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// Replicas' clocks disagree; the database's is one (issue 27). Leases are
// given and reaped by it in SQL (dbNowMS); everything else a replica
// dates (when a retry comes due, the login window, the DLQ reprocess
// minute, an audit entry's em, an event's criado_em) reads Clock, the
// database's clock as this replica measures it: the local clock plus the
// offset to clock_timestamp() found by the round trip with the least
// delay, measured at Open and again every clockSync. So a replica whose
// clock runs minutes ahead neither retries early nor dates the audit
// trail in the future; its error is half a round trip to the database.

// clockSync is how often the offset is measured again: local clocks
// drift by parts per million, and an NTP step is corrected this late.
const clockSync = 10 * time.Second

// clockSamples round trips are made per measure; the fastest one counts.
const clockSamples = 3

// Clock is the database's clock as this replica reads it (app.New takes
// it as every service's clock when Deps.Now is unset).
func (db *DB) Clock() time.Time { return db.local().Add(time.Duration(db.offset.Load())) }

// syncClock measures the offset from the local clock to the database's.
func (db *DB) syncClock(ctx context.Context) error {
	best, offset := time.Duration(-1), time.Duration(0)
	for range clockSamples {
		sent := db.local()
		var at time.Time
		if err := db.read.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&at); err != nil {
			return fmt.Errorf("read the database's clock: %w", err)
		}
		rtt := db.local().Sub(sent)
		if best < 0 || rtt < best {
			best, offset = rtt, at.Sub(sent.Add(rtt/2))
		}
	}
	db.offset.Store(int64(offset))
	return nil
}

// followClock measures the offset every clockSync until the DB closes.
func (db *DB) followClock() {
	t := time.NewTicker(clockSync)
	defer t.Stop()
	for {
		select {
		case <-db.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
			db.syncClock(ctx) // a failure keeps the last offset
			cancel()
		}
	}
}

// offsetClock is the state Clock reads.
type offsetClock struct {
	local  func() time.Time // this process's clock; time.Now but in tests
	offset atomic.Int64     // nanoseconds from local to the database's clock
}
