package query

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"geohub/app"
)

// Operator accounts, their sessions and the API tokens. Every change to an
// account or its sessions holds the accounts lock: on PostgreSQL two
// replicas could otherwise each see the other admin still active (READ
// COMMITTED reads what committed before each statement), and two admins
// deactivating or demoting each other at once would both succeed and leave
// nobody to undo it. Account changes are rare: the wait is nothing.
var accountsLock = []Lock{{"accounts"}}

// InsertSession implements app.SessionStore. Sessions live in the
// database, so every replica behind a load balancer knows them. Expired
// sessions go with each login: no sweeper needed.
func (w *Writes) InsertSession(ctx context.Context, hash, operadorID string, criado, expira time.Time, audit *app.AuditEntry) error {
	return w.w.Write(ctx, Op{}, func(tx Tx) error {
		if _, err := tx.Exec(w.sweep("operator_session", "hash", "expira_em <= ?"), MS(criado)); err != nil {
			return err
		}
		if _, err := tx.Exec(`INSERT INTO operator_session (hash, operador_id, criado_em, expira_em) VALUES (?, ?, ?, ?)`,
			hash, operadorID, MS(criado), MS(expira)); err != nil {
			return err
		}
		return tx.Audit(audit)
	})
}

// ExtendSession implements app.SessionStore: idle more from now, never past
// the session's ttl, and written at most once a minute.
func (w *Writes) ExtendSession(ctx context.Context, hash string, now time.Time, idle, ttl time.Duration) error {
	return w.w.Write(ctx, Op{}, func(tx Tx) error {
		end := w.d.Least + "(?, criado_em + ?)"
		_, err := tx.Exec(`UPDATE operator_session SET expira_em = `+end+`
			WHERE hash = ? AND expira_em > ? AND expira_em < `+end+` - 60000`,
			MS(now.Add(idle)), ttl.Milliseconds(), hash, MS(now), MS(now.Add(idle)), ttl.Milliseconds())
		return err
	})
}

// DeleteSession implements app.SessionStore.
func (w *Writes) DeleteSession(ctx context.Context, hash string, audit *app.AuditEntry) error {
	return w.w.Write(ctx, Op{Locks: accountsLock}, func(tx Tx) error {
		n, err := tx.Exec(`DELETE FROM operator_session WHERE hash = ?`, hash)
		if err != nil || n == 0 {
			return err // none: gone already (expired, or ended elsewhere), nothing to record
		}
		return tx.Audit(audit)
	})
}

// SetOperatorPassword implements app.SessionStore. It ends the operator's
// other sessions in the same transaction: a changed password locks out
// whoever knew the old one.
func (w *Writes) SetOperatorPassword(ctx context.Context, operadorID, senhaHash, keepSession string, audit *app.AuditEntry) error {
	return w.w.Write(ctx, Op{Locks: accountsLock}, func(tx Tx) error {
		n, err := tx.Exec(`UPDATE operator SET senha_hash = ? WHERE id = ?`, senhaHash, operadorID)
		if err != nil {
			return err
		}
		if n == 0 {
			return app.ErrNotFound
		}
		if _, err = tx.Exec(`DELETE FROM operator_session WHERE operador_id = ? AND hash <> ?`, operadorID, keepSession); err != nil {
			return err
		}
		return tx.Audit(audit)
	})
}

// ResetOperatorPassword implements app.SessionStore: a new password and no
// session left.
func (w *Writes) ResetOperatorPassword(ctx context.Context, actorID, operadorID, senhaHash string, audit *app.AuditEntry) error {
	return w.changeOperator(ctx, actorID, operadorID, `UPDATE operator SET senha_hash = ? WHERE id = ?`, senhaHash, true, audit, "")
}

// SetOperatorActive implements app.SessionStore. The account's sessions go
// either way, so a login that raced a deactivation cannot come back with a
// later reactivation.
func (w *Writes) SetOperatorActive(ctx context.Context, actorID, operadorID string, ativo bool, audit *app.AuditEntry) error {
	if actorID == "" {
		return app.ErrNoActiveAdmin
	}
	return w.changeOperator(ctx, actorID, operadorID, `UPDATE operator SET ativo = ? WHERE id = ?`, ativo, true, audit, "ativo")
}

// SetOperatorRole implements app.SessionStore. Sessions stay: each request
// reads the role afresh.
func (w *Writes) SetOperatorRole(ctx context.Context, actorID, operadorID string, papel app.Papel, audit *app.AuditEntry) error {
	if actorID == "" {
		return app.ErrNoActiveAdmin
	}
	return w.changeOperator(ctx, actorID, operadorID, `UPDATE operator SET papel = ? WHERE id = ?`, string(papel), false, audit, "papel")
}

