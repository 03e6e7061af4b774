package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"geohub/app"
	"geohub/fixtures"
	"geohub/receiver/session"
	"geohub/receiver/simulator"
)

// demoCredentialsFile keeps the demo integrator's id and API key in the
// data directory, as a real CAD keeps its credentials in its own config:
// the API key is shown only once, and restarts must reuse it.
const demoCredentialsFile = "demo-cad.json"

// demoSessionCredentialsFile is the same for --demo-sessao, whose
// integrator receives over a session: an integrator's entrega never
// changes, so each mode has its own.
const demoSessionCredentialsFile = "demo-cad-sessao.json"

func demoFile(session bool) string {
	if session {
		return demoSessionCredentialsFile
	}
	return demoCredentialsFile
}

type demoCredentials struct {
	ID     string `json:"id"`
	APIKey string `json:"api_key"`
}

// demo is what --demo runs beside the server: the built-in CAD simulator as
// a real integrator (its own webhook listener on loopback, commands over
// the HTTP API) and a trickle of jornada events from a rostering system.
type demo struct {
	data        string
	geohub      string // the API's base URL
	integrators *app.Integrators
	publisher   *app.Publisher
	logger      *slog.Logger
	// session: the simulator dials GET /api/sessao (--demo-sessao), as a
	// CAD behind NAT does, instead of listening for callbacks.
	session bool
}

// start launches the demo and returns a function that waits for it to stop
// once ctx ends.
func (d *demo) start(ctx context.Context) (wait func(), err error) {
	fx, err := fixtures.LoadDemo()
	if err != nil {
		return nil, fmt.Errorf("demo fixtures: %w", err)
	}
	var ln net.Listener
	var callback string
	if !d.session {
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return nil, fmt.Errorf("demo listener: %w", err)
		}
		callback = "http://" + ln.Addr().String() + "/geohub/eventos"
	}
	creds, err := d.integrator(ctx, fx, callback)
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		return nil, err
	}
	// The simulator's play by play is debug: at info the server's own few
	// warnings would drown in it. A line a minute says it is alive.
	quiet := &quietLog{next: d.logger.Handler(), count: new(atomic.Int64)}
	log := slog.New(quiet).With("componente", "simulador")
	cad := simulator.New(simulator.Config{
		BaseURL: d.geohub,
		APIKey:  creds.APIKey,
		Self:    creds.ID,
		// In the same process the simulator can follow a secret rotation
		// made on the console; a real CAD is given the new secret.
		Secrets: func() [][]byte {
			cur, prev, err := d.integrators.Secrets(context.Background(), creds.ID)
			if err != nil {
				return nil
			}
			return [][]byte{cur, prev}
		},
		Logger: log,
	})
	mux := http.NewServeMux()
	mux.Handle("POST /geohub/eventos", cad.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}

	var wg sync.WaitGroup
	if d.session {
		wg.Go(func() {
			err := session.Run(ctx, session.Config{URL: d.geohub, APIKey: creds.APIKey, Receiver: cad.Handler(),
				OnState: func(s session.State) {
					if s.Connected {
						d.logger.Info("demo CAD session connected", "integrador", creds.ID)
					} else if ctx.Err() == nil {
						d.logger.Warn("demo CAD session ended", "integrador", creds.ID, "err", s.Err, "nova_tentativa_em", s.Retry)
					}
				}})
			if err != nil && ctx.Err() == nil {
				log.Error("demo session stopped", "err", err)
			}
		})
	} else {
		wg.Go(func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("demo receiver stopped", "err", err)
			}
		})
	}
	wg.Go(func() {
		if err := cad.Run(ctx, simulator.RunConfig{}); err != nil && ctx.Err() == nil {
			log.Error("demo simulator stopped", "err", err)
		}
	})
	wg.Go(func() { d.jornadas(ctx, fx) })
	wg.Go(func() { quiet.summarize(ctx, d.logger, time.Minute) })
	if d.session {
		d.logger.Info("demo running: the CAD simulator sends commands and receives its deliveries over a session",
			"integrador", creds.ID)
	} else {
		d.logger.Info("demo running: the CAD simulator sends commands and receives webhooks",
			"integrador", creds.ID, "callback", callback)
	}
	return func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shut)
		wg.Wait()
	}, nil
}

