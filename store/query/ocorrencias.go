package query

import (
	"context"
	"fmt"
	"geohub/app"
	"geohub/app/ocorrencia"
	"math"
	"slices"
	"strings"
)

// Ocorrencias implements ocorrencia.ReadModel: newest registration first,
// by keyset on registrada_seq, and the page's despachos in one more query,
// newest row first, so that the page can end at app.PageBytes (an
// ocorrência's despachos have no bound) without reading those of the rows
// it leaves out.
func (r *Reads) Ocorrencias(ctx context.Context, f ocorrencia.Filter) ([]ocorrencia.Summary, bool, error) {
	var where []string
	var args []any
	add := func(cond string, v any) {
		where, args = append(where, cond+" ?"), append(args, v)
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
		add("registrada_em >=", MS(f.Inicio))
	}
	if !f.Fim.IsZero() {
		add("registrada_em <", MS(f.Fim))
	}
	q := `SELECT registrada_seq, id, natureza, status, coalesce(integrador_id, ''), registrada_em,
		atualizada_em, versao, ultima_sequencia FROM ocorrencia`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	rows, err := r.c.Query(ctx, q+" ORDER BY registrada_seq DESC LIMIT ?", append(args, f.Limite)...)
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
		s.RegistradaEm, s.AtualizadaEm, s.Despachos = FromMS(reg), FromMS(upd), []ocorrencia.Despacho{}
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
	seqs := make([]any, len(out))
	for i, s := range out {
		seqs[i] = s.Cursor
	}
	drows, err := r.c.Query(ctx, `SELECT ocorrencia_seq, id, recurso, status FROM ocorrencia_despacho
		WHERE ocorrencia_seq IN (?`+strings.Repeat(", ?", len(seqs)-1)+`) ORDER BY ocorrencia_seq DESC, ordem DESC`, seqs...)
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

// summarySize is near what the row takes encoded (see app.Event.Size).
func summarySize(s ocorrencia.Summary) int {
	n := 200 + len(s.ID) + len(s.Natureza) + len(s.Status) + len(s.Integrador)
	for _, d := range s.Despachos {
		n += 120 + len(d.ID) + len(d.OcorrenciaID) + len(d.Recurso.Identificador) + len(d.Status)
	}
	return n
}
