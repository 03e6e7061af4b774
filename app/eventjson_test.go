package app

import (
	"encoding/json"
	"testing"
	"time"
)

// plainEvent has Event's fields without its MarshalJSON, so encoding/json's
// own output is the reference.
type plainEvent Event

func FuzzEventJSONMatchesEncodingJSON(f *testing.F) {
	f.Add(int64(1), "0199bb3e-0000-7000-8000-00000000004a", "jornada:iniciada", "teste", "ocorrencia:1", "", "", `{"a":1}`, int64(1764504000123))
	f.Add(int64(-5), "\"quote\\back\nline\t\x01", "ç ã \u2028 \u2029", "\xff\xfe invalid", "<&>", "id", "usuario", `[]`, int64(0))
	f.Fuzz(func(t *testing.T, seq int64, id, tipo, origem, agregado, autoriaID, solicitacao, payload string, ms int64) {
		if !json.Valid([]byte(payload)) {
			return
		}
		var compact json.RawMessage
		if err := json.Unmarshal([]byte(payload), &compact); err != nil {
			return
		}
		ev := Event{Sequence: seq, EventID: id, Tipo: tipo, VersaoSchema: "1.0.0", Timestamp: time.UnixMilli(ms).UTC(),
			Origem: origem, CorrelacaoID: id, Agregado: agregado, Solicitacao: solicitacao,
			Payload: compact, CriadoEm: time.UnixMilli(ms + 7).UTC()}
		if autoriaID != "" {
			ev.Autoria = &Autoria{ID: autoriaID, Tipo: "sistema"}
		}
		got, _ := ev.MarshalJSON()
		want, err := json.Marshal(plainEvent(ev))
		if err != nil {
			t.Skip(err)
		}
		var a, b any
		if err := json.Unmarshal(got, &a); err != nil {
			t.Fatalf("invalid JSON %s: %v", got, err)
		}
		json.Unmarshal(want, &b)
		ga, _ := json.Marshal(a)
		gb, _ := json.Marshal(b)
		if string(ga) != string(gb) {
			t.Fatalf("got  %s\nwant %s", got, want)
		}
	})
}
