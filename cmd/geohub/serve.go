package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"geohub/app"
	"geohub/app/callback"
	"geohub/app/ocorrencia"
	"geohub/web"
	"geohub/web/proxy"
)

// Config is what `geohub serve` runs with.
type Config struct {
	Data              string
	DB, MasterKeyFile string // see Database
	Addr              string
	Demo              bool
	DemoSessao        bool // the demo's CAD receives over a session (implies Demo)
	InsecureCallbacks bool
	NoAutoDisable     bool
	LogFormat         string
	LogLevel          string
	AdminPassword     string
	TrustedProxies    string // comma-separated addresses or CIDR prefixes
	// How long outbox bodies are kept after delivery and after a dead
	// letter (SPEC 6.4); 0 is the default. envErrs holds, per flag, a bad
	// value from the environment, which the flag set cannot report; the
	// flag given on the command line overrides it.
	DeliveredRetention, DeadLetterRetention time.Duration
	// SessionIdle ends a console session after this long without a request.
	SessionIdle time.Duration
	// PerIntegrator is how many requests this server has on the wire to
	// one integrator at most; replicas each have theirs.
	PerIntegrator int
	envErrs       map[string]error
}

// retentionFlags registers serve's duration flags: body retention (SPEC
// 6.4) and the console's idle timeout.
func retentionFlags(fs *flag.FlagSet, cfg *Config) {
	for _, r := range []struct {
		dst             *time.Duration
		name, env, what string
		def, least      time.Duration
	}{
		{&cfg.DeliveredRetention, "delivered-retention", "GEOHUB_DELIVERED_RETENTION",
			"how long a delivered webhook's body is kept", app.DefaultRetention, time.Nanosecond},
		{&cfg.DeadLetterRetention, "dead-letter-retention", "GEOHUB_DEAD_LETTER_RETENTION",
			"how long a dead letter keeps its body and so can be resent, counted from when it failed", app.DefaultDeadLetterRetention, time.Nanosecond},
		// A session's expiry moves at most once a minute, so it may trail
		// the last request by up to 2 min: a shorter idle time would sign
		// out people who are still working.
		{&cfg.SessionIdle, "session-idle", "GEOHUB_SESSION_IDLE",
			"how long a console session lasts without a request, at least 5m (at most its 12 h)", app.DefaultSessionIdle, 5 * time.Minute},
	} {
		parse := func(v string) error {
			d, err := time.ParseDuration(v)
			if err != nil || d < r.least {
				return fmt.Errorf("want a Go duration of at least %s, such as %s", r.least, r.def)
			}
			*r.dst = d
			return nil
		}
		*r.dst = r.def
		if v, ok := os.LookupEnv(r.env); ok {
			if err := parse(v); err != nil {
				if cfg.envErrs == nil {
					cfg.envErrs = map[string]error{}
				}
				cfg.envErrs[r.name] = fmt.Errorf("%s=%q: %w", r.env, v, err)
			}
		}
		fs.Func(r.name, fmt.Sprintf("%s (default %s) (env %s)", r.what, r.def, r.env), func(v string) error {
			delete(cfg.envErrs, r.name)
			return parse(v)
		})
	}
}

// perIntegratorFlag registers --per-integrator-in-flight: the bound on one
// integrator's requests on the wire is per server, so N replicas send an
// integrator up to N times it; an operator who runs N sets it to the
// total over N.
func perIntegratorFlag(fs *flag.FlagSet, cfg *Config) {
	const name, env = "per-integrator-in-flight", "GEOHUB_PER_INTEGRATOR_IN_FLIGHT"
	parse := func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > app.MaxPerIntegrator {
			return fmt.Errorf("want a whole number from 1 to %d", app.MaxPerIntegrator)
		}
		cfg.PerIntegrator = n
		return nil
	}
	cfg.PerIntegrator = app.DefaultPerIntegrator
	if v, ok := os.LookupEnv(env); ok {
		if err := parse(v); err != nil {
			if cfg.envErrs == nil {
				cfg.envErrs = map[string]error{}
			}
			cfg.envErrs[name] = fmt.Errorf("%s=%q: %w", env, v, err)
		}
	}
	fs.Func(name, fmt.Sprintf("most requests on the wire to one integrator from this server; with N replicas an integrator gets up to N times it (default %d) (env %s)",
		app.DefaultPerIntegrator, env), func(v string) error {
		delete(cfg.envErrs, name)
		return parse(v)
	})
}

// envErr is the first bad environment value no flag overrode.
func (cfg Config) envErr() error {
	for _, name := range []string{"delivered-retention", "dead-letter-retention", "session-idle", "per-integrator-in-flight"} {
		if err := cfg.envErrs[name]; err != nil {
			return err
		}
	}
	return nil
}

