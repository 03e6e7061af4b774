package console

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

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
// plus its page size and its keyset cursor.
type listQuery struct {
	form
	Limite int
	// Ate and Apos are the cursor of a list shown newest first: Ate shows
	// the newest rows with a key up to it (the older pages), Apos the rows
	// just above it (back towards the newest). Neither is the first page.
	Ate, Apos int64
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
	for k, dst := range map[string]*int64{"ate": &l.Ate, "apos": &l.Apos} {
		if v := q.Get(k); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				l.Error = "Cursor de página inválido: volte à primeira página."
			} else {
				*dst = n
			}
		}
	}
	if l.Ate > 0 && l.Apos > 0 {
		l.Error = "Cursor de página inválido: volte à primeira página."
	}
	return l
}

func (l listQuery) invalid() bool { return l.Error != "" || len(l.Errors) > 0 }

func (l listQuery) filtered() bool { return len(l.Filters) > 0 }

// link is the list's URL with its filters and page size, at a cursor
// (ate or apos, and its value; none for the first page).
func (l listQuery) link(path, cursor string, at int64) string {
	v := url.Values{}
	for k, vs := range l.Filters {
		v[k] = vs
	}
	if l.Limite != defaultPageSize {
		v.Set("limite", strconv.Itoa(l.Limite))
	}
	if cursor != "" {
		v.Set(cursor, strconv.FormatInt(at, 10))
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

// pager is what a keyset page says about itself and its neighbours. Keys
// are event sequences or delivery ids; the page shows them newest first.
type pager struct {
	Head bool // the first page: nothing newer when it was read
	// Total counts the rows matching the filters on the first page.
	Total int
	// From and To are the page's lowest and highest key; Older and Newer
	// how many matching rows lie below and above it, -1 when unknown.
	From, To     int64
	Shown        int
	Older, Newer int
	// OlderURL and NewerURL are the neighbour pages, "" when there is none.
	OlderURL, NewerURL string
	// Key is what a key is called ("sequências", "entregas #").
	Key string
}

// listWords are how a list names its rows, its keys and its neighbour
// pages, each in its gender (eventos, entregas).
type listWords struct {
	Singular, Plural string // "evento", "eventos"
	KeyOne, KeyMany  string // "sequência", "sequências"
	KeyPrefix        string // "#" before a delivery id
	Older, Newer     string // the links: "Mais antigos", "Mais recentes"
	OlderN, Recentes string // after a count: "mais antigos", "mais recentes"
	OlderOne         string // after a count of 1: "mais antigo"
	None             string // a page without rows
}

var (
	eventWords = listWords{Singular: "evento", Plural: "eventos", KeyOne: "sequência", KeyMany: "sequências",
		Older: "Mais antigos", Newer: "Mais recentes", OlderN: "mais antigos", Recentes: "mais recentes", OlderOne: "mais antigo",
		None: "Nenhum evento aqui."}
	deliveryWords = listWords{Singular: "entrega", Plural: "entregas", KeyOne: "entrega", KeyMany: "entregas", KeyPrefix: "#",
		Older: "Mais antigas", Newer: "Mais recentes", OlderN: "mais antigas", Recentes: "mais recentes", OlderOne: "mais antiga",
		None: "Nenhuma entrega aqui."}
)

// pagerText says where a page is: which keys it shows and, where known,
// how many rows lie below it (or, on the first page, how many there were).
func pagerText(pg pager, w listWords) string {
	if pg.Shown == 0 {
		return w.None
	}
	keys := w.KeyOne + " " + w.KeyPrefix + seq(pg.To)
	if pg.From != pg.To {
		keys = w.KeyMany + " " + w.KeyPrefix + seq(pg.From) + "–" + w.KeyPrefix + seq(pg.To)
	}
	count := func(n int) string {
		if n == 1 {
			return "1 " + w.Singular
		}
		return num(int64(n)) + " " + w.Plural
	}
	recent := func(n int) string { return plural(n, "mais recente", w.Recentes) }
	var parts []string
	switch {
	case pg.Head && pg.Total <= pg.Shown:
		parts = append(parts, count(pg.Shown), keys)
	case pg.Head:
		parts = append(parts, recent(pg.Shown)+" de "+count(pg.Total)+" ao abrir a página", keys)
	default:
		parts = append(parts, strings.ToUpper(keys[:1])+keys[1:])
		if pg.Newer > 0 {
			parts = append(parts, recent(pg.Newer)+" acima")
		}
		if pg.Older >= 0 {
			parts = append(parts, plural(pg.Older, w.OlderOne, w.OlderN)+" abaixo")
		}
	}
	return strings.Join(parts, " · ")
}

// keysetLinks fills in the neighbours of a page of rows whose keys run from
// lo to hi: older continues below lo (the page's Proximo when the store
// gave one), newer above hi.
func (l listQuery) keysetLinks(pg *pager, path string, lo, hi int64, older string) {
	if older != "" {
		if n, err := strconv.ParseInt(older, 10, 64); err == nil && n > 0 {
			pg.OlderURL = l.link(path, "ate", n)
		}
	}
	if !pg.Head {
		pg.NewerURL = l.link(path, "apos", hi)
	}
	pg.From, pg.To = lo, hi
}

var eventFields = []string{"tipo", "origem", "agregado", "correlacao_id", "timestamp_inicio", "timestamp_fim", "event_id"}

// eventQuery reads the events page's filters; the tail reads the same ones.
// The event id is not an EventFilter field: it names one event, which the
// page reads alone.
func eventQuery(r *http.Request) (l listQuery, f app.EventFilter, eventID string) {
	l = parseList(r, eventFields...)
	f = app.EventFilter{Tipo: l.V("tipo"), Origem: l.V("origem"), Agregado: l.V("agregado")}
	for k, id := range map[string]*string{"correlacao_id": &f.CorrelacaoID, "event_id": &eventID} {
		if v := l.V(k); v != "" {
			u, err := uuid.Parse(v)
			if err != nil || len(v) != 36 {
				l.Errors[k] = "deve ser um UUID, como 0199bb3e-0000-7000-8000-00000000004a"
			} else {
				*id = u.String() // stored lower-case
			}
		}
	}
	for k, t := range map[string]*time.Time{"timestamp_inicio": &f.TimestampInicio, "timestamp_fim": &f.TimestampFim} {
		if v := l.V(k); v != "" {
			at, ok := parsePeriod(v)
			if k == "timestamp_fim" {
				// Both ends included, to the millisecond: the minute typed is in.
				at, ok = periodEnd(v)
				at = at.Add(-time.Millisecond)
			}
			if ok {
				*t = at
			} else {
				l.Errors[k] = periodExample
			}
		}
	}
	if !f.TimestampInicio.IsZero() && !f.TimestampFim.IsZero() && f.TimestampFim.Before(f.TimestampInicio) {
		l.Errors["timestamp_fim"] = "deve ser depois do início"
	}
	return l, f, eventID
}

// matches applies the filters the tail does not hand to the store.
func matches(f app.EventFilter, eventID string, ev app.Event) bool {
	return app.TypeMatches(f.Tipo, ev.Tipo) && (f.Origem == "" || ev.Origem == f.Origem) &&
		(f.Agregado == "" || ev.Agregado == f.Agregado) && (f.CorrelacaoID == "" || ev.CorrelacaoID == f.CorrelacaoID) &&
		(eventID == "" || ev.EventID == eventID) &&
		(f.TimestampInicio.IsZero() || !ev.Timestamp.Before(f.TimestampInicio)) &&
		(f.TimestampFim.IsZero() || !ev.Timestamp.After(f.TimestampFim))
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
	// Single is a search by event id: one event or none, no paging.
	Single bool
}

func (c *Console) events(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	l, f, eventID := eventQuery(r)
	v := eventsView{Q: l, Tipos: c.typeNames(), Pager: pager{Older: -1, Newer: -1}}
	if l.invalid() {
		c.render(w, r, http.StatusUnprocessableEntity, eventsPage(c.page(r, "Eventos", "eventos"), v))
		return
	}
	v.Names = c.integratorNames(ctx)
	if eventID != "" {
		ev, err := c.Queries.Event(ctx, eventID)
		if err != nil && app.ErrorCode(err) != app.ENotFound {
			c.Fail(w, r, err)
			return
		}
		if err == nil && matches(f, eventID, ev) {
			v.Rows = []app.Event{ev}
		}
		v.Single, v.Pager.Head, v.Pager.Total, v.Pager.Shown = true, true, len(v.Rows), len(v.Rows)
		c.render(w, r, http.StatusOK, eventsPage(c.page(r, "Eventos", "eventos"), v))
		return
	}
	// Read the newest sequence before the list: an event committed between
	// the two is either in the list or after De, so the tail shows it.
	latest, err := c.Queries.Log.MaxSequence(ctx)
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	// Unfiltered, the log is its sequence numbers: rowids given one past
	// the largest and never deleted, so a page is a range of them and its
	// counts are subtractions, with no count over the whole log.
	dense := !l.filtered()
	limit := int64(l.Limite)
	pg := &v.Pager
	var older string // the cursor below the page
	if l.Apos > 0 {
		// Back towards the newest: the rows just above the cursor, read
		// oldest first and shown newest first.
		f.SequenceInicio, f.Limite = l.Apos+1, l.Limite
		if dense {
			f.SequenceFim = l.Apos + limit
		}
		page, err := c.Queries.Events(ctx, f)
		if err != nil {
			c.Fail(w, r, err)
			return
		}
		v.Rows = page.Linhas
		slices.Reverse(v.Rows)
		if dense {
			pg.Head, pg.Newer = l.Apos+limit >= latest, int(max(0, latest-l.Apos-limit))
		} else {
			pg.Head, pg.Newer = page.Total <= len(v.Rows), page.Total-len(v.Rows)
		}
		lo := l.Apos + 1
		if len(v.Rows) > 0 {
			lo = v.Rows[len(v.Rows)-1].Sequence
		}
		if lo > 1 {
			older = strconv.FormatInt(lo-1, 10)
			if dense {
				pg.Older = int(lo - 1)
			}
		}
	} else {
		top := l.Ate
		pg.Head = top == 0 || top >= latest
		if pg.Head {
			top = latest
		}
		if top > 0 {
			f.Desc, f.SequenceFim, f.Limite = true, top, l.Limite
			if dense {
				f.SequenceInicio = max(1, top-limit+1)
			}
			page, err := c.Queries.Events(ctx, f)
			if err != nil {
				c.Fail(w, r, err)
				return
			}
			v.Rows = page.Linhas
			if dense {
				pg.Total, pg.Older = int(latest), int(f.SequenceInicio-1)
				if f.SequenceInicio > 1 {
					older = strconv.FormatInt(f.SequenceInicio-1, 10)
				}
			} else {
				pg.Total, pg.Older, older = page.Total, page.Total-len(v.Rows), page.Proximo
			}
		}
	}
	lo, hi := l.Ate, l.Ate
	if len(v.Rows) > 0 {
		hi, lo = v.Rows[0].Sequence, v.Rows[len(v.Rows)-1].Sequence
	}
	pg.Shown = len(v.Rows)
	l.keysetLinks(pg, "/eventos", lo, hi, older)
	v.De = latest
	if len(v.Rows) > 0 && v.Rows[0].Sequence > v.De {
		v.De = v.Rows[0].Sequence
	}
	v.Live = pg.Head
	c.render(w, r, http.StatusOK, eventsPage(c.page(r, "Eventos", "eventos"), v))
}

// eventsTail streams the events after ?de= that match the page's filters.
// The type goes to the store (an index range); the other filters are
// applied here, and the cursor still moves past what they leave out.
func (c *Console) eventsTail(w http.ResponseWriter, r *http.Request) {
	l, f, eventID := eventQuery(r)
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
			evs, cut, err := c.Queries.Log.EventsAfter(ctx, after, tipos, tailBatch, app.ChunkBytes)
			if err != nil {
				return nil, after, false, err
			}
			var lines []tailLine
			for _, ev := range evs {
				after = ev.Sequence
				if matches(f, eventID, ev) {
					lines = append(lines, tailLine{seq: ev.Sequence, row: eventRow(ev, names)})
				}
			}
			return lines, after, len(evs) == tailBatch || cut, nil
		},
	})
}

