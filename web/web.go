// Package web is Geohub's HTTP edge: the JSON API, health and metrics. It
// translates requests into calls on package app and app errors into HTTP
// statuses; it holds no SQL and no business rules.
package web

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	json2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"geohub/app"
	"geohub/app/ocorrencia"
	"geohub/web/heavy"
	"geohub/web/hijack"
	"geohub/web/proxy"
	"geohub/web/refused"
)

// MaxBodyBytes caps every request body.
const MaxBodyBytes = 1 << 20

// Server holds what the handlers call.
type Server struct {
	Publisher *app.Publisher
	Registry  *app.Registry
	Queries   *app.Queries
	Consumers *app.Consumers
	Auth      *app.Auth
	// Integrators is the cadastro of CAD systems.
	Integrators *app.Integrators
	Deliveries  *app.Deliveries
	// Ocorrencias is the ocorrência plugin: commands and projection.
	Ocorrencias *ocorrencia.Service
	// Audit is the audit trail (SPEC 10): read at /api/auditoria, and told
	// of the changes refused here before any service runs.
	Audit *app.AuditTrail
	// Console serves every path outside /api/ that no API route takes.
	Console  http.Handler
	Logger   *slog.Logger
	Gatherer prometheus.Gatherer
	// Ready reports whether the database is writable and workers run.
	Ready func(ctx context.Context) error
	// TrustedProxies are the reverse proxies whose X-Forwarded-For the
	// audit trail believes (--trusted-proxies, as the console).
	TrustedProxies proxy.Trusted
	// Heavy bounds the responses that carry stored records; serve gives
	// the console the same one.
	Heavy *heavy.Limit
	// Refusals answers 429 to a credential refused too often, before its
	// request runs (app.Refusals).
	Refusals *app.Refusals
	// Dispatcher delivers to the CAD sessions of GET /api/sessao.
	Dispatcher *app.Dispatcher
	sessions   hijack.Closing // ends the CAD sessions at shutdown
}

