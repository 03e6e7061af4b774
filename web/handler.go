package web

import (
	"context"
	"net/http"

	"geohub/app"
	"geohub/app/ocorrencia"
	"geohub/web/console"
	"geohub/web/heavy"
	"geohub/web/proxy"

	"github.com/prometheus/client_golang/prometheus"
)

// Options are the edge's settings that serve takes from its flags. serve
// and every test kit pass them to NewHandler, so no test runs an edge that
// serve would not build.
type Options struct {
	// Ocorrencias is the ocorrência plugin: its commands, list and live page.
	Ocorrencias *ocorrencia.Service
	// Gatherer serves /metrics (nil: an empty registry).
	Gatherer prometheus.Gatherer
	// TrustedProxies (--trusted-proxies) are the reverse proxies whose
	// X-Forwarded-For and X-Forwarded-Proto both the API and the console
	// believe.
	TrustedProxies proxy.Trusted
	// Insecure (--insecure-callbacks): every console page says so.
	Insecure bool
	// HeavySlots bounds, for the whole server, the responses that carry
	// stored records on the API and the console together (0: heavy.Total).
	HeavySlots int
}

// Handler is the server's one HTTP edge: the API (/api/, /metrics,
// /healthz, /readyz) and the console behind it, sharing one heavy-read
// limit and one trusted-proxy list.
type Handler struct {
	API     *Server
	Console *console.Console
	mux     http.Handler
}

// NewHandler mounts the API and the console on the service graph.
func NewHandler(svc *app.Services, o Options) *Handler {
	slots := o.HeavySlots
	if slots <= 0 {
		slots = heavy.Total
	}
	limit := heavy.New(slots)
	if o.Gatherer == nil {
		o.Gatherer = prometheus.NewRegistry()
	}
	cons := console.New(svc, o.Ocorrencias)
	cons.Insecure, cons.TrustedProxies, cons.Heavy = o.Insecure, o.TrustedProxies, limit
	api := &Server{Publisher: svc.Publisher, Registry: svc.Registry, Queries: svc.Queries, Consumers: svc.Consumers,
		Auth: svc.Auth, Integrators: svc.Integrators, Deliveries: svc.Deliveries, Ocorrencias: o.Ocorrencias,
		Audit: svc.AuditTrail, Console: cons.Handler(), Logger: svc.Logger, Gatherer: o.Gatherer, Ready: svc.Ready,
		TrustedProxies: o.TrustedProxies, Heavy: limit, Refusals: svc.Refusals, Dispatcher: svc.Dispatcher}
	return &Handler{API: api, Console: cons, mux: api.Handler()}
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// CloseTails ends the console's live tails: http.Server.Shutdown does not
// track the hijacked connections they run on.
func (h *Handler) CloseTails() {
	h.Console.CloseTails()
	h.API.CloseSessions()
}

// WaitSessions waits for the CAD sessions CloseTails ended to record their
// end, or for ctx; serve calls it before the store closes.
func (h *Handler) WaitSessions(ctx context.Context) error { return h.API.WaitSessions(ctx) }
