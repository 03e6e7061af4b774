package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"geohub/app"
)

var deliveryFields = []string{"status", "integrador", "tipo", "agregado", "event_id", "criado_inicio", "criado_fim"}

// The words operators use for delivery statuses.
var deliveryStatuses = []struct{ Value, Label string }{
	{app.EntregaPendente, "Pendente"},
	{app.EntregaProcessando, "Em envio"},
	{app.EntregaEntregue, "Entregue"},
	{app.EntregaFalhou, "Falhou"},
}

func statusLabel(s string) string {
	for _, st := range deliveryStatuses {
		if st.Value == s {
			return st.Label
		}
	}
	if l := dlqStatusLabel[s]; l != "" {
		return l
	}
	return s
}

// deliveryQuery reads the deliveries page's filters; the tail reads the
// same ones but status, which an attempt does not have.
func deliveryQuery(r *http.Request) (listQuery, app.DeliveryFilter) {
	l := parseList(r, deliveryFields...)
	f := app.DeliveryFilter{Status: l.V("status"), Integrador: l.V("integrador"), Tipo: l.V("tipo"), Agregado: l.V("agregado")}
	if f.Status != "" && !slices.ContainsFunc(deliveryStatuses, func(s struct{ Value, Label string }) bool { return s.Value == f.Status }) {
		l.Errors["status"] = "escolha uma situação da lista"
	}
	if v := l.V("criado_inicio"); v != "" {
		if t, ok := parsePeriod(v); ok {
			f.CriadoInicio = t
		} else {
			l.Errors["criado_inicio"] = periodExample
		}
	}
	if v := l.V("criado_fim"); v != "" {
		if t, ok := periodEnd(v); ok {
			f.CriadoFim = t.Add(-time.Millisecond) // both ends included: the minute typed is in
		} else {
			l.Errors["criado_fim"] = periodExample
		}
	}
	if !f.CriadoInicio.IsZero() && !f.CriadoFim.IsZero() && f.CriadoFim.Before(f.CriadoInicio) {
		l.Errors["criado_fim"] = "deve ser depois do início"
	}
	if v := l.V("event_id"); v != "" {
		id, err := uuid.Parse(v)
		if err != nil || len(v) != 36 {
			l.Errors["event_id"] = "deve ser um UUID, como 0199bb3e-0000-7000-8000-00000000004a"
		} else {
			f.EventID = id.String()
		}
	}
	return l, f
}

type deliveriesView struct {
	Q           listQuery
	Rows        []app.Delivery // newest first
	Pager       pager
	Integrators []app.Integrator
	Names       map[string]string
	// TailURL and De start the attempts' tail: only attempts recorded
	// after the page was read.
	TailURL string
	De      int64
	// Volta is this page, where a resend comes back to.
	Volta string
}