// integrator returns the demo integrator, created on the first --demo start
// and pointed at this run's callback on every later one.
func (d *demo) integrator(ctx context.Context, fx fixtures.Demo, callback string) (demoCredentials, error) {
	path := filepath.Join(d.data, demoFile(d.session))
	var creds demoCredentials
	raw, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := json.Unmarshal(raw, &creds); err != nil {
			// A damaged file costs the demo its old integrator, not the start.
			d.logger.Warn("demo credentials unreadable; creating a new demo integrator", "file", path, "err", err)
			break
		}
		// The callback moves with each run, and a demo paused by a serve
		// without --demo comes back; an admin who disabled the demo
		// integrator keeps it disabled.
		var patch app.IntegratorPatch
		if !d.session {
			patch.CallbackURL = &callback
		}
		in, err := d.integrators.Update(ctx, creds.ID, patch)
		if err == nil && !in.Ativo && in.MotivoInativo == demoPaused {
			on := true
			_, err = d.integrators.Update(ctx, creds.ID, app.IntegratorPatch{Ativo: &on})
		}
		if err == nil {
			return d.keepKey(ctx, path, creds)
		}
		if app.ErrorCode(err) != app.ENotFound {
			return creds, fmt.Errorf("update demo integrator: %w", err)
		}
		// The file outlived its integrator (another database): start over.
	case !errors.Is(err, fs.ErrNotExist):
		return creds, err
	}
	req := app.NewIntegrator{Nome: fx.Integrador.Nome, CallbackURL: callback,
		HostsPermitidos: []string{"127.0.0.1"}, Eventos: fx.Integrador.Eventos}
	if d.session {
		req = app.NewIntegrator{Nome: fx.Integrador.Nome + " (sessão)", Entrega: app.EntregaSessao, Eventos: fx.Integrador.Eventos}
	}
	created, err := d.integrators.Create(ctx, req)
	if err != nil {
		return creds, fmt.Errorf("create demo integrator: %w", err)
	}
	creds = demoCredentials{ID: created.ID, APIKey: created.APIKey}
	return creds, saveDemoCredentials(path, creds)
}

// demoPaused is why the demo integrator is inactive while serve runs
// without --demo: its callback lived in the demo's process, so every
// delivery would fail and show as an incident on every page.
const demoPaused = "demonstração parada: o CAD simulado só recebe com serve --demo, que o reativa"

// pauseDemo deactivates the demo integrator of an earlier --demo run on
// this data directory, when serve starts without --demo.
func pauseDemo(ctx context.Context, data, file string, integrators *app.Integrators, logger *slog.Logger) error {
	raw, err := os.ReadFile(filepath.Join(data, file))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	var creds demoCredentials
	if err != nil || json.Unmarshal(raw, &creds) != nil {
		return nil // --demo reports a damaged file; here it is no reason not to start
	}
	in, err := integrators.Get(ctx, creds.ID)
	if app.ErrorCode(err) == app.ENotFound || err == nil && !in.Ativo {
		return nil
	}
	if err != nil {
		return err
	}
	off := false
	if _, err := integrators.Update(ctx, in.ID, app.IntegratorPatch{Ativo: &off, Motivo: demoPaused}); err != nil {
		return fmt.Errorf("pause the demo integrator: %w", err)
	}
	logger.Info("the demo integrator is paused: its simulator runs only with --demo, which resumes it",
		"integrador", in.ID, "nome", in.Nome)
	return nil
}

// keepKey makes sure the stored API key still works. Only its hash is in
// the database, so after a key replaced on the console the simulator's
// commands would get 401 on every later start; the demo takes a new key
// instead (the running simulator keeps the old one until the next start).
func (d *demo) keepKey(ctx context.Context, path string, creds demoCredentials) (demoCredentials, error) {
	_, err := d.integrators.Authenticate(ctx, creds.APIKey)
	if app.ErrorCode(err) != app.EUnauthorized {
		return creds, err
	}
	rot, err := d.integrators.RotateAPIKey(ctx, creds.ID)
	if err != nil {
		return creds, fmt.Errorf("renew the demo integrator's API key: %w", err)
	}
	d.logger.Info("the demo integrator's API key was replaced; the demo took a new one", "integrador", creds.ID)
	creds.APIKey = rot.APIKey
	return creds, saveDemoCredentials(path, creds)
}

