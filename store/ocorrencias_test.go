package store_test

import (
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"geohub/app/ocorrencia"
)

// A row is replaced only by a fold that saw at least as much of the log: a
// fold that read before a later one committed (a slow handler, one that
// timed out and returned late) must not take the row back.
func TestSaveOcorrenciaNeverGoesBack(t *testing.T) {
	db := mustOpen(t)
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	id := uuid.NewString()
	desp := func(status ...string) []ocorrencia.Despacho {
		out := []ocorrencia.Despacho{}
		for i, s := range status {
			out = append(out, ocorrencia.Despacho{ID: id[:8] + string(rune('a'+i)), OcorrenciaID: id,
				Recurso: ocorrencia.Recurso{Identificador: "UR-" + string(rune('1'+i))}, Status: s})
		}
		return out
	}
	row := func(versao int, ultima int64, status string, d []ocorrencia.Despacho) ocorrencia.Summary {
		return ocorrencia.Summary{Ocorrencia: ocorrencia.Ocorrencia{ID: id, Natureza: "incendio", Status: status,
			Versao: versao, Despachos: d}, Integrador: "int-1", RegistradaEm: at, AtualizadaEm: at.Add(time.Duration(versao) * time.Minute),
			Cursor: 7, UltimaSequencia: ultima}
	}
	newer := row(3, 30, ocorrencia.EmAtendimento, desp(ocorrencia.NoLocal, ocorrencia.EmDeslocamento))
	for _, s := range []ocorrencia.Summary{
		row(1, 7, ocorrencia.Aberta, desp()),
		newer,
		newer, // a replay: the same fold again
		row(2, 20, ocorrencia.Aberta, desp(ocorrencia.EmDeslocamento)), // late, stale
	} {
		if err := db.SaveOcorrencia(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
	got, _, err := db.Ocorrencias(t.Context(), ocorrencia.Filter{Limite: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("%d rows, want 1", len(got))
	}
	g := got[0]
	if g.Versao != 3 || g.Status != ocorrencia.EmAtendimento || g.UltimaSequencia != 30 || g.Integrador != "int-1" ||
		!g.RegistradaEm.Equal(at) || !g.AtualizadaEm.Equal(newer.AtualizadaEm) || !slices.Equal(g.Despachos, newer.Despachos) {
		t.Fatalf("stored %+v, want %+v", g, newer)
	}
}
