package console

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"geohub/app"
	"geohub/web/refused"
)

// The integrators' portal (SPEC 8c): /portal, a CAD vendor's own corner,
// signed in with a single-use link an operator made or with the
// integrator's API key. A portal session reaches its integrator's
// deliveries, cadastro, tester and catalogue, and nothing of other
// integrators, of operators or of the log.

const (
	portalCookie     = "geohub_portal"
	portalSignInCSRF = "geohub_csrf_portal"
)

// portalSession is the integrator signed in to the portal.
type portalSession struct {
	in     app.Integrator
	secret string
	csrf   string
}

type portalKey struct{}

func portalOf(r *http.Request) *portalSession {
	s, _ := r.Context().Value(portalKey{}).(*portalSession)
	return s
}

// portalPage is what every portal page shows around its content.
type portalPage struct {
	Title    string
	S        *portalSession
	Insecure bool
	// OldSecret: its secret predates Standard Webhooks (see page.OldSecret).
	OldSecret bool
}

func (c *Console) portalPage(r *http.Request, title string) portalPage {
	return portalPage{Title: title, S: portalOf(r), Insecure: c.Insecure}
}

func (c *Console) portalRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /portal/entrar", c.portalSignInPage)
	mux.HandleFunc("POST /portal/entrar", c.portalSignIn)
	mux.Handle("GET /portal", c.portalAuthed(c.portalHome))
	mux.Handle("GET /portal/{$}", c.portalAuthed(c.portalHome))
	mux.Handle("GET /portal/entregas/{id}", c.portalAuthed(c.portalDelivery))
	mux.Handle("GET /portal/catalogo", c.portalAuthed(c.portalCatalogue))
	mux.Handle("POST /portal/sair", c.portalAuthed(c.portalSignOut))
	mux.Handle("POST /portal/testar", c.portalAuthed(c.portalTest))
	mux.Handle("POST /portal/tentar-agora", c.portalAuthed(c.portalRetryNow))
	mux.Handle("POST /portal/evento-teste", c.portalAuthed(c.portalTestEvent))
	mux.Handle("POST /portal/segredo/rotacionar", c.portalAuthed(c.portalRotateSecret))
	mux.Handle("POST /portal/reenviar", c.portalAuthed(c.portalRedeliver))
	mux.Handle("POST /portal/entregas/{id}/reenviar", c.portalAuthed(c.portalResend))
	// Operators make and revoke the links, from the integrator's page.
	mux.Handle("POST /integradores/{id}/portal/link", c.authed(app.Operators, c.issuePortalLink))
	mux.Handle("POST /integradores/{id}/portal/link/{link}/revogar", c.authed(app.Operators, c.revokePortalLink))
	mux.Handle("POST /integradores/{id}/portal/sessoes/encerrar", c.authed(app.Operators, c.endPortalSessions))
}

// portalAuthed admits a live portal session, checks a form's CSRF token,
// and makes the integrator the author of what the request changes.
func (c *Console) portalAuthed(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ck, err := r.Cookie(portalCookie)
		var in app.Integrator
		if err == nil {
			in, err = c.Portal.Session(r.Context(), ck.Value)
		}
		if err != nil {
			if err != http.ErrNoCookie && !errors.Is(err, app.ErrNotFound) {
				c.Fail(w, r, err)
				return
			}
			if r.Method != http.MethodGet {
				http.Error(w, "sessão do portal expirada", http.StatusUnauthorized)
				return
			}
			http.Redirect(w, r, "/portal/entrar", http.StatusSeeOther)
			return
		}
		s := &portalSession{in: in, secret: ck.Value, csrf: c.Portal.CSRF(ck.Value)}
		addr, _ := c.TrustedProxies.Client(r)
		ctx := app.WithActor(r.Context(), app.Actor{Tipo: app.ActorIntegrador, ID: in.ID, Nome: in.Nome, Endereco: addr})
		// The portal spends the integrator's refusals, as its API key does.
		refused.Limit(c.Refusals, "integrador:"+in.ID, w, r.WithContext(context.WithValue(ctx, portalKey{}, s)), func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost {
				r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
				if !c.Portal.CheckCSRF(ck.Value, r.PostFormValue("csrf")) {
					c.Audit.Refused(r.Context(), app.AcaoAcessoNegado, app.AuditTarget{Tipo: "rota", ID: r.Method + " " + r.URL.Path},
						app.Errorf(app.EForbidden, "token CSRF inválido"))
					c.forbidden(w, r, nil, "O formulário expirou ou não veio desta página. Recarregue a página e tente de novo.")
					return
				}
			}
			h(w, r)
		}, c.Fail)
	})
}

