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
