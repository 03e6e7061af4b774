package console

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/a-h/templ"

	"geohub/app"
)

// integratorFields are the create form's fields, in the names the API
// errors point at (/callback_url, /hosts_permitidos/2...).
var integratorFields = []string{"nome", "entrega", "callback_url", "hosts_permitidos", "eventos", "backoff"}

// editFields are the edit form's; the name is fixed at creation.
// editFields are the edit form's fields. Enabling and disabling are their
// own buttons: a checkbox loaded with the page would, on save, undo an
// auto-disable or another admin's change made in the meantime.
var editFields = []string{"callback_url", "hosts_permitidos", "eventos", "backoff"}

func (c *Console) integrators(w http.ResponseWriter, r *http.Request) {
	all, err := c.Integrators.List(r.Context())
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, integratorsPage(c.page(r, "Integradores", "integradores"), all, c.Now()))
}

// integratorsLive keeps the list's circuits, queues and health current:
// read again whenever an attempt is recorded or a circuit changes.
func (c *Console) integratorsLive(w http.ResponseWriter, r *http.Request) {
	p := c.page(r, "Integradores", "integradores")
	// The rows carry the session's CSRF token in their forms.
	c.serveSnapshot(w, r, "integradores", sessionKeyOf(r), c.AttemptsChanged, func(ctx context.Context) (map[string]templ.Component, error) {
		all, err := c.Integrators.List(ctx)
		if err != nil {
			return nil, err
		}
		return map[string]templ.Component{"linhas": integratorRows(p, all, c.Now())}, nil
	})
}

// integratorLive keeps an integrator's page current, so that after
// "Tentar agora" the queue is seen draining and the failure going away
// without a reload.
func (c *Console) integratorLive(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := c.Integrators.Get(r.Context(), id); err != nil {
		c.Fail(w, r, err)
		return
	}
	p := c.page(r, "", "integradores")
	c.serveSnapshot(w, r, "integrador", id+" "+sessionKeyOf(r), c.AttemptsChanged, func(ctx context.Context) (map[string]templ.Component, error) {
		in, err := c.Integrators.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		why, err := c.whyFailing(ctx, in)
		if err != nil {
			return nil, err
		}
		return map[string]templ.Component{"estado": integratorState(in, why), "saude": integratorHealth(p, in, c.Now())}, nil
	})
}

func (c *Console) newIntegratorPage(w http.ResponseWriter, r *http.Request) {
	f := form{Values: map[string]string{}, Errors: map[string]string{}}
	c.render(w, r, http.StatusOK, newIntegratorPage(c.page(r, "Novo integrador", "integradores"), f, pending.issue()))
}

func (c *Console) createIntegrator(w http.ResponseWriter, r *http.Request) {
	p := c.page(r, "Novo integrador", "integradores")
	f := newForm(r, integratorFields...)
	token := r.PostFormValue("envio")
	if done, ok := pending.claim(token); !ok {
		c.render(w, r, http.StatusConflict, alreadySentPage(p, "Este cadastro já foi enviado",
			"O integrador deste formulário já foi criado; o segredo e a chave de API só aparecem na resposta do primeiro envio e não são mostrados de novo. Se não foram guardados, abra o integrador e troque-os.", done))
		return
	}
	req := app.NewIntegrator{
		Nome:            strings.TrimSpace(f.V("nome")),
		Entrega:         f.V("entrega"),
		CallbackURL:     strings.TrimSpace(f.V("callback_url")),
		HostsPermitidos: splitList(f.V("hosts_permitidos")),
		Eventos:         splitList(f.V("eventos")),
		Backoff:         splitList(f.V("backoff")),
	}
	created, err := c.Integrators.Create(r.Context(), req)
	if err != nil {
		pending.release(token)
		if code := app.ErrorCode(err); code != app.EInvalid && code != app.EConflict {
			c.Fail(w, r, err)
			return
		}
		f.take(itemized(err, map[string][]string{"hosts_permitidos": req.HostsPermitidos, "eventos": req.Eventos, "backoff": req.Backoff}))
		if f.Error == "" {
			f.Error = "O integrador não foi cadastrado: confira os campos marcados."
		}
		c.render(w, r, http.StatusUnprocessableEntity, newIntegratorPage(p, f, pending.issue()))
		return
	}
	pending.done(token, created.ID)
	// The only response that ever carries the secrets: rendered here, never
	// behind a GET that a reload, the history or a proxy could replay.
	c.render(w, r, http.StatusCreated, createdPage(c.page(r, "Integrador criado", "integradores"), created))
}