// Main is the running program. Tests start it in-process with Run and read
// Addr once Ready is closed.
type Main struct {
	Config Config
	Stdout io.Writer

	// Ready is closed once the server accepts connections; Addr is then the
	// address it listens on (useful with port 0).
	Ready chan struct{}
	Addr  string
	// Edge is the HTTP edge serve built (set before Ready is closed), for
	// the tests that compare it with their kits'.
	Edge *web.Handler

	// Subscribe, when set, registers in-process consumers before they start.
	Subscribe func(*app.Consumers)
	// BeforeProject, when set, runs before each fold of the ocorrências read
	// model; its error fails the fold (tests inject consumer failures so).
	BeforeProject func(ctx context.Context, ev app.Event) error
}

const masterKeyFile = "master.key"

// version goes in the User-Agent of every webhook.
var version = "dev"

func (cfg Config) database() Database {
	return Database{Data: cfg.Data, URL: cfg.DB, MasterKeyFile: cfg.MasterKeyFile}
}

// masterKey reads the 32-byte master key, creating it (mode 0600) when
// missing. It encrypts secrets at rest and derives the redaction key, so
// losing it makes hashed fields unjoinable with new ones.
func masterKey(path string) ([]byte, error) {
	key, err := os.ReadFile(path)
	if err == nil {
		if err := privateFile(path); err != nil {
			return nil, fmt.Errorf("master key: %w", err)
		}
		if len(key) != 32 {
			return nil, fmt.Errorf("master key %s: want 32 bytes, found %d", path, len(key))
		}
		return key, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read master key: %w", err)
	}
	key = make([]byte, 32)
	rand.Read(key)
	// Write a temporary file and link it into place: a crash never leaves a
	// short key, and of two processes creating it at once one wins and the
	// other reads the winner's key.
	tmp, err := os.CreateTemp(filepath.Dir(path), ".master.key-*")
	if err != nil {
		return nil, fmt.Errorf("create master key: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(key); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("write master key: %w", err)
	}
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("write master key: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	if err := os.Link(tmp.Name(), path); errors.Is(err, fs.ErrExist) {
		return masterKey(path)
	} else if err != nil {
		return nil, fmt.Errorf("install master key: %w", err)
	}
	if dir, err := os.Open(filepath.Dir(path)); err == nil {
		dir.Sync()
		dir.Close()
	}
	return key, nil
}

func newLogger(format, level string, w io.Writer) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format must be text or json")
}