// changeOperator is one admin change to an account, in one transaction:
// the actor check (none for actorID "", the server's own operator), the
// update (one value, then the account's id), ErrNotFound for an unknown
// account, the end of its sessions when endSessions, and the audit entry,
// which gets the account's login and, when column names the changed one
// (ativo or papel), the value it had.
func (w *Writes) changeOperator(ctx context.Context, actorID, operadorID, update string, value any, endSessions bool,
	audit *app.AuditEntry, column string) error {
	return w.w.Write(ctx, Op{Locks: accountsLock}, func(tx Tx) error {
		if actorID != "" {
			if err := requireActiveAdmin(tx, actorID); err != nil {
				return err
			}
		}
		if audit != nil {
			var login, papel string
			var ativo bool
			err := tx.QueryRow(`SELECT login, papel, ativo FROM operator WHERE id = ?`, operadorID).Scan(&login, &papel, &ativo)
			if errors.Is(err, sql.ErrNoRows) {
				return app.ErrNotFound
			}
			if err != nil {
				return err
			}
			audit.Alvo.Nome = login
			switch column {
			case "ativo":
				audit.SetOld("ativo", ativo)
			case "papel":
				audit.SetOld("papel", papel)
			}
		}
		n, err := tx.Exec(update, value, operadorID)
		if err != nil {
			return err
		}
		if n == 0 {
			return app.ErrNotFound
		}
		if endSessions {
			if _, err := tx.Exec(`DELETE FROM operator_session WHERE operador_id = ?`, operadorID); err != nil {
				return err
			}
		}
		return tx.Audit(audit)
	})
}

// requireActiveAdmin refuses a change to the accounts unless actorID is
// still an active admin inside the transaction that makes it (which holds
// the accounts lock).
func requireActiveAdmin(tx Tx, actorID string) error {
	var admins int
	if err := tx.QueryRow(`SELECT count(*) FROM operator WHERE id = ? AND ativo = TRUE AND papel = 'admin'`,
		actorID).Scan(&admins); err != nil {
		return err
	}
	if admins == 0 {
		return app.ErrNoActiveAdmin
	}
	return nil
}

// InsertOperator implements app.AuthStore; false when the login exists.
func (w *Writes) InsertOperator(ctx context.Context, actorID string, o app.Operator, senhaHash string, audit *app.AuditEntry) (bool, error) {
	var created bool
	err := w.w.Write(ctx, Op{Locks: accountsLock}, func(tx Tx) error {
		created = false
		if actorID != "" {
			if err := requireActiveAdmin(tx, actorID); err != nil {
				return err
			}
		}
		n, err := tx.Exec(`INSERT INTO operator (id, login, senha_hash, papel, criado_em)
			VALUES (?, ?, ?, ?, ?) ON CONFLICT (login) DO NOTHING`, o.ID, o.Login, senhaHash, string(o.Papel), MS(o.CriadoEm))
		if err != nil {
			return err
		}
		if created = n == 1; !created {
			return nil
		}
		return tx.Audit(audit)
	})
	return created, err
}

// InsertToken implements app.AuthStore.
func (w *Writes) InsertToken(ctx context.Context, t app.Token, hash string, audit *app.AuditEntry) error {
	return w.w.Write(ctx, Op{}, func(tx Tx) error {
		if _, err := tx.Exec(`INSERT INTO api_token (id, nome, papel, hash, criado_em) VALUES (?, ?, ?, ?, ?)`,
			t.ID, t.Nome, string(t.Papel), hash, MS(t.CriadoEm)); err != nil {
			return err
		}
		return tx.Audit(audit)
	})
}

// RevokeToken implements app.AuthStore.
func (w *Writes) RevokeToken(ctx context.Context, id string, at time.Time, audit *app.AuditEntry) error {
	return w.w.Write(ctx, Op{Locks: []Lock{{"token", id}}}, func(tx Tx) error {
		var nome string
		err := tx.QueryRow(`UPDATE api_token SET revogado_em = ? WHERE id = ? AND revogado_em IS NULL
			RETURNING nome`, MS(at), id).Scan(&nome)
		if errors.Is(err, sql.ErrNoRows) {
			return app.ErrNotFound
		}
		if err != nil {
			return err
		}
		if audit != nil && audit.Alvo.Nome == "" {
			audit.Alvo.Nome = nome
		}
		return tx.Audit(audit)
	})
}