func (c *Console) portalSignInPage(w http.ResponseWriter, r *http.Request) {
	c.showPortalSignIn(w, r, http.StatusOK, "")
}

// showPortalSignIn is the sign-in page: with ?link= a button that spends
// the link (a GET does not, so a mail scanner that opens it spends
// nothing), else the API key's field.
func (c *Console) showPortalSignIn(w http.ResponseWriter, r *http.Request, status int, msg string) {
	b := make([]byte, 16)
	rand.Read(b)
	token := hex.EncodeToString(b)
	_, https := c.TrustedProxies.Client(r)
	http.SetCookie(w, &http.Cookie{Name: portalSignInCSRF, Value: token, Path: "/portal/entrar", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: https, MaxAge: 3600})
	link := r.FormValue("link")
	c.render(w, r, status, portalSignInPage(portalPage{Title: "Entrar no portal", Insecure: c.Insecure}, token, link, msg))
}

func (c *Console) portalSignIn(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	ck, err := r.Cookie(portalSignInCSRF)
	if err != nil || ck.Value == "" || subtle.ConstantTimeCompare([]byte(ck.Value), []byte(r.PostFormValue("csrf"))) != 1 {
		c.forbidden(w, r, nil, "O formulário de entrada expirou ou não veio desta página. Abra o link de novo.")
		return
	}
	client, https := c.TrustedProxies.Client(r)
	var secret string
	if link := r.PostFormValue("link"); link != "" {
		secret, _, err = c.Portal.SignInWithLink(r.Context(), link, client)
	} else {
		secret, _, err = c.Portal.SignInWithKey(r.Context(), strings.TrimSpace(r.PostFormValue("api_key")), client)
	}
	if err != nil {
		if app.ErrorCode(err) != app.EUnauthorized {
			c.Fail(w, r, err)
			return
		}
		c.showPortalSignIn(w, r, http.StatusUnauthorized, app.Public(err).Message)
		return
	}
	if old, err := r.Cookie(portalCookie); err == nil && old.Value != "" {
		if in, err := c.Portal.Session(r.Context(), old.Value); err == nil {
			c.Portal.SignOut(app.WithActor(r.Context(), app.Actor{Tipo: app.ActorIntegrador, ID: in.ID, Nome: in.Nome,
				Endereco: client}), old.Value, in)
		}
	}
	http.SetCookie(w, &http.Cookie{Name: portalCookie, Value: secret, Path: "/portal", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: https})
	http.SetCookie(w, &http.Cookie{Name: portalSignInCSRF, Path: "/portal/entrar", MaxAge: -1})
	http.Redirect(w, r, "/portal", http.StatusSeeOther)
}

