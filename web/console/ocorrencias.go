package console

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/a-h/templ"
	"github.com/google/uuid"

	"geohub/app"
	"geohub/app/ocorrencia"
)

// The ocorrências pages (SPEC 7, 9): the list from the read model, live;
// one ocorrência from the log, with the forms that send the same commands
// as the API, for the signed-in operator (autoria usuario).

var ocorrenciaStatusLabel = map[string]string{
	ocorrencia.Aberta: "Aberta", ocorrencia.EmAtendimento: "Em atendimento", ocorrencia.Encerrada: "Encerrada",
}

var despachoStatusLabel = map[string]string{
	ocorrencia.EmDeslocamento: "Em deslocamento", ocorrencia.NoLocal: "No local",
	ocorrencia.Liberado: "Liberado", ocorrencia.Cancelado: "Cancelado",
}

// The buttons that move a status say what happened in the field, not the
// status it ends in.
var (
	ocorrenciaAction = map[string]string{ocorrencia.EmAtendimento: "Iniciar atendimento", ocorrencia.Encerrada: "Encerrar"}
	despachoAction   = map[string]string{ocorrencia.NoLocal: "Chegou ao local", ocorrencia.Liberado: "Liberar", ocorrencia.Cancelado: "Cancelar despacho"}
)

func labelOr(m map[string]string, k string) string {
	if l := m[k]; l != "" {
		return l
	}
	return k
}

// ocorrenciaStatuses are the status filter's options, in workflow order.
var ocorrenciaStatuses = []string{ocorrencia.Aberta, ocorrencia.EmAtendimento, ocorrencia.Encerrada}

var ocorrenciaFields = []string{"status", "natureza", "integrador", "registrada_inicio", "registrada_fim"}

// periodLayouts are what a datetime-local or date input sends, and what a
// person types as in the error's example (30/11/2026 14:00), in Brasília,
// each with the precision it names.
var periodLayouts = []struct {
	layout string
	unit   time.Duration
}{
	{"2006-01-02T15:04", time.Minute}, {"2006-01-02T15:04:05", time.Second}, {"2006-01-02", 24 * time.Hour},
	{"02/01/2006 15:04", time.Minute}, {"02/01/2006 15:04:05", time.Second}, {"02/01/2006", 24 * time.Hour},
}

// periodExample is the error of a period that does not parse.
const periodExample = "use dia e hora, como 30/11/2026 14:00"

func parsePeriod(v string) (time.Time, bool) {
	v = strings.TrimSpace(v)
	for _, p := range periodLayouts {
		if t, err := time.ParseInLocation(p.layout, v, brt); err == nil {
			return t, true
		}
	}
	// A link built elsewhere (the API's form) may carry a full RFC 3339 time.
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, true
	}
	return time.Time{}, false
}

// periodEnd reads the end of a period as typed, and returns the first
// instant after what it names: "até 14:41" includes 14:41:59, "até
// 30/11" the whole day. A full RFC 3339 time names one millisecond.
func periodEnd(v string) (time.Time, bool) {
	v = strings.TrimSpace(v)
	for _, p := range periodLayouts {
		if t, err := time.ParseInLocation(p.layout, v, brt); err == nil {
			return t.Add(p.unit), true
		}
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t.Add(time.Millisecond), true
	}
	return time.Time{}, false
}

// ocorrenciaQuery reads the list's filters and cursor; the live socket
// reads the same ones, so it shows the page's own window.
func ocorrenciaQuery(r *http.Request) (listQuery, ocorrencia.Filter) {
	l := parseList(r, ocorrenciaFields...)
	f := ocorrencia.Filter{Status: l.V("status"), Natureza: l.V("natureza"), Integrador: l.V("integrador"), Limite: l.Limite}
	for _, k := range []string{"registrada_inicio", "registrada_fim"} {
		if v := l.V(k); v != "" {
			t, ok := parsePeriod(v)
			if k == "registrada_fim" {
				t, ok = periodEnd(v) // [início, fim): the minute typed is in
			}
			if !ok {
				l.Errors[k] = periodExample
			} else if k == "registrada_inicio" {
				f.Inicio = t
			} else {
				f.Fim = t
			}
		}
	}
	if v := r.URL.Query().Get("antes"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			l.Error = "Cursor de página inválido: volte à primeira página."
		} else {
			f.Antes = n
		}
	}
	return l, f
}

