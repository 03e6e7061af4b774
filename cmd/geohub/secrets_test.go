package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// geohubCLI runs the built binary with stdin and extra environment, and
// returns its stdout, its stderr and whether it exited 0.
func geohubCLI(t *testing.T, stdin string, env []string, args ...string) (string, string, bool) {
	t.Helper()
	bin, err := plainBinary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	if _, exited := err.(*exec.ExitError); err != nil && !exited {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), err == nil
}

// A command line is readable by every user of the machine (ps,
// /proc/PID/cmdline): the CLI takes secrets from a file, stdin or the
// environment, and refuses them as arguments without echoing them.
func TestSecretsNeverComeFromTheCommandLine(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../app/testdata/assinatura.json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Casos []struct{ Segredo, Timestamp, Corpo, Assinatura string }
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	c := v.Casos[0]
	const leaked = "segredo-que-vazaria-no-ps"

	t.Run("a secret as an argument is refused, naming what to use, without echoing it", func(t *testing.T) {
		for _, args := range [][]string{
			{"verify-signature", "--secret", leaked, "--timestamp", c.Timestamp},
			{"verify-signature", "--timestamp", c.Timestamp, "-secret=" + leaked},
			{"simulador", "--api-key", leaked, "--integrador", "x"},
			{"simulador", "--secret", leaked, "--integrador", "x"},
		} {
			out, errOut, ok := geohubCLI(t, c.Corpo, nil, args...)
			flag := "--secret-file"
			env := "GEOHUB_SECRET"
			if strings.Contains(strings.Join(args, " "), "api-key") {
				flag, env = "--api-key-file", "GEOHUB_API_KEY"
			}
			if ok || !strings.Contains(errOut, "is refused") || !strings.Contains(errOut, flag) || !strings.Contains(errOut, env) || strings.Contains(out+errOut, leaked) {
				t.Errorf("geohub %s: exit 0 = %v\nstdout %s\nstderr %s", strings.Join(args, " "), ok, out, errOut)
			}
		}
	})
	t.Run("a database URL with a password is refused as an argument, without echoing it, and taken from GEOHUB_DB", func(t *testing.T) {
		const password = "senha-do-banco-no-ps"
		for _, args := range [][]string{
			{"serve", "--db", "postgres://geohub:" + password + "@127.0.0.1:1/geohub"},
			{"migrate", "-db=postgres://127.0.0.1:1/geohub?password=" + password},
			{"token", "create", "--papel", "admin", "--db", "postgresql://u:" + password + "@[::1]:1/x"},
			{"migrate-data", "--from", t.TempDir(), "--db", "postgres://u:" + password + "@127.0.0.1:1/x"},
		} {
			out, errOut, ok := geohubCLI(t, "", nil, args...)
			if ok || !strings.Contains(errOut, "--db is refused") || !strings.Contains(errOut, "GEOHUB_DB") || strings.Contains(out+errOut, password) {
				t.Errorf("geohub %s: exit 0 = %v\nstdout %s\nstderr %s", strings.Join(args, " "), ok, out, errOut)
			}
		}
		// In the environment the same URL is taken: the answer is about
		// the unreachable server, not the password's place.
		_, errOut, ok := geohubCLI(t, "", []string{"GEOHUB_DB=postgres://geohub:" + password + "@127.0.0.1:1/geohub", "GEOHUB_MASTER_KEY=" + strings.Repeat("ab", 32)},
			"migrate", "--data", t.TempDir())
		if ok || strings.Contains(errOut, "--db is refused") || strings.Contains(errOut, password) {
			t.Errorf("GEOHUB_DB: exit 0 = %v, stderr %s", ok, errOut)
		}
		// Without a password the argument stays allowed.
		_, errOut, _ = geohubCLI(t, "", []string{"GEOHUB_MASTER_KEY=" + strings.Repeat("ab", 32)}, "migrate", "--data", t.TempDir(),
			"--db", "postgres://geohub@127.0.0.1:1/geohub")
		if strings.Contains(errOut, "--db is refused") {
			t.Errorf("a URL without a password was refused: %s", errOut)
		}
	})
	t.Run("verify-signature reads the secret from a file or from GEOHUB_SECRET", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "segredo")
		if err := os.WriteFile(file, []byte(c.Segredo+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, errOut, ok := geohubCLI(t, c.Corpo, nil, "verify-signature", "--secret-file", file, "--timestamp", c.Timestamp); !ok || strings.TrimSpace(out) != c.Assinatura {
			t.Errorf("--secret-file: %q %s", out, errOut)
		}
		if out, errOut, ok := geohubCLI(t, c.Corpo, []string{"GEOHUB_SECRET=" + c.Segredo}, "verify-signature", "--timestamp", c.Timestamp,
			"--signature", c.Assinatura); !ok || strings.TrimSpace(out) != "assinatura confere" {
			t.Errorf("GEOHUB_SECRET: %q %s", out, errOut)
		}
	})
	t.Run("verify-signature refuses the secret on stdin, which carries the body", func(t *testing.T) {
		if _, errOut, ok := geohubCLI(t, c.Segredo+"\n"+c.Corpo, nil, "verify-signature", "--secret-file", "-", "--timestamp", c.Timestamp); ok || !strings.Contains(errOut, "stdin carries the body") {
			t.Errorf("--secret-file -: exit 0 = %v, %s", ok, errOut)
		}
	})
	t.Run("the simulator reads its secrets from files or stdin, one of them at most on stdin", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "nao-existe")
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"--api-key-file", missing}, missing},
			{[]string{"--api-key-file", "-"}, "--api-key-file - is empty"},
			{[]string{"--api-key-file", "-", "--secret-file", "-"}, "stdin holds one of them"},
		} {
			args := append([]string{"simulador", "--integrador", "x", "--listen", "127.0.0.1:0"}, tc.args...)
			if _, errOut, ok := geohubCLI(t, "", nil, args...); ok || !strings.Contains(errOut, tc.want) {
				t.Errorf("geohub %s: exit 0 = %v, stderr %s, want %q", strings.Join(args, " "), ok, errOut, tc.want)
			}
		}
	})
}

// argvSecret is a secret passed as an argument in a command someone would
// copy: the README's, the integrator guide's and the usage text's.
var argvSecret = regexp.MustCompile(`(verify-signature|simulador)[^\n]*--(secret|api-key)[ =]`)

func TestTheDocsShowNoSecretOnTheCommandLine(t *testing.T) {
	t.Parallel()
	texts := map[string]string{"usage": usage}
	for _, path := range []string{"../../README.md", "../../docs/integradores.md"} {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		texts[path] = string(raw)
	}
	for name, text := range texts {
		for _, line := range argvSecret.FindAllString(text, -1) {
			t.Errorf("%s shows a secret on the command line: %s", name, line)
		}
	}
}
