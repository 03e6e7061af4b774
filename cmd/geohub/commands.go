package main

import (
	"context"
	"crypto/hmac"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/user"
	"strconv"
	"strings"
	"time"

	"geohub/app"
	"geohub/store"
)

// envOr returns the environment variable's value, or def when unset: every
// flag reads one, so containers configure geohub without a command line.
func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("geohub "+name, flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	return fs
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return refuseArgvDatabasePassword(fs)
}

// refuseArgvDatabasePassword refuses a --db URL given on the command line
// with a password in it, for the reason refuseArgvSecrets gives, without
// repeating the URL. In GEOHUB_DB it is the environment's, readable by the
// process's user only; pgx also reads PGPASSWORD and ~/.pgpass.
func refuseArgvDatabasePassword(fs *flag.FlagSet) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "db" && urlHasPassword(f.Value.String()) {
			err = errors.New("--db is refused with a password in it: the command line is visible to every user of this machine (ps) and stays in the shell history; give the URL in the environment variable GEOHUB_DB, or the password in PGPASSWORD or a ~/.pgpass file (PGPASSFILE)")
		}
	})
	return err
}

func urlHasPassword(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		// Not a URL the driver reads either; say nothing of its content.
		return strings.Contains(raw, "@") || strings.Contains(strings.ToLower(raw), "password")
	}
	if _, ok := u.User.Password(); ok {
		return true
	}
	return u.Query().Has("password")
}

func serveCmd(ctx context.Context, args []string) error {
	cfg, run, err := serveConfig(args)
	if err != nil || !run {
		return err
	}
	tuneRuntime()
	m := &Main{Config: cfg, Stdout: os.Stdout}
	return m.Run(ctx)
}

// serveConfig reads serve's flags and environment; run is false for --help.
func serveConfig(args []string) (cfg Config, run bool, err error) {
	fs := newFlags("serve")
	var d Database
	databaseFlags(fs, &d)
	fs.StringVar(&cfg.Addr, "addr", envOr("GEOHUB_ADDR", "127.0.0.1:8080"), "listen address (env GEOHUB_ADDR)")
	fs.BoolVar(&cfg.Demo, "demo", envOr("GEOHUB_DEMO", "") == "1", "load fixtures/ so the console comes alive (env GEOHUB_DEMO=1)")
	fs.BoolVar(&cfg.DemoSessao, "demo-sessao", envOr("GEOHUB_DEMO_SESSAO", "") == "1",
		"--demo with the CAD simulator receiving over a session (GET /api/sessao) instead of a callback (env GEOHUB_DEMO_SESSAO=1)")
	fs.BoolVar(&cfg.InsecureCallbacks, "insecure-callbacks", envOr("GEOHUB_INSECURE_CALLBACKS", "") == "1",
		"allow http:// and loopback callback URLs: local demos and tests only (env GEOHUB_INSECURE_CALLBACKS=1)")
	fs.BoolVar(&cfg.NoAutoDisable, "no-auto-disable", envOr("GEOHUB_NO_AUTO_DISABLE", "") == "1",
		"never deactivate an integrator that keeps failing (default: after 120 h of failures) (env GEOHUB_NO_AUTO_DISABLE=1)")
	fs.StringVar(&cfg.TrustedProxies, "trusted-proxies", envOr("GEOHUB_TRUSTED_PROXIES", ""),
		"reverse proxies (IPs or CIDRs, comma-separated) whose X-Forwarded-For and X-Forwarded-Proto the console believes (env GEOHUB_TRUSTED_PROXIES)")
	fs.StringVar(&cfg.LogFormat, "log-format", envOr("GEOHUB_LOG_FORMAT", "text"), "log format: text or json (env GEOHUB_LOG_FORMAT)")
	fs.StringVar(&cfg.LogLevel, "log-level", envOr("GEOHUB_LOG_LEVEL", "info"), "log level: debug, info, warn, error (env GEOHUB_LOG_LEVEL)")
	retentionFlags(fs, &cfg)
	perIntegratorFlag(fs, &cfg)
	if err := parse(fs, args); err != nil || isHelp(args) {
		return cfg, false, err
	}
	if err := cfg.envErr(); err != nil {
		return cfg, false, err
	}
	cfg.Data, cfg.DB, cfg.MasterKeyFile = d.Data, d.URL, d.MasterKeyFile
	cfg.AdminPassword = os.Getenv("GEOHUB_ADMIN_PASSWORD")
	return cfg, true, nil
}

