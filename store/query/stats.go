package query

import (
	"context"
	"time"

	"geohub/app"
)

// EventsPerMinute implements app.StatsStore: a range scan of the timestamp
// index.
func (r *Reads) EventsPerMinute(ctx context.Context, from, to time.Time) ([]app.MinuteCount, error) {
	rows, err := r.c.Query(ctx, `SELECT timestamp / 60000, count(*) FROM event_log
		WHERE timestamp >= ? AND timestamp < ? GROUP BY 1 ORDER BY 1`, MS(from), MS(to))
	if err != nil {
		return nil, err
	}
	out, err := Collect(rows, func(row Row) (app.MinuteCount, error) {
		var m, n int64
		err := row.Scan(&m, &n)
		return app.MinuteCount{Minuto: time.UnixMilli(m * 60000).UTC(), N: n}, err
	})
	if len(out) == 0 {
		out = nil
	}
	return out, err
}

// DeliveryCounts implements app.StatsStore. Live rows are counted in
// their partial indexes, dead letters in outbox_mortas_idx, and the
// delivered are the rest of the whole count: an index of every row by
// status would take a new entry at every claim and every finish.
func (r *Reads) DeliveryCounts(ctx context.Context) (map[string]int64, error) {
	var total, pendente, processando, falhou int64
	err := r.c.QueryRow(ctx, `SELECT (SELECT count(*) FROM outbox),
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
