package postgres

import (
	"context"
	"time"

	"geohub/app"
)

var _ app.StatsStore = (*DB)(nil)

// EventsPerMinute implements app.StatsStore: a range scan of the timestamp
// index. Integer division truncates toward zero, as SQLite's does.
func (db *DB) EventsPerMinute(ctx context.Context, from, to time.Time) ([]app.MinuteCount, error) {
	rows, err := db.read.Query(ctx, `SELECT timestamp / 60000, count(*) FROM event_log
		WHERE timestamp >= $1 AND timestamp < $2 GROUP BY 1 ORDER BY 1`, ms(from), ms(to))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []app.MinuteCount
	for rows.Next() {
		var m, n int64
		if err := rows.Scan(&m, &n); err != nil {
			return nil, err
		}
		out = append(out, app.MinuteCount{Minuto: time.UnixMilli(m * 60000).UTC(), N: n})
	}
	return out, rows.Err()
}

// DeliveryCounts implements app.StatsStore: the status index counts.
func (db *DB) DeliveryCounts(ctx context.Context) (map[string]int64, error) {
	rows, err := db.read.Query(ctx, `SELECT status, count(*) FROM outbox GROUP BY status`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var s string
		var n int64
		if err := rows.Scan(&s, &n); err != nil {
			return nil, err
		}
		out[s] = n
	}
	return out, rows.Err()
}