func isHelp(args []string) bool {
	for _, a := range args {
		if a == "-h" || a == "--help" || a == "-help" {
			return true
		}
	}
	return false
}

func migrateCmd(ctx context.Context, args []string) error {
	fs := newFlags("migrate")
	var d Database
	databaseFlags(fs, &d)
	if err := parse(fs, args); err != nil || isHelp(args) {
		return err
	}
	db, _, err := d.open(ctx, cliLogger(), false)
	if err != nil {
		return err
	}
	defer db.Close()
	fmt.Println("schema up to date:", d.Where())
	return nil
}

func tokenCreateCmd(ctx context.Context, args []string) error {
	fs := newFlags("token create")
	var d Database
	databaseFlags(fs, &d)
	papel := fs.String("papel", envOr("GEOHUB_PAPEL", ""), "role: admin, operador, leitor or produtor (env GEOHUB_PAPEL)")
	nome := fs.String("nome", envOr("GEOHUB_NOME", ""), "a name to recognise the token by (env GEOHUB_NOME)")
	if err := parse(fs, args); err != nil || isHelp(args) {
		return err
	}
	return createToken(ctx, os.Stdout, d, app.Papel(*papel), *nome)
}

func tokenRevokeCmd(ctx context.Context, args []string) error {
	fs := newFlags("token revoke")
	var d Database
	databaseFlags(fs, &d)
	id := fs.String("id", "", "the token's id, as token create printed it")
	if err := parse(fs, args); err != nil || isHelp(args) {
		return err
	}
	if *id == "" {
		return fmt.Errorf("--id is required")
	}
	db, _, err := d.open(ctx, cliLogger(), true)
	if err != nil {
		return err
	}
	defer db.Close()
	auth := &app.Auth{Store: db, Now: time.Now}
	if err := auth.RevokeToken(cliContext(ctx), *id); err != nil {
		return err
	}
	fmt.Printf("token %s revogado; servidores em execução o recusam em até 1 s\n", *id)
	return nil
}

// createToken prints the token alone on the last line of out: scripts take
// it with `tail -n1`. Only its hash is stored.
func createToken(ctx context.Context, out io.Writer, d Database, papel app.Papel, nome string) error {
	if !app.ValidPapel(papel) {
		return fmt.Errorf("--papel must be admin, operador, leitor or produtor")
	}
	db, _, err := d.open(ctx, cliLogger(), true)
	if err != nil {
		return err
	}
	defer db.Close()
	auth := &app.Auth{Store: db, Now: time.Now}
	secret, t, err := auth.CreateToken(cliContext(ctx), papel, nome)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "token %s (papel %s, nome %q) criado; guarde-o agora, ele não será mostrado de novo:\n", t.ID, t.Papel, t.Nome)
	fmt.Fprintln(out, secret)
	return nil
}

// cliContext names the command's author in the audit trail: whoever runs
// geohub on the server's machine, by their OS account. It is not an
// authentication (anyone who can read the data directory can change it);
// it is who the machine says ran the command.
func cliContext(ctx context.Context) context.Context {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if name == "" {
		name = "desconhecido"
	}
	return app.WithActor(ctx, app.Actor{Tipo: app.ActorCLI, ID: name, Nome: name, Endereco: "local"})
}

