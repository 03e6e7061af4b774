package console

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"geohub/app"
)

// Console lists are shorter than the API's default: a page should fit a
// screen or two.
const (
	defaultPageSize = 50
	maxPageSize     = app.MaxLimite
)

// listQuery is a list page's filters as typed, with a finding per field,
// plus its paging.
type listQuery struct {
	form
	Limite int
	Pagina int
	// Filters are the non-empty filters, in the order of fields, for links
	// that keep them.
	Filters url.Values
}

// parseList reads fields and the paging parameters; fields is the filter
// fields in display order.
func parseList(r *http.Request, fields ...string) listQuery {
	q := r.URL.Query()
	l := listQuery{form: form{Values: map[string]string{}, Errors: map[string]string{}}, Filters: url.Values{}}
	for _, k := range fields {
		v := strings.TrimSpace(q.Get(k))
		l.Values[k] = v
		if v != "" {
			l.Filters.Set(k, v)
		}
	}
	l.Values["limite"] = strings.TrimSpace(q.Get("limite"))
	l.Limite = defaultPageSize
	if v := l.Values["limite"]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPageSize {
			l.Errors["limite"] = "use um número de 1 a " + strconv.Itoa(maxPageSize)
		} else {
			l.Limite = n
		}
	}
	l.Pagina = 1
	if v := q.Get("pagina"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			l.Error = "Página inválida: use um número a partir de 1."
		} else {
			l.Pagina = n
		}
	}
	return l
}

func (l listQuery) invalid() bool { return l.Error != "" || len(l.Errors) > 0 }

func (l listQuery) filtered() bool { return len(l.Filters) > 0 }

// link is the list's URL for another page, keeping filters and page size.
func (l listQuery) link(path string, pagina int) string {
	v := url.Values{}
	for k, vs := range l.Filters {
		v[k] = vs
	}
	if l.Limite != defaultPageSize {
		v.Set("limite", strconv.Itoa(l.Limite))
	}
	if pagina > 1 {
		v.Set("pagina", strconv.Itoa(pagina))
	}
	if len(v) == 0 {
		return path
	}
	return path + "?" + v.Encode()
}

// tailURL is the websocket of a list's tail with the list's filters, which
// the tail applies on the server.
func (l listQuery) tailURL(path string, keys ...string) string {
	v := url.Values{}
	for _, k := range keys {
		if s := l.Filters.Get(k); s != "" {
			v.Set(k, s)
		}
	}
	if len(v) == 0 {
		return path
	}
	return path + "?" + v.Encode()
}

// pager is what the paging links need.
type pager struct {
	Pagina, Paginas int
	Total           int
	First, Last     int // positions shown, counted from the newest, 1-based
	Newer, Older    string
}

// newestFirst places page p (1 = newest) of a list the store returns oldest
// first. Offsets from the oldest never change as rows are appended, so the
// page is counted back from the total.
func newestFirst(total, limite, pagina int) (offset, n int) {
	end := total - (pagina-1)*limite
	if end <= 0 {
		return 0, 0
	}
	start := max(end-limite, 0)
	return start, end - start
}

func (l *listQuery) pages(total int, path string) pager {
	paginas := max(1, (total+l.Limite-1)/l.Limite)
	// A page that no longer exists (filters narrowed) shows the last one.
	l.Pagina = min(l.Pagina, paginas)
	pg := pager{Pagina: l.Pagina, Paginas: paginas, Total: total}
	if total > 0 {
		pg.First = (l.Pagina-1)*l.Limite + 1
		pg.Last = min(l.Pagina*l.Limite, total)
	}
	if l.Pagina > 1 {
		pg.Newer = l.link(path, l.Pagina-1)
	}
	if l.Pagina < paginas {
		pg.Older = l.link(path, l.Pagina+1)
	}
	return pg
}

var eventFields = []string{"tipo", "origem", "agregado", "correlacao_id"}

// eventQuery reads the events page's filters; the tail reads the same ones.
func eventQuery(r *http.Request) (listQuery, app.EventFilter) {
	l := parseList(r, eventFields...)
	f := app.EventFilter{Tipo: l.V("tipo"), Origem: l.V("origem"), Agregado: l.V("agregado")}
	if v := l.V("correlacao_id"); v != "" {
		id, err := uuid.Parse(v)
		if err != nil || len(v) != 36 {
			l.Errors["correlacao_id"] = "deve ser um UUID, como 0199bb3e-0000-7000-8000-00000000004a"
		} else {
			f.CorrelacaoID = id.String() // stored lower-case
		}
	}
	return l, f
}

// matches applies the filters the tail does not hand to the store.
func matches(f app.EventFilter, ev app.Event) bool {
	return (f.Tipo == "" || ev.Tipo == f.Tipo) && (f.Origem == "" || ev.Origem == f.Origem) &&
		(f.Agregado == "" || ev.Agregado == f.Agregado) && (f.CorrelacaoID == "" || ev.CorrelacaoID == f.CorrelacaoID)
}

type eventsView struct {
	Q     listQuery
	Rows  []app.Event // newest first
	Pager pager
	Tipos []string
	Names map[string]string // integrator id → name, for autoria
	// De is the newest sequence the page accounts for: its tail starts after it.
	De   int64
	Live bool // the first page: new events appear on top
}

