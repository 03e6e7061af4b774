// Package console is the operators' browser console (SPEC 9): server-rendered
// pages (github.com/a-h/templ; the generated *_templ.go files are
// committed), static assets embedded in the binary, sessions with CSRF
// tokens, and websocket live tails. Its text is pt-BR. Like package web it
// holds no SQL and no business rules: every action is a call on package app.
package console

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/a-h/templ"

	"geohub/app"
	"geohub/app/ocorrencia"
	"geohub/web/heavy"
	"geohub/web/proxy"
	"geohub/web/refused"
)

//go:generate go tool templ generate

//go:embed static
var static embed.FS

// Cookie names. The session cookie carries the secret; the login form's
// CSRF cookie exists only before a session does.
const (
	sessionCookie = "geohub_sessao"
	loginCSRF     = "geohub_csrf_login"
)

// Console serves the console's pages. Every service field is required: they
// come from one app.Services (serve.go, and storetest in the tests), so the
// handlers do not check for a missing one.
type Console struct {
	Sessions    *app.Sessions
	Portal      *app.Portal
	Queries     *app.Queries
	Deliveries  *app.Deliveries
	Integrators *app.Integrators
	Registry    *app.Registry
	Consumers   *app.Consumers
	// Ocorrencias sends the ocorrência commands for the signed-in operator
	// and reads the list (its Changed notifier wakes the live list).
	Ocorrencias *ocorrencia.Service
	Stats       *app.Stats
	// Audit is the audit trail: the /auditoria page reads it, and the
	// changes refused here (role, CSRF) are told to it.
	Audit *app.AuditTrail
	// The live tails (tail.go): the notifiers wake them after a commit of
	// events and of delivery attempts; Attempts reads the attempts.
	EventsChanged   *app.Notifier
	AttemptsChanged *app.Notifier
	Attempts        app.AttemptLog
	// Insecure says --insecure-callbacks is on: every page says so.
	Insecure bool
	// TrustedProxies are the reverse proxies whose X-Forwarded-For and
	// X-Forwarded-Proto the console believes.
	TrustedProxies proxy.Trusted
	// Heavy bounds the pages that carry stored records, with the API's.
	Heavy   *heavy.Limit
	Logger  *slog.Logger
	Now     func() time.Time
	Metrics *app.Metrics
	// Refusals answers 429 to an operator refused too often (package
	// refused), as the API does to a token.
	Refusals *app.Refusals

	tails tails
	feeds feeds
}

// New is the console on the service graph; web.NewHandler sets the edge's
// own settings (Insecure, TrustedProxies, the shared Heavy) before Handler.
// Nothing else builds one: serve and the tests go through web.NewHandler.
func New(svc *app.Services, oc *ocorrencia.Service) *Console {
	return &Console{Sessions: svc.Sessions, Portal: svc.Portal, Queries: svc.Queries, Deliveries: svc.Deliveries,
		Integrators: svc.Integrators, Registry: svc.Registry, Consumers: svc.Consumers, Ocorrencias: oc,
		Stats: svc.Stats, Audit: svc.AuditTrail, EventsChanged: svc.EventsChanged, AttemptsChanged: svc.AttemptsChanged,
		Attempts: svc.Store, Logger: svc.Logger, Now: svc.Now, Metrics: svc.Metrics, Refusals: svc.Refusals, Heavy: heavy.New(heavy.Total)}
}

// heavy runs h inside one of the operator's slots (package heavy).
func (c *Console) heavy(h http.HandlerFunc) http.HandlerFunc { return c.Heavy.Wrap(h, c.Fail) }

// session is the signed-in operator of a request.
type session struct {
	op     app.Operator
	secret string
	csrf   string
}

type sessionKey struct{}

// sessionKeyOf tells the request's session apart from others' (for the live
// views whose forms carry its CSRF token), without being its secret.
func sessionKeyOf(r *http.Request) string {
	if s := sessionOf(r); s != nil {
		return s.csrf
	}
	return ""
}

func sessionOf(r *http.Request) *session {
	s, _ := r.Context().Value(sessionKey{}).(*session)
	return s
}

func allowed(s *session, roles []app.Papel) bool {
	for _, r := range roles {
		if s != nil && s.op.Papel == r {
			return true
		}
	}
	return false
}

