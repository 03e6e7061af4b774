package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"geohub/receiver/simulator"
)

// simulatorCmd runs the CAD simulator against a Geohub of the integrator's
// choice: the same one that backs --demo, standalone. It receives webhooks
// on --listen (the integrator's callback_url is http://<listen>/geohub/eventos,
// behind TLS in anything but a local test) and trickles commands.
func simulatorCmd(ctx context.Context, args []string) error {
	fs := newFlags("simulador")
	base := fs.String("geohub", envOr("GEOHUB_URL", "http://127.0.0.1:8080"), "Geohub's base URL (env GEOHUB_URL)")
	key := fs.String("api-key", envOr("GEOHUB_API_KEY", ""), "the integrator's API key, gk_… (env GEOHUB_API_KEY; prefer it: flags show in the process list)")
	secret := fs.String("secret", envOr("GEOHUB_SECRET", ""), "the integrator's signing secret (env GEOHUB_SECRET; prefer it)")
	self := fs.String("integrador", envOr("GEOHUB_INTEGRADOR", ""), "the integrator's id, to discard its own echo (env GEOHUB_INTEGRADOR)")
	listen := fs.String("listen", envOr("GEOHUB_SIMULADOR_ADDR", "127.0.0.1:9090"), "webhook listen address (env GEOHUB_SIMULADOR_ADDR)")
	interval := fs.String("intervalo", envOr("GEOHUB_SIMULADOR_INTERVALO", "8s"), "time between two new ocorrências (env GEOHUB_SIMULADOR_INTERVALO)")
	if err := parse(fs, args); err != nil || isHelp(args) {
		return err
	}
	every, err := time.ParseDuration(*interval)
	if err != nil || every <= 0 {
		return fmt.Errorf("--intervalo: a positive duration such as 8s")
	}
	if *key == "" || *secret == "" || *self == "" {
		return fmt.Errorf("--api-key, --secret and --integrador are required: they come from POST /api/integradores")
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cad := simulator.New(simulator.Config{BaseURL: *base, APIKey: *key, Secret: []byte(*secret), Self: *self, Logger: logger})
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
