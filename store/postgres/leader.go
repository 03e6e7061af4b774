package postgres

import (
	"context"
	"fmt"
	"time"

	"geohub/app"
)

var _ app.LeaderStore = (*DB)(nil)

// The election follows River's (internal/leadership): one row, lider, names
// the replica whose term runs, the term's number and when it expires by
// the database's clock, so replicas whose clocks disagree still agree on
// who leads. The row outlives its terms, so mandato only grows: a term is
// named by (replica, mandato), and a replica that lost its term cannot
// renew or resign a later one, its own included. Each method is a single
// statement in a transaction of its own, on the pool: no advisory lock or
// LISTEN, nothing a transaction-pooling PgBouncer would lose between
// statements.

// agora is the database's clock in the schema's unix milliseconds.
const agora = `(extract(epoch FROM clock_timestamp()) * 1000)::bigint`

// electSQL takes the row when it is absent, or its term expired (resigned
// terms expire at once), or the term is this replica's own (it stepped down
// without knowing whether its last renewal committed): a new term each time.
const electSQL = `WITH agora AS (SELECT ` + agora + ` AS ms)
	INSERT INTO lider AS l (id, replica, mandato, eleito_em, expira_em)
	SELECT 1, $1, 1, ms, ms + $2 FROM agora
	ON CONFLICT (id) DO UPDATE SET replica = EXCLUDED.replica, mandato = l.mandato + 1,
		eleito_em = EXCLUDED.eleito_em, expira_em = EXCLUDED.expira_em
		WHERE l.expira_em <= EXCLUDED.eleito_em OR l.replica = EXCLUDED.replica
	RETURNING mandato`

// Elect implements app.LeaderStore.
func (db *DB) Elect(ctx context.Context, replica string, ttl time.Duration) (int64, error) {
	var term int64
	err := db.read.QueryRow(ctx, electSQL, replica, ttl.Milliseconds()).Scan(&term)
	if isNoRows(err) {
		return 0, nil // another replica's term runs
	}
	if err != nil {
		return 0, fmt.Errorf("elect leader: %w", err)
	}
	return term, nil
}

// Renew implements app.LeaderStore. An expired term is not renewed even
// when no one took it yet: its holder already stopped trusting it.
func (db *DB) Renew(ctx context.Context, replica string, term int64, ttl time.Duration) (bool, error) {
	tag, err := db.read.Exec(ctx, `UPDATE lider SET expira_em = `+agora+` + $3
		WHERE id = 1 AND replica = $1 AND mandato = $2 AND expira_em > `+agora,
		replica, term, ttl.Milliseconds())
	if err != nil {
		return false, fmt.Errorf("renew leader's term: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// Resign implements app.LeaderStore: the term expires now, and the
// notification on leaderChannel, sent only if that commits, makes every
// follower stand at once.
func (db *DB) Resign(ctx context.Context, replica string, term int64) error {
	_, err := db.read.Exec(ctx, `WITH fim AS (
			UPDATE lider SET expira_em = `+agora+`
			WHERE id = 1 AND replica = $1 AND mandato = $2 AND expira_em > `+agora+`
			RETURNING replica)
		SELECT pg_notify('`+leaderChannel+`', replica) FROM fim`, replica, term)
	if err != nil {
		return fmt.Errorf("resign leader's term: %w", err)
	}
	return nil
}
