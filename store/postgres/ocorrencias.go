package postgres

import (
	"context"
	"fmt"
	"strconv"

	"geohub/app/ocorrencia"
)

var _ ocorrencia.ReadModel = (*DB)(nil)

// saveOcorrenciaSQL writes the row unless the stored one already folded a
// later event (ultima_sequencia only grows). It is one statement, not
// SQLite's read then write: replicas projecting the same ocorrência at
// once meet at the row lock of the upsert, and the WHERE is evaluated on
// the row as the other committed it. RETURNING gives a row only when this
// fold was written, and then its despachos are replaced under that lock.
// The first save of a row has no row to lock yet, and the upsert only
// arbitrates on its primary key: two replicas inserting one ocorrência at
// once would have the second fail on ocorrencia_id_key. So the save
// declares the row's key (writer.go), which its batch takes before any
// statement runs, in one order with every other key of the batch.
const saveOcorrenciaSQL = `INSERT INTO ocorrencia AS o (registrada_seq, id, natureza, status, integrador_id,
		registrada_em, atualizada_em, versao, ultima_sequencia) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
	ON CONFLICT (registrada_seq) DO UPDATE SET status = excluded.status,
		atualizada_em = excluded.atualizada_em, versao = excluded.versao,
		ultima_sequencia = excluded.ultima_sequencia
		WHERE o.ultima_sequencia <= excluded.ultima_sequencia
	RETURNING registrada_seq`

// SaveOcorrencia implements ocorrencia.ReadModel: the row and its despachos
// are replaced together, unless the stored row already folded a later
// event.
func (db *DB) SaveOcorrencia(ctx context.Context, s ocorrencia.Summary) error {
	return db.locked(ctx, []lockKey{key("ocorrencia", strconv.FormatInt(s.Cursor, 10))}, func(tx *wtx) error {
		var seq int64
		err := tx.QueryRow(tx.ctx, saveOcorrenciaSQL, s.Cursor, s.ID, s.Natureza, s.Status, null(s.Integrador),
			ms(s.RegistradaEm), ms(s.AtualizadaEm), s.Versao, s.UltimaSequencia).Scan(&seq)
		if isNoRows(err) {
			return nil // the stored row is newer
		}
		if err != nil {
			return fmt.Errorf("save ocorrência: %w", err)
		}
		if _, err := tx.Exec(tx.ctx, `DELETE FROM ocorrencia_despacho WHERE ocorrencia_seq = $1`, s.Cursor); err != nil {
			return fmt.Errorf("save despachos: %w", err)
		}
		for i, d := range s.Despachos {
			if _, err := tx.Exec(tx.ctx, `INSERT INTO ocorrencia_despacho (ocorrencia_seq, ordem, id, recurso, status)
				VALUES ($1, $2, $3, $4, $5)`, s.Cursor, i, d.ID, d.Recurso.Identificador, d.Status); err != nil {
				return fmt.Errorf("save despachos: %w", err)
			}
		}
		return nil
	})
}
