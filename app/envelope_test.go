package app

import (
	"encoding/json"
	"os"
	"strconv"
	"testing"
	"time"
)

func TestSignatureVectors(t *testing.T) {
	raw, err := os.ReadFile("testdata/assinatura.json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Casos []struct {
			Nome, Segredo, Timestamp, Corpo, Assinatura string
		}
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	for _, c := range v.Casos {
		ts, _ := strconv.ParseInt(c.Timestamp, 10, 64)
		if got := Sign([]byte(c.Segredo), ts, []byte(c.Corpo)); got != c.Assinatura {
			t.Errorf("%s: got %s, want %s", c.Nome, got, c.Assinatura)
		}
	}
}

func TestEnvelopeIsCanonical(t *testing.T) {
	// The example of SPEC 6.3 and of the first signature vector.
	ev := Event{EventID: "0199bb3e-0000-7000-8000-00000000004a", Tipo: "ocorrencia:despacho-mudou-status",
		VersaoSchema: "1.0.0", Origem: "ocorrencia", Solicitacao: "0199bb3e-0000-7000-8000-0000000000bb",
		Timestamp: time.Date(2026, 10, 31, 12, 4, 11, 0, time.UTC),
		Autoria:   &Autoria{ID: "0199bb3e-0000-7000-8000-0000000000aa", Tipo: "usuario"}}
	payload := map[string]any{"para": "no_local", "ocorrenciaId": "0199bb3e-0000-7000-8000-0000000000dd",
		"id": "0199bb3e-0000-7000-8000-0000000000cc", "de": "em_deslocamento"}
	sorted, _ := json.Marshal(payload)
	body, err := buildEnvelope(ev, sorted)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"0199bb3e-0000-7000-8000-00000000004a","ocorridoEm":"2026-10-31T12:04:11.000Z","origem":{"autoria":{"id":"0199bb3e-0000-7000-8000-0000000000aa","tipo":"usuario"},"plugin":"ocorrencia","solicitacao":"0199bb3e-0000-7000-8000-0000000000bb","versao":"1.0.0"},"payload":{"de":"em_deslocamento","id":"0199bb3e-0000-7000-8000-0000000000cc","ocorrenciaId":"0199bb3e-0000-7000-8000-0000000000dd","para":"no_local"},"tipo":"ocorrencia:despacho-mudou-status"}`
	if string(body) != want {
		t.Fatalf("envelope\n got %s\nwant %s", body, want)
	}
	if got := Sign([]byte("whsec-exemplo-0001"), 1761912251, body); got != "sha256=18c2c7df682c00db97f54611cc7a64b665760d84db779aff94512e4a4254d8cc" {
		t.Fatalf("signature of the example envelope: %s", got)
	}
}