// cliLogger is where the commands log (the sealing of old bodies, say):
// stderr, as text, so stdout stays what scripts read.
func cliLogger() *slog.Logger { return slog.New(slog.NewTextHandler(os.Stderr, nil)) }

// resetPasswordCmd is the way back into the console for whoever runs the
// server: an admin who forgot the password has nobody else to reset it.
func resetPasswordCmd(ctx context.Context, args []string) error {
	fs := newFlags("operator reset-password")
	var d Database
	databaseFlags(fs, &d)
	login := fs.String("login", "", "the console account whose password to replace")
	if err := parse(fs, args); err != nil || isHelp(args) {
		return err
	}
	if *login == "" {
		return fmt.Errorf("--login is required")
	}
	return resetPassword(ctx, os.Stdout, d, *login)
}

// resetPassword prints the new password alone on the last line of out, as
// createToken prints a token.
func resetPassword(ctx context.Context, out io.Writer, d Database, login string) error {
	db, _, err := d.open(ctx, cliLogger(), true)
	if err != nil {
		return err
	}
	defer db.Close()
	o, _, err := db.OperatorByLogin(ctx, login)
	if errors.Is(err, app.ErrNotFound) {
		return fmt.Errorf("no console account with login %q", login)
	}
	if err != nil {
		return err
	}
	sessions := &app.Sessions{Store: db, Now: time.Now}
	senha, err := sessions.ResetPassword(cliContext(ctx), "", o)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "senha de %s redefinida; as sessões da conta foram encerradas.\n", o.Login)
	if !o.Ativo {
		fmt.Fprintln(out, "atenção: a conta está desativada; um admin precisa reativá-la em /operadores.")
	}
	fmt.Fprintln(out, "guarde-a agora, ela não será mostrada de novo; troque-a no console em “Trocar senha”:")
	fmt.Fprintln(out, senha)
	return nil
}

func backupCmd(ctx context.Context, args []string) error {
	fs := newFlags("backup")
	var d Database
	databaseFlags(fs, &d)
	out := fs.String("out", envOr("GEOHUB_BACKUP_OUT", ""), "file to write the copy to; must not exist (env GEOHUB_BACKUP_OUT)")
	if err := parse(fs, args); err != nil || isHelp(args) {
		return err
	}
	if d.Postgres() {
		// A consistent copy of a live PostgreSQL database is the server's
		// own tool's job; the master key is kept apart either way.
		return fmt.Errorf("backup copies the SQLite database; on PostgreSQL use pg_dump (or the provider's backups), see the README")
	}
	if *out == "" {
		return fmt.Errorf("--out is required")
	}
	if _, err := os.Stat(*out); err == nil {
		return fmt.Errorf("%s exists: backup never overwrites", *out)
	}
	opened, _, err := d.open(ctx, cliLogger(), true)
	if err != nil {
		return err
	}
	defer opened.Close()
	db := opened.(*store.DB)
	if err := db.Backup(ctx, *out); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	fmt.Println("backup written:", *out)
	return nil
}

// verifySignatureCmd helps an integrator debug its receiver: it prints the
// signature Geohub sends for a body (read raw from stdin, byte for byte) and,
// given --signature, says whether it matches, comparing in constant time.
func verifySignatureCmd(stdin io.Reader, stdout io.Writer, args []string) error {
	fs := newFlags("verify-signature")
	secretIn := secretFlag(fs, "secret", "GEOHUB_SECRET", "the integrator's signing secret", "stdin carries the body")
	ts := fs.String("timestamp", "", "the X-Geohub-Timestamp header, epoch seconds")
	sig := fs.String("signature", "", "the X-Geohub-Assinatura header to check (sha256=HEX); omit to only print")
	if err := refuseArgvSecrets(args, secretIn); err != nil {
		return err
	}
	if err := parse(fs, args); err != nil || isHelp(args) {
		return err
	}
	secret, err := secretIn.value(stdin)
	if err != nil {
		return err
	}
	t, err := strconv.ParseInt(*ts, 10, 64)
	if secret == "" || err != nil {
		return fmt.Errorf("the secret (--secret-file FILE or GEOHUB_SECRET) and a numeric --timestamp are required")
	}
	body, err := io.ReadAll(stdin)
	if err != nil {
		return err
	}
	want := app.Sign([]byte(secret), t, body)
	if *sig == "" {
		fmt.Fprintln(stdout, want)
		return nil
	}
	if !hmac.Equal([]byte(want), []byte(strings.TrimSpace(*sig))) {
		fmt.Fprintf(stdout, "assinatura NÃO confere\nesperada: %s\n", want)
		return fmt.Errorf("signature does not match")
	}
	fmt.Fprintln(stdout, "assinatura confere")
	return nil
}