// Handler returns the console's routes.
func (c *Console) Handler() http.Handler {
	mux := http.NewServeMux()
	assets, _ := fs.Sub(static, "static")
	mux.Handle("GET /static/", c.assetsOnly(assets, http.StripPrefix("/static/", cacheAssets(http.FileServerFS(assets)))))
	mux.HandleFunc("GET /login", c.loginPage)
	mux.HandleFunc("POST /login", c.login)
	mux.Handle("POST /sair", c.authed(app.Readers, c.logout))
	mux.Handle("GET /conta/senha", c.authed(app.Readers, c.passwordPage))
	mux.Handle("POST /conta/senha", c.authed(app.Readers, c.changePassword))
	mux.Handle("GET /{$}", c.authed(app.Readers, c.overview))
	mux.Handle("GET /visao-geral", c.authed(app.Readers, c.overviewCharts))
	mux.Handle("GET /eventos", c.authed(app.Readers, c.heavy(c.events)))
	mux.Handle("GET /eventos/{eventId}", c.authed(app.Readers, c.heavy(c.event)))
	mux.Handle("GET /eventos/{eventId}/bruto", c.authed(app.Readers, c.heavy(c.eventRaw)))
	mux.Handle("GET /entregas", c.authed(app.Readers, c.deliveries))
	mux.Handle("GET /entregas/{id}", c.authed(app.Readers, c.delivery))
	mux.Handle("POST /entregas/{id}/reenviar", c.authed(app.Operators, c.resend))
	mux.Handle("POST /entregas/reenviar", c.authed(app.Operators, c.resendAll))
	mux.Handle("POST /entregas/{id}/tentar-agora", c.authed(app.Operators, c.retryDeliveryNow))
	mux.Handle("GET /dlq", c.authed(app.Readers, c.dlq))
	mux.Handle("POST /dlq/reprocessar", c.authed(app.Operators, c.reprocess))
	mux.Handle("GET /ws/eventos", c.authed(app.Readers, c.eventsTail))
	mux.Handle("GET /ws/entregas", c.authed(app.Readers, c.attemptsTail))
	// Ocorrências: operators send the commands an integrator sends.
	mux.Handle("GET /ocorrencias", c.authed(app.Readers, c.ocorrencias))
	mux.Handle("GET /ocorrencias/nova", c.authed(app.Operators, c.newOcorrenciaPage))
	mux.Handle("POST /ocorrencias", c.authed(app.Operators, c.registerOcorrencia))
	mux.Handle("GET /ocorrencias/{id}", c.authed(app.Readers, c.ocorrenciaPage))
	mux.Handle("POST /ocorrencias/{id}/despachos", c.authed(app.Operators, c.dispatchRecurso))
	mux.Handle("POST /ocorrencias/{id}/despachos/{despachoId}/status", c.authed(app.Operators, c.setDespachoStatus))
	mux.Handle("POST /ocorrencias/{id}/status", c.authed(app.Operators, c.setOcorrenciaStatus))
	mux.Handle("GET /ws/ocorrencias", c.authed(app.Readers, c.ocorrenciasLive))
	mux.Handle("GET /ws/alertas", c.authed(app.Readers, c.incidentsLive))
	mux.Handle("GET /ws/integradores", c.authed(app.Readers, c.integratorsLive))
	mux.Handle("GET /ws/integradores/{id}", c.authed(app.Readers, c.integratorLive))
	// "Tentar agora" acts on deliveries, like a resend: operators too.
	mux.Handle("POST /integradores/{id}/tentar-agora", c.authed(app.Operators, c.retryIntegratorNow))
	// Integrators, registry and operators: every other POST is admin-only.
	mux.Handle("GET /integradores", c.authed(app.Readers, c.integrators))
	mux.Handle("GET /integradores/novo", c.authed(app.Admins, c.newIntegratorPage))
	mux.Handle("POST /integradores", c.authed(app.Admins, c.createIntegrator))
	mux.Handle("GET /integradores/{id}", c.authed(app.Readers, c.integrator))
	mux.Handle("POST /integradores/{id}", c.authed(app.Admins, c.updateIntegrator))
	mux.Handle("POST /integradores/{id}/ativo", c.authed(app.Admins, c.setIntegratorActive))
	mux.Handle("POST /integradores/{id}/segredo/rotacionar", c.authed(app.Admins, c.rotateSecret))
	mux.Handle("POST /integradores/{id}/api_key/rotacionar", c.authed(app.Admins, c.rotateAPIKey))
	mux.Handle("POST /integradores/{id}/verificar", c.authed(app.Admins, c.verifyIntegrator))
	mux.Handle("POST /integradores/{id}/testar", c.authed(app.Operators, c.testIntegrator))
	mux.Handle("GET /registro", c.authed(app.Readers, c.registry))
	mux.Handle("GET /registro/{tipo}", c.authed(app.Readers, c.heavy(c.registryType)))
	mux.Handle("GET /registro/{tipo}/{versao}/schema", c.authed(app.Readers, c.heavy(c.schemaRaw)))
	mux.Handle("POST /registro/{tipo}/{versao}/status", c.authed(app.Admins, c.setTypeStatus))
	mux.Handle("GET /operadores", c.authed(app.Admins, c.operatorsPage))
	mux.Handle("POST /operadores", c.authed(app.Admins, c.createOperator))
	mux.Handle("POST /operadores/{id}/ativo", c.authed(app.Admins, c.setOperatorActive))
	mux.Handle("POST /operadores/{id}/senha", c.authed(app.Admins, c.resetOperatorPassword))
	mux.Handle("POST /operadores/{id}/papel", c.authed(app.Admins, c.setOperatorRole))
	// An operador reads it too, without accounts, sign-ins and tokens.
	mux.Handle("GET /auditoria", c.authed(app.Operators, c.heavy(c.auditPage)))
	c.portalRoutes(mux)
	return securityHeaders(c.sameOrigin(c.unrouted(mux)))
}