// Handler returns the routes of SPEC sections 4.4, 5 and 10.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	read, operate, admin, produce, anyRole := app.Readers, app.Operators, app.Admins, app.Producers, app.AnyRole

	mux.Handle("POST /api/events", s.authed(produce, s.publish))
	mux.Handle("GET /api/events", s.authed(read, s.heavy(s.listEvents)))
	mux.Handle("GET /api/events/{eventId}", s.authed(read, s.heavy(s.getEvent)))
	mux.Handle("GET /api/events/trace/{correlacaoId}", s.authed(read, s.heavy(s.trace)))
	mux.Handle("GET /api/events/replay", s.authed(read, s.heavy(s.replay)))
	mux.Handle("GET /api/events/dlq", s.authed(read, s.dlq))
	mux.Handle("POST /api/events/dlq/reprocessar", s.authed(operate, s.reprocessDLQ))

	mux.Handle("POST /api/registro", s.authed(admin, s.registerType))
	mux.Handle("GET /api/registro", s.authedOrOwn(anyRole, s.listTypes))
	mux.Handle("GET /api/registro/{tipo}", s.authedOrOwn(anyRole, s.getType))
	mux.Handle("PATCH /api/registro/{tipo}/{versao}", s.authed(admin, s.patchType))

	mux.Handle("POST /api/integradores", s.authed(admin, s.createIntegrator))
	mux.Handle("GET /api/integradores", s.authed(read, s.listIntegrators))
	mux.Handle("GET /api/integradores/{id}", s.authedOrOwn(read, s.getIntegrator))
	mux.Handle("PATCH /api/integradores/{id}", s.authed(admin, s.patchIntegrator))
	mux.Handle("POST /api/integradores/{id}/segredo/rotacionar", s.authedOrOwn(admin, s.rotateSecret))
	mux.Handle("POST /api/integradores/{id}/api_key/rotacionar", s.authed(admin, s.rotateAPIKey))

	mux.Handle("POST /api/integradores/{id}/verificar", s.authed(admin, s.verifyIntegrator))
	mux.Handle("GET /api/sessao", s.keyed(false, s.serveSession))
	mux.Handle("GET /api/entregas", s.authedOrOwn(read, s.listDeliveries))
	mux.Handle("GET /api/entregas/{id}", s.authedOrOwn(read, s.getDelivery))
	mux.Handle("POST /api/entregas/{id}/reenviar", s.authedOrOwn(operate, s.resendDelivery))
	mux.Handle("POST /api/entregas/reenviar", s.authedOrOwn(operate, s.resendDeliveries))
	mux.Handle("POST /api/entregas/{id}/tentar-agora", s.authedOrOwn(operate, s.retryDelivery))
	mux.Handle("POST /api/integradores/{id}/tentar-agora", s.authedOrOwn(operate, s.retryIntegrator))
	// An integrator's own key also reaches these, as /api/integradores/eu/…
	// (SPEC 8b, 8c): the tester and gap repair.
	mux.Handle("POST /api/integradores/{id}/testar", s.authedOrOwn(operate, s.testIntegrator))
	mux.Handle("POST /api/integradores/{id}/reenviar", s.authedOrOwn(operate, s.redeliver))
	mux.Handle("POST /api/integradores/{id}/evento-teste", s.authedOrOwn(operate, s.sendTestEvent))

	mux.Handle("POST /api/ocorrencias", s.command(s.registerOcorrencia))
	mux.Handle("POST /api/ocorrencias/{id}/despachos", s.command(s.dispatch))
	mux.Handle("POST /api/ocorrencias/{id}/despachos/{despachoId}/status", s.command(s.setDispatchStatus))
	mux.Handle("POST /api/ocorrencias/{id}/status", s.command(s.setOcorrenciaStatus))
	mux.HandleFunc("GET /api/ocorrencias", s.listOcorrencias)
	mux.HandleFunc("GET /api/ocorrencias/{id}", s.getOcorrencia)

	mux.Handle("GET /api/auditoria", s.authed(admin, s.heavy(s.listAudit)))
	mux.Handle("GET /api/auditoria/exportar", s.authed(admin, s.heavy(s.exportAudit)))

	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.Gatherer, promhttp.HandlerOpts{}))
	return writeDeadline(s.logRequests(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Every answer, errors, replay and metrics included: a browser must
		// never take JSON or NDJSON for HTML or script. The console sets
		// its own, the same.
		w.Header().Set("X-Content-Type-Options", "nosniff")
		// A query that does not parse (a bad escape, a semicolon, more than
		// 10,000 parameters) would be read as the parts that do, or as
		// none: its filters silently ignored (issue 26, I1).
		if _, err := url.ParseQuery(r.URL.RawQuery); err != nil {
			why := "um escape % inválido ou um ';' (separe os parâmetros com &)"
			if strings.Contains(err.Error(), "exceeded limit") {
				why = "parâmetros demais"
			}
			s.Fail(w, r, &app.Error{Code: app.EMalformed, Message: "consulta (query string) malformada: " + why, Err: err})
			return
		}
		if _, pattern := mux.Handler(r); pattern == "" {
			if s.Console != nil && !strings.HasPrefix(r.URL.Path, "/api/") {
				s.Console.ServeHTTP(w, r)
				return
			}
			s.unrouted(w, r, mux)
			return
		}
		mux.ServeHTTP(w, r)
	})))
}

// unrouted answers what no route takes in the API's error shape, keeping the
// mux's verdict: 404, or 405 with its Allow header.
func (s *Server) unrouted(w http.ResponseWriter, r *http.Request, mux *http.ServeMux) {
	verdict := &headerOnly{header: http.Header{}}
	mux.ServeHTTP(verdict, r)
	if verdict.status == http.StatusMethodNotAllowed {
		w.Header().Set("Allow", verdict.header.Get("Allow"))
		s.Fail(w, r, app.Errorf(app.EMethod, "método %s não permitido nesta rota", r.Method))
		return
	}
	s.Fail(w, r, app.Errorf(app.ENotFound, "rota não encontrada"))
}

// headerOnly records a handler's status and headers and drops its body.
type headerOnly struct {
	header http.Header
	status int
}

func (h *headerOnly) Header() http.Header         { return h.header }
func (h *headerOnly) Write(b []byte) (int, error) { return len(b), nil }
func (h *headerOnly) WriteHeader(status int)      { h.status = status }