// ocorrenciasLink is the list with the query's filters and page size, from
// cursor antes (0: the newest).
func ocorrenciasLink(l listQuery, path string, antes string) string {
	v := url.Values{}
	for k, vs := range l.Filters {
		v[k] = vs
	}
	if l.Limite != defaultPageSize {
		v.Set("limite", strconv.Itoa(l.Limite))
	}
	if antes != "" {
		v.Set("antes", antes)
	}
	if len(v) == 0 {
		return path
	}
	return path + "?" + v.Encode()
}

type ocorrenciasView struct {
	Q           listQuery
	Rows        []ocorrencia.Summary
	Antes       int64
	Older       string // the next (older) page, "" at the end
	Integrators []app.Integrator
	Names       map[string]string
	Naturezas   []string // suggestions for the filter: those on this page
	Live        string   // the socket that keeps the rows current
	CanAct      bool
}

func (c *Console) ocorrencias(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	l, f := ocorrenciaQuery(r)
	v := ocorrenciasView{Q: l, Antes: f.Antes, CanAct: allowed(sessionOf(r), app.Operators)}
	var err error
	if v.Integrators, err = c.Integrators.List(ctx); err != nil {
		c.Fail(w, r, err)
		return
	}
	v.Names = map[string]string{}
	for _, in := range v.Integrators {
		v.Names[in.ID] = in.Nome
	}
	p := c.page(r, "Ocorrências", "ocorrencias")
	if l.invalid() {
		c.render(w, r, http.StatusUnprocessableEntity, ocorrenciasPage(p, v))
		return
	}
	list, err := c.Ocorrencias.List(ctx, f)
	if app.ErrorCode(err) == app.EInvalid {
		v.Q.take(err)
		c.render(w, r, http.StatusUnprocessableEntity, ocorrenciasPage(p, v))
		return
	} else if err != nil {
		c.Fail(w, r, err)
		return
	}
	v.Rows = list.Linhas
	if list.Proximo != "" {
		v.Older = ocorrenciasLink(l, "/ocorrencias", list.Proximo)
	}
	for _, s := range v.Rows {
		if !slices.Contains(v.Naturezas, s.Natureza) {
			v.Naturezas = append(v.Naturezas, s.Natureza)
		}
	}
	slices.Sort(v.Naturezas)
	antes := ""
	if f.Antes > 0 {
		antes = strconv.FormatInt(f.Antes, 10)
	}
	v.Live = ocorrenciasLink(l, "/ws/ocorrencias", antes)
	c.render(w, r, http.StatusOK, ocorrenciasPage(p, v))
}

// ocorrenciasLive keeps the list page's window current: on each change of
// the read model it re-renders the rows and the paging link. The window is
// the page's (filters, cursor, size), so the newest page gains new
// ocorrências on top and every page sees its rows change.
func (c *Console) ocorrenciasLive(w http.ResponseWriter, r *http.Request) {
	l, f := ocorrenciaQuery(r)
	if l.invalid() {
		http.Error(w, "filtro inválido", http.StatusBadRequest)
		return
	}
	// Integrator names are read again only when a row names one not seen
	// yet: listing integrators on every wake would cost more than the list.
	var names map[string]string
	key, _ := json.Marshal(f) // unambiguous, as %+v of crafted values is not
	c.serveSnapshot(w, r, "ocorrencias", string(key), c.Ocorrencias.Changed, func(ctx context.Context) (map[string]templ.Component, error) {
		list, err := c.Ocorrencias.List(ctx, f)
		if err != nil {
			return nil, err
		}
		for _, s := range list.Linhas {
			if _, ok := names[s.Integrador]; s.Integrador != "" && !ok {
				names = c.integratorNames(ctx)
				if _, ok := names[s.Integrador]; !ok {
					names[s.Integrador] = s.Integrador // unknown still: do not look again on every wake
				}
			}
		}
		older := ""
		if list.Proximo != "" {
			older = ocorrenciasLink(l, "/ocorrencias", list.Proximo)
		}
		return map[string]templ.Component{
			"linhas":    ocorrenciaRows(list.Linhas, names, l.filtered()),
			"paginacao": ocorrenciasPager(older, f.Antes > 0, ocorrenciasLink(l, "/ocorrencias", "")),
		}, nil
	})
}

// origin says who registered an ocorrência.
func origin(integrador string, names map[string]string) string {
	if integrador == "" {
		return "operador do console ou da API"
	}
	return integratorName(names, integrador)
}

type ocorrenciaView struct {
	O      ocorrencia.Ocorrencia
	Events app.Page[app.Event]
	Names  map[string]string
	Logins map[string]string // operator id → login, for autoria usuario
	CanAct bool
	// Dispatch is the dispatch form as typed, with its findings, when a
	// dispatch was refused.
	Dispatch form
	// Refused is the reason of the refused command, shown above the page.
	Refused string
	// CAD names the integrator that registered it, and Delivered holds its
	// delivery of each event, by event id; Warning says it is not receiving.
	CAD       string
	Delivered map[string]app.Delivery
	Warning   string
}