// Run serves until ctx ends, then shuts down in order: stop accepting
// requests, stop consumers, let the writer finish, checkpoint the WAL.
func (m *Main) Run(ctx context.Context) error {
	cfg := m.Config
	cfg.Demo = cfg.Demo || cfg.DemoSessao
	if cfg.Demo && !cfg.DemoSessao {
		// The demo's CAD simulator listens on loopback over http; over a
		// session it has no callback.
		cfg.InsecureCallbacks = true
	}
	if m.Stdout == nil {
		m.Stdout = io.Discard
	}
	if m.Ready == nil {
		m.Ready = make(chan struct{})
	}
	logger, err := newLogger(cfg.LogFormat, cfg.LogLevel, os.Stderr)
	if err != nil {
		return err
	}
	proxies, err := proxy.Parse(cfg.TrustedProxies)
	if err != nil {
		return fmt.Errorf("--trusted-proxies: %w", err)
	}
	// Bind before the database is opened for work (SPEC 10, "Start
	// safely"): a second serve on a busy address must exit before it
	// recovers the running server's leases or takes a leader term.
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (is another geohub serve, or another program, using this address?)", cfg.Addr, err)
	}
	defer ln.Close() // Serve closes it too; this covers the returns before it
	m.Addr = ln.Addr().String()
	where := cfg.database()
	db, key, err := where.open(ctx, logger, false)
	if err != nil {
		return err
	}
	defer func() {
		if err := db.Close(); err != nil {
			logger.Error("close database", "err", err)
		}
	}()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	autoDisable := app.DefaultAutoDisable
	if cfg.NoAutoDisable {
		autoDisable = 0
	}
	svc, err := app.New(ctx, app.Deps{Store: db, MasterKey: key, Logger: logger, Registerer: reg,
		Policy:  callback.Policy{Insecure: cfg.InsecureCallbacks},
		Version: version, AutoDisable: autoDisable,
		// One SQLite node runs one dispatcher, so leases found at start are
		// orphans; on PostgreSQL they may be another replica's, which only
		// expiry hands back.
		ReapOnStart: !where.Postgres(),
		Retention:   cfg.DeliveredRetention, DeadLetterRetention: cfg.DeadLetterRetention, SessionIdle: cfg.SessionIdle,
		PerIntegrator: cfg.PerIntegrator})
	if err != nil {
		return err
	}
	conflicts, reactivated, err := app.RegisterBuiltinTypes(ctx, svc.Registry)
	if err != nil {
		return err
	}
	for _, c := range conflicts {
		logger.Error("a built-in event type is registered with other content and keeps it; its plugin may refuse commands",
			"tipo", c)
	}
	for _, tv := range reactivated {
		logger.Warn("a built-in event type was deprecated, which made every command fail; it is active again", "tipo", tv)
	}
	if pw, created, err := svc.Auth.EnsureAdmin(ctx, cfg.AdminPassword); err != nil {
		return fmt.Errorf("create admin operator: %w", err)
	} else if created && cfg.AdminPassword == "" {
		// Only a generated password is printed: one given in the
		// environment must not end up in container logs.
		fmt.Fprintf(m.Stdout, "\n  Operador admin criado. Senha (mostrada só agora): %s\n\n", pw)
	} else if created {
		fmt.Fprintln(m.Stdout, "Operador admin criado com a senha de GEOHUB_ADMIN_PASSWORD.")
	}

	ocorrencias := ocorrencia.New(svc, db)
	ocorrencias.BeforeProject = m.BeforeProject
	if m.Subscribe != nil {
		m.Subscribe(svc.Consumers)
	}
	// Stop runs before the database closes (deferred above): the stats
	// loop, the dispatcher, the consumers, after the HTTP server and the
	// demo (deferred below) are done.
	defer svc.Stop()
	// The demo integrator of the mode not running now is paused: nothing
	// of this run receives for it.
	for _, file := range []string{demoCredentialsFile, demoSessionCredentialsFile} {
		if cfg.Demo && file == demoFile(cfg.DemoSessao) {
			continue
		}
		if err := pauseDemo(ctx, cfg.Data, file, svc.Integrators, logger); err != nil {
			return err
		}
	}
	if err := svc.Start(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	edge := web.NewHandler(svc, web.Options{Ocorrencias: ocorrencias, Gatherer: reg,
		TrustedProxies: proxies, Insecure: cfg.InsecureCallbacks})
	m.Edge = edge
	httpSrv := &http.Server{
		Handler:           edge,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		// The handler sets the same deadline on every response and the
		// streams move theirs forward; this one also covers what net/http
		// answers by itself before any handler runs.
		WriteTimeout: web.WriteTimeout,
	}
	httpSrv.RegisterOnShutdown(edge.CloseTails) // Shutdown does not track hijacked connections
	if cfg.InsecureCallbacks {
		flag := "--insecure-callbacks"
		if cfg.Demo {
			flag = "--insecure-callbacks, implied by --demo"
		}
		logger.Warn(strings.Repeat("!", 20) + " insecure callbacks (" + flag + "): http:// and loopback callback URLs are ALLOWED; use only for local demos and tests " + strings.Repeat("!", 20))
	}
	logger.Info("geohub listening", "addr", m.Addr, "db", where.Where(), "driver", where.Driver(), "demo", cfg.Demo)
	// The one line a newcomer needs (SPEC 10): where the console is.
	fmt.Fprintf(m.Stdout, "Console: %s/\n", loopbackURL(m.Addr))
	errc := make(chan error, 1)
	go func() { errc <- httpSrv.Serve(ln) }()
	if cfg.Demo {
		// The demo stops when Run returns for any reason, not only on a
		// signal: an HTTP server failure must not leave it waiting.
		demoCtx, stopDemo := context.WithCancel(ctx)
		d := &demo{data: cfg.Data, geohub: loopbackURL(m.Addr), integrators: svc.Integrators, publisher: svc.Publisher, logger: logger,
			session: cfg.DemoSessao}
		waitDemo, err := d.start(demoCtx)
		if err != nil {
			stopDemo()
			httpSrv.Close()
			if ctx.Err() != nil {
				return nil // stopped (Ctrl-C) while the demo was starting
			}
			return err
		}
		defer waitDemo()
		defer stopDemo()
	}
	close(m.Ready)

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	logger.Info("shutting down")
	shutCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := httpSrv.Shutdown(shutCtx); err != nil {
		logger.Warn("http shutdown", "err", err)
	}
	// Shutdown does not wait for hijacked connections: the CAD sessions
	// record their end in the store, which closes once Run returns.
	if err := edge.WaitSessions(shutCtx); err != nil {
		logger.Warn("CAD sessions still open at shutdown", "err", err)
	}
	return nil
}