// authed admits a request whose bearer token has one of roles: 401 without
// a valid token, 403 with the wrong role.
func (s *Server) authed(roles []app.Papel, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The scheme is case-insensitive (RFC 9110 section 11.1).
		scheme, secret, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		if !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(secret) == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="geohub"`)
			s.Fail(w, r, app.Errorf(app.EUnauthorized, "token ausente: use Authorization: Bearer <token>"))
			return
		}
		t, err := s.Auth.Authenticate(r.Context(), strings.TrimSpace(secret))
		if err != nil {
			if app.ErrorCode(err) == app.EUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="geohub", error="invalid_token"`)
			}
			s.Fail(w, r, err)
			return
		}
		// The token is the author of whatever the request changes.
		ctx := app.WithActor(r.Context(), app.Actor{Tipo: app.ActorToken, ID: t.ID, Nome: t.Nome, Papel: t.Papel,
			Endereco: s.remoteAddr(r)})
		s.limitRefusals("token:"+t.ID, w, r.WithContext(ctx), func(w http.ResponseWriter, r *http.Request) {
			if err := app.Allow(t, roles...); err != nil {
				if r.Method != http.MethodGet && r.Method != http.MethodHead {
					s.Audit.Refused(r.Context(), app.AcaoAcessoNegado, routeTarget(r), err)
				}
				s.Fail(w, r, err)
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
			h(w, r.WithContext(context.WithValue(r.Context(), tokenKey{}, t)))
		})
	})
}

// limitRefusals runs next unless the credential key was refused too often
// (package refused).
func (s *Server) limitRefusals(key string, w http.ResponseWriter, r *http.Request, next http.HandlerFunc) {
	refused.Limit(s.Refusals, key, w, r, next, s.Fail)
}

type tokenKey struct{}

// tokenOf is the operator token that authed admitted the request with.
func tokenOf(r *http.Request) (app.Token, bool) {
	t, ok := r.Context().Value(tokenKey{}).(app.Token)
	return t, ok
}

// errorBody is the one error shape of the API.
type errorBody struct {
	Erro     string       `json:"erro"`
	Codigo   app.Code     `json:"codigo"`
	Detalhes []app.Detail `json:"detalhes,omitempty"`
}

// Fail writes err as the API's error shape (app.Public decides the status
// and the words, as it does for the console). Internal errors are logged.
func (s *Server) Fail(w http.ResponseWriter, r *http.Request, err error) {
	e := app.Public(err)
	status := e.Code.HTTPStatus()
	if status >= 500 {
		s.Logger.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((e.RetryAfter+time.Second-1)/time.Second)))
	}
	writeJSON(w, status, errorBody{Erro: e.Message, Codigo: e.Code, Detalhes: e.Details})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	json2.MarshalWrite(w, v, apiJSON)
	w.Write([]byte{'\n'})
}

// apiJSON is encoding/json's behaviour (v1 options) with one change: every
// time.Time is written in app.EnvelopeTime, milliseconds always, where
// encoding/json trims trailing zeros ("04.1Z" beside "04.123Z") and keeps
// the nanoseconds of times that never went through the store.
var apiJSON = json2.JoinOptions(jsonv1.DefaultOptionsV1(), jsontext.EscapeForHTML(false),
	json2.WithMarshalers(json2.MarshalToFunc(func(enc *jsontext.Encoder, t time.Time) error {
		return enc.WriteToken(jsontext.String(t.UTC().Format(app.EnvelopeTime)))
	})))

// writeEvent writes one record with its hand-written encoder: json.Encoder
// would re-scan a Marshaler's output to validate and compact it.
func writeEvent(w http.ResponseWriter, status int, ev app.Event) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	w.Write(append(ev.AppendJSON(make([]byte, 0, 512+len(ev.Payload))), '\n'))
}

// decodeJSON reads the request body strictly into v (see app.DecodeJSON).
func decodeJSON(r *http.Request, v any) error { return app.DecodeJSON(r.Body, v) }

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.Ready(ctx); err != nil {
		s.Logger.Warn("not ready", "err", err)
		body := map[string]string{"status": "indisponivel"}
		var ae *app.Error
		if errors.As(err, &ae) && ae.Code == app.EUnavailable {
			// A storage fault, said in words an operator can act on; other
			// errors stay in the log.
			body["motivo"] = ae.Message
		}
		writeJSON(w, http.StatusServiceUnavailable, body)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "pronto"})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection: the console's
// live tails hijack it for their websockets.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// logRequests logs method, path, status and duration: never bodies, never
// query strings (filters may carry personal data), never credentials.
func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		s.Logger.LogAttrs(r.Context(), slog.LevelDebug, "http request",
			slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.Int("status", rec.status), slog.Duration("duracao", time.Since(start)))
	})
}