func (c *Console) integrator(w http.ResponseWriter, r *http.Request) {
	in, err := c.Integrators.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	c.showIntegrator(w, r, http.StatusOK, in, editFormOf(in), nil)
}

func (c *Console) showIntegrator(w http.ResponseWriter, r *http.Request, status int, in app.Integrator, f form, v *verification) {
	p := c.page(r, in.Nome, "integradores")
	var tokens rotationTokens
	if isAdmin(p) {
		tokens = rotationTokens{Segredo: pending.issue(), Chave: pending.issue()}
	}
	why, err := c.whyFailing(r.Context(), in)
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	ready, err := c.Integrators.SecretLibraryReady(r.Context(), in.ID)
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	p.OldSecret = !ready
	var links []app.PortalLink
	if canAct(p) {
		var err error
		if links, err = c.Portal.Links(r.Context(), in.ID); err != nil {
			c.Fail(w, r, err)
			return
		}
	}
	c.render(w, r, status, integratorPage(p, in, f, tokens, v, links, why, c.Now()))
}

// rotationTokens are the one-time tokens of the integrator page's two
// rotation forms: each has its own, so a reload cannot repeat either and
// using one leaves the other usable.
type rotationTokens struct{ Segredo, Chave string }

// editFormOf fills the edit form with the stored values.
func editFormOf(in app.Integrator) form {
	f := form{Values: map[string]string{
		"callback_url":     in.CallbackURL,
		"hosts_permitidos": strings.Join(in.HostsPermitidos, "\n"),
		"eventos":          strings.Join(in.Eventos, "\n"),
		"backoff":          strings.Join(in.Backoff, ", "),
	}, Errors: map[string]string{}}
	return f
}

func (c *Console) updateIntegrator(w http.ResponseWriter, r *http.Request) {
	in, err := c.Integrators.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	f := newForm(r, editFields...)
	// Only what changed goes into the patch: an unchanged callback is not
	// resolved again, so a host that stopped resolving cannot keep an
	// operator from editing the rest (or from disabling it).
	var patch app.IntegratorPatch
	if u := strings.TrimSpace(f.V("callback_url")); u != in.CallbackURL {
		patch.CallbackURL = &u
	}
	hosts := splitList(f.V("hosts_permitidos"))
	if !slices.Equal(hosts, in.HostsPermitidos) {
		patch.HostsPermitidos = &hosts
	}
	eventos := splitList(f.V("eventos"))
	if len(eventos) == 0 {
		eventos = []string{"*"}
	}
	if !slices.Equal(eventos, in.Eventos) {
		patch.Eventos = &eventos
	}
	backoff := splitList(f.V("backoff"))
	if !slices.Equal(backoff, in.Backoff) {
		patch.Backoff = &backoff
	}
	if patch == (app.IntegratorPatch{}) {
		c.redirect(w, r, "/integradores/"+in.ID, "Nada mudou: o cadastro já estava assim.")
		return
	}
	if _, err := c.Integrators.Update(r.Context(), in.ID, patch); err != nil {
		if app.ErrorCode(err) != app.EInvalid {
			c.Fail(w, r, err)
			return
		}
		f.take(itemized(err, map[string][]string{"hosts_permitidos": hosts, "eventos": eventos, "backoff": backoff}))
		if f.Error == "" {
			f.Error = "Nada foi salvo: confira os campos marcados."
		}
		c.showIntegrator(w, r, http.StatusUnprocessableEntity, in, f, nil)
		return
	}
	c.redirect(w, r, "/integradores/"+in.ID, "Alterações salvas.")
}

// setIntegratorActive is the one-click enable/disable of the detail page.
func (c *Console) setIntegratorActive(w http.ResponseWriter, r *http.Request) {
	ativo := r.PostFormValue("ativo") == "sim"
	in, err := c.Integrators.Update(r.Context(), r.PathValue("id"), app.IntegratorPatch{Ativo: &ativo})
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	msg := "Integrador reativado: volta a receber os novos eventos."
	if !ativo {
		msg = "Integrador desativado: não recebe novos eventos e seus comandos são recusados até ser reativado."
	}
	c.redirect(w, r, "/integradores/"+in.ID, msg)
}

