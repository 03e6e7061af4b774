package main

import (
	"bytes"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"geohub/store/storetest"
)

// A server given another master key than the one its database was first
// opened with refuses to start, and says why (review finding 2): on
// PostgreSQL, a replica with a mistyped key would otherwise seal bodies the
// others cannot open and dead-letter what it cannot open. The first start
// pins the key; the refused one changes nothing, so the right key starts
// again. The commands that open the database refuse it too, whichever way
// the key is given.
func TestServeRefusesAnotherMasterKey(t *testing.T) {
	alongside(t)
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	postgres := storetest.Backend() == "postgres"
	first := launch{bin: bin, data: data}.start(t)
	if !first.alive() {
		t.Fatalf("the first start failed:\n%s", first.out)
	}
	if !postgres {
		first.stop() // one process per SQLite file; on PostgreSQL it stays, a replica already running
	}

	otherKey := hex.EncodeToString(bytes.Repeat([]byte{0x7e}, 32))
	other := filepath.Join(t.TempDir(), "outra.key")
	if err := os.WriteFile(other, []byte(otherKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := launch{bin: bin, data: data, flags: []string{"--master-key-file", other}}.start(t).refused("another master key")
	t.Logf("refused: %s", strings.TrimSpace(out))
	for _, want := range []string{"master key does not match", "--master-key-file " + other, "another installation's"} {
		if !strings.Contains(out, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, out)
		}
	}

	// GEOHUB_MASTER_KEY, on a command that would write (a token), refuses
	// alike and names where the key came from.
	args := []string{"token", "create", "--data", data, "--papel", "leitor", "--nome", "teste"}
	if d := testDatabase(t, data); d.Postgres() {
		args = append(args, "--db", d.URL) // without the test's --master-key-file, which would win
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = filepath.Dir(bin)
	cmd.Env = append(os.Environ(), "GEOHUB_MASTER_KEY="+otherKey)
	cliOut, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("token create with another master key succeeded:\n%s", cliOut)
	}
	if !strings.Contains(string(cliOut), "master key does not match") || !strings.Contains(string(cliOut), "GEOHUB_MASTER_KEY") {
		t.Errorf("token create's refusal does not say why:\n%s", cliOut)
	}

	if postgres {
		first.stop()
	}
	again := launch{bin: bin, data: data}.start(t)
	if !again.alive() {
		t.Fatalf("the database's own key no longer starts it:\n%s", again.out)
	}
	again.stop()
}
