package postgres

import (
	"context"
	"fmt"
	"sort"

	"geohub/app"
)

var _ app.ConsumerStore = (*DB)(nil)

// SeedCursor implements app.ConsumerStore.
func (db *DB) SeedCursor(ctx context.Context, colonia, tipo string, seq int64) error {
	return db.locked(ctx, []lockKey{key("cursor", colonia, tipo)}, func(tx *wtx) error {
		_, err := tx.Exec(tx.ctx, `INSERT INTO consumer_cursor (colonia, tipo, last_sequence, atualizado_em)
			VALUES ($1, $2, $3, $4) ON CONFLICT (colonia, tipo) DO NOTHING`, colonia, tipo, seq, ms(db.now()))
		return err
	})
}

// advanceCursorSQL moves one cursor forward, clamped to just before the
// first open failure of its colonia and tipo (one seek of
// dead_letter_queue_open_tipo_idx), and never backwards. The row lock the
// UPDATE takes serialises replicas advancing the same cursor; greatest
// then compares with the value the other one committed. Each cursor's key
// (writer.go) puts the rows of every batch in one lock order.
const advanceCursorSQL = `UPDATE consumer_cursor SET
	last_sequence = greatest(last_sequence, least($3::bigint, coalesce((SELECT min(d.sequence_number) - 1
		FROM dead_letter_queue d WHERE d.status IN ('pendente', 'retrying')
		AND d.colonia = $1 AND d.tipo = $2), $3::bigint))),
	atualizado_em = $4
	WHERE colonia = $1 AND tipo = $2`

// AdvanceCursors implements app.ConsumerStore. The clamp to the first open
// failure is what keeps a cursor from passing a failed event.
func (db *DB) AdvanceCursors(ctx context.Context, colonia string, seqs map[string]int64) error {
	tipos := make([]string, 0, len(seqs))
	for t := range seqs {
		tipos = append(tipos, t)
	}
	sort.Strings(tipos)
	keys := make([]lockKey, len(tipos))
	for i, t := range tipos {
		keys[i] = key("cursor", colonia, t)
	}
	return db.locked(ctx, keys, func(tx *wtx) error {
		for _, tipo := range tipos {
			if _, err := tx.Exec(tx.ctx, advanceCursorSQL, colonia, tipo, seqs[tipo], ms(db.now())); err != nil {
				return fmt.Errorf("advance cursor %s: %w", tipo, err)
			}
		}
		return nil
	})
}

// recordFailureSQL is SQLite's upsert: in SET, d names the stored row
// (before this update) and excluded the proposed one.
const recordFailureSQL = `INSERT INTO dead_letter_queue AS d (event_id, sequence_number, tipo, colonia,
		handler_nome, mensagem_erro, pilha_erro, tentativas, ultima_tentativa, status, criado_em)
	VALUES ($1, $2, $3, $4, $5, $6, $7, 1, $8, 'pendente', $9)
	ON CONFLICT (event_id, colonia) DO UPDATE SET
		mensagem_erro = excluded.mensagem_erro, pilha_erro = excluded.pilha_erro,
		tentativas = d.tentativas + 1, ultima_tentativa = excluded.ultima_tentativa,
		status = CASE WHEN d.status = 'failed_permanent' OR d.tentativas + 1 >= $10 THEN 'failed_permanent'
			ELSE 'pendente' END,
		resolvido_em = CASE WHEN d.status = 'failed_permanent' THEN d.resolvido_em
			WHEN d.tentativas + 1 >= $10 THEN excluded.ultima_tentativa END`

// RecordFailure implements app.ConsumerStore.
func (db *DB) RecordFailure(ctx context.Context, e app.DLQEntry) error {
	return db.locked(ctx, []lockKey{key("dlq", e.EventID, e.Colonia)}, func(tx *wtx) error {
		_, err := tx.Exec(tx.ctx, recordFailureSQL, e.EventID, e.Sequence, e.Tipo, e.Colonia, e.HandlerNome,
			e.MensagemErro, e.PilhaErro, ms(e.UltimaTentativa), ms(e.CriadoEm), app.MaxDLQAttempts)
		return err
	})
}

// SetDLQStatus implements app.ConsumerStore.
func (db *DB) SetDLQStatus(ctx context.Context, eventID, colonia, status string) error {
	return db.locked(ctx, []lockKey{key("dlq", eventID, colonia)}, func(tx *wtx) error {
		var resolved *int64
		if status == app.DLQResolved || status == app.DLQFailedPermanent {
			v := ms(db.now())
			resolved = &v
		}
		tag, err := tx.Exec(tx.ctx, `UPDATE dead_letter_queue SET status = $1, resolvido_em = $2
			WHERE event_id = $3 AND colonia = $4`, status, resolved, eventID, colonia)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return app.ErrNotFound
		}
		return nil
	})
}