func (c *Console) ocorrenciaPage(w http.ResponseWriter, r *http.Request) {
	c.showOcorrencia(w, r, http.StatusOK, form{Values: map[string]string{}, Errors: map[string]string{}}, "")
}

// showOcorrencia renders one ocorrência as the log has it now; status and
// refused carry a refused command's answer.
func (c *Console) showOcorrencia(w http.ResponseWriter, r *http.Request, status int, dispatch form, refused string) {
	ctx := r.Context()
	o, err := c.Ocorrencias.Get(ctx, r.PathValue("id"), "")
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	v := ocorrenciaView{O: o, CanAct: allowed(sessionOf(r), app.Operators), Dispatch: dispatch, Refused: refused,
		Names: c.integratorNames(ctx)}
	if v.Events, err = c.Queries.Events(ctx, app.EventFilter{Agregado: "ocorrencia:" + o.ID, Limite: app.MaxLimite}); err != nil {
		c.Fail(w, r, err)
		return
	}
	// Whether its CAD got each event: the deliveries of this aggregate to
	// the integrator that registered it.
	if cad := o.Originador(); cad != "" {
		v.CAD = v.Names[cad]
		deliveries, err := c.Deliveries.List(ctx, app.DeliveryFilter{Integrador: cad, Agregado: "ocorrencia:" + o.ID,
			Limite: app.MaxLimite})
		if err != nil {
			c.Fail(w, r, err)
			return
		}
		v.Delivered = map[string]app.Delivery{}
		for _, d := range deliveries.Linhas {
			v.Delivered[d.EventID] = d
		}
		v.Warning = c.notReceiving(cad)
	}
	v.Logins = map[string]string{}
	if ops, err := c.Sessions.Operators(ctx); err != nil {
		c.Logger.Warn("list operators for names", "err", err)
	} else {
		for _, op := range ops {
			v.Logins[op.ID] = op.Login
		}
	}
	c.render(w, r, status, ocorrenciaDetailPage(c.page(r, naturezaLabel(o.Natureza), "ocorrencias"), v))
}

// actor says who caused an event, naming a console account by its login
// (an operator token keeps its id: its name is not a person's).
func actor(a *app.Autoria, names, logins map[string]string) string {
	if a != nil && a.Tipo == "usuario" && logins[a.ID] != "" {
		return autoriaLabel["usuario"] + " " + logins[a.ID]
	}
	return autoria(a, names)
}

// shortID is enough of a UUID v7 to tell rows apart on screen: its random
// tail, as the leading digits are the time and repeat from row to row.
func shortID(id string) string {
	if len(id) == 36 {
		return "…" + id[28:]
	}
	return id
}

// newSolicitacao is the idempotency key a form carries: rendered once, it
// makes a double submit or a reload of the answer run the command once.
func newSolicitacao() string { return uuid.NewString() }

// command builds the operator's command from a posted form: the route and
// body the API would get, so a command reads the same in the log whichever
// way it came.
func command(r *http.Request, rota string, body any) app.Command {
	b, err := json.Marshal(body)
	if err != nil {
		panic(err) // the bodies are plain structs
	}
	sol := strings.TrimSpace(r.PostFormValue("solicitacao"))
	if sol == "" {
		// Not a form of ours (a script, curl): it cannot repeat one of ours.
		sol = newSolicitacao()
	}
	return app.Command{Operador: sessionOf(r).op.ID, Solicitacao: sol, Metodo: http.MethodPost, Rota: rota, Body: b}
}

// refusal is the error a recorded refusal stands for.
func refusal(out app.Outcome) *app.Error {
	var m struct {
		Erro     string       `json:"erro"`
		Codigo   app.Code     `json:"codigo"`
		Detalhes []app.Detail `json:"detalhes"`
	}
	if err := json.Unmarshal(out.Body, &m); err != nil || m.Erro == "" {
		return &app.Error{Code: app.EInternal, Message: "comando recusado"}
	}
	return &app.Error{Code: m.Codigo, Message: m.Erro, Details: m.Detalhes}
}

// commandResult sorts a command's answer: the ocorrência it left, or the error to
// show (a refusal, or the command could not run). A repeat is the first
// answer again.
func commandResult(out app.Outcome, err error) (ocorrencia.Ocorrencia, error) {
	if err != nil {
		return ocorrencia.Ocorrencia{}, err
	}
	if out.Status >= 300 {
		return ocorrencia.Ocorrencia{}, refusal(out)
	}
	var o ocorrencia.Ocorrencia
	if err := json.Unmarshal(out.Body, &o); err != nil {
		return o, err
	}
	return o, nil
}