func saveDemoCredentials(path string, creds demoCredentials) error {
	raw, err := json.Marshal(creds)
	if err != nil {
		return err
	}
	return writeFileAtomic(path, raw)
}

// jornadas publishes shifts starting and ending, in-process, as a rostering
// system would over POST /api/events: at most a few open at once, one change
// every 10–20 s. Shifts left open by a restart stay open in the log.
func (d *demo) jornadas(ctx context.Context, fx fixtures.Demo) {
	if len(fx.Servidores) == 0 || len(fx.Unidades) == 0 {
		return
	}
	type open struct{ id, servidor string }
	var abertas []open
	autoria := &app.Autoria{ID: "escala-municipal", Tipo: "sistema"}
	publish := func(tipo, id string, payload any) {
		raw, err := json.Marshal(payload)
		if err != nil {
			return
		}
		// The bounded version, as the README asks producers to name.
		if _, _, err := d.publisher.Publish(ctx, app.PublishRequest{Tipo: tipo, VersaoSchema: "1.1.0", Origem: "escala",
			Agregado: "jornada:" + id, Autoria: autoria, Payload: raw}); err != nil && ctx.Err() == nil {
			d.logger.Warn("demo jornada not published", "tipo", tipo, "err", err)
		}
	}
	for wait := time.Second; ; wait = time.Duration(10+rand.IntN(10)) * time.Second {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		now := time.Now().UTC().Format(time.RFC3339)
		if len(abertas) >= 3 || len(abertas) > 0 && rand.IntN(3) == 0 {
			i := rand.IntN(len(abertas))
			j := abertas[i]
			abertas = append(abertas[:i], abertas[i+1:]...)
			publish("jornada:encerrada", j.id, map[string]any{"jornadaId": j.id, "fim": now, "motivo": "fim do turno"})
			continue
		}
		s := fx.Servidores[rand.IntN(len(fx.Servidores))]
		id := uuid.NewString()
		abertas = append(abertas, open{id: id, servidor: s.Nome})
		publish("jornada:iniciada", id, map[string]any{"jornadaId": id, "inicio": now,
			"servidor": map[string]string{"nome": s.Nome, "cpf": s.CPF},
			"unidade":  fx.Unidades[rand.IntN(len(fx.Unidades))],
			"local":    map[string]float64{"lat": -22.9056 + (rand.Float64()-0.5)*0.05, "lng": -47.0608 + (rand.Float64()-0.5)*0.05}})
	}
}

// loopbackURL turns a listen address into a URL a local client can dial.
func loopbackURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// writeFileAtomic writes a 0600 file through a synced temporary file and a
// rename, so a crash leaves the old content or the new, never half.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	// The rename is durable only once the directory is.
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer dir.Close()
	return dir.Sync()
}

// quietLog hands the simulator's records to next with info lowered to
// debug, and counts them (with its derived loggers) for summarize.
type quietLog struct {
	next  slog.Handler
	count *atomic.Int64
}

// Enabled is always true: what next drops is still counted.
func (q *quietLog) Enabled(context.Context, slog.Level) bool { return true }

func (q *quietLog) Handle(ctx context.Context, r slog.Record) error {
	q.count.Add(1)
	r.Level = demote(r.Level)
	if !q.next.Enabled(ctx, r.Level) {
		return nil
	}
	return q.next.Handle(ctx, r)
}

func (q *quietLog) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &quietLog{next: q.next.WithAttrs(attrs), count: q.count}
}

func (q *quietLog) WithGroup(name string) slog.Handler {
	return &quietLog{next: q.next.WithGroup(name), count: q.count}
}

func demote(l slog.Level) slog.Level {
	if l == slog.LevelInfo {
		return slog.LevelDebug
	}
	return l
}

// summarize logs, every interval, how many records the simulator wrote.
func (q *quietLog) summarize(ctx context.Context, log *slog.Logger, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n := q.count.Swap(0); n > 0 {
				log.Info("demo simulator at work (its lines are at debug level)", "registros", n, "intervalo", every)
			}
		}
	}
}
