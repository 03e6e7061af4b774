package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"geohub/app"
	"geohub/app/callback"
)

// errTesterFailed is the exit of `receptor testar` when a check failed:
// the report was printed, and says which.
var errTesterFailed = errors.New("the receiver failed the tester: see the checks above")

// receptorTestCmd runs the receiver tester (SPEC 8b) against a receiver
// that need not be registered anywhere: no server, no database. The secret
// comes from a file or the environment, as every secret of this CLI.
func receptorTestCmd(ctx context.Context, stdout io.Writer, args []string) error {
	fs := newFlags("receptor testar")
	target := fs.String("url", "", "the receiver's URL, as the cadastro's callback_url")
	secretIn := secretFlag(fs, "segredo", "GEOHUB_SECRET", "the receiver's signing secret (whsec_…)", "")
	asJSON := fs.Bool("json", false, `print {"aprovado", "verificacoes"} as JSON`)
	insecure := fs.Bool("insecure-callbacks", false, "allow an http:// or loopback receiver, for local development (https is then a warning)")
	if err := refuseArgvSecrets(args, secretIn); err != nil {
		return err
	}
	if err := parse(fs, args); err != nil || isHelp(args) {
		return err
	}
	secret, err := secretIn.value(os.Stdin)
	if err != nil {
		return err
	}
	if *target == "" || secret == "" {
		return fmt.Errorf("--url and the secret (--segredo-file FILE, - for stdin, or GEOHUB_SECRET) are required")
	}
	tester := app.NewTester(callback.Policy{Insecure: *insecure}, 0, nil, version)
	rep := tester.Run(ctx, app.TestTarget{URL: *target, Secret: []byte(secret)})
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		printTestReport(stdout, rep)
	}
	if !rep.Aprovado {
		return errTesterFailed
	}
	return nil
}

func printTestReport(w io.Writer, rep app.TestReport) {
	for _, c := range rep.Verificacoes {
		status := "-"
		if c.Status != 0 {
			status = fmt.Sprint(c.Status)
		}
		fmt.Fprintf(w, "%-7s %-26s HTTP %-4s %6d ms", c.Resultado, c.ID, status, c.DuracaoMS)
		if c.Detalhe != "" {
			fmt.Fprintf(w, "  %s", c.Detalhe)
		}
		fmt.Fprintln(w)
	}
	if rep.Aprovado {
		fmt.Fprintln(w, "aprovado: nenhuma verificação falhou")
	} else {
		fmt.Fprintln(w, "reprovado: corrija as verificações que falharam")
	}
}