// shown says whether a command's error is for the operator to read on the
// page (a refusal with its reason, or an unavailable registry with what to
// fix) rather than an internal failure.
func shown(err error) (*app.Error, bool) {
	var e *app.Error
	if !errors.As(err, &e) || e.Code == app.EInternal || e.Code.HTTPStatus() == http.StatusInternalServerError {
		return nil, false
	}
	return e, true
}

// done redirects to the ocorrência with what happened.
func (c *Console) done(w http.ResponseWriter, r *http.Request, o ocorrencia.Ocorrencia, msg string, repeat bool) {
	if repeat {
		msg += " (formulário enviado de novo: o comando foi executado uma vez só)"
	}
	c.redirectWarning(w, r, "/ocorrencias/"+url.PathEscape(o.ID), msg, c.notReceiving(o.Originador()))
}

// naturezas are the natureza codes the CAD systems send, in words.
var naturezas = map[string]string{
	"incendio": "Incêndio", "acidente_transito": "Acidente de trânsito", "resgate": "Resgate",
	"atendimento_medico": "Atendimento médico", "alagamento": "Alagamento", "queda_arvore": "Queda de árvore",
	"vazamento_gas": "Vazamento de gás", "desabamento": "Desabamento", "deslizamento": "Deslizamento",
}

// naturezaLabel is a natureza in words: a known code by its name, another
// with its underscores as spaces and a capital first letter.
func naturezaLabel(code string) string {
	if l, ok := naturezas[code]; ok {
		return l
	}
	words := strings.ReplaceAll(code, "_", " ")
	if r, size := utf8.DecodeRuneInString(words); r != utf8.RuneError {
		return string(unicode.ToUpper(r)) + words[size:]
	}
	return words
}

// cadReceipt says whether the CAD got an event: delivered, waiting (with
// its attempts so far) or failed.
func cadReceipt(d app.Delivery) string {
	switch d.Status {
	case app.EntregaEntregue:
		return "recebeu"
	case app.EntregaFalhou:
		return "falhou"
	case app.EntregaProcessando:
		return "enviando"
	}
	if d.Tentativas > 0 {
		return "esperando (" + plural(d.Tentativas, "tentativa", "tentativas") + ")"
	}
	return "esperando"
}

// notReceiving says, for an act on an ocorrência, that the CAD it goes to
// is not receiving now: the act is recorded and its delivery waits.
func (c *Console) notReceiving(integrador string) string {
	for _, i := range c.Integrators.Incidents() {
		if i.ID == integrador && i.Estado == app.IncidenteInativo {
			return i.Nome + " foi desativado automaticamente depois de falhar por dias: o ato foi registrado, mas nada é " +
				"enviado a ele enquanto estiver inativo. Reative-o com Verificar na página do integrador e peça o reparo de lacunas."
		}
		if i.ID == integrador {
			return i.Nome + " não está recebendo agora (" + incidentText(i) +
				"): o ato foi registrado e a entrega dele espera; sai quando o CAD voltar, ou use Tentar agora na página do integrador."
		}
	}
	return ""
}

// refused shows the ocorrência's page with the reason of a refused command.
func (c *Console) refused(w http.ResponseWriter, r *http.Request, err error, dispatch form) {
	e, ok := shown(err)
	if !ok {
		c.Fail(w, r, err)
		return
	}
	msg := e.Message
	for _, d := range e.Details {
		field := strings.TrimPrefix(d.Caminho, "/")
		if i := strings.IndexByte(field, '/'); i >= 0 {
			field = field[:i]
		}
		if _, ok := dispatch.Values[field]; ok {
			dispatch.Errors[field] = d.Mensagem
			continue
		}
		msg += "; " + d.Mensagem
	}
	c.showOcorrencia(w, r, e.Code.HTTPStatus(), dispatch, msg)
}

func (c *Console) dispatchRecurso(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	f := newForm(r, "recurso")
	ident := strings.TrimSpace(f.V("recurso"))
	body := ocorrencia.DispatchRequest{Recurso: ocorrencia.Recurso{Identificador: ident}}
	out, err := c.Ocorrencias.Dispatch(r.Context(), command(r, "/api/ocorrencias/"+id+"/despachos", body), id)
	o, err := commandResult(out, err)
	if err != nil {
		c.refused(w, r, err, f)
		return
	}
	c.done(w, r, o, "Recurso "+ident+" despachado: em deslocamento.", out.Repeat)
}

