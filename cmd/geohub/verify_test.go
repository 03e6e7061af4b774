package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
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
	for i, c := range v.Casos {
		// The secret comes in a file, never as an argument (see secrets_test.go).
		secretFile := filepath.Join(t.TempDir(), fmt.Sprintf("segredo-%d", i))
		if err := os.WriteFile(secretFile, []byte(c.Segredo+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := verifySignatureCmd(strings.NewReader(c.Corpo), &out,
			[]string{"--secret-file", secretFile, "--timestamp", c.Timestamp}); err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(out.String()); got != c.Assinatura {
			t.Errorf("%s: printed %s, want %s", c.Nome, got, c.Assinatura)
		}
		out.Reset()
		if err := verifySignatureCmd(strings.NewReader(c.Corpo), &out,
			[]string{"--secret-file", secretFile, "--timestamp", c.Timestamp, "--signature", c.Assinatura}); err != nil {
			t.Errorf("%s: a matching signature was refused: %v", c.Nome, err)
		}
		if err := verifySignatureCmd(strings.NewReader(c.Corpo+"x"), &out,
			[]string{"--secret-file", secretFile, "--timestamp", c.Timestamp, "--signature", c.Assinatura}); err == nil {
			t.Errorf("%s: a changed body passed", c.Nome)
		}
	}
}