// sameOrigin refuses every state-changing request that a browser says came
// from another origin (Sec-Fetch-Site, else Origin against Host), before
// any form or token is read. The forms' CSRF tokens stay; this also covers
// what a double-submit cookie cannot: a sibling subdomain may plant the
// login form's cookie and post its own value beside it. Requests without
// either header (not from a browser) are left to the tokens.
func (c *Console) sameOrigin(next http.Handler) http.Handler {
	p := http.NewCrossOriginProtection()
	p.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.forbidden(w, r, nil, "Este pedido veio de outro site. Use os formulários do próprio console.")
	}))
	return p.Handler(next)
}

// unrouted answers what no route takes with a page in the layout, in
// pt-BR, instead of the mux's bare "404 page not found": 404, or 405 with
// the mux's Allow header for a path that exists for another method.
func (c *Console) unrouted(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		verdict := &headerOnly{header: http.Header{}}
		mux.ServeHTTP(verdict, r)
		// The menu shows for a signed-in operator; nobody is sent to
		// /login for a page that does not exist.
		s := c.optionalSession(r)
		if verdict.status == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", verdict.header.Get("Allow"))
			p := page{Title: "Ação não disponível", S: s, Insecure: c.Insecure}
			c.render(w, r, http.StatusMethodNotAllowed, notFoundPage(p, http.StatusMethodNotAllowed, "Ação não disponível",
				"Este endereço existe, mas não para este tipo de pedido: use os botões e formulários do console.", r.URL.Path))
			return
		}
		c.notFound(w, r, s)
	})
}

// notFound is the console's 404 page; s may be nil.
func (c *Console) notFound(w http.ResponseWriter, r *http.Request, s *session) {
	p := page{Title: "Página não encontrada", S: s, Insecure: c.Insecure}
	c.render(w, r, http.StatusNotFound, notFoundPage(p, http.StatusNotFound, "Página não encontrada",
		"O console não tem uma página neste endereço. Confira o endereço digitado ou siga pelo menu.", r.URL.Path))
}

// assetsOnly lets next serve the files of assets under /static/ and
// nothing else: a directory (the root included) would be listed, and a
// missing file would get the file server's bare 404 instead of the
// console's page.
func (c *Console) assetsOnly(assets fs.FS, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/static/")
		if st, err := fs.Stat(assets, name); err != nil || st.IsDir() {
			c.notFound(w, r, c.optionalSession(r))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// headerOnly records a handler's status and headers and drops its body.
type headerOnly struct {
	header http.Header
	status int
}

func (h *headerOnly) Header() http.Header         { return h.header }
func (h *headerOnly) Write(b []byte) (int, error) { return len(b), nil }
func (h *headerOnly) WriteHeader(status int)      { h.status = status }

// optionalSession is the request's signed-in operator, or nil: for pages
// that show to anyone, such as the 404.
func (c *Console) optionalSession(r *http.Request) *session {
	ck, err := r.Cookie(sessionCookie)
	if err != nil || ck.Value == "" {
		return nil
	}
	op, err := c.Sessions.Check(r.Context(), ck.Value)
	if err != nil {
		return nil
	}
	return &session{op: op, secret: ck.Value, csrf: c.Sessions.CSRF(ck.Value)}
}

func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// No inline script or style anywhere: charts are SVG attributes and
		// the scripts read their settings from data- attributes.
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("X-Frame-Options", "DENY")
		next.ServeHTTP(w, r)
	})
}

func cacheAssets(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		next.ServeHTTP(w, r)
	})
}