func (c *Console) rotateSecret(w http.ResponseWriter, r *http.Request) {
	c.rotateOnce(w, r, "Esta troca já foi feita",
		"O segredo deste pedido já foi gerado e mostrado uma única vez; ele não aparece de novo. Se não o guardou, troque-o outra vez.",
		func(ctx context.Context, p page, in app.Integrator) (templ.Component, error) {
			rot, err := c.Integrators.RotateSecret(ctx, in.ID)
			return rotatedPage(p, in, rot), err
		})
}

func (c *Console) rotateAPIKey(w http.ResponseWriter, r *http.Request) {
	c.rotateOnce(w, r, "Esta troca já foi feita",
		"A chave de API deste pedido já foi gerada e mostrada uma única vez; ela não aparece de novo. Se não a guardou, troque-a outra vez.",
		func(ctx context.Context, p page, in app.Integrator) (templ.Component, error) {
			rot, err := c.Integrators.RotateAPIKey(ctx, in.ID)
			return rotatedKeyPage(p, in, rot), err
		})
}

// rotateOnce runs a rotation of one of the integrator's credentials at most
// once per form token: a reload or a second click gets a page saying it was
// done (title, msg), never a second credential or the first one again.
func (c *Console) rotateOnce(w http.ResponseWriter, r *http.Request, title, msg string,
	rotate func(ctx context.Context, p page, in app.Integrator) (templ.Component, error)) {
	in, err := c.Integrators.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	p := c.page(r, in.Nome, "integradores")
	token := r.PostFormValue("envio")
	if done, ok := pending.claim(token); !ok {
		c.render(w, r, http.StatusConflict, alreadySentPage(p, title, msg, done))
		return
	}
	shown, err := rotate(r.Context(), p, in)
	if err != nil {
		pending.release(token)
		c.Fail(w, r, err)
		return
	}
	pending.done(token, in.ID)
	c.render(w, r, http.StatusOK, shown)
}

// retryIntegratorNow is an integrator's "Tentar agora" (SPEC 9): app
// closes its circuit and makes its pending deliveries due now.
func (c *Console) retryIntegratorNow(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.PathValue("id")
	before, err := c.lastAttempt(ctx)
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	res, err := c.Deliveries.RetryNow(ctx, c.Integrators, id)
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	in, err := c.Integrators.Get(ctx, id)
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	c.redirect(w, r, c.afterAction(r, "/integradores/"+id, before), retryNowText(in, res))
}

// retryNowText says what "Tentar agora" did, in the numbers the page
// shows: the circuit, the deliveries it brought forward, and the whole
// queue now on its way. The console and the portal say it alike.
func retryNowText(in app.Integrator, res app.RetryResult) string {
	msg := fmt.Sprintf("Tentar agora: circuito de %s fechado", in.Nome)
	switch {
	case res.Antecipadas == 1:
		msg += "; 1 entrega que esperava nova tentativa foi antecipada"
	case res.Antecipadas > 1:
		msg += "; " + num(int64(res.Antecipadas)) + " entregas que esperavam nova tentativa foram antecipadas"
	}
	if in.Saude != nil && in.Saude.Pendentes > 0 {
		return msg + "; " + plural(in.Saude.Pendentes, "entrega pendente sai agora", "entregas pendentes saem agora, na ordem de cada agregado") + "."
	}
	return msg + "; nenhuma entrega pendente."
}

// circuitState is an integrator's breaker state; without one, closed.
func circuitState(in app.Integrator) string {
	if in.Circuito == nil || in.Circuito.Estado == "" {
		return app.CircuitoFechado
	}
	return in.Circuito.Estado
}

