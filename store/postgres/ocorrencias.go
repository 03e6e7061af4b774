package postgres

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"geohub/app"
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

// Ocorrencias implements ocorrencia.ReadModel: newest registration first,
// by keyset on registrada_seq, and the page's despachos in one more query,
// newest row first, so that the page can end at app.PageBytes (an
// ocorrência's despachos have no bound) without reading those of the rows
// it leaves out.
func (db *DB) Ocorrencias(ctx context.Context, f ocorrencia.Filter) ([]ocorrencia.Summary, bool, error) {
	var where []string
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, cond+" $"+strconv.Itoa(len(args)))
	}
	if f.Antes > 0 {
		add("registrada_seq <", f.Antes)
	}
	if f.Status != "" {
		add("status =", f.Status)
	}
	if f.Natureza != "" {
		add("natureza =", f.Natureza)
	}
	if f.Integrador != "" {
		add("integrador_id =", f.Integrador)
	}
	if !f.Inicio.IsZero() {
		add("registrada_em >=", ms(f.Inicio))
	}
	if !f.Fim.IsZero() {
		add("registrada_em <", ms(f.Fim))
	}
	q := `SELECT registrada_seq, id, natureza, status, coalesce(integrador_id, ''), registrada_em,
		atualizada_em, versao, ultima_sequencia FROM ocorrencia`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	args = append(args, f.Limite)
	rows, err := db.read.Query(ctx, q+" ORDER BY registrada_seq DESC LIMIT $"+strconv.Itoa(len(args)), args...)
	if err != nil {
		return nil, false, fmt.Errorf("list ocorrências: %w", err)
	}
	out := []ocorrencia.Summary{}
	at := map[int64]int{}
	for rows.Next() {
		var s ocorrencia.Summary
		var reg, upd int64
		if err := rows.Scan(&s.Cursor, &s.ID, &s.Natureza, &s.Status, &s.Integrador, &reg, &upd,
			&s.Versao, &s.UltimaSequencia); err != nil {
			rows.Close()
			return nil, false, fmt.Errorf("list ocorrências: %w", err)
		}
		s.RegistradaEm, s.AtualizadaEm, s.Despachos = fromMS(reg), fromMS(upd), []ocorrencia.Despacho{}
		at[s.Cursor] = len(out)
		out = append(out, s)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("list ocorrências: %w", err)
	}
	if len(out) == 0 {
		return out, false, nil
	}
	// A filtered page's rows can lie far apart: name them, so the read is
	// one seek of the primary key per row rather than a scan between.
	seqs := make([]int64, len(out))
	for i, s := range out {
		seqs[i] = s.Cursor
	}
	drows, err := db.read.Query(ctx, `SELECT ocorrencia_seq, id, recurso, status FROM ocorrencia_despacho
		WHERE ocorrencia_seq = ANY($1) ORDER BY ocorrencia_seq DESC, ordem DESC`, seqs)
	if err != nil {
		return nil, false, fmt.Errorf("list despachos: %w", err)
	}
	defer drows.Close()
	// out[:whole] have all their despachos: those registered after the
	// despacho being read.
	size, whole, cut := 0, 0, false
	complete := func(seq int64) bool {
		for whole < len(out) && out[whole].Cursor > seq {
			size += summarySize(out[whole])
			if whole++; size >= app.PageBytes && whole < len(out) {
				return true
			}
		}
		return false
	}
	for drows.Next() {
		var seq int64
		var d ocorrencia.Despacho
		if err := drows.Scan(&seq, &d.ID, &d.Recurso.Identificador, &d.Status); err != nil {
			return nil, false, fmt.Errorf("list despachos: %w", err)
		}
		if cut = complete(seq); cut {
			break
		}
		if i, ok := at[seq]; ok {
			d.OcorrenciaID = out[i].ID
			out[i].Despachos = append(out[i].Despachos, d)
		}
	}
	if cut {
		drows.Close() // the rest of the result is discarded as it arrives
	} else if err := drows.Err(); err != nil {
		return nil, false, fmt.Errorf("list despachos: %w", err)
	}
	if !cut {
		cut = complete(math.MinInt64)
	}
	if cut {
		out = out[:whole]
	}
	for _, s := range out {
		slices.Reverse(s.Despachos)
	}
	return out, cut, nil
}

// summarySize is near what the row takes encoded, as SQLite's store counts
// it (see app.Event.Size).
func summarySize(s ocorrencia.Summary) int {
	n := 200 + len(s.ID) + len(s.Natureza) + len(s.Status) + len(s.Integrador)
	for _, d := range s.Despachos {
		n += 120 + len(d.ID) + len(d.OcorrenciaID) + len(d.Recurso.Identificador) + len(d.Status)
	}
	return n
}
