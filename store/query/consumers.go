package query

import (
	"context"
	"database/sql"
	"fmt"

	"geohub/app"
)

// Cursors implements app.ConsumerStore.
func (r *Reads) Cursors(ctx context.Context, colonia string) (map[string]int64, error) {
	rows, err := r.c.Query(ctx, `SELECT tipo, last_sequence FROM consumer_cursor WHERE colonia = ?`, colonia)
	if err != nil {
		return nil, fmt.Errorf("read cursors: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var tipo string
		var seq int64
		if err := rows.Scan(&tipo, &seq); err != nil {
			return nil, err
		}
		out[tipo] = seq
	}
	return out, rows.Err()
}

const dlqColumns = `id, event_id, sequence_number, tipo, colonia, handler_nome, mensagem_erro, pilha_erro,
	tentativas, ultima_tentativa, status, criado_em, resolvido_em`

func scanDLQ(row Row) (app.DLQEntry, error) {
	var e app.DLQEntry
	var ultima, criado int64
	var resolvido sql.NullInt64
	if err := row.Scan(&e.ID, &e.EventID, &e.Sequence, &e.Tipo, &e.Colonia, &e.HandlerNome, &e.MensagemErro,
		&e.PilhaErro, &e.Tentativas, &ultima, &e.Status, &criado, &resolvido); err != nil {
		return e, err
	}
	e.UltimaTentativa, e.CriadoEm = FromMS(ultima), FromMS(criado)
	e.ResolvidoEm = fromNullMS(resolvido)
	return e, nil
}

// DLQOpen implements app.ConsumerStore: pendente and retrying entries of a
// colonia, oldest event first.
func (r *Reads) DLQOpen(ctx context.Context, colonia string, limit int) ([]app.DLQEntry, error) {
	rows, err := r.c.Query(ctx, `SELECT `+dlqColumns+` FROM dead_letter_queue
		WHERE status IN ('pendente', 'retrying') AND colonia = ? ORDER BY sequence_number LIMIT ?`, colonia, limit)
	if err != nil {
		return nil, fmt.Errorf("read DLQ: %w", err)
	}
	return Collect(rows, scanDLQ)
}

// DLQStats implements app.ConsumerStore and app.StatsStore.
func (r *Reads) DLQStats(ctx context.Context, limit int) (app.DLQStats, error) {
	st := app.DLQStats{PendentesPorColonia: map[string]int{}}
	// One snapshot for the counts and the entries: a failure recorded
	// between two reads showed an entry under no colônia.
	err := r.c.Snapshot(ctx, func(c Conn) error {
		rows, err := c.Query(ctx, `SELECT colonia, count(*) FROM dead_letter_queue
			WHERE status IN ('pendente', 'retrying') GROUP BY colonia`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var colonia string
			var n int
			if err := rows.Scan(&colonia, &n); err != nil {
				rows.Close()
				return err
			}
			st.PendentesPorColonia[colonia] = n
			st.TotalPendentes += n
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		entries, err := c.Query(ctx, `SELECT `+dlqColumns+` FROM dead_letter_queue
			WHERE status IN ('pendente', 'retrying') ORDER BY id DESC LIMIT ?`, limit)
		if err != nil {
			return err
		}
		st.Entradas, err = Collect(entries, scanDLQ)
		return err
	})
	if err != nil {
		return st, fmt.Errorf("DLQ stats: %w", err)
	}
	return st, nil
}
