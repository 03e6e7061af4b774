package postgres

import (
	"context"
	"time"

	"geohub/app"
)

var _ app.SessionStore = (*DB)(nil)

// InsertSession implements app.SessionStore. Sessions live in the
// database, so every replica behind the load balancer knows them.
//
// Expired sessions go with each login: no sweeper needed. One that another
// transaction is deleting meanwhile is skipped, so that a login never
// waits for another replica's.
func (db *DB) InsertSession(ctx context.Context, hash, operadorID string, criado, expira time.Time, audit *app.AuditEntry) error {
	return db.do(ctx, func(tx *wtx) error {
		if _, err := tx.Exec(tx.ctx, `DELETE FROM operator_session WHERE hash IN (SELECT hash FROM operator_session
			WHERE expira_em <= $1 FOR UPDATE SKIP LOCKED)`, ms(criado)); err != nil {
			return err
		}
		if _, err := tx.Exec(tx.ctx, `INSERT INTO operator_session (hash, operador_id, criado_em, expira_em)
			VALUES ($1, $2, $3, $4)`, hash, operadorID, ms(criado), ms(expira)); err != nil {
			return err
		}
		return tx.audit(audit, ms(db.now()))
	})
}

// ExtendSession implements app.SessionStore.
func (db *DB) ExtendSession(ctx context.Context, hash string, now time.Time, idle, ttl time.Duration) error {
	return db.do(ctx, func(tx *wtx) error {
		_, err := tx.Exec(tx.ctx, `UPDATE operator_session SET expira_em = LEAST($1, criado_em + $2)
			WHERE hash = $3 AND expira_em > $4 AND expira_em < LEAST($1, criado_em + $2) - 60000`,
			ms(now.Add(idle)), ttl.Milliseconds(), hash, ms(now))
		return err
	})
}

// DeleteSession implements app.SessionStore.
func (db *DB) DeleteSession(ctx context.Context, hash string, audit *app.AuditEntry) error {
	return db.locked(ctx, accountKeys, func(tx *wtx) error {
		tag, err := tx.Exec(tx.ctx, `DELETE FROM operator_session WHERE hash = $1`, hash)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return nil // gone already (expired, or ended elsewhere): nothing to record
		}
		return tx.audit(audit, ms(db.now()))
	})
}

// SetOperatorPassword implements app.SessionStore. It ends the operator's
// other sessions in the same transaction: a changed password locks out
// whoever knew the old one.
func (db *DB) SetOperatorPassword(ctx context.Context, operadorID, senhaHash, keepSession string, audit *app.AuditEntry) error {
	return db.locked(ctx, accountKeys, func(tx *wtx) error {
		tag, err := tx.Exec(tx.ctx, `UPDATE operator SET senha_hash = $1 WHERE id = $2`, senhaHash, operadorID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return app.ErrNotFound
		}
		if _, err = tx.Exec(tx.ctx, `DELETE FROM operator_session WHERE operador_id = $1 AND hash <> $2`,
			operadorID, keepSession); err != nil {
			return err
		}
		return tx.audit(audit, ms(db.now()))
	})
}

// ResetOperatorPassword implements app.SessionStore: a new password and no
// session left.
func (db *DB) ResetOperatorPassword(ctx context.Context, actorID, operadorID, senhaHash string, audit *app.AuditEntry) error {
	return db.changeOperator(ctx, actorID, operadorID, `UPDATE operator SET senha_hash = $1 WHERE id = $2`,
		senhaHash, true, audit, "")
}

// SetOperatorActive implements app.SessionStore. The account's sessions go
// either way, so a login that raced a deactivation cannot come back with a
// later reactivation.
func (db *DB) SetOperatorActive(ctx context.Context, actorID, operadorID string, ativo bool, audit *app.AuditEntry) error {
	if actorID == "" {
		return errNoActor
	}
	return db.changeOperator(ctx, actorID, operadorID, `UPDATE operator SET ativo = $1 WHERE id = $2`,
		ativo, true, audit, "ativo")
}

// SetOperatorRole implements app.SessionStore. Sessions stay: each request
// reads the role afresh.
func (db *DB) SetOperatorRole(ctx context.Context, actorID, operadorID string, papel app.Papel, audit *app.AuditEntry) error {
	if actorID == "" {
		return errNoActor
	}
	return db.changeOperator(ctx, actorID, operadorID, `UPDATE operator SET papel = $1 WHERE id = $2`,
		string(papel), false, audit, "papel")
}

// changeOperator is one admin change to an account, in one transaction:
// the actor check (none for actorID "", the server's own operator), the
// update (one value, then the account's id), ErrNotFound for an unknown
// account, the end of its sessions when endSessions, and the audit entry,
// which gets the account's login and, when column names the changed one
// (ativo or papel), the value it had.
func (db *DB) changeOperator(ctx context.Context, actorID, operadorID, update string, value any, endSessions bool,
	audit *app.AuditEntry, column string) error {
	return db.locked(ctx, accountKeys, func(tx *wtx) error {
		if actorID != "" {
			if err := requireActiveAdmin(tx, actorID); err != nil {
				return err
			}
		}
		if audit != nil {
			var login, papel string
			var ativo bool
			err := tx.QueryRow(tx.ctx, `SELECT login, papel, ativo FROM operator WHERE id = $1`, operadorID).Scan(&login, &papel, &ativo)
			if isNoRows(err) {
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
		tag, err := tx.Exec(tx.ctx, update, value, operadorID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return app.ErrNotFound
		}
		if endSessions {
			if _, err := tx.Exec(tx.ctx, `DELETE FROM operator_session WHERE operador_id = $1`, operadorID); err != nil {
				return err
			}
		}
		return tx.audit(audit, ms(db.now()))
	})
}

// errNoActor: deactivations and role changes are an admin's, never the
// server's own (which has no account to keep active).
var errNoActor = app.Errorf(app.EForbidden, "sua conta não é mais de um administrador ativo")

// accountKeys serialise the changes to operator accounts and their
// sessions across replicas, until the transaction ends. In SQLite the one
// writer does that; here two replicas could otherwise each see the other
// admin still active (READ COMMITTED reads what committed before each
// statement), and two admins deactivating or demoting each other at once
// would both succeed and leave nobody to undo it. It is a key of the
// batch (writer.go), taken before any statement in one order with the
// batch's other keys, and a transaction lock, so a connection pooler in
// transaction mode cannot leave it held. Account changes are rare: the
// wait is nothing.
var accountKeys = []lockKey{key("accounts")}

// requireActiveAdmin refuses a change to the accounts unless actorID is
// still an active admin inside the transaction that makes it, which holds
// accountKeys: no other replica changes an account meanwhile.
func requireActiveAdmin(tx *wtx, actorID string) error {
	var admins int
	if err := tx.QueryRow(tx.ctx, `SELECT count(*) FROM operator WHERE id = $1 AND ativo AND papel = 'admin'`,
		actorID).Scan(&admins); err != nil {
		return err
	}
	if admins == 0 {
		return app.Errorf(app.EForbidden, "sua conta não é mais de um administrador ativo")
	}
	return nil
}