// circuitText says since when the circuit is open and when the next probe
// may go; nothing while it is closed.
func circuitText(in app.Integrator, now time.Time) string {
	c := in.Circuito
	if c == nil || c.Estado == app.CircuitoFechado {
		return ""
	}
	var parts []string
	if c.Desde != nil {
		parts = append(parts, "aberto desde "+clock(*c.Desde, now)+" ("+ago(*c.Desde, now)+")")
	}
	switch {
	case c.Estado == app.CircuitoAberto && c.Ate != nil:
		parts = append(parts, "próxima sondagem às "+clock(*c.Ate, now))
	case c.Estado == app.CircuitoMeioAberto:
		parts = append(parts, "a próxima entrega testa o receptor")
	}
	if c.FalhasSeguidas > 0 {
		parts = append(parts, plural(c.FalhasSeguidas, "falha seguida", "falhas seguidas"))
	}
	return strings.Join(parts, " · ")
}

// troubleRank orders integrators for the overview: an open circuit first,
// then failing or inactive, then the healthy.
func troubleRank(in app.Integrator) int {
	switch {
	case circuitState(in) != app.CircuitoFechado, in.Ativo && in.CallbackRecusado != "":
		return 0
	case in.FalhandoDesde != nil || !in.Ativo:
		return 1
	}
	return 2
}

// needsRetry says whether "Tentar agora" would change anything visible.
func needsRetry(in app.Integrator) bool {
	return circuitState(in) != app.CircuitoFechado || (in.Saude != nil && in.Saude.Pendentes > 0)
}

// healthWindow names the span the success rate and latencies count: the
// last hour, or since the server started when that was less than an hour
// ago (the dispatcher keeps the hour in memory).
func healthWindow(h *app.Health, now time.Time) string {
	if h == nil || h.Desde.IsZero() || now.Sub(h.Desde) >= time.Hour-time.Minute {
		return "última hora"
	}
	return "desde " + clock(h.Desde, now) + ", quando o servidor iniciou"
}

// healthWindowShort is the window for a column heading.
func healthWindowShort(all []app.Integrator, now time.Time) string {
	if len(all) == 0 || healthWindow(all[0].Saude, now) == "última hora" {
		return "última hora"
	}
	return "desde " + clock(all[0].Saude.Desde, now)
}

func rateText(h *app.Health) string {
	if h == nil || h.TaxaSucesso == nil || h.Tentativas == 0 {
		return "sem tentativas"
	}
	return percent(*h.TaxaSucesso) + " (" + num(int64(h.Sucessos)) + " de " + num(int64(h.Tentativas)) + ")"
}

func latencyText(h *app.Health) string {
	if h == nil || h.LatenciaP50MS == nil || h.LatenciaP95MS == nil {
		return "—"
	}
	return num(*h.LatenciaP50MS) + " / " + num(*h.LatenciaP95MS) + " ms"
}

func pendingText(n int) string {
	return plural(n, "entrega pendente ou em envio", "entregas pendentes ou em envio")
}

// percent formats a rate in [0, 1] the Brazilian way: 97,5%.
func percent(rate float64) string {
	s := strconv.FormatFloat(rate*100, 'f', 1, 64)
	s = strings.TrimSuffix(s, ".0")
	return strings.Replace(s, ".", ",", 1) + "%"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return num(int64(n)) + " " + many
}

