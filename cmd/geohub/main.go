// Command geohub is the municipality's event backbone: one binary that keeps
// the event log, delivers it and serves the console. main only parses the
// command line; the program is Main, which tests run in-process.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

const usage = `geohub: the municipality's event backbone.

Commands:
  geohub serve   [--data DIR] [--addr HOST:PORT] [--demo] [--insecure-callbacks]
  geohub migrate [--data DIR]
  geohub migrate-data --from DIR --db postgres://...   (copy a stopped SQLite appliance into PostgreSQL)
  geohub token create --papel admin|operador|leitor|produtor [--nome NAME] [--data DIR]
  geohub token revoke --id ID [--data DIR]
  geohub operator reset-password --login LOGIN [--data DIR]
  geohub backup  --out FILE [--data DIR]
  geohub verify-signature --secret-file FILE --timestamp T [--signature sha256=HEX] < body
  geohub receptor testar --url URL --segredo-file FILE [--json] [--insecure-callbacks]
  geohub simulador --geohub URL --api-key-file FILE --secret-file FILE --integrador ID [--listen HOST:PORT]
  geohub simulador --registrar [--geohub URL] [--listen HOST:PORT]   (admin token in GEOHUB_TOKEN)

Every command that opens the database takes --data DIR (the embedded
SQLite, the default) or --db postgres://... with --master-key-file FILE or
GEOHUB_MASTER_KEY (PostgreSQL, for several replicas).

Run "geohub <command> --help" for the flags of each command and the
environment variable each flag reads. Secrets never go on the command line,
which ps shows to every user: give them in a file (--secret-file,
--api-key-file; - for stdin) or in the environment (GEOHUB_SECRET,
GEOHUB_API_KEY, GEOHUB_TOKEN).
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "geohub:", err)
		os.Exit(exitCode(err))
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return fmt.Errorf("missing command")
	}
	switch args[0] {
	case "serve":
		return serveCmd(ctx, args[1:])
	case "migrate":
		return migrateCmd(ctx, args[1:])
	case "migrate-data":
		return migrateDataCmd(ctx, args[1:])
	case "token":
		switch {
		case len(args) >= 2 && args[1] == "create":
			return tokenCreateCmd(ctx, args[2:])
		case len(args) >= 2 && args[1] == "revoke":
			return tokenRevokeCmd(ctx, args[2:])
		}
		return fmt.Errorf(`usage: geohub token create --papel ROLE [--nome NAME] [--data DIR] | geohub token revoke --id ID [--data DIR]`)
	case "operator":
		if len(args) >= 2 && args[1] == "reset-password" {
			return resetPasswordCmd(ctx, args[2:])
		}
		return fmt.Errorf(`usage: geohub operator reset-password --login LOGIN [--data DIR]`)
	case "backup":
		return backupCmd(ctx, args[1:])
	case "verify-signature":
		return verifySignatureCmd(os.Stdin, os.Stdout, args[1:])
	case "receptor":
		if len(args) >= 2 && args[1] == "testar" {
			return receptorTestCmd(ctx, os.Stdout, args[2:])
		}
		return fmt.Errorf(`usage: geohub receptor testar --url URL --segredo-file FILE [--json] [--insecure-callbacks]`)
	case "simulador":
		return simulatorCmd(ctx, args[1:])
	case "-h", "--help", "help":
		fmt.Print(usage)
		return nil
	}
	fmt.Fprint(os.Stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}
