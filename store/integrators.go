package store

import (
	"context"

	"geohub/app"
	"geohub/store/query"
)

// InsertIntegrator implements app.IntegratorStore.
func (db *DB) InsertIntegrator(ctx context.Context, in app.Integrator, sealedSecret []byte, apiKeyHash string, audit *app.AuditEntry) error {
	return db.do(ctx, func(tx *wtx) error {
		_, err := tx.Exec(`INSERT INTO integrator (id, nome, callback_url, hosts_permitidos, eventos,
			backoff, ativo, motivo_inativo, segredo, api_key_hash, criado_em, atualizado_em)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
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
	return db.do(ctx, func(tx *wtx) error {
		// falhando_desde is the dispatcher's to extend; an update only ever
		// clears it (a reactivation).
		res, err := tx.Exec(`UPDATE integrator SET nome = ?, callback_url = ?, hosts_permitidos = ?,
			eventos = ?, backoff = ?, ativo = ?, motivo_inativo = ?, atualizado_em = ?,
			falhando_desde = CASE WHEN ? THEN NULL ELSE falhando_desde END WHERE id = ?`,
			in.Nome, in.CallbackURL, query.JSONList(in.HostsPermitidos), query.JSONList(in.Eventos), query.JSONList(in.Backoff),
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
