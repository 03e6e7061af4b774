package query

import (
	"context"
	"fmt"
	"time"

	"geohub/app"
)

// Circuits implements app.CircuitStore.
func (r *Reads) Circuits(ctx context.Context) ([]app.StoredCircuit, error) {
	rows, err := r.c.Query(ctx, `SELECT integrador_id, aberto, desde, ate, cooldown_ms, falhas, origem, versao
		FROM circuito ORDER BY integrador_id`)
	if err != nil {
		return nil, fmt.Errorf("read circuits: %w", err)
	}
	out, err := Collect(rows, func(row Row) (app.StoredCircuit, error) {
		var c app.StoredCircuit
		var desde, ate, cooldown int64
		if err := row.Scan(&c.Integrador, &c.Aberto, &desde, &ate, &cooldown, &c.Falhas, &c.Origem, &c.Versao); err != nil {
			return c, err
		}
		if c.Aberto {
			c.Desde, c.Ate = FromMS(desde), FromMS(ate)
		}
		c.Cooldown = time.Duration(cooldown) * time.Millisecond
		return c, nil
	})
	if err != nil {
		return nil, fmt.Errorf("read circuits: %w", err)
	}
	if len(out) == 0 {
		out = nil
	}
	return out, nil
}

// CadastroVersion implements app.CadastroVersioner: triggers on the
// integrator table move it.
func (r *Reads) CadastroVersion(ctx context.Context) (int64, error) {
	var v int64
	if err := r.c.QueryRow(ctx, `SELECT versao FROM cadastro_versao WHERE id = 1`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read cadastro version: %w", err)
	}
	return v, nil
}

// SaveCircuits implements app.CircuitStore, beside the dispatcher's
// outcomes. Each circuit's row is behind its lock, which PostgreSQL's
// batches take in one global order with every other: two replicas' batches
// that both write circuits take turns instead of locking the rows in
// opposite orders.
func (w *Writes) SaveCircuits(ctx context.Context, cs []app.StoredCircuit) error {
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = c.Integrador
	}
	err := w.w.Write(ctx, Op{Locks: sortedLocks("circuit", ids)}, func(tx Tx) error {
		for _, c := range cs {
			var desde, ate int64
			if c.Aberto {
				desde, ate = MS(c.Desde), MS(c.Ate)
			}
			if _, err := tx.Exec(`INSERT INTO circuito (integrador_id, aberto, desde, ate, cooldown_ms, falhas, origem, versao)
				VALUES (?, ?, ?, ?, ?, ?, ?, 1)
				ON CONFLICT (integrador_id) DO UPDATE SET aberto = excluded.aberto, desde = excluded.desde,
					ate = excluded.ate, cooldown_ms = excluded.cooldown_ms, falhas = excluded.falhas,
					origem = excluded.origem, versao = circuito.versao + 1`,
				c.Integrador, c.Aberto, desde, ate, c.Cooldown.Milliseconds(), c.Falhas, c.Origem); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("save circuits: %w", err)
	}
	return nil
}