func (c *Console) deliveries(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	l, f := deliveryQuery(r)
	v := deliveriesView{Q: l, Volta: r.URL.RequestURI(), TailURL: l.tailURL("/ws/entregas", "integrador", "tipo", "agregado", "event_id")}
	var err error
	if v.Integrators, err = c.Integrators.List(ctx); err != nil {
		c.Fail(w, r, err)
		return
	}
	v.Names = map[string]string{}
	for _, in := range v.Integrators {
		v.Names[in.ID] = in.Nome
	}
	if l.invalid() {
		c.render(w, r, http.StatusUnprocessableEntity, deliveriesPage(c.page(r, "Entregas", "entregas"), v))
		return
	}
	if v.De, err = c.Attempts.MaxAttemptID(ctx); err != nil {
		c.Fail(w, r, err)
		return
	}
	// After a resend the page comes back with ?de= from before it, so the
	// attempt it caused shows in the tail even if it finished before this
	// page was read.
	if s := r.URL.Query().Get("de"); s != "" {
		de, err := strconv.ParseInt(s, 10, 64)
		if err != nil || de < 0 {
			v.Q.Error = "O parâmetro de (a tentativa a partir da qual a transmissão começa) deve ser um número."
			c.render(w, r, http.StatusUnprocessableEntity, deliveriesPage(c.page(r, "Entregas", "entregas"), v))
			return
		}
		v.De = min(v.De, max(de, v.De-tailBatch))
	}
	// Newest first by id, from the cursor: rows created meanwhile are above
	// the page, never pushed into it.
	pg := &v.Pager
	pg.Older, pg.Newer = -1, -1
	f.Limite = l.Limite
	var older string // the cursor below the page
	if l.Apos > 0 {
		f.IDInicio = l.Apos + 1
		page, err := c.Deliveries.List(ctx, f)
		if err != nil {
			c.Fail(w, r, err)
			return
		}
		v.Rows = page.Linhas
		slices.Reverse(v.Rows)
		pg.Head, pg.Newer = page.Total <= len(v.Rows), page.Total-len(v.Rows)
		lo := l.Apos + 1
		if len(v.Rows) > 0 {
			lo = v.Rows[len(v.Rows)-1].ID
		}
		if lo > 1 {
			older = strconv.FormatInt(lo-1, 10)
		}
		pg.Total = page.Total
	} else {
		f.Desc, f.IDFim = true, l.Ate
		page, err := c.Deliveries.List(ctx, f)
		if err != nil {
			c.Fail(w, r, err)
			return
		}
		v.Rows = page.Linhas
		pg.Head, pg.Total, pg.Older, older = l.Ate == 0, page.Total, page.Total-len(v.Rows), page.Proximo
	}
	lo, hi := l.Ate, l.Ate
	if len(v.Rows) > 0 {
		hi, lo = v.Rows[0].ID, v.Rows[len(v.Rows)-1].ID
	}
	pg.Shown = len(v.Rows)
	v.Q.keysetLinks(pg, "/entregas", lo, hi, older)
	c.render(w, r, http.StatusOK, deliveriesPage(c.page(r, "Entregas", "entregas"), v))
}

// attemptsTail streams one line per recorded delivery attempt after ?de=
// (an attempt id), narrowed by integrator, type and aggregate.
func (c *Console) attemptsTail(w http.ResponseWriter, r *http.Request) {
	l, f := deliveryQuery(r)
	if len(l.Errors) > 0 {
		http.Error(w, "filtro inválido", http.StatusBadRequest)
		return
	}
	af := app.AttemptFilter{Integrador: f.Integrador, Tipo: f.Tipo, Agregado: f.Agregado}
	names := c.integratorNames(r.Context())
	c.serveTail(w, r, tailSource{
		changed: c.AttemptsChanged,
		latest:  c.Attempts.MaxAttemptID,
		next: func(ctx context.Context, after int64) ([]tailLine, int64, bool, error) {
			recs, cursor, err := c.Attempts.AttemptsAfter(ctx, after, af, tailBatch)
			if err != nil {
				return nil, after, false, err
			}
			var lines []tailLine
			for _, rec := range recs {
				// The event id is not the store's filter: the cursor still
				// moves past the attempts it leaves out.
				if f.EventID == "" || rec.Delivery.EventID == f.EventID {
					lines = append(lines, tailLine{seq: rec.ID, row: attemptRow(rec, names)})
				}
			}
			return lines, cursor, len(recs) == tailBatch, nil
		},
	})
}

type deliveryView struct {
	D    app.DeliveryDetail
	Name string
	// Held says why a pending delivery is not leaving: its integrator's
	// circuit is open ("" when it is closed).
	Held string
}

func parseDeliveryID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, app.Errorf(app.ENotFound, "entrega não encontrada")
	}
	return id, nil
}

func (c *Console) delivery(w http.ResponseWriter, r *http.Request) {
	id, err := parseDeliveryID(r)
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	d, err := c.Deliveries.Get(r.Context(), id)
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	d.Corpo = nil // the envelope carries the full, unredacted payload: never on a page
	v := deliveryView{D: d, Name: d.Integrador}
	if in, err := c.Integrators.Get(r.Context(), d.Integrador); err == nil {
		v.Name = in.Nome
		if d.Status == app.EntregaPendente && circuitState(in) != app.CircuitoFechado {
			v.Held = circuitText(in, c.Now())
		}
	}
	c.render(w, r, http.StatusOK, deliveryPage(c.page(r, fmt.Sprintf("Entrega #%d", id), "entregas"), v))
}

