package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"geohub/app"
	"geohub/receiver/simulator"
)

// simulatorCmd runs the CAD simulator against a Geohub of the integrator's
// choice: the same one that backs --demo, standalone. It receives webhooks
// on --listen (the integrator's callback_url is http://<listen>/geohub/eventos,
// behind TLS in anything but a local test) and trickles commands.
func simulatorCmd(ctx context.Context, args []string) error {
	fs := newFlags("simulador")
	base := fs.String("geohub", envOr("GEOHUB_URL", "http://127.0.0.1:8080"), "Geohub's base URL (env GEOHUB_URL)")
	keyIn := secretFlag(fs, "api-key", "GEOHUB_API_KEY", "the integrator's API key, gk_…", "")
	secretIn := secretFlag(fs, "secret", "GEOHUB_SECRET", "the integrator's signing secret", "")
	self := fs.String("integrador", envOr("GEOHUB_INTEGRADOR", ""), "the integrator's id, to discard its own echo (env GEOHUB_INTEGRADOR)")
	listen := fs.String("listen", envOr("GEOHUB_SIMULADOR_ADDR", "127.0.0.1:9090"), "webhook listen address (env GEOHUB_SIMULADOR_ADDR)")
	interval := fs.String("intervalo", envOr("GEOHUB_SIMULADOR_INTERVALO", "8s"), "time between two new ocorrências (env GEOHUB_SIMULADOR_INTERVALO)")
	register := fs.Bool("registrar", false, "register the simulator as a new integrator first, with an admin token in GEOHUB_TOKEN (it prints the new API key)")
	if err := refuseArgvSecrets(args, keyIn, secretIn); err != nil {
		return err
	}
	if err := parse(fs, args); err != nil || isHelp(args) {
		return err
	}
	if keyIn.file == "-" && secretIn.file == "-" {
		return fmt.Errorf("--api-key-file - and --secret-file -: stdin holds one of them; give the other in a file or its environment variable")
	}
	key, err := keyIn.value(os.Stdin)
	if err != nil {
		return err
	}
	secret, err := secretIn.value(os.Stdin)
	if err != nil {
		return err
	}
	every, err := time.ParseDuration(*interval)
	if err != nil || every <= 0 {
		return fmt.Errorf("--intervalo: a positive duration such as 8s")
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if *register {
		// The copy-paste path (README): an admin token registers the
		// simulator as a new integrator on its own --listen address.
		created, err := registerSimulator(ctx, *base, os.Getenv("GEOHUB_TOKEN"), *listen)
		if err != nil {
			return err
		}
		key, secret, *self = created.APIKey, created.Segredo, created.ID
		fmt.Fprintf(os.Stdout, "Integrador %s registrado. Guarde a chave de API (mostrada só agora):\nGEOHUB_API_KEY=%s\n",
			created.ID, created.APIKey)
	}
	if key == "" || secret == "" || *self == "" {
		return fmt.Errorf("the API key (--api-key-file or GEOHUB_API_KEY), the secret (--secret-file or GEOHUB_SECRET) and --integrador are required (they come from POST /api/integradores), or --registrar with GEOHUB_TOKEN")
	}
	cad := simulator.New(simulator.Config{BaseURL: *base, APIKey: key, Secret: []byte(secret), Self: *self, Logger: logger})
	mux := http.NewServeMux()
	mux.Handle("POST /geohub/eventos", cad.Handler())
	// The projection, to compare with GET /api/ocorrencias/{id}. It is open
	// to whoever reaches --listen: keep that on loopback or a private net.
	mux.HandleFunc("GET /estado", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		json.NewEncoder(w).Encode(map[string]any{"ocorrencias": cad.Projection().Ocorrencias(),
			"jornadas": cad.Projection().Jornadas()})
	})
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	logger.Info("CAD simulator receiving webhooks", "callback", "http://"+ln.Addr().String()+"/geohub/eventos", "geohub", *base)
	runErr := cad.Run(ctx, simulator.RunConfig{Interval: every})
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(shut)
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	if ctx.Err() != nil {
		return nil
	}
	return runErr
}

// registerSimulator creates an integrator whose callback is the simulator's
// own listener, as POST /api/integradores does for anyone.
func registerSimulator(ctx context.Context, base, token, listen string) (app.CreatedIntegrator, error) {
	if token == "" {
		return app.CreatedIntegrator{}, fmt.Errorf("--registrar needs an admin token in GEOHUB_TOKEN")
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return app.CreatedIntegrator{}, fmt.Errorf("--listen: %w", err)
	}
	body, _ := json.Marshal(app.NewIntegrator{Nome: "CAD simulado " + listen,
		CallbackURL: "http://" + listen + "/geohub/eventos", HostsPermitidos: []string{host}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(base, "/")+"/api/integradores",
		bytes.NewReader(body))
	if err != nil {
		return app.CreatedIntegrator{}, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return app.CreatedIntegrator{}, fmt.Errorf("register the simulator: %w", err)
	}
	defer res.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if res.StatusCode != http.StatusCreated {
		return app.CreatedIntegrator{}, fmt.Errorf("register the simulator: %s: %s", res.Status, bytes.TrimSpace(answer))
	}
	var created app.CreatedIntegrator
	if err := json.Unmarshal(answer, &created); err != nil {
		return app.CreatedIntegrator{}, fmt.Errorf("register the simulator: %w", err)
	}
	return created, nil
}