func (c *Console) portalSignOut(w http.ResponseWriter, r *http.Request) {
	s := portalOf(r)
	if err := c.Portal.SignOut(r.Context(), s.secret, s.in); err != nil {
		c.Fail(w, r, err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: portalCookie, Path: "/portal", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/portal/entrar", http.StatusSeeOther)
}

// portalResult is what an action on the portal's home page answers, shown
// above the rest.
type portalResult struct {
	OK      string          // a confirmation
	Erro    string          // a refusal, in app's words
	Report  *app.TestReport // the tester's
	Segredo string          // a new secret, shown once
}

// portalFilter is the deliveries' filter of the home page: Desde and Ate
// as typed (datetime-local), the end's minute included.
type portalFilter struct {
	Status, Tipo, Agregado, Desde, Ate string
}

func (c *Console) portalHome(w http.ResponseWriter, r *http.Request) {
	c.showPortalHome(w, r, http.StatusOK, portalResult{})
}

func (c *Console) showPortalHome(w http.ResponseWriter, r *http.Request, status int, res portalResult) {
	s := portalOf(r)
	in, err := c.Integrators.Get(r.Context(), s.in.ID) // with its circuit and health now
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	q := r.URL.Query()
	f := portalFilter{Status: q.Get("status"), Tipo: q.Get("tipo"), Agregado: q.Get("agregado"), Desde: q.Get("desde"), Ate: q.Get("ate")}
	df := app.DeliveryFilter{Integrador: in.ID, Status: f.Status, Tipo: f.Tipo, Agregado: f.Agregado, Limite: 50, Desc: true}
	if f.Desde != "" {
		if t, ok := parsePeriod(f.Desde); ok {
			df.CriadoInicio = t
		} else {
			res.Erro = "Data inválida em Desde: use dia e hora."
		}
	}
	if f.Ate != "" {
		if t, ok := periodEnd(f.Ate); ok {
			df.CriadoFim = t.Add(-time.Millisecond)
		} else {
			res.Erro = "Data inválida em Até: use dia e hora."
		}
	}
	page, err := c.Deliveries.List(r.Context(), df)
	if err != nil && app.ErrorCode(err) == app.EInvalid {
		res.Erro, err = app.Public(err).Message, nil
	}
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	ready, err := c.Integrators.SecretLibraryReady(r.Context(), in.ID)
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	pp := c.portalPage(r, in.Nome)
	pp.OldSecret = !ready
	c.render(w, r, status, portalHomePage(pp, in, f, page, res, c.Now()))
}

func (c *Console) portalDelivery(w http.ResponseWriter, r *http.Request) {
	id, err := parseDeliveryID(r)
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	d, err := c.portalOwnDelivery(r, id)
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, portalDeliveryPage(c.portalPage(r, "Entrega "+strconv.FormatInt(d.ID, 10)), d, c.flash(r)))
}

// portalOwnDelivery reads a delivery of the signed-in integrator; another
// integrator's does not exist here.
func (c *Console) portalOwnDelivery(r *http.Request, id int64) (app.DeliveryDetail, error) {
	d, err := c.Deliveries.Get(r.Context(), id)
	if err == nil && d.Integrador != portalOf(r).in.ID {
		err = app.Errorf(app.ENotFound, "entrega não encontrada")
	}
	return d, err
}

func (c *Console) portalCatalogue(w http.ResponseWriter, r *http.Request) {
	in := portalOf(r).in
	all := slices.DeleteFunc(c.Registry.List(), func(t app.TypeVersion) bool { return !in.Wants(t.Tipo) })
	c.render(w, r, http.StatusOK, portalCataloguePage(c.portalPage(r, "Catálogo de eventos"), all))
}

func (c *Console) portalTest(w http.ResponseWriter, r *http.Request) {
	rep, err := c.Deliveries.Test(r.Context(), c.Integrators, portalOf(r).in.ID)
	if err != nil {
		c.showPortalHome(w, r, app.Public(err).Code.HTTPStatus(), portalResult{Erro: app.Public(err).Message})
		return
	}
	c.showPortalHome(w, r, http.StatusOK, portalResult{Report: &rep})
}

func (c *Console) portalRetryNow(w http.ResponseWriter, r *http.Request) {
	id := portalOf(r).in.ID
	res, err := c.Deliveries.RetryNow(r.Context(), c.Integrators, id)
	var in app.Integrator
	if err == nil {
		in, err = c.Integrators.Get(r.Context(), id)
	}
	if err != nil {
		c.showPortalHome(w, r, app.Public(err).Code.HTTPStatus(), portalResult{Erro: app.Public(err).Message})
		return
	}
	c.showPortalHome(w, r, http.StatusOK, portalResult{OK: retryNowText(in, res)})
}

func (c *Console) portalTestEvent(w http.ResponseWriter, r *http.Request) {
	te, err := c.Deliveries.SendTestEvent(r.Context(), c.Integrators, portalOf(r).in.ID)
	switch {
	case err != nil:
		c.showPortalHome(w, r, app.Public(err).Code.HTTPStatus(), portalResult{Erro: app.Public(err).Message})
	case te.Entregas == 0:
		c.showPortalHome(w, r, http.StatusOK, portalResult{Erro: "Evento de teste publicado, mas sem entrega: " + te.Motivo + "."})
	default:
		c.showPortalHome(w, r, http.StatusOK, portalResult{OK: "Evento de teste " + te.Evento.EventID +
			" publicado: a entrega dele aparece na lista abaixo."})
	}
}

func (c *Console) portalRotateSecret(w http.ResponseWriter, r *http.Request) {
	rot, err := c.Integrators.RotateSecret(r.Context(), portalOf(r).in.ID)
	if err != nil {
		c.showPortalHome(w, r, app.Public(err).Code.HTTPStatus(), portalResult{Erro: app.Public(err).Message})
		return
	}
	c.showPortalHome(w, r, http.StatusOK, portalResult{Segredo: rot.Segredo,
		OK: "Novo segredo gerado. O anterior continua assinando (X-Geohub-Assinatura-Anterior) até " +
			rot.AnteriorValidoAte.In(brt).Format("02/01/2006 15:04") + "."})
}

func (c *Console) portalRedeliver(w http.ResponseWriter, r *http.Request) {
	req := app.RedeliverRequest{Agregado: strings.TrimSpace(r.PostFormValue("agregado"))}
	var bad string
	if v := strings.TrimSpace(r.PostFormValue("sequencia_desde")); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			bad = "sequência inicial inválida: use um número, como 4"
		}
		req.SequenciaDesde = n
	}
	if v := strings.TrimSpace(r.PostFormValue("desde")); v != "" {
		t, ok := parsePeriod(v)
		if !ok {
			bad = "data e hora inválidas em Desde"
		}
		req.Desde = t.Format(time.RFC3339Nano)
	}
	if v := strings.TrimSpace(r.PostFormValue("ate")); v != "" {
		t, ok := periodEnd(v) // the minute typed is in
		if !ok {
			bad = "data e hora inválidas em Até"
		}
		req.Ate = t.Add(-time.Millisecond).Format(time.RFC3339Nano)
	}
	if bad != "" {
		c.showPortalHome(w, r, http.StatusUnprocessableEntity, portalResult{Erro: bad})
		return
	}
	res, err := c.Deliveries.Redeliver(r.Context(), c.Integrators, portalOf(r).in.ID, req)
	if err != nil {
		c.showPortalHome(w, r, app.Public(err).Code.HTTPStatus(), portalResult{Erro: app.Public(err).Message})
		return
	}
	msg := num(int64(res.Reenviadas)) + " entregas postas de novo na fila, em ordem, com o mesmo corpo e a mesma sequência."
	if res.Reenviadas == 1 {
		msg = "1 entrega posta de novo na fila, com o mesmo corpo e a mesma sequência."
	}
	msg += purgedNote(res.Expurgadas)
	c.showPortalHome(w, r, http.StatusOK, portalResult{OK: msg})
}