// authed admits a request with a live session and one of roles. Without a
// session a page goes to /login and comes back afterwards; a POST without
// the session's CSRF token is refused 403.
func (c *Console) authed(roles []app.Papel, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var op app.Operator
		ck, err := r.Cookie(sessionCookie)
		if err == nil {
			resolve := c.Sessions.Resolve
			if r.Header.Get("X-Geohub-Auto") != "" {
				// A page refreshing itself (the overview's charts) is
				// not the person's activity: the idle time runs on.
				resolve = c.Sessions.Check
			}
			op, err = resolve(r.Context(), ck.Value)
		} else {
			err = app.Errorf(app.EUnauthorized, "sem sessão")
		}
		if err != nil {
			if app.ErrorCode(err) != app.EUnauthorized {
				c.Fail(w, r, err)
				return
			}
			if isWebsocket(r) {
				c.refuseTail(w, r) // the page's script sees 4401 and goes to /login
				return
			}
			if r.Method != http.MethodGet {
				http.Error(w, "sessão expirada", http.StatusUnauthorized)
				return
			}
			back := r.URL.RequestURI()
			http.Redirect(w, r, "/login?volta="+url.QueryEscape(back), http.StatusSeeOther)
			return
		}
		s := &session{op: op, secret: ck.Value, csrf: c.Sessions.CSRF(ck.Value)}
		// The signed-in operator is the author of whatever the request changes.
		addr, _ := c.TrustedProxies.Client(r)
		ctx := app.WithActor(r.Context(), app.Actor{Tipo: app.ActorOperador, ID: op.ID, Nome: op.Login, Papel: op.Papel, Endereco: addr})
		ctx = context.WithValue(ctx, sessionKey{}, s)
		refused.Limit(c.Refusals, "operador:"+op.ID, w, r.WithContext(ctx), func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost {
				r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
				if !c.Sessions.CheckCSRF(ck.Value, r.PostFormValue("csrf")) {
					const msg = "O formulário expirou ou não veio desta página (token CSRF inválido). Recarregue a página e tente de novo."
					c.Audit.Refused(r.Context(), app.AcaoAcessoNegado, app.AuditTarget{Tipo: "rota", ID: r.Method + " " + r.URL.Path},
						app.Errorf(app.EForbidden, "token CSRF inválido"))
					c.forbidden(w, r, s, msg)
					return
				}
			}
			if !allowed(s, roles) {
				if r.Method == http.MethodPost {
					c.Audit.Refused(r.Context(), app.AcaoAcessoNegado, app.AuditTarget{Tipo: "rota", ID: r.Method + " " + r.URL.Path},
						app.Errorf(app.EForbidden, "o papel %s não permite esta ação", op.Papel))
				}
				c.forbidden(w, r, s, "Seu papel ("+labelOrPapel(string(op.Papel))+") não permite esta ação.")
				return
			}
			h(w, r)
		}, c.Fail)
	})
}