// backTo is where a form goes after it succeeds: the page it was sent
// from (a console path), without that page's old confirmation.
func backTo(r *http.Request, fallback string) string {
	v := r.PostFormValue("volta")
	if v == "" {
		return fallback
	}
	u, err := url.Parse(safeBack(v))
	if err != nil {
		return fallback
	}
	q := u.Query()
	q.Del("ok")
	q.Del("okh")
	q.Del("de")
	u.RawQuery = q.Encode()
	return u.RequestURI()
}

// afterAction is where a resend or a "Tentar agora" goes back to. The
// list's tail restarts from the attempt recorded last before the action,
// so the attempt it causes shows there however fast it is.
func (c *Console) afterAction(r *http.Request, fallback string, before int64) string {
	back := backTo(r, fallback)
	u, err := url.Parse(back)
	if err != nil || u.Path != "/entregas" {
		return back
	}
	q := u.Query()
	q.Set("de", strconv.FormatInt(before, 10))
	u.RawQuery = q.Encode()
	return u.RequestURI()
}

// lastAttempt is the newest attempt id, read before a resend.
func (c *Console) lastAttempt(ctx context.Context) (int64, error) {
	return c.Attempts.MaxAttemptID(ctx)
}

func (c *Console) resend(w http.ResponseWriter, r *http.Request) {
	id, err := parseDeliveryID(r)
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	before, err := c.lastAttempt(r.Context())
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	if err := c.Deliveries.Resend(r.Context(), id); err != nil {
		c.Fail(w, r, err)
		return
	}
	c.redirect(w, r, c.afterAction(r, "/entregas", before), fmt.Sprintf("Entrega #%d reenviada: voltou para a fila e sai agora, com o mesmo conteúdo e a mesma sequência.", id))
}

// retryDeliveryNow is a pending delivery's "Tentar agora": app makes it
// due now. An open circuit still holds it until its probe, and the notice
// says so, pointing at the integrator's own "Tentar agora".
func (c *Console) retryDeliveryNow(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id, err := parseDeliveryID(r)
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	before, err := c.lastAttempt(ctx)
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	d, err := c.Deliveries.RetryDeliveryNow(ctx, id)
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	msg := fmt.Sprintf("Entrega #%d adiantada: sai agora, na ordem do seu agregado.", id)
	if in, err := c.Integrators.Get(ctx, d.Integrador); err == nil && circuitState(in) != app.CircuitoFechado {
		msg = fmt.Sprintf("Entrega #%d adiantada, mas o circuito de %s está aberto: ela sai quando o receptor for testado de novo (%s). “Tentar agora” na página do integrador fecha o circuito.",
			id, in.Nome, circuitText(in, c.Now()))
	}
	c.redirect(w, r, c.afterAction(r, "/entregas/"+strconv.FormatInt(id, 10), before), msg)
}

func (c *Console) resendAll(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.PostFormValue("integrador")
	if id == "" {
		c.Fail(w, r, &app.Error{Code: app.EInvalid, Message: "Escolha o integrador cujas entregas com falha devem ser reenviadas."})
		return
	}
	name := integratorName(c.integratorNames(ctx), id)
	before, err := c.lastAttempt(ctx)
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	res, err := c.Deliveries.ResendAll(ctx, id, app.EntregaFalhou)
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	n := res.Reenviadas
	msg := fmt.Sprintf("Nenhuma entrega com falha para %s: nada a reenviar.", name)
	switch {
	case n == 1:
		msg = fmt.Sprintf("1 entrega com falha para %s reenviada.", name)
	case n > 1:
		msg = fmt.Sprintf("%s entregas com falha para %s reenviadas.", num(int64(n)), name)
	}
	msg += purgedNote(res.Expurgadas)
	c.redirect(w, r, c.afterAction(r, "/entregas", before), msg)
}

// purgedNote tells, after a bulk resend, of the dead letters it left: their
// body was purged after the retention, so nothing can send them again.
func purgedNote(n int) string {
	switch {
	case n == 1:
		return " 1 outra não pode mais ser reenviada: o corpo dela já foi expurgado (o prazo de retenção das falhas venceu)."
	case n > 1:
		return fmt.Sprintf(" %s outras não podem mais ser reenviadas: o corpo delas já foi expurgado (o prazo de retenção das falhas venceu).", num(int64(n)))
	}
	return ""
}

