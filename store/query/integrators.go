package query

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"geohub/app"
)

// IntegratorColumns are what ScanIntegrator reads, in its order.
const IntegratorColumns = `id, nome, entrega, callback_url, hosts_permitidos, eventos, backoff, ativo, motivo_inativo,
	falhando_desde, ultimo_sucesso_em, criado_em, atualizado_em`

// ScanIntegrator reads one integrator row of IntegratorColumns; no row is
// app.ErrNotFound.
func ScanIntegrator(row Row) (app.Integrator, error) {
	var in app.Integrator
	var hosts, eventos, backoff string
	var criado, atualizado int64
	var falhando, sucesso sql.NullInt64
	err := row.Scan(&in.ID, &in.Nome, &in.Entrega, &in.CallbackURL, &hosts, &eventos, &backoff, &in.Ativo, &in.MotivoInativo,
		&falhando, &sucesso, &criado, &atualizado)
	if errors.Is(err, sql.ErrNoRows) {
		return in, app.ErrNotFound
	}
	if err != nil {
		return in, err
	}
	in.CriadoEm, in.AtualizadoEm = FromMS(criado), FromMS(atualizado)
	in.UltimoSucesso = fromNullMS(sucesso)
	in.FalhandoDesde = fromNullMS(falhando)
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

// JSONList is a text column's JSON array of v, [] for none.
func JSONList(v []string) string {
	if v == nil {
		v = []string{}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// Integrators implements app.IntegratorStore.
func (r *Reads) Integrators(ctx context.Context) ([]app.Integrator, error) {
	rows, err := r.c.Query(ctx, `SELECT `+IntegratorColumns+` FROM integrator ORDER BY nome`+r.d.Bytes+`, id`+r.d.Bytes)
	if err != nil {
		return nil, fmt.Errorf("list integrators: %w", err)
	}
	out, err := Collect(rows, ScanIntegrator)
	if len(out) == 0 {
		out = nil
	}
	return out, err
}

// Integrator implements app.IntegratorStore.
func (r *Reads) Integrator(ctx context.Context, id string) (app.Integrator, error) {
	return ScanIntegrator(r.c.QueryRow(ctx, `SELECT `+IntegratorColumns+` FROM integrator WHERE id = ?`, id))
}

// IntegratorByAPIKey implements app.IntegratorStore.
func (r *Reads) IntegratorByAPIKey(ctx context.Context, hash string) (app.Integrator, error) {
	return ScanIntegrator(r.c.QueryRow(ctx, `SELECT `+IntegratorColumns+` FROM integrator WHERE api_key_hash = ?`, hash))
}

// IntegratorSecrets implements app.IntegratorStore: the sealed secrets.
func (r *Reads) IntegratorSecrets(ctx context.Context, id string) (app.IntegratorSecrets, error) {
	var s app.IntegratorSecrets
	var ate sql.NullInt64
	err := r.c.QueryRow(ctx, `SELECT segredo, segredo_anterior, segredo_anterior_ate
		FROM integrator WHERE id = ?`, id).Scan(&s.Atual, &s.Anterior, &ate)
	if errors.Is(err, sql.ErrNoRows) {
		return s, app.ErrNotFound
	}
	if ate.Valid {
		s.AnteriorAte = FromMS(ate.Int64)
	}
	return s, err
}

// Backlogs implements app.IntegratorStore: two counts over the partial
// indexes of the live rows (pendente, processando), never the delivered
// history.
func (r *Reads) Backlogs(ctx context.Context, ids ...string) (map[string]int, error) {
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
	rows, err := r.c.Query(ctx, `SELECT integrador_id, count(*) FROM `+r.d.Indexed("outbox", "outbox_due_idx")+`
		WHERE status = 'pendente' `+cond+` GROUP BY integrador_id
		UNION ALL SELECT integrador_id, count(*) FROM `+r.d.Indexed("outbox", "outbox_inflight_idx")+`
		WHERE status = 'processando' `+cond+` GROUP BY integrador_id`, args...)
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

// cadastroLocks are the locks of a change to integrator id's record: its
// row, and the cadastro's version, which every such change moves (a
// trigger), so that no batch waits for that row while another holds what
// it waits for.
func cadastroLocks(id string) []Lock { return []Lock{{"cadastro"}, {"integrator", id}} }

// InsertIntegrator implements app.IntegratorStore.
func (w *Writes) InsertIntegrator(ctx context.Context, in app.Integrator, sealedSecret []byte, apiKeyHash string, audit *app.AuditEntry) error {
	if in.Entrega == "" {
		in.Entrega = app.EntregaCallback // the zero value: what every integrator was before SPEC 8d
	}
	return w.w.Write(ctx, Op{Locks: cadastroLocks(in.ID)}, func(tx Tx) error {
		_, err := tx.Exec(`INSERT INTO integrator (id, nome, entrega, callback_url, hosts_permitidos, eventos,
			backoff, ativo, motivo_inativo, segredo, api_key_hash, criado_em, atualizado_em)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			in.ID, in.Nome, in.Entrega, in.CallbackURL, JSONList(in.HostsPermitidos), JSONList(in.Eventos), JSONList(in.Backoff),
			in.Ativo, in.MotivoInativo, sealedSecret, apiKeyHash, MS(in.CriadoEm), MS(in.AtualizadoEm))
		if err != nil {
			return err
		}
		return tx.Audit(audit)
	})
}

// UpdateIntegrator implements app.IntegratorStore.
func (w *Writes) UpdateIntegrator(ctx context.Context, in app.Integrator, audit *app.AuditEntry) error {
	return w.w.Write(ctx, Op{Locks: cadastroLocks(in.ID)}, func(tx Tx) error {
		// falhando_desde is the dispatcher's to extend; an update only ever
		// clears it (a reactivation).
		n, err := tx.Exec(`UPDATE integrator SET nome = ?, callback_url = ?, hosts_permitidos = ?,
			eventos = ?, backoff = ?, ativo = ?, motivo_inativo = ?, atualizado_em = ?,
			falhando_desde = CASE WHEN ? THEN NULL ELSE falhando_desde END WHERE id = ?`,
			in.Nome, in.CallbackURL, JSONList(in.HostsPermitidos), JSONList(in.Eventos), JSONList(in.Backoff),
			in.Ativo, in.MotivoInativo, MS(in.AtualizadoEm), in.FalhandoDesde == nil, in.ID)
		if err != nil {
			return err
		}
		if n == 0 {
			return app.ErrNotFound
		}
		return tx.Audit(audit)
	})
}

// SetIntegratorSecret implements app.IntegratorStore.
func (w *Writes) SetIntegratorSecret(ctx context.Context, id string, s app.IntegratorSecrets, audit *app.AuditEntry) error {
	return w.w.Write(ctx, Op{Locks: cadastroLocks(id)}, func(tx Tx) error {
		n, err := tx.Exec(`UPDATE integrator SET segredo = ?, segredo_anterior = ?,
			segredo_anterior_ate = ?, atualizado_em = ? WHERE id = ?`,
			s.Atual, s.Anterior, MS(s.AnteriorAte), MS(tx.Now()), id)
		if err != nil {
			return err
		}
		if n == 0 {
			return app.ErrNotFound
		}
		return tx.Audit(audit)
	})
}

// SetIntegratorAPIKey implements app.IntegratorStore. A portal session
// opened with the replaced key (or any other) ends with it: a leaked key's
// session must not outlive it.
//
// It runs alone on PostgreSQL: api_key_hash is UNIQUE, so updating it
// locks the row FOR UPDATE, not FOR NO KEY UPDATE, and that conflicts with
// the FOR KEY SHARE of the foreign-key check of every outbox row inserted
// for the integrator, which appends take while they hold log_head. In a
// group commit beside an append, it would hold the row while waiting for
// log_head, and another replica's append would hold log_head while waiting
// for the row. Alone, its transaction waits (for the locks, then the row)
// holding nothing, and once it holds the row it waits for nothing.
func (w *Writes) SetIntegratorAPIKey(ctx context.Context, id, hash string, audit *app.AuditEntry) error {
	return w.w.Write(ctx, Op{Locks: cadastroLocks(id), Alone: true}, func(tx Tx) error {
		n, err := tx.Exec(`UPDATE integrator SET api_key_hash = ?, atualizado_em = ? WHERE id = ?`, hash, MS(tx.Now()), id)
		if err != nil {
			return err
		}
		if n == 0 {
			return app.ErrNotFound
		}
		if _, err := tx.Exec(`DELETE FROM portal_session WHERE integrador_id = ?`, id); err != nil {
			return err
		}
		return tx.Audit(audit)
	})
}
