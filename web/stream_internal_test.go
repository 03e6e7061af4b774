package web

import (
	"bytes"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"geohub/app"
	"geohub/store"
)

// TestStreamedPagesKeepTheShapeOfAPage checks that writeEventPage, which
// encodes rows as the store yields them, writes byte for byte what
// writeJSON wrote for the whole app.Page[Event]: empty pages, full pages
// with proximo, both orders, and pages cut by size.
func TestStreamedPagesKeepTheShapeOfAPage(t *testing.T) {
	db, err := store.Open(t.Context(), filepath.Join(t.TempDir(), store.FileName), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var batch []app.Pending
	for i := range 12 {
		payload := fmt.Sprintf(`{"i":%d,"texto":"<%s>\u2028"}`, i, strings.Repeat("x", i%3*400_000))
		id := uuid.Must(uuid.NewV7()).String()
		ev := app.Event{EventID: id, Tipo: "teste:forma", VersaoSchema: "1.0.0", Origem: "teste",
			CorrelacaoID: id, Timestamp: time.Date(2026, 11, 30, 12, 0, i, 0, time.UTC), Payload: []byte(payload)}
		if i%2 == 0 {
			ev.Agregado, ev.Autoria, ev.Solicitacao = "teste:1", &app.Autoria{ID: "a\"b", Tipo: "sistema"}, "s-1"
		}
		batch = append(batch, app.Pending{Event: ev})
	}
	if _, err := db.Append(t.Context(), batch); err != nil {
		t.Fatal(err)
	}
	s := &Server{Queries: &app.Queries{Log: db, Store: db}}
	cut := 0
	for _, f := range []app.EventFilter{
		{},
		{Limite: 3},
		{Limite: 3, Desc: true},
		{Limite: 2, Deslocamento: 5},
		{Deslocamento: 1, Limite: 500},
		{Tipo: "nenhum"},
		{SequenceInicio: 4, Limite: 500},
		{SequenceFim: 9, Desc: true, Limite: 500},
	} {
		whole, err := s.Queries.Events(t.Context(), f)
		if err != nil {
			t.Fatal(err)
		}
		if whole.TruncadaPorTamanho {
			cut++
		}
		want := httptest.NewRecorder()
		writeJSON(want, 200, whole)
		p, err := s.Queries.EventPage(t.Context(), f)
		if err != nil {
			t.Fatal(err)
		}
		got := httptest.NewRecorder()
		s.writeEventPage(got, httptest.NewRequest("GET", "/api/events", nil), p)
		if !bytes.Equal(got.Body.Bytes(), want.Body.Bytes()) {
			t.Errorf("filter %+v: streamed page differs from writeJSON's\n got %.400s\nwant %.400s", f, got.Body, want.Body)
		}
		if got.Header().Get("Content-Type") != want.Header().Get("Content-Type") {
			t.Errorf("content type %q, want %q", got.Header().Get("Content-Type"), want.Header().Get("Content-Type"))
		}
	}
	if cut == 0 {
		t.Fatal("no page was cut by size: the shape of truncada_por_tamanho went unchecked")
	}
}
