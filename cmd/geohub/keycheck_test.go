package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
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

// The master key is handled as the one secret that opens all the others
// (issue 26, I2): a key file others can read is refused, a new database
// takes only a random key, and a missing master.key beside an existing
// database is an error, never a fresh key written in its place.
func TestMasterKeyHandling(t *testing.T) {
	sqliteOnly(t)
	t.Parallel()
	migrate := func(data string, env []string, flags ...string) (string, bool) {
		t.Helper()
		_, errOut, ok := geohubCLI(t, "", env, append([]string{"migrate", "--data", data}, flags...)...)
		return errOut, ok
	}
	data := t.TempDir()
	if out, ok := migrate(data, nil); !ok {
		t.Fatalf("a first migrate: %s", out)
	}
	key := filepath.Join(data, masterKeyFile)

	t.Run("a key file others can read is refused", func(t *testing.T) {
		if err := os.Chmod(key, 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(key, 0o600)
		if out, ok := migrate(data, nil); ok || !strings.Contains(out, "chmod 600") {
			t.Fatalf("master.key at 0644: ok=%v %s", ok, out)
		}
		file := filepath.Join(t.TempDir(), "chave")
		os.WriteFile(file, []byte(hex.EncodeToString(bytes.Repeat([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, 2))), 0o604)
		if out, ok := migrate(t.TempDir(), nil, "--master-key-file", file); ok || !strings.Contains(out, "chmod 600") {
			t.Fatalf("--master-key-file at 0604: ok=%v %s", ok, out)
		}
	})
	t.Run("a missing master.key beside a database is an error, and none is written", func(t *testing.T) {
		saved, err := os.ReadFile(key)
		if err != nil {
			t.Fatal(err)
		}
		os.Remove(key)
		defer os.WriteFile(key, saved, 0o600)
		if out, ok := migrate(data, nil); ok || !strings.Contains(out, "missing beside the existing database") {
			t.Fatalf("without master.key: ok=%v %s", ok, out)
		}
		if _, err := os.Stat(key); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("a new master.key was written beside the database: %v", err)
		}
	})
	t.Run("a new database takes only a random key", func(t *testing.T) {
		for name, k := range map[string][]byte{
			"all zero":   make([]byte, 32),
			"passphrase": []byte("minha senha secreta da prefeitura"[:32]),
			"few bytes":  bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef}, 8),
		} {
			file := filepath.Join(t.TempDir(), "chave")
			os.WriteFile(file, k, 0o600)
			if out, ok := migrate(t.TempDir(), nil, "--master-key-file", file); ok || !strings.Contains(out, "refused for a new database") {
				t.Errorf("%s: ok=%v %s", name, ok, out)
			}
			if out, ok := migrate(t.TempDir(), []string{"GEOHUB_MASTER_KEY=" + hex.EncodeToString(k)}); ok || !strings.Contains(out, "GEOHUB_MASTER_KEY") {
				t.Errorf("%s from the environment: ok=%v %s", name, ok, out)
			}
		}
		random := make([]byte, 32)
		rand.Read(random)
		if out, ok := migrate(t.TempDir(), []string{"GEOHUB_MASTER_KEY=" + hex.EncodeToString(random)}); !ok {
			t.Errorf("a random key: %s", out)
		}
	})
}