// pluralWord is the words after a count shown apart: one for 1, else many.
func pluralWord(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// clock is a time of today as HH:MM:SS, other days with the date.
func clock(t, now time.Time) string {
	if t.In(brt).Format("2006-01-02") == now.In(brt).Format("2006-01-02") {
		return t.In(brt).Format("15:04:05")
	}
	return when(t)
}

// ago says how long ago t was, roughly, for a glance.
func ago(t, now time.Time) string {
	d := now.Sub(t)
	switch {
	case d < time.Second:
		return "agora"
	case d < time.Minute:
		return "há " + strconv.Itoa(int(d.Seconds())) + " s"
	case d < time.Hour:
		return "há " + strconv.Itoa(int(d.Minutes())) + " min"
	case d < 48*time.Hour:
		return "há " + strconv.Itoa(int(d.Hours())) + " h"
	}
	return "há " + strconv.Itoa(int(d.Hours()/24)) + " dias"
}

// verification is the outcome of a verificar, or the receiver tester's
// report (Report set), shown on the integrator's page.
type verification struct {
	OK          bool
	Reactivated bool // it was inactive and the success made it active
	Session     bool // it went through the integrator's session
	Attempt     app.Attempt
	Report      *app.TestReport
	// PortalLink is a new sign-in link to the portal, shown once.
	PortalLink       string
	PortalLinkExpira time.Time
}

func (c *Console) verifyIntegrator(w http.ResponseWriter, r *http.Request) {
	before, err := c.Integrators.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	a, err := c.Deliveries.Verify(r.Context(), c.Integrators, before.ID)
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	after, err := c.Integrators.Get(r.Context(), before.ID)
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	ok := a.Succeeded()
	v := &verification{OK: ok, Reactivated: ok && !before.Ativo, Attempt: a, Session: before.Entrega == app.EntregaSessao}
	c.showIntegrator(w, r, http.StatusOK, after, editFormOf(after), v)
}

// testIntegrator runs the receiver tester against the integrator's
// callback (SPEC 8b) and shows its report on the integrator's page.
func (c *Console) testIntegrator(w http.ResponseWriter, r *http.Request) {
	rep, err := c.Deliveries.Test(r.Context(), c.Integrators, r.PathValue("id"))
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	in, err := c.Integrators.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	c.showIntegrator(w, r, http.StatusOK, in, editFormOf(in), &verification{Report: &rep})
}

// failure is why an integrator fails, from its last failed attempt: shown
// on its page without a click (SPEC 9, "At 3 a.m.").
type failure struct {
	Entrega int64
	Attempt app.Attempt
	// Incident: the header's badge shows this integrator too. Without
	// it one delivery is refused (a poison event) while the endpoint
	// receives, and the card says that rather than "failing".
	Incident bool
}

// whyFailing finds the last failed attempt of an integrator that is failing
// or whose circuit is open; nil otherwise.
func (c *Console) whyFailing(ctx context.Context, in app.Integrator) (*failure, error) {
	if in.FalhandoDesde == nil && circuitState(in) == app.CircuitoFechado && in.CallbackRecusado == "" {
		return nil, nil
	}
	page, err := c.Deliveries.List(ctx, app.DeliveryFilter{Integrador: in.ID, Desc: true, Limite: 50})
	if err != nil {
		return nil, err
	}
	for _, d := range page.Linhas {
		if d.Tentativas == 0 || (d.UltimoErro == "" && (d.UltimoStatus == 0 || d.UltimoStatus/100 == 2)) {
			continue
		}
		detail, err := c.Deliveries.Get(ctx, d.ID)
		if err != nil {
			return nil, err
		}
		if n := len(detail.Tentativas); n > 0 {
			last := slices.MaxFunc(detail.Tentativas, func(a, b app.Attempt) int { return a.Tentativa - b.Tentativa })
			incident := slices.ContainsFunc(c.Integrators.Incidents(), func(i app.Incident) bool { return i.ID == in.ID })
			return &failure{Entrega: d.ID, Attempt: last, Incident: incident}, nil
		}
	}
	return nil, nil
}

// incidentText is an incident's state in a few words.
func incidentText(i app.Incident) string {
	switch {
	case i.Recusado != "":
		return "callback recusado"
	case i.Estado == app.CircuitoAberto:
		return "circuito aberto"
	case i.Estado == app.CircuitoMeioAberto:
		return "circuito testando o receptor"
	case i.Estado == app.IncidenteInativo:
		return "desativado automaticamente"
	}
	return "falhando (" + plural(i.FalhasSeguidas, "falha seguida", "falhas seguidas") + ")"
}

// incidentTitle goes before every page's title while a CAD is not
// receiving, so a tab in the background says so too.
func incidentTitle(incs []app.Incident) string {
	switch len(incs) {
	case 0:
		return ""
	case 1:
		return "⚠ " + incs[0].Nome + ": " + incidentText(incs[0]) + " · "
	}
	return "⚠ " + strconv.Itoa(len(incs)) + " CADs sem receber · "
}

// testResult is a check's outcome in words.
func testResult(r string) string {
	switch r {
	case app.TesteOK:
		return "ok"
	case app.TesteAviso:
		return "aviso"
	}
	return "falhou"
}

// splitList reads a list typed one per line or separated by commas; nothing
// typed is nil, which app reads as "not given" (eventos: all of them).
func splitList(s string) []string {
	var out []string
	for _, line := range strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' || r == ',' }) {
		if v := strings.TrimSpace(line); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// itemized names the offending entry in each finding about a list and joins
// the findings per field: a list is one text box in the form, so
// "/hosts_permitidos/2" alone would leave the operator counting lines.
func itemized(err error, lists map[string][]string) error {
	var e *app.Error
	if !errors.As(err, &e) {
		return err
	}
	out := *e
	out.Details = nil
	at := map[string]int{}
	for _, d := range e.Details {
		field, idx, indexed := strings.Cut(strings.TrimPrefix(d.Caminho, "/"), "/")
		if n, err := strconv.Atoi(idx); indexed && err == nil && n < len(lists[field]) {
			d.Mensagem = fmt.Sprintf("%q: %s", lists[field][n], d.Mensagem)
		}
		if _, isList := lists[field]; isList {
			d.Caminho = "/" + field
			if i, seen := at[field]; seen {
				out.Details[i].Mensagem += "; " + d.Mensagem
				continue
			}
			at[field] = len(out.Details)
		}
		out.Details = append(out.Details, d)
	}
	return &out
}

func isAdmin(p page) bool { return p.S != nil && p.S.op.Papel == app.PapelAdmin }

// pending makes the forms whose repetition would do harm single-use: a
// reload of the answer, a double click or the back button would otherwise
// create a second integrator, or rotate the secret just shown away. Each
// such form carries a random token; the first POST with it claims it.
var pending = &onceForms{used: map[string]onceUse{}}

type onceForms struct {
	mu   sync.Mutex
	used map[string]onceUse
}

type onceUse struct {
	at time.Time
	id string // the integrator the submission created or changed
}

// onceTTL bounds the memory of used tokens; a form older than this that is
// submitted again simply runs again.
const onceTTL = 24 * time.Hour

func (o *onceForms) issue() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// claim takes a token for one submission. It fails, with what the first
// submission produced (possibly still nothing), when the token was used.
func (o *onceForms) claim(token string) (id string, ok bool) {
	if token == "" {
		// A form without a token was not rendered by us; it cannot repeat
		// one of ours, so it runs (CSRF and the role are checked already).
		return "", true
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	now := time.Now()
	for k, u := range o.used {
		if now.Sub(u.at) > onceTTL {
			delete(o.used, k)
		}
	}
	if u, seen := o.used[token]; seen {
		return u.id, false
	}
	o.used[token] = onceUse{at: now}
	return "", true
}

// release frees a token whose submission failed, so it may be sent again.
func (o *onceForms) release(token string) {
	o.mu.Lock()
	delete(o.used, token)
	o.mu.Unlock()
}

func (o *onceForms) done(token, id string) {
	if token == "" {
		return
	}
	o.mu.Lock()
	o.used[token] = onceUse{at: time.Now(), id: id}
	o.mu.Unlock()
}

// backoffText describes an integrator's retry schedule for people.
func backoffText(steps []string) string {
	if len(steps) == 0 {
		return "padrão: 1 min, dobrando até 1 h, 10 tentativas"
	}
	words := make([]string, len(steps))
	for i, step := range steps {
		words[i] = stepText(step)
	}
	return strings.Join(words, ", ") + " (" + strconv.Itoa(len(steps)+1) + " tentativas)"
}

// stepText is one backoff step for people ("5 s", "2 min", "1 h 30 min"),
// or the step as typed when it is not a Go duration.
func stepText(step string) string {
	d, err := time.ParseDuration(strings.TrimSpace(step))
	if err != nil || d < 0 {
		return step
	}
	if d < time.Second {
		return strconv.FormatInt(d.Milliseconds(), 10) + " ms"
	}
	var parts []string
	h, m, sec := int64(d/time.Hour), int64(d%time.Hour/time.Minute), d%time.Minute
	if h > 0 {
		parts = append(parts, num(h)+" h")
	}
	if m > 0 {
		parts = append(parts, strconv.FormatInt(m, 10)+" min")
	}
	if sec > 0 {
		s := strconv.FormatFloat(sec.Seconds(), 'f', -1, 64)
		parts = append(parts, strings.Replace(s, ".", ",", 1)+" s")
	}
	return strings.Join(parts, " ")
}

// Text says in words what the receiver answered to a verificar.
func (v verification) Text() string {
	a := v.Attempt
	switch {
	case v.OK && v.Reactivated:
		return fmt.Sprintf("O receptor respondeu HTTP %d em %s. O integrador foi reativado e volta a receber eventos.", a.StatusCode, durationMS(a.DuracaoMS))
	case v.OK && v.Session:
		return fmt.Sprintf("O CAD respondeu ack pela sessão em %s: assinatura aceita e sessão funcionando.", durationMS(a.DuracaoMS))
	case v.OK:
		return fmt.Sprintf("O receptor respondeu HTTP %d em %s: assinatura aceita e callback funcionando.", a.StatusCode, durationMS(a.DuracaoMS))
	case a.Erro != "":
		return fmt.Sprintf("Não foi possível falar com o receptor (após %s). Nada foi alterado no integrador.", durationMS(a.DuracaoMS))
	default:
		return fmt.Sprintf("O receptor respondeu HTTP %d em %s; só uma resposta 2xx confirma o callback. Nada foi alterado no integrador.", a.StatusCode, durationMS(a.DuracaoMS))
	}
}

// statusLabels name in pt-BR the HTTP codes receivers answer most.
var statusLabels = map[int]string{
	http.StatusBadRequest:            "requisição inválida",
	http.StatusUnauthorized:          "não autorizado",
	http.StatusForbidden:             "proibido",
	http.StatusNotFound:              "não encontrado",
	http.StatusRequestTimeout:        "tempo esgotado",
	http.StatusConflict:              "conflito",
	http.StatusGone:                  "removido",
	http.StatusRequestEntityTooLarge: "corpo grande demais",
	http.StatusUnsupportedMediaType:  "tipo de conteúdo não aceito",
	http.StatusUnprocessableEntity:   "conteúdo inválido",
	http.StatusTooManyRequests:       "muitas requisições",
	http.StatusInternalServerError:   "erro interno",
	http.StatusBadGateway:            "gateway inválido",
	http.StatusServiceUnavailable:    "serviço indisponível",
	http.StatusGatewayTimeout:        "gateway sem resposta",
}

// httpStatus is a code with its pt-BR label when it has one:
// "503 (serviço indisponível)"; other codes, the number alone.
func httpStatus(code int) string {
	if label, ok := statusLabels[code]; ok {
		return strconv.Itoa(code) + " (" + label + ")"
	}
	return strconv.Itoa(code)
}

// sessionState is a session integrator's state for the page's tests and
// styles: conectada, desconectada or nunca.
func sessionState(in app.Integrator) string {
	switch {
	case in.Sessao == nil:
		return "nunca"
	case in.Sessao.Conectada:
		return "conectada"
	}
	return "desconectada"
}

// sessionSummary is the list's word on a session integrator's session.
func sessionSummary(in app.Integrator, now time.Time) string {
	switch {
	case in.Sessao == nil:
		return "sessão: nunca conectou"
	case in.Sessao.Conectada:
		return fmt.Sprintf("sessão conectada (%d sem resposta)", in.Sessao.Pendentes)
	case !in.Sessao.EncerradaEm.IsZero():
		return "sessão desconectada " + ago(in.Sessao.EncerradaEm, now)
	}
	return "sessão sem sinal " + ago(in.Sessao.VistoEm, now)
}

// verifyTitle says where "Verificar" sends its ping.
func verifyTitle(in app.Integrator) string {
	if in.Entrega == app.EntregaSessao {
		return "Envia um integracao:verificacao assinado pela sessão conectada do CAD"
	}
	return "Envia um integracao:verificacao assinado ao callback"
}

// keyRotationEffect is what replacing the API key does to the CAD.
func keyRotationEffect(in app.Integrator) string {
	if in.Entrega == app.EntregaSessao {
		return "A atual deixa de valer na hora: a sessão do CAD é fechada (1008), ele para de receber eventos e seus comandos são recusados até ele usar a nova."
	}
	return "A atual deixa de valer na hora: os comandos do CAD são recusados até ele usar a nova."
}

// latencyOf says what the latency measures: HTTP answers, or a session's
// acks and nacks.
func latencyOf(in app.Integrator) string {
	if in.Entrega == app.EntregaSessao {
		return "das respostas da sessão (ack ou nack)"
	}
	return "das respostas HTTP"
}
