package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"geohub/app"
	"geohub/store/query"
)

const integratorColumns = `id, nome, callback_url, hosts_permitidos, eventos, backoff, ativo, motivo_inativo,
	falhando_desde, ultimo_sucesso_em, criado_em, atualizado_em`

func scanIntegrator(row query.Row) (app.Integrator, error) {
	var in app.Integrator
	var hosts, eventos, backoff string
	var criado, atualizado int64
	var falhando, sucesso sql.NullInt64
	err := row.Scan(&in.ID, &in.Nome, &in.CallbackURL, &hosts, &eventos, &backoff, &in.Ativo, &in.MotivoInativo,
		&falhando, &sucesso, &criado, &atualizado)
	if errors.Is(err, sql.ErrNoRows) {
		return in, app.ErrNotFound
	}
	if err != nil {
		return in, err
	}
	in.CriadoEm, in.AtualizadoEm = fromMS(criado), fromMS(atualizado)
	if sucesso.Valid {
		t := fromMS(sucesso.Int64)
		in.UltimoSucesso = &t
	}
	if falhando.Valid {
		t := fromMS(falhando.Int64)
		in.FalhandoDesde = &t
	}
	for _, f := range []struct {
		raw string
		dst *[]string
	}{{hosts, &in.HostsPermitidos}, {eventos, &in.Eventos}, {backoff, &in.Backoff}} {
		if err := json.Unmarshal([]byte(f.raw), f.dst); err != nil {
			return in, fmt.Errorf("decode integrator %s: %w", in.ID, err)
		}
	}
	if len(in.Backoff) == 0 {
		in.Backoff = nil
	}
	return in, nil
}

