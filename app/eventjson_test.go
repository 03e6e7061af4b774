package app

import (
	"bytes"
	"encoding/json"
	"strings"
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
		var a, b map[string]any
		if err := json.Unmarshal(got, &a); err != nil {
			t.Fatalf("invalid JSON %s: %v", got, err)
		}
		json.Unmarshal(want, &b)
		// The one difference on purpose: times always with milliseconds
		// (EnvelopeTime), where encoding/json trims trailing zeros.
		for _, k := range []string{"timestamp", "criado_em"} {
			at, err := time.Parse(time.RFC3339Nano, b[k].(string))
			if err != nil {
				t.Fatal(err)
			}
			b[k] = at.UTC().Format(EnvelopeTime)
		}
		ga, _ := json.Marshal(a)
		gb, _ := json.Marshal(b)
		if string(ga) != string(gb) {
			t.Fatalf("got  %s\nwant %s", got, want)
		}
	})
}

// appendJSONValue must write what json.Marshal writes for a decoded
// document, but for the HTML escaping it leaves out.
func TestAppendJSONValueMatchesEncodingJSON(t *testing.T) {
	docs := []string{
		`{}`, `{"b":1,"a":[true,false,null,"x"],"c":{"z":1.50,"y":-2e10}}`,
		`{"nome":"Ana \"Bia\"\n\t\u0001","emoji":"😀","sep":"\u2028","html":"<a href='x'>&</a>"}`,
		`{"n":[[],[{}],{"k":[1,2,{"x":"y"}]}],"big":123456789012345678901234567890}`,
	}
	for _, d := range docs {
		dec := json.NewDecoder(strings.NewReader(d))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		got, err := appendJSONValue(nil, v)
		if err != nil {
			t.Fatal(err)
		}
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			t.Fatal(err)
		}
		if string(got) != strings.TrimSuffix(want.String(), "\n") {
			t.Errorf("%s:\n got %s\nwant %s", d, got, want.String())
		}
	}
	if _, err := appendJSONValue(nil, map[string]any{"n": json.Number("1e")}); err == nil {
		t.Fatal("an invalid number literal was written")
	}
}