// secretInput is a secret a command reads from a file, from stdin or from
// the environment, never from its arguments: a process's command line is
// readable by every user of the machine (ps, /proc/PID/cmdline) and stays
// in shell histories, while its environment is readable only by its owner.
type secretInput struct {
	name string // the argv flag refused; the file flag is name+"-file"
	env  string
	// busyStdin, when set, is why stdin cannot carry the secret.
	busyStdin string
	file      string
}

// secretFlag registers --NAME-file for the secret that --NAME used to take;
// busyStdin is why "-" cannot be used, "" when it can.
func secretFlag(fs *flag.FlagSet, name, env, what, busyStdin string) *secretInput {
	in := &secretInput{name: name, env: env, busyStdin: busyStdin}
	fs.StringVar(&in.file, name+"-file", "",
		fmt.Sprintf("file holding %s%s (or env %s; --%s VALUE is refused: the command line shows in ps)", what, in.stdinNote(), env, name))
	return in
}

func (in *secretInput) stdinNote() string {
	if in.busyStdin != "" {
		return ""
	}
	return ", or - for stdin"
}

// refuseArgvSecrets refuses a secret given as an argument before the flags
// are parsed, so that the answer says what to use instead (the flag
// package would only say the flag is not defined).
func refuseArgvSecrets(args []string, inputs ...*secretInput) error {
	for _, a := range args {
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		for _, in := range inputs {
			if name == in.name {
				stdin := " (- for stdin)"
				if in.busyStdin != "" {
					stdin = ""
				}
				return fmt.Errorf("--%s is refused: a secret on the command line is visible to every user of this machine (ps) and stays in the shell history; use --%s-file FILE%s or the environment variable %s",
					in.name, in.name, stdin, in.env)
			}
		}
	}
	return nil
}

// maxSecretBytes bounds what a secret file or stdin may hold.
const maxSecretBytes = 64 << 10

// value is the secret: the file's content (stdin's for "-") without its
// line ending, or else the environment variable; "" when there is neither.
func (in *secretInput) value(stdin io.Reader) (string, error) {
	if in.file == "" {
		return os.Getenv(in.env), nil
	}
	if in.file == "-" && in.busyStdin != "" {
		return "", fmt.Errorf(`--%s-file -: %s; give the secret in a file, e.g. --%s-file <(printf %%s "$SEGREDO"), or in %s`,
			in.name, in.busyStdin, in.name, in.env)
	}
	r := stdin
	if in.file != "-" {
		f, err := os.Open(in.file)
		if err != nil {
			return "", fmt.Errorf("--%s-file: %w", in.name, err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxSecretBytes+1))
	if err != nil {
		return "", fmt.Errorf("--%s-file: %w", in.name, err)
	}
	if len(b) > maxSecretBytes {
		return "", fmt.Errorf("--%s-file %s: more than %d bytes, not a secret", in.name, in.file, maxSecretBytes)
	}
	v := strings.TrimRight(string(b), "\r\n")
	if v == "" {
		return "", fmt.Errorf("--%s-file %s is empty", in.name, in.file)
	}
	return v, nil
}
