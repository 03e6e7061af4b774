package store

import (
	"context"
	"time"

	"geohub/app"
)

// EventsPerMinute implements app.StatsStore: a range scan of the timestamp
// index.
func (db *DB) EventsPerMinute(ctx context.Context, from, to time.Time) ([]app.MinuteCount, error) {
	rows, err := db.read.QueryContext(ctx, `SELECT timestamp / 60000, count(*) FROM event_log
		WHERE timestamp >= ? AND timestamp < ? GROUP BY 1 ORDER BY 1`, ms(from), ms(to))
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
	rows, err := db.read.QueryContext(ctx, `SELECT status, count(*) FROM outbox GROUP BY status`)
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
