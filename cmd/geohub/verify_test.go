package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

func TestVerifySignatureReproducesTheVectors(t *testing.T) {
	raw, err := os.ReadFile("../../app/testdata/assinatura.json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Casos []struct{ Nome, Segredo, Timestamp, Corpo, Assinatura string }
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	for _, c := range v.Casos {
		var out bytes.Buffer
		if err := verifySignatureCmd(strings.NewReader(c.Corpo), &out,
			[]string{"--secret", c.Segredo, "--timestamp", c.Timestamp}); err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(out.String()); got != c.Assinatura {
			t.Errorf("%s: printed %s, want %s", c.Nome, got, c.Assinatura)
		}
		out.Reset()
		if err := verifySignatureCmd(strings.NewReader(c.Corpo), &out,
			[]string{"--secret", c.Segredo, "--timestamp", c.Timestamp, "--signature", c.Assinatura}); err != nil {
			t.Errorf("%s: a matching signature was refused: %v", c.Nome, err)
		}
		if err := verifySignatureCmd(strings.NewReader(c.Corpo+"x"), &out,
			[]string{"--secret", c.Segredo, "--timestamp", c.Timestamp, "--signature", c.Assinatura}); err == nil {
			t.Errorf("%s: a changed body passed", c.Nome)
		}
	}
}