func isWebsocket(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

// page is what the layout needs from every page.
type page struct {
	Title    string
	Active   string // the nav entry
	S        *session
	Insecure bool
	Flash    string // a one-line confirmation, above the content
	Warning  string // what the operator must know about what was done
	// OldSecret: the integrator on the page signs with a secret of the
	// format before Standard Webhooks, which those libraries refuse.
	OldSecret bool
	// Incidents are the CADs not receiving now: every signed-in page names
	// them in its header and title (SPEC 9, "At 3 a.m.").
	Incidents []app.Incident
}

func (c *Console) page(r *http.Request, title, active string) page {
	p := page{Title: title, Active: active, S: sessionOf(r), Insecure: c.Insecure, Flash: c.flash(r), Warning: c.warning(r)}
	if p.S != nil {
		p.Incidents = c.Integrators.Incidents()
	}
	return p
}

func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, comp templ.Component) {
	if _, err := r.Cookie(flashCookie); err == nil && status < 300 {
		// Shown on this page, once; an error page does not show it, and
		// leaves it for the next one.
		http.SetCookie(w, &http.Cookie{Name: flashCookie, Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if err := comp.Render(r.Context(), w); err != nil {
		c.Logger.Warn("render console page", "path", r.URL.Path, "err", err)
	}
}

func (c *Console) forbidden(w http.ResponseWriter, r *http.Request, s *session, msg string) {
	p := page{Title: "Acesso negado", S: s, Insecure: c.Insecure}
	c.render(w, r, http.StatusForbidden, errorPage(p, "Acesso negado", msg))
}

// Fail renders an app error as a page with the status and message
// app.Public gives the API; internal errors are logged.
func (c *Console) Fail(w http.ResponseWriter, r *http.Request, err error) {
	e := app.Public(err)
	status := e.Code.HTTPStatus()
	msg := e.Message
	if status >= 500 {
		// The API's words for a 500 are terse; a person gets what to do.
		if e.Code == app.EInternal {
			msg = "Algo deu errado do nosso lado. Tente de novo; se persistir, avise o administrador."
		}
		c.Logger.Error("console request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	title := "Erro"
	if e.Code == app.ENotFound {
		title = "Não encontrado"
	}
	retryAfter(w, err)
	p := page{Title: title, S: sessionOf(r), Insecure: c.Insecure}
	c.render(w, r, status, errorPage(p, title, msg))
}

// retryAfter tells a rate-limited browser, or script, when to come back,
// in whole seconds rounded up, as the API does.
func retryAfter(w http.ResponseWriter, err error) {
	var e *app.Error
	if errors.As(err, &e) && e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((e.RetryAfter+time.Second-1)/time.Second)))
	}
}

// redirect answers a successful form with a page that says what happened.
func (c *Console) redirect(w http.ResponseWriter, r *http.Request, to, ok string) {
	c.redirectWarning(w, r, to, ok, "")
}

// flashCookie carries a form's confirmation (and warning) to the page the
// form redirects to, which shows it once and clears it: not in the URL,
// where a reload or a shared link would show it again. Its MAC keeps a
// sibling site from planting a "system" message.
const flashCookie = "geohub_aviso"

// flashNote is what the flash cookie carries.
type flashNote struct {
	OK      string `json:"ok,omitempty"`
	Warning string `json:"aviso,omitempty"`
}

// redirectWarning is redirect with a warning beside the confirmation: what
// was done, and what the operator must know about it (shown apart, not in
// green).
func (c *Console) redirectWarning(w http.ResponseWriter, r *http.Request, to, ok, warning string) {
	if ok != "" || warning != "" {
		payload, _ := json.Marshal(flashNote{OK: ok, Warning: warning})
		value := base64.RawURLEncoding.EncodeToString(payload)
		_, https := c.TrustedProxies.Client(r)
		http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: value + "." + c.flashMAC(value), Path: "/",
			HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: https, MaxAge: 60})
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
}

func (c *Console) flashMAC(msg string) string {
	m := hmac.New(sha256.New, c.Sessions.CSRFKey)
	m.Write([]byte("flash\x00" + msg))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// note reads the request's flash cookie, if the console wrote it.
func (c *Console) note(r *http.Request) flashNote {
	ck, err := r.Cookie(flashCookie)
	if err != nil {
		return flashNote{}
	}
	value, mac, ok := strings.Cut(ck.Value, ".")
	if !ok || !hmac.Equal([]byte(mac), []byte(c.flashMAC(value))) {
		return flashNote{}
	}
	raw, err := base64.RawURLEncoding.DecodeString(value)
	var n flashNote
	if err != nil || json.Unmarshal(raw, &n) != nil {
		return flashNote{}
	}
	return n
}

// warning returns the request's warning if the console wrote it.
func (c *Console) warning(r *http.Request) string { return c.note(r).Warning }

// flash returns the request's confirmation message if the console wrote it.
func (c *Console) flash(r *http.Request) string { return c.note(r).OK }

// form carries what was typed and the findings per field, so an invalid
// form comes back with the error beside each field and nothing retyped.
type form struct {
	Values map[string]string
	Errors map[string]string
	Error  string // a finding about the whole form
}

func newForm(r *http.Request, fields ...string) form {
	f := form{Values: map[string]string{}, Errors: map[string]string{}}
	for _, k := range fields {
		f.Values[k] = r.PostFormValue(k)
	}
	return f
}

// take copies an app error's findings onto the fields they point at.
func (f *form) take(err error) {
	var e *app.Error
	if !errors.As(err, &e) {
		f.Error = "Algo deu errado do nosso lado. Tente de novo."
		return
	}
	for _, d := range e.Details {
		field := strings.TrimPrefix(d.Caminho, "/")
		if i := strings.IndexByte(field, '/'); i >= 0 {
			field = field[:i]
		}
		if _, ok := f.Values[field]; ok && f.Errors[field] == "" {
			f.Errors[field] = d.Mensagem
		} else if f.Error == "" {
			f.Error = e.Message + ": " + d.Mensagem
		}
	}
	if len(e.Details) == 0 {
		f.Error = e.Message
	}
}

func (f form) V(k string) string { return f.Values[k] }
func (f form) E(k string) string { return f.Errors[k] }