func (c *Console) setDespachoStatus(w http.ResponseWriter, r *http.Request) {
	id, despacho := r.PathValue("id"), r.PathValue("despachoId")
	para := r.PostFormValue("para")
	out, err := c.Ocorrencias.SetDispatchStatus(r.Context(),
		command(r, "/api/ocorrencias/"+id+"/despachos/"+despacho+"/status", ocorrencia.StatusRequest{Para: para}), id, despacho)
	o, err := commandResult(out, err)
	if err != nil {
		c.refused(w, r, err, form{Values: map[string]string{}, Errors: map[string]string{}})
		return
	}
	recurso := despacho
	if o.Despacho != nil {
		recurso = o.Despacho.Recurso.Identificador
	}
	msg := "Despacho de " + recurso + ": " + strings.ToLower(labelOr(despachoStatusLabel, para)) + "."
	if para == ocorrencia.NoLocal {
		msg = recurso + " chegou ao local."
		if o.Status == ocorrencia.EmAtendimento {
			msg += " A ocorrência está em atendimento."
		}
	}
	c.done(w, r, o, msg, out.Repeat)
}

func (c *Console) setOcorrenciaStatus(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	para := r.PostFormValue("para")
	out, err := c.Ocorrencias.SetStatus(r.Context(), command(r, "/api/ocorrencias/"+id+"/status", ocorrencia.StatusRequest{Para: para}), id)
	o, err := commandResult(out, err)
	if err != nil {
		c.refused(w, r, err, form{Values: map[string]string{}, Errors: map[string]string{}})
		return
	}
	msg := "Ocorrência " + strings.ToLower(labelOr(ocorrenciaStatusLabel, para)) + "."
	if para == ocorrencia.EmAtendimento {
		msg = "Atendimento iniciado."
	}
	c.done(w, r, o, msg, out.Repeat)
}

var registerFields = []string{"natureza", "descricao", "endereco", "lat", "lng"}

func (c *Console) newOcorrenciaPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusOK, newOcorrenciaPage(c.page(r, "Nova ocorrência", "ocorrencias"),
		form{Values: map[string]string{}, Errors: map[string]string{}}))
}

// coordinate reads a latitude or longitude as typed in Brazil (a decimal
// comma) or as a GPS shows it (a point).
func coordinate(v string) (*float64, bool) {
	v = strings.ReplaceAll(strings.TrimSpace(v), ",", ".")
	if v == "" {
		return nil, true
	}
	n, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return nil, false
	}
	return &n, true
}

func (c *Console) registerOcorrencia(w http.ResponseWriter, r *http.Request) {
	f := newForm(r, registerFields...)
	p := c.page(r, "Nova ocorrência", "ocorrencias")
	body := ocorrencia.RegisterRequest{Natureza: strings.TrimSpace(f.V("natureza")),
		Descricao: strings.TrimSpace(f.V("descricao")), Endereco: strings.TrimSpace(f.V("endereco"))}
	lat, okLat := coordinate(f.V("lat"))
	lng, okLng := coordinate(f.V("lng"))
	switch {
	case !okLat:
		f.Errors["lat"] = "use um número, como -22,9056"
	case !okLng:
		f.Errors["lng"] = "use um número, como -47,0608"
	case (lat == nil) != (lng == nil):
		f.Errors[map[bool]string{true: "lat", false: "lng"}[lat == nil]] = "informe latitude e longitude, ou nenhuma das duas"
	case lat != nil:
		body.Local = &ocorrencia.Local{Lat: lat, Lng: lng}
	}
	if len(f.Errors) > 0 {
		c.render(w, r, http.StatusUnprocessableEntity, newOcorrenciaPage(p, f))
		return
	}
	out, err := c.Ocorrencias.Register(r.Context(), command(r, "/api/ocorrencias", body))
	o, err := commandResult(out, err)
	if err != nil {
		e, ok := shown(err)
		if !ok {
			c.Fail(w, r, err)
			return
		}
		// The schema locates coordinates under /local; the form has them
		// as fields of their own.
		e = &app.Error{Code: e.Code, Message: e.Message, Details: slices.Clone(e.Details)}
		for i, d := range e.Details {
			e.Details[i].Caminho = strings.TrimPrefix(d.Caminho, "/local")
		}
		f.take(e)
		c.render(w, r, e.Code.HTTPStatus(), newOcorrenciaPage(p, f))
		return
	}
	c.done(w, r, o, "Ocorrência registrada: "+naturezaLabel(o.Natureza)+", aberta.", out.Repeat)
}
