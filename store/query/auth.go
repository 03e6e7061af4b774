package query

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"geohub/app"
)

// TokenByHash implements app.AuthStore: a token not revoked.
func (r *Reads) TokenByHash(ctx context.Context, hash string) (app.Token, error) {
	var t app.Token
	var criado int64
	err := r.c.QueryRow(ctx, `SELECT id, nome, papel, criado_em FROM api_token
		WHERE hash = ? AND revogado_em IS NULL`, hash).Scan(&t.ID, &t.Nome, &t.Papel, &criado)
	if errors.Is(err, sql.ErrNoRows) {
		return t, app.ErrNotFound
	}
	t.CriadoEm = FromMS(criado)
	return t, err
}

// OperatorByLogin implements app.AuthStore: the operator and its password
// hash.
func (r *Reads) OperatorByLogin(ctx context.Context, login string) (app.Operator, string, error) {
	var o app.Operator
	var hash string
	var criado int64
	err := r.c.QueryRow(ctx, `SELECT id, login, senha_hash, papel, criado_em, ativo FROM operator WHERE login = ?`,
		login).Scan(&o.ID, &o.Login, &hash, &o.Papel, &criado, &o.Ativo)
	if errors.Is(err, sql.ErrNoRows) {
		return o, "", app.ErrNotFound
	}
	o.CriadoEm = FromMS(criado)
	return o, hash, err
}

// SessionOperator implements app.SessionStore: the operator of a live
// session.
func (r *Reads) SessionOperator(ctx context.Context, hash string, now time.Time) (app.Operator, error) {
	var o app.Operator
	var criado int64
	// ativo is checked here too, not only by deleting the sessions on
	// deactivation: a login racing the deactivation must not outlive it.
	err := r.c.QueryRow(ctx, `SELECT o.id, o.login, o.papel, o.criado_em, o.ativo
		FROM operator_session s JOIN operator o ON o.id = s.operador_id
		WHERE s.hash = ? AND s.expira_em > ? AND o.ativo = TRUE`, hash, MS(now)).Scan(&o.ID, &o.Login, &o.Papel, &criado, &o.Ativo)
	if errors.Is(err, sql.ErrNoRows) {
		return o, app.ErrNotFound
	}
	o.CriadoEm = FromMS(criado)
	return o, err
}

// Operators implements app.SessionStore.
func (r *Reads) Operators(ctx context.Context) ([]app.Operator, error) {
	rows, err := r.c.Query(ctx, `SELECT id, login, papel, criado_em, ativo FROM operator ORDER BY login`)
	if err != nil {
		return nil, err
	}
	out, err := Collect(rows, func(row Row) (app.Operator, error) {
		var o app.Operator
		var criado int64
		err := row.Scan(&o.ID, &o.Login, &o.Papel, &criado, &o.Ativo)
		o.CriadoEm = FromMS(criado)
		return o, err
	})
	if len(out) == 0 {
		out = nil
	}
	return out, err
}
