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

// DeliveryCounts implements app.StatsStore. Live rows are counted in
// their partial indexes, dead letters in outbox_mortas_idx, and the
// delivered are the rest of the primary key's count: no index covers
// every row by status, since each would take a new entry at every claim
// and every finish.
func (db *DB) DeliveryCounts(ctx context.Context) (map[string]int64, error) {
	var total, pendente, processando, falhou int64
	err := db.read.QueryRow(ctx, `SELECT (SELECT count(*) FROM outbox),
		(SELECT count(*) FROM outbox WHERE status = 'pendente'),
		(SELECT count(*) FROM outbox WHERE status = 'processando'),
		(SELECT count(*) FROM outbox WHERE status = 'falhou')`).Scan(&total, &pendente, &processando, &falhou)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for s, n := range map[string]int64{app.EntregaPendente: pendente, app.EntregaProcessando: processando,
		app.EntregaFalhou: falhou, app.EntregaEntregue: total - pendente - processando - falhou} {
		if n > 0 {
			out[s] = n
		}
	}
	return out, nil
}