func (c *Console) portalResend(w http.ResponseWriter, r *http.Request) {
	id, err := parseDeliveryID(r)
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	_, err = c.portalOwnDelivery(r, id)
	if err == nil {
		err = c.Deliveries.Resend(r.Context(), id)
	}
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	c.redirect(w, r, "/portal/entregas/"+strconv.FormatInt(id, 10), "Reenviada: a entrega voltou para a fila.")
}

// portalCircuit is the circuit in words, also when it is closed.
func portalCircuit(in app.Integrator, now time.Time) string {
	if t := circuitText(in, now); t != "" {
		return t + ": o Geohub espera antes de tentar de novo; use Tentar agora quando o receptor voltar"
	}
	return "fechado: as entregas saem normalmente"
}

// portalHealth is the health window's numbers in a line.
func portalHealth(h app.Health) string {
	parts := []string{plural(h.Tentativas, "tentativa", "tentativas") + ", " + plural(h.Sucessos, "aceita", "aceitas")}
	if h.LatenciaP95MS != nil {
		parts = append(parts, "p95 "+durationMS(*h.LatenciaP95MS))
	}
	parts = append(parts, plural(h.Pendentes, "pendente agora", "pendentes agora"))
	return strings.Join(parts, " · ")
}

// answerAdvice says in plain words what a receiver's answer means and what
// to do, for the portal's vendor.
func answerAdvice(a app.Attempt) string {
	switch s := a.StatusCode; {
	case a.Succeeded():
		return "Entregue."
	case a.Erro != "" && s == 0:
		reason, _ := splitDetail(a.Erro)
		return reason
	case s == http.StatusUnauthorized:
		return "O receptor recusou a assinatura. Confira o segredo: X-Geohub-Assinatura usa o segredo inteiro (whsec_ incluído) como chave; webhook-signature, os bytes em base64 depois de whsec_. Confira também o relógio do servidor (janela de 5 minutos)."
	case s == http.StatusRequestEntityTooLarge:
		return "O receptor recusou o tamanho do corpo. Aceite corpos de até 2 MiB (no Express: express.raw({type: 'application/json', limit: '2mb'}))."
	case s == http.StatusBadRequest:
		return "O receptor disse que o corpo não é um envelope válido. Leia o corpo cru e não exija campos que o catálogo não garante."
	case s == http.StatusNotFound || s == http.StatusMethodNotAllowed:
		return "O receptor não tem esta rota para POST. Confira a URL de callback do cadastro."
	case s == http.StatusTooManyRequests || s >= 500:
		return "Erro ou sobrecarga no receptor: o Geohub tenta de novo conforme a espera entre tentativas. Veja os registros do receptor."
	case s >= 300 && s < 400:
		return "O receptor redirecionou: o Geohub não segue redirecionamentos. Cadastre a URL final."
	case s != 0:
		return "O receptor recusou a entrega com HTTP " + strconv.Itoa(s) + ": o Geohub tenta de novo conforme a espera entre tentativas, até esgotá-las; só 400 e 401 encerram a entrega na hora, na situação Falhou. Veja os registros do receptor."
	}
	return "Sem resposta do receptor."
}