// lastAnswer says how the last attempt went, in a few words: the reason in
// pt-BR, without the network's raw text (each attempt keeps it on the
// delivery's page).
func lastAnswer(d app.Delivery) string {
	switch {
	case d.UltimoErro != "":
		reason, _ := splitDetail(d.UltimoErro)
		return reason
	case d.UltimoStatus != 0:
		return "HTTP " + strconv.Itoa(d.UltimoStatus)
	case d.Tentativas == 0:
		return "ainda sem tentativa"
	}
	return "—"
}

// answerParts splits the last answer for a narrow cell: the HTTP code, and
// the explanation without what the code already says or the network's raw
// text (both stay in the cell's title and on the delivery's page).
func answerParts(d app.Delivery) (code, reason string) {
	if d.UltimoStatus != 0 {
		code = "HTTP " + strconv.Itoa(d.UltimoStatus)
	}
	reason, _ = splitDetail(d.UltimoErro)
	if d.UltimoStatus != 0 {
		reason = strings.TrimPrefix(reason, "o receptor respondeu "+strconv.Itoa(d.UltimoStatus))
		reason = strings.TrimLeft(reason, ":; ")
	}
	if code == "" && reason == "" {
		reason = lastAnswer(d)
	}
	return code, reason
}

// splitDetail separates an attempt's error in pt-BR from Go's own text,
// which app keeps after it as "(detalhe: …)" for whoever debugs the network.
func splitDetail(msg string) (reason, detail string) {
	const open = " (detalhe: "
	i := strings.Index(msg, open)
	if i < 0 {
		return msg, ""
	}
	// The detail ends at the parenthesis that closes it: what app adds
	// after it ("; tentativas esgotadas (3)") has parentheses of its own.
	depth := 1
	for j := i + len(open); j < len(msg); j++ {
		switch msg[j] {
		case '(':
			depth++
		case ')':
			if depth--; depth == 0 {
				return msg[:i] + msg[j+1:], msg[i+len(open) : j]
			}
		}
	}
	return msg[:i], msg[i+len(open):]
}

// attemptResult is one attempt's outcome, in a few words.
func attemptResult(a app.Attempt) string {
	switch {
	case a.Erro != "":
		return a.Erro
	case a.StatusCode != 0:
		return "HTTP " + strconv.Itoa(a.StatusCode)
	}
	return "sem resposta"
}

// attemptShort is an attempt's outcome for a line of the live list: the
// code or the reason in pt-BR, without the network's raw text.
func attemptShort(a app.Attempt) string {
	if a.Erro != "" {
		reason, _ := splitDetail(a.Erro)
		return reason
	}
	return attemptResult(a)
}

// attemptNext says what follows a failed attempt, as the delivery stood
// when the line was read.
func attemptNext(r app.RecordedAttempt) string {
	d := r.Delivery
	if r.Attempt.Succeeded() || r.Attempt.Tentativa != d.Tentativas {
		return ""
	}
	switch d.Status {
	case app.EntregaFalhou:
		return "sem nova tentativa"
	case app.EntregaPendente:
		return "nova tentativa às " + d.ProximaTentativa.In(brt).Format("15:04:05")
	}
	return ""
}

func attemptsNote(l listQuery) string {
	switch {
	case l.V("status") != "" && (l.V("criado_inicio") != "" || l.V("criado_fim") != ""):
		return "Cada tentativa de envio aparece aqui assim que termina (os filtros de situação e de período não valem para tentativas)."
	case l.V("status") != "":
		return "Cada tentativa de envio aparece aqui assim que termina (o filtro de situação não vale para tentativas)."
	case l.V("criado_inicio") != "" || l.V("criado_fim") != "":
		return "Cada tentativa de envio aparece aqui assim que termina (o filtro de período não vale para tentativas)."
	}
	return "Cada tentativa de envio aparece aqui assim que termina."
}

func canAct(p page) bool { return allowed(p.S, app.Operators) }

// durationMS is a duration for people: milliseconds under a second, else
// seconds with one decimal and a decimal comma ("5,0 s").
func durationMS(ms int64) string {
	if ms < 1000 {
		return num(ms) + " ms"
	}
	return strings.Replace(strconv.FormatFloat(float64(ms)/1000, 'f', 1, 64), ".", ",", 1) + " s"
}
