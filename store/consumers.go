package store

import (
	"context"
	"fmt"
	"sort"

	"geohub/app"
)

// SeedCursor implements app.ConsumerStore.
func (db *DB) SeedCursor(ctx context.Context, colonia, tipo string, seq int64) error {
	return db.do(ctx, func(tx *wtx) error {
		_, err := tx.Exec(`INSERT INTO consumer_cursor (colonia, tipo, last_sequence, atualizado_em)
			VALUES (?, ?, ?, ?) ON CONFLICT (colonia, tipo) DO NOTHING`, colonia, tipo, seq, ms(db.now()))
		return err
	})
}

// AdvanceCursors implements app.ConsumerStore. The clamp to the first open
// failure is what keeps a cursor from passing a failed event.
func (db *DB) AdvanceCursors(ctx context.Context, colonia string, seqs map[string]int64) error {
	tipos := make([]string, 0, len(seqs))
	for t := range seqs {
		tipos = append(tipos, t)
	}
	sort.Strings(tipos)
	return db.do(ctx, func(tx *wtx) error {
		for _, tipo := range tipos {
			_, err := tx.Exec(`UPDATE consumer_cursor SET
				last_sequence = max(last_sequence, min(?3, coalesce((SELECT min(sequence_number) - 1
					FROM dead_letter_queue WHERE status IN ('pendente', 'retrying')
					AND colonia = ?1 AND tipo = ?2), ?3))),
				atualizado_em = ?4
				WHERE colonia = ?1 AND tipo = ?2`, colonia, tipo, seqs[tipo], ms(db.now()))
			if err != nil {
				return fmt.Errorf("advance cursor %s: %w", tipo, err)
			}
		}
		return nil
	})
}

// RecordFailure implements app.ConsumerStore.
func (db *DB) RecordFailure(ctx context.Context, e app.DLQEntry) error {
	return db.do(ctx, func(tx *wtx) error {
		_, err := tx.Exec(`INSERT INTO dead_letter_queue (event_id, sequence_number, tipo, colonia,
			handler_nome, mensagem_erro, pilha_erro, tentativas, ultima_tentativa, status, criado_em)
			VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, 'pendente', ?)
			ON CONFLICT (event_id, colonia) DO UPDATE SET
				mensagem_erro = excluded.mensagem_erro, pilha_erro = excluded.pilha_erro,
				tentativas = tentativas + 1, ultima_tentativa = excluded.ultima_tentativa,
				status = CASE WHEN status = 'failed_permanent' OR tentativas + 1 >= ?10 THEN 'failed_permanent'
					ELSE 'pendente' END,
				resolvido_em = CASE WHEN status = 'failed_permanent' THEN resolvido_em
					WHEN tentativas + 1 >= ?10 THEN excluded.ultima_tentativa END`,
			e.EventID, e.Sequence, e.Tipo, e.Colonia, e.HandlerNome, e.MensagemErro, e.PilhaErro,
			ms(e.UltimaTentativa), ms(e.CriadoEm), app.MaxDLQAttempts)
		return err
	})
}

// SetDLQStatus implements app.ConsumerStore.
func (db *DB) SetDLQStatus(ctx context.Context, eventID, colonia, status string) error {
	return db.do(ctx, func(tx *wtx) error {
		var resolved any
		if status == app.DLQResolved || status == app.DLQFailedPermanent {
			resolved = ms(db.now())
		}
		res, err := tx.Exec(`UPDATE dead_letter_queue SET status = ?, resolvido_em = ?
			WHERE event_id = ? AND colonia = ?`, status, resolved, eventID, colonia)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return app.ErrNotFound
		}
		return nil
	})
}