func jsonList(v []string) string {
	if v == nil {
		v = []string{}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// InsertIntegrator implements app.IntegratorStore.
func (db *DB) InsertIntegrator(ctx context.Context, in app.Integrator, sealedSecret []byte, apiKeyHash string, audit *app.AuditEntry) error {
	return db.do(ctx, func(tx *wtx) error {
		_, err := tx.Exec(`INSERT INTO integrator (id, nome, callback_url, hosts_permitidos, eventos,
			backoff, ativo, motivo_inativo, segredo, api_key_hash, criado_em, atualizado_em)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			in.ID, in.Nome, in.CallbackURL, jsonList(in.HostsPermitidos), jsonList(in.Eventos), jsonList(in.Backoff),
			in.Ativo, in.MotivoInativo, sealedSecret, apiKeyHash, ms(in.CriadoEm), ms(in.AtualizadoEm))
		if err != nil {
			return err
		}
		return tx.audit(audit, ms(db.now()))
	})
}

// Integrators implements app.IntegratorStore.
func (db *DB) Integrators(ctx context.Context) ([]app.Integrator, error) {
	rows, err := db.read.QueryContext(ctx, `SELECT `+integratorColumns+` FROM integrator ORDER BY nome, id`)
	if err != nil {
		return nil, fmt.Errorf("list integrators: %w", err)
	}
	defer rows.Close()
	var out []app.Integrator
	for rows.Next() {
		in, err := scanIntegrator(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, in)
	}
	return out, rows.Err()
}

// Backlogs implements app.IntegratorStore: two counts over the partial
// indexes of the live rows (pendente, processando), never the delivered
// history.
func (db *DB) Backlogs(ctx context.Context, ids ...string) (map[string]int, error) {
	q := `SELECT integrador_id, count(*) FROM outbox INDEXED BY outbox_due_idx WHERE status = 'pendente' %s GROUP BY integrador_id
		UNION ALL SELECT integrador_id, count(*) FROM outbox INDEXED BY outbox_inflight_idx WHERE status = 'processando' %s GROUP BY integrador_id`
	var args []any
	cond := ""
	if len(ids) > 0 {
		cond = "AND integrador_id IN (?" + strings.Repeat(", ?", len(ids)-1) + ")"
		for range 2 {
			for _, id := range ids {
				args = append(args, id)
			}
		}
	}
	rows, err := db.read.QueryContext(ctx, fmt.Sprintf(q, cond, cond), args...)
	if err != nil {
		return nil, fmt.Errorf("count backlogs: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return nil, fmt.Errorf("count backlogs: %w", err)
		}
		out[id] += n
	}
	return out, rows.Err()
}

// UpdateIntegrator implements app.IntegratorStore.
func (db *DB) UpdateIntegrator(ctx context.Context, in app.Integrator, audit *app.AuditEntry) error {
	return db.do(ctx, func(tx *wtx) error {
		// falhando_desde is the dispatcher's to extend; an update only ever
		// clears it (a reactivation).
		res, err := tx.Exec(`UPDATE integrator SET nome = ?, callback_url = ?, hosts_permitidos = ?,
			eventos = ?, backoff = ?, ativo = ?, motivo_inativo = ?, atualizado_em = ?,
			falhando_desde = CASE WHEN ? THEN NULL ELSE falhando_desde END WHERE id = ?`,
			in.Nome, in.CallbackURL, jsonList(in.HostsPermitidos), jsonList(in.Eventos), jsonList(in.Backoff),
			in.Ativo, in.MotivoInativo, ms(in.AtualizadoEm), in.FalhandoDesde == nil, in.ID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return app.ErrNotFound
		}
		return tx.audit(audit, ms(db.now()))
	})
}

// SetIntegratorSecret implements app.IntegratorStore.
func (db *DB) SetIntegratorSecret(ctx context.Context, id string, s app.IntegratorSecrets, audit *app.AuditEntry) error {
	return db.do(ctx, func(tx *wtx) error {
		res, err := tx.Exec(`UPDATE integrator SET segredo = ?, segredo_anterior = ?,
			segredo_anterior_ate = ?, atualizado_em = ? WHERE id = ?`,
			s.Atual, s.Anterior, ms(s.AnteriorAte), ms(db.now()), id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return app.ErrNotFound
		}
		return tx.audit(audit, ms(db.now()))
	})
}

// SetIntegratorAPIKey implements app.IntegratorStore.
func (db *DB) SetIntegratorAPIKey(ctx context.Context, id, hash string, audit *app.AuditEntry) error {
	return db.do(ctx, func(tx *wtx) error {
		res, err := tx.Exec(`UPDATE integrator SET api_key_hash = ?, atualizado_em = ? WHERE id = ?`, hash, ms(db.now()), id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return app.ErrNotFound
		}
		// A portal session opened with the replaced key (or any other)
		// ends with it: a leaked key's session must not outlive it.
		if _, err := tx.Exec(`DELETE FROM portal_session WHERE integrador_id = ?`, id); err != nil {
			return err
		}
		return tx.audit(audit, ms(db.now()))
	})
}

// IntegratorSecrets implements app.IntegratorStore.
func (db *DB) IntegratorSecrets(ctx context.Context, id string) (app.IntegratorSecrets, error) {
	var s app.IntegratorSecrets
	var ate sql.NullInt64
	err := db.read.QueryRowContext(ctx, `SELECT segredo, segredo_anterior, segredo_anterior_ate
		FROM integrator WHERE id = ?`, id).Scan(&s.Atual, &s.Anterior, &ate)
	if errors.Is(err, sql.ErrNoRows) {
		return s, app.ErrNotFound
	}
	if ate.Valid {
		s.AnteriorAte = fromMS(ate.Int64)
	}
	return s, err
}

// IntegratorByAPIKey implements app.IntegratorStore.
func (db *DB) IntegratorByAPIKey(ctx context.Context, hash string) (app.Integrator, error) {
	return scanIntegrator(db.read.QueryRowContext(ctx, `SELECT `+integratorColumns+` FROM integrator
		WHERE api_key_hash = ?`, hash))
}

// Integrator implements app.IntegratorStore.
func (db *DB) Integrator(ctx context.Context, id string) (app.Integrator, error) {
	return scanIntegrator(db.read.QueryRowContext(ctx, `SELECT `+integratorColumns+` FROM integrator WHERE id = ?`, id))
}
