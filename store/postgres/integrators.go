package postgres

import (
	"context"

	"geohub/app"
	"geohub/store/query"
)

// The integrators' cadastro (SPEC 6.1) on PostgreSQL, as package store's
// SQLite (store/integrators.go). Each change writes its audit entry in its
// own transaction, as Append does (tx.audit).
//
// IntegratorStore's AuditLog (AppendAudit) is the audit trail's, not this
// file's; once it is there, *DB is an app.IntegratorStore.
//
// A change to an integrator's row declares its key (writer.go), as the
// dispatcher's failing periods do, and a change to the cadastro also the
// cadastro's: each moves cadastro_versao's one row (a trigger of schema
// migration 2), which the key stands for, so no batch waits for that row
// while another holds what it waits for.

// InsertIntegrator implements app.IntegratorStore.
func (db *DB) InsertIntegrator(ctx context.Context, in app.Integrator, sealedSecret []byte, apiKeyHash string, audit *app.AuditEntry) error {
	return db.locked(ctx, cadastroKeys(in.ID), func(tx *wtx) error {
		_, err := tx.Exec(tx.ctx, `INSERT INTO integrator (id, nome, callback_url, hosts_permitidos, eventos,
			backoff, ativo, motivo_inativo, segredo, api_key_hash, criado_em, atualizado_em)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
			in.ID, in.Nome, in.CallbackURL, query.JSONList(in.HostsPermitidos), query.JSONList(in.Eventos), query.JSONList(in.Backoff),
			in.Ativo, in.MotivoInativo, sealedSecret, apiKeyHash, ms(in.CriadoEm), ms(in.AtualizadoEm))
		if err != nil {
			return err
		}
		return tx.audit(audit, ms(db.now()))
	})
}

// UpdateIntegrator implements app.IntegratorStore.
func (db *DB) UpdateIntegrator(ctx context.Context, in app.Integrator, audit *app.AuditEntry) error {
	return db.locked(ctx, cadastroKeys(in.ID), func(tx *wtx) error {
		// falhando_desde is the dispatcher's to extend; an update only ever
		// clears it (a reactivation).
		tag, err := tx.Exec(tx.ctx, `UPDATE integrator SET nome = $1, callback_url = $2, hosts_permitidos = $3,
			eventos = $4, backoff = $5, ativo = $6, motivo_inativo = $7, atualizado_em = $8,
			falhando_desde = CASE WHEN $9::boolean THEN NULL ELSE falhando_desde END WHERE id = $10`,
			in.Nome, in.CallbackURL, query.JSONList(in.HostsPermitidos), query.JSONList(in.Eventos), query.JSONList(in.Backoff),
			in.Ativo, in.MotivoInativo, ms(in.AtualizadoEm), in.FalhandoDesde == nil, in.ID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return app.ErrNotFound
		}
		return tx.audit(audit, ms(db.now()))
	})
}

// SetIntegratorSecret implements app.IntegratorStore.
func (db *DB) SetIntegratorSecret(ctx context.Context, id string, s app.IntegratorSecrets, audit *app.AuditEntry) error {
	return db.locked(ctx, cadastroKeys(id), func(tx *wtx) error {
		tag, err := tx.Exec(tx.ctx, `UPDATE integrator SET segredo = $1, segredo_anterior = $2,
			segredo_anterior_ate = $3, atualizado_em = $4 WHERE id = $5`,
			s.Atual, s.Anterior, ms(s.AnteriorAte), ms(db.now()), id)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return app.ErrNotFound
		}
		return tx.audit(audit, ms(db.now()))
	})
}

// SetIntegratorAPIKey implements app.IntegratorStore. api_key_hash is
// UNIQUE, so updating it locks the row FOR UPDATE, not FOR NO KEY UPDATE,
// and that conflicts with the FOR KEY SHARE of the foreign-key check of
// every outbox row inserted for the integrator, which appends take while
// they hold log_head. In a group commit beside an append, it would hold
// the row while waiting for log_head, and another replica's append would
// hold log_head while waiting for the row. So it runs alone: its
// transaction waits (for the keys, then the row) holding nothing, and once
// it holds the row it waits for nothing.
func (db *DB) SetIntegratorAPIKey(ctx context.Context, id, hash string, audit *app.AuditEntry) error {
	return db.submit(ctx, &op{alone: true, keys: cadastroKeys(id), fn: func(tx *wtx) error {
		tag, err := tx.Exec(tx.ctx, `UPDATE integrator SET api_key_hash = $1, atualizado_em = $2 WHERE id = $3`,
			hash, ms(db.now()), id)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return app.ErrNotFound
		}
		// A portal session opened with the replaced key (or any other)
		// ends with it: a leaked key's session must not outlive it.
		if _, err := tx.Exec(tx.ctx, `DELETE FROM portal_session WHERE integrador_id = $1`, id); err != nil {
			return err
		}
		return tx.audit(audit, ms(db.now()))
	}})
}

// cadastroKeys are the keys of a change to integrator id's record.
func cadastroKeys(id string) []lockKey {
	return []lockKey{key("cadastro"), key("integrator", id)}
}
