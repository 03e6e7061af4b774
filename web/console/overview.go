package console

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"time"

	"geohub/app"
)

// overviewWindow is one of the overview's selectable spans (SPEC 9). Events
// are counted over it; what has no history over it says its own span.
type overviewWindow struct {
	Key    string // ?janela=
	Label  string // the selector's button
	In     string // after a count: "eventos na última hora"
	Since  string // the chart's left end
	Span   time.Duration
	Bucket time.Duration // one column of the chart
	Per    string        // the peak's unit
	// Every is how often the page refreshes, in ms: a week of counts is
	// read less often than an hour of them.
	Every int
}

var overviewWindows = []overviewWindow{
	{Key: "1h", Label: "1 h", In: "na última hora", Since: "há 60 min", Span: time.Hour, Bucket: time.Minute, Per: "/min", Every: 15000},
	{Key: "24h", Label: "24 h", In: "nas últimas 24 h", Since: "há 24 h", Span: 24 * time.Hour, Bucket: time.Hour, Per: "/h", Every: 60000},
	{Key: "7d", Label: "7 dias", In: "nos últimos 7 dias", Since: "há 7 dias", Span: 7 * 24 * time.Hour, Bucket: 6 * time.Hour, Per: " em 6 h", Every: 300000},
}

// overviewView is the overview's figures, each with the span it counts.
type overviewView struct {
	O app.Overview
	W overviewWindow
	// Events are the window's event counts per bucket, oldest first.
	Events []app.MinuteCount
	// Integrators are every integrator, those in trouble first.
	Integrators []app.Integrator
	// GaugeSpan is what the backlog and DLQ charts cover: the samples the
	// server keeps in memory, an hour at most.
	GaugeSpan string
	Now       time.Time
}

func (v overviewView) URL() string { return "/visao-geral?janela=" + v.W.Key }

// window reads ?janela=; anything else is the last hour.
func window(r *http.Request) overviewWindow {
	k := r.URL.Query().Get("janela")
	for _, w := range overviewWindows {
		if w.Key == k {
			return w
		}
	}
	return overviewWindows[0]
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	v, err := c.overviewData(r.Context(), window(r))
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, overviewPage(c.page(r, "Visão geral", "inicio"), v))
}

// overviewCharts is the overview's numbers alone, for its periodic refresh.
func (c *Console) overviewCharts(w http.ResponseWriter, r *http.Request) {
	v, err := c.overviewData(r.Context(), window(r))
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, overviewCharts(c.page(r, "Visão geral", "inicio"), v))
}

func (c *Console) overviewData(ctx context.Context, win overviewWindow) (overviewView, error) {
	now := c.Now()
	v := overviewView{W: win, Now: now, GaugeSpan: "última hora"}
	var err error
	if v.O, err = c.Stats.Overview(ctx); err != nil {
		return v, err
	}
	v.Events = v.O.EventosPorMinuto
	if win.Bucket != time.Minute {
		if v.Events, err = c.eventBuckets(ctx, win, now); err != nil {
			return v, err
		}
	}
	if len(v.O.Backlog) > 0 && now.Sub(v.O.Backlog[0].Em) < time.Hour-time.Minute {
		v.GaugeSpan = "desde " + clock(v.O.Backlog[0].Em, now) + ", quando o servidor iniciou"
	}
	if v.Integrators, err = c.Integrators.List(ctx); err != nil {
		return v, err
	}
	slices.SortStableFunc(v.Integrators, func(a, b app.Integrator) int { return troubleRank(a) - troubleRank(b) })
	return v, nil
}

// eventBuckets counts the window's events per bucket, each a count on the
// timestamp index. Buckets start on Brasília's clock (06:00, 12:00...), so
// the columns read as the municipality's hours.
func (c *Console) eventBuckets(ctx context.Context, win overviewWindow, now time.Time) ([]app.MinuteCount, error) {
	_, offset := now.In(brt).Zone()
	shift := time.Duration(offset) * time.Second
	end := now.Add(shift).Truncate(win.Bucket).Add(-shift).Add(win.Bucket)
	var out []app.MinuteCount
	for b := end.Add(-win.Span); b.Before(end); b = b.Add(win.Bucket) {
		// Both ends are included: the bucket stops a millisecond (the
		// log's precision) before the next one starts.
		p, err := c.Queries.Events(ctx, app.EventFilter{TimestampInicio: b, TimestampFim: b.Add(win.Bucket - time.Millisecond), Limite: 1})
		if err != nil {
			return nil, err
		}
		out = append(out, app.MinuteCount{Minuto: b.UTC(), N: int64(p.Total)})
	}
	return out, nil
}

// troubled counts the integrators that are not delivering normally.
func troubled(all []app.Integrator) int {
	n := 0
	for _, in := range all {
		if troubleRank(in) < 2 {
			n++
		}
	}
	return n
}

func bucketName(d time.Duration) string {
	switch d {
	case time.Minute:
		return "minuto"
	case time.Hour:
		return "hora"
	}
	return "período de " + strconv.Itoa(int(d.Hours())) + " h"
}

// windowName is the window as a chart's heading says it.
func windowName(w overviewWindow) string {
	switch w.Key {
	case "24h":
		return "últimas 24 h"
	case "7d":
		return "últimos 7 dias"
	}
	return "última hora"
}

func refreshText(ms int) string {
	switch {
	case ms%60000 == 0 && ms == 60000:
		return "minuto"
	case ms%60000 == 0:
		return strconv.Itoa(ms/60000) + " minutos"
	}
	return strconv.Itoa(ms/1000) + " segundos"
}
