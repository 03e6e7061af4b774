package store

import (
	"context"
	"database/sql"
	"fmt"

	"geohub/app/ocorrencia"
)

// SaveOcorrencia implements ocorrencia.ReadModel: the row and its despachos
// are replaced together, unless the stored row already folded a later
// event (ultima_sequencia only grows).
func (db *DB) SaveOcorrencia(ctx context.Context, s ocorrencia.Summary) error {
	return db.do(ctx, func(tx *wtx) error {
		var stored int64
		err := tx.QueryRow(`SELECT ultima_sequencia FROM ocorrencia WHERE registrada_seq = ?`, s.Cursor).Scan(&stored)
		switch {
		case err == sql.ErrNoRows:
		case err != nil:
			return fmt.Errorf("read ocorrência: %w", err)
		case stored > s.UltimaSequencia:
			return nil
		}
		var integrador any
		if s.Integrador != "" {
			integrador = s.Integrador
		}
		if _, err := tx.Exec(`INSERT INTO ocorrencia (registrada_seq, id, natureza, status, integrador_id,
				registrada_em, atualizada_em, versao, ultima_sequencia) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (registrada_seq) DO UPDATE SET status = excluded.status,
				atualizada_em = excluded.atualizada_em, versao = excluded.versao,
				ultima_sequencia = excluded.ultima_sequencia`,
			s.Cursor, s.ID, s.Natureza, s.Status, integrador, ms(s.RegistradaEm), ms(s.AtualizadaEm),
			s.Versao, s.UltimaSequencia); err != nil {
			return fmt.Errorf("save ocorrência: %w", err)
		}
		if _, err := tx.Exec(`DELETE FROM ocorrencia_despacho WHERE ocorrencia_seq = ?`, s.Cursor); err != nil {
			return fmt.Errorf("save despachos: %w", err)
		}
		for i, d := range s.Despachos {
			if _, err := tx.Exec(`INSERT INTO ocorrencia_despacho (ocorrencia_seq, ordem, id, recurso, status)
				VALUES (?, ?, ?, ?, ?)`, s.Cursor, i, d.ID, d.Recurso.Identificador, d.Status); err != nil {
				return fmt.Errorf("save despachos: %w", err)
			}
		}
		return nil
	})
}