func (c *Console) events(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	l, f := eventQuery(r)
	v := eventsView{Q: l, Tipos: c.typeNames()}
	if l.invalid() {
		c.render(w, r, http.StatusUnprocessableEntity, eventsPage(c.page(r, "Eventos", "eventos"), v))
		return
	}
	// Read the newest sequence before the list: an event committed between
	// the two is either in the list or after De, so the tail shows it.
	latest, err := c.Queries.Log.MaxSequence(ctx)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	// Unfiltered, the log is its sequence numbers: rowids given one past
	// the largest and never deleted, so the total is the newest sequence
	// and a page is a range of them, with no count over the whole log.
	total := int(latest)
	if l.filtered() {
		count := f
		count.Limite = 1
		first, err := c.Queries.Events(ctx, count)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		total = first.Total
	}
	v.Pager = v.Q.pages(total, "/eventos")
	if off, n := newestFirst(total, v.Q.Limite, v.Q.Pagina); n > 0 {
		f.Limite, f.Deslocamento = n, off
		if !l.filtered() {
			f.SequenceInicio, f.SequenceFim, f.Deslocamento = int64(off)+1, int64(off+n), 0
		}
		page, err := c.Queries.Events(ctx, f)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		v.Rows = page.Linhas
		slices.Reverse(v.Rows)
	}
	v.De = latest
	if len(v.Rows) > 0 && v.Rows[0].Sequence > v.De {
		v.De = v.Rows[0].Sequence
	}
	v.Live = v.Q.Pagina == 1
	v.Names = c.integratorNames(ctx)
	c.render(w, r, http.StatusOK, eventsPage(c.page(r, "Eventos", "eventos"), v))
}

// eventsTail streams the events after ?de= that match the page's filters.
// The type goes to the store (an index range); the other filters are
// applied here, and the cursor still moves past what they leave out.
func (c *Console) eventsTail(w http.ResponseWriter, r *http.Request) {
	l, f := eventQuery(r)
	if len(l.Errors) > 0 {
		http.Error(w, "filtro inválido", http.StatusBadRequest)
		return
	}
	var tipos []string
	if f.Tipo != "" {
		tipos = []string{f.Tipo}
	}
	names := c.integratorNames(r.Context())
	c.serveTail(w, r, tailSource{
		changed: c.EventsChanged,
		latest:  c.Queries.Log.MaxSequence,
		next: func(ctx context.Context, after int64) ([]tailLine, int64, bool, error) {
			evs, err := c.Queries.Log.EventsAfter(ctx, after, tipos, tailBatch)
			if err != nil {
				return nil, after, false, err
			}
			var lines []tailLine
			for _, ev := range evs {
				after = ev.Sequence
				if matches(f, ev) {
					lines = append(lines, tailLine{seq: ev.Sequence, row: eventRow(ev, names)})
				}
			}
			return lines, after, len(evs) == tailBatch, nil
		},
	})
}

type eventView struct {
	Ev         app.Event
	Payload    string
	Trace      app.Page[app.Event]
	Deliveries app.Page[app.Delivery]
	Names      map[string]string
}

func (c *Console) event(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	ev, err := c.Queries.Event(ctx, r.PathValue("eventId"))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	v := eventView{Ev: ev, Payload: indentPayload(ev.Payload), Names: c.integratorNames(ctx)}
	if v.Trace, err = c.Queries.Trace(ctx, ev.CorrelacaoID); err != nil {
		c.fail(w, r, err)
		return
	}
	if v.Deliveries, err = c.Deliveries.List(ctx, app.DeliveryFilter{EventID: ev.EventID, Limite: app.MaxLimite}); err != nil {
		c.fail(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, eventPage(c.page(r, "Evento "+strconv.FormatInt(ev.Sequence, 10), "eventos"), v))
}

// indentPayload pretty-prints a stored payload; the log only holds JSON.
func indentPayload(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return string(raw)
	}
	return b.String()
}

// typeNames lists the registered types for the filter's suggestions.
func (c *Console) typeNames() []string {
	if c.Registry == nil {
		return nil
	}
	var out []string
	for _, tv := range c.Registry.List() {
		if !slices.Contains(out, tv.Tipo) {
			out = append(out, tv.Tipo)
		}
	}
	slices.Sort(out)
	return out
}

// integratorNames maps integrator ids to names: ids are UUIDs, which say
// nothing to an operator.
func (c *Console) integratorNames(ctx context.Context) map[string]string {
	names := map[string]string{}
	if c.Integrators == nil {
		return names
	}
	all, err := c.Integrators.List(ctx)
	if err != nil {
		c.Logger.Warn("list integrators for names", "err", err)
	}
	for _, in := range all {
		names[in.ID] = in.Nome
	}
	return names
}

// integratorName is an integrator's name, or its id when unknown.
func integratorName(names map[string]string, id string) string {
	if n := names[id]; n != "" {
		return n
	}
	return id
}

var autoriaLabel = map[string]string{"usuario": "usuário", "integrador": "integrador", "sistema": "sistema"}

// autoria says who caused an event, in words.
func autoria(a *app.Autoria, names map[string]string) string {
	if a == nil {
		return "—"
	}
	label := autoriaLabel[a.Tipo]
	if label == "" {
		label = a.Tipo
	}
	if a.Tipo == "integrador" {
		return label + " " + integratorName(names, a.ID)
	}
	return label + " " + a.ID
}

func seq(n int64) string { return strconv.FormatInt(n, 10) }

// qs escapes a value for a link's query string.
func qs(v string) string { return url.QueryEscape(v) }
