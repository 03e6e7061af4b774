package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"geohub/app"
)

// InsertSession implements app.SessionStore.
func (db *DB) InsertSession(ctx context.Context, hash, operadorID string, criado, expira time.Time, audit *app.AuditEntry) error {
	return db.do(ctx, func(tx *wtx) error {
		// Expired sessions go with each login: no sweeper needed.
		if _, err := tx.Exec(`DELETE FROM operator_session WHERE expira_em <= ?`, ms(criado)); err != nil {
			return err
		}
		if _, err := tx.Exec(`INSERT INTO operator_session (hash, operador_id, criado_em, expira_em) VALUES (?, ?, ?, ?)`,
			hash, operadorID, ms(criado), ms(expira)); err != nil {
			return err
		}
		return tx.audit(audit, ms(db.now()))
	})
}

// ExtendSession implements app.SessionStore.
func (db *DB) ExtendSession(ctx context.Context, hash string, now time.Time, idle, ttl time.Duration) error {
	return db.do(ctx, func(tx *wtx) error {
		_, err := tx.Exec(`UPDATE operator_session SET expira_em = min(?, criado_em + ?)
			WHERE hash = ? AND expira_em > ? AND expira_em < min(?, criado_em + ?) - 60000`,
			ms(now.Add(idle)), ttl.Milliseconds(), hash, ms(now), ms(now.Add(idle)), ttl.Milliseconds())
		return err
	})
}

// DeleteSession implements app.SessionStore.
func (db *DB) DeleteSession(ctx context.Context, hash string, audit *app.AuditEntry) error {
	return db.do(ctx, func(tx *wtx) error {
		res, err := tx.Exec(`DELETE FROM operator_session WHERE hash = ?`, hash)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return nil // gone already (expired, or ended elsewhere): nothing to record
		}
		return tx.audit(audit, ms(db.now()))
	})
}

// SetOperatorPassword implements app.SessionStore. It ends the operator's
// other sessions in the same transaction: a changed password locks out
// whoever knew the old one.
func (db *DB) SetOperatorPassword(ctx context.Context, operadorID, senhaHash, keepSession string, audit *app.AuditEntry) error {
	return db.do(ctx, func(tx *wtx) error {
		res, err := tx.Exec(`UPDATE operator SET senha_hash = ? WHERE id = ?`, senhaHash, operadorID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return app.ErrNotFound
		}
		if _, err = tx.Exec(`DELETE FROM operator_session WHERE operador_id = ? AND hash <> ?`, operadorID, keepSession); err != nil {
			return err
		}
		return tx.audit(audit, ms(db.now()))
	})
}

// ResetOperatorPassword implements app.SessionStore: a new password and no
// session left.
func (db *DB) ResetOperatorPassword(ctx context.Context, actorID, operadorID, senhaHash string, audit *app.AuditEntry) error {
	return db.changeOperator(ctx, actorID, operadorID, `UPDATE operator SET senha_hash = ? WHERE id = ?`, senhaHash, true, audit, "")
}

// SetOperatorActive implements app.SessionStore. The account's sessions go
// either way, so a login that raced a deactivation cannot come back with a
// later reactivation.
func (db *DB) SetOperatorActive(ctx context.Context, actorID, operadorID string, ativo bool, audit *app.AuditEntry) error {
	if actorID == "" {
		return errNoActor
	}
	return db.changeOperator(ctx, actorID, operadorID, `UPDATE operator SET ativo = ? WHERE id = ?`, ativo, true, audit, "ativo")
}

// SetOperatorRole implements app.SessionStore. Sessions stay: each request
// reads the role afresh.
func (db *DB) SetOperatorRole(ctx context.Context, actorID, operadorID string, papel app.Papel, audit *app.AuditEntry) error {
	if actorID == "" {
		return errNoActor
	}
	return db.changeOperator(ctx, actorID, operadorID, `UPDATE operator SET papel = ? WHERE id = ?`, papel, false, audit, "papel")
}

// changeOperator is one admin change to an account, in one transaction:
// the actor check (none for actorID "", the server's own operator), the
// update (one value, then the account's id), ErrNotFound for an unknown
// account, the end of its sessions when endSessions, and the audit entry,
// which gets the account's login and, when column names the changed one
// (ativo or papel), the value it had.
func (db *DB) changeOperator(ctx context.Context, actorID, operadorID, update string, value any, endSessions bool,
	audit *app.AuditEntry, column string) error {
	return db.do(ctx, func(tx *wtx) error {
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
		res, err := tx.Exec(update, value, operadorID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return app.ErrNotFound
		}
		if endSessions {
			if _, err := tx.Exec(`DELETE FROM operator_session WHERE operador_id = ?`, operadorID); err != nil {
				return err
			}
		}
		return tx.audit(audit, ms(db.now()))
	})
}

// errNoActor: deactivations and role changes are an admin's, never the
// server's own (which has no account to keep active).
var errNoActor = app.Errorf(app.EForbidden, "sua conta não é mais de um administrador ativo")

// requireActiveAdmin refuses a change to the accounts unless actorID is
// still an active admin inside the transaction that makes it: two admins
// deactivating or demoting each other at once would otherwise both succeed
// and leave nobody to undo it.
func requireActiveAdmin(tx *wtx, actorID string) error {
	var admins int
	if err := tx.QueryRow(`SELECT count(*) FROM operator WHERE id = ? AND ativo = 1 AND papel = 'admin'`,
		actorID).Scan(&admins); err != nil {
		return err
	}
	if admins == 0 {
		return app.Errorf(app.EForbidden, "sua conta não é mais de um administrador ativo")
	}
	return nil
}