// portalCount says how many deliveries the home page's filter found, of
// which the table shows the newest 50.
func portalCount(total int) string {
	switch total {
	case 0:
		return "Nenhuma entrega."
	case 1:
		return "1 entrega, abaixo."
	}
	return plural(total, "entrega", "entregas") + "; abaixo, as mais recentes (até 50)."
}

// issuePortalLink makes a sign-in link and shows it once on the
// integrator's page.
func (c *Console) issuePortalLink(w http.ResponseWriter, r *http.Request) {
	l, err := c.Portal.IssueLink(r.Context(), r.PathValue("id"))
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	in, err := c.Integrators.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	_, https := c.TrustedProxies.Client(r)
	scheme := "http"
	if https {
		scheme = "https"
	}
	link := scheme + "://" + r.Host + "/portal/entrar?link=" + url.QueryEscape(l.Token)
	w.Header().Set("Cache-Control", "no-store")
	c.showIntegrator(w, r, http.StatusCreated, in, editFormOf(in), &verification{PortalLink: link, PortalLinkExpira: l.ExpiraEm})
}

func (c *Console) revokePortalLink(w http.ResponseWriter, r *http.Request) {
	if err := c.Portal.RevokeLink(r.Context(), r.PathValue("id"), r.PathValue("link")); err != nil {
		c.Fail(w, r, err)
		return
	}
	c.redirect(w, r, "/integradores/"+url.PathEscape(r.PathValue("id")), "Link do portal revogado.")
}

func (c *Console) endPortalSessions(w http.ResponseWriter, r *http.Request) {
	n, err := c.Portal.EndSessions(r.Context(), r.PathValue("id"))
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	c.redirect(w, r, "/integradores/"+url.PathEscape(r.PathValue("id")), "Sessões do portal encerradas: "+strconv.Itoa(n)+".")
}