type eventView struct {
	Ev         app.Event
	Payload    shownJSON
	Trace      app.Page[app.Event]
	Deliveries app.Page[app.Delivery]
	Names      map[string]string
}

func (c *Console) event(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	ev, err := c.Queries.Event(ctx, r.PathValue("eventId"))
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	v := eventView{Ev: ev, Payload: showJSON(ev.Payload), Names: c.integratorNames(ctx)}
	if v.Trace, err = c.Queries.Trace(ctx, ev.CorrelacaoID); err != nil {
		c.Fail(w, r, err)
		return
	}
	if v.Deliveries, err = c.Deliveries.List(ctx, app.DeliveryFilter{EventID: ev.EventID, Limite: app.MaxLimite}); err != nil {
		c.Fail(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, eventPage(c.page(r, "Evento "+strconv.FormatInt(ev.Sequence, 10), "eventos"), v))
}

// typeNames lists the registered types for the filter's suggestions.
func (c *Console) typeNames() []string {
	var out []string
	for _, tv := range c.Registry.List() {
		if !slices.Contains(out, tv.Tipo) {
			out = append(out, tv.Tipo)
		}
	}
	slices.Sort(out)
	return out
}

// integratorNames maps integrator and operator ids to names: ids are UUIDs, which say
// nothing to an operator.
func (c *Console) integratorNames(ctx context.Context) map[string]string {
	names := map[string]string{}
	all, err := c.Integrators.List(ctx)
	if err != nil {
		c.Logger.Warn("list integrators for names", "err", err)
	}
	for _, in := range all {
		names[in.ID] = in.Nome
	}
	// And the console's accounts by login, for events a person caused:
	// ids are UUIDs on both sides, so one map names either.
	ops, err := c.Sessions.Operators(ctx)
	if err != nil {
		c.Logger.Warn("list operators for names", "err", err)
	}
	for _, op := range ops {
		names[op.ID] = op.Login
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
	if a.Tipo == "integrador" || a.Tipo == "usuario" {
		return label + " " + integratorName(names, a.ID)
	}
	return label + " " + a.ID
}

func seq(n int64) string { return strconv.FormatInt(n, 10) }

// qs escapes a value for a link's query string.
func qs(v string) string { return url.QueryEscape(v) }
