package console

import (
	"fmt"
	"strings"
	"time"

	"geohub/app"
)

// bar is one column of a bar chart, in SVG user units.
type bar struct {
	X, Y, W, H string
	Title      string
}

const chartW, chartH = 600.0, 120.0

// eventBars lays the events per bucket (a minute, an hour, six hours) out
// as columns scaled to the busiest one.
func eventBars(ms []app.MinuteCount, bucket time.Duration) (bars []bar, peak int64) {
	for _, m := range ms {
		peak = max(peak, m.N)
	}
	if len(ms) == 0 {
		return nil, 0
	}
	w := chartW / float64(len(ms))
	for i, m := range ms {
		h := 0.0
		if peak > 0 {
			h = float64(m.N) / float64(peak) * (chartH - 4)
		}
		if m.N > 0 && h < 2 {
			h = 2
		}
		bars = append(bars, bar{X: f1(float64(i) * w), Y: f1(chartH - h), W: f1(w * 0.8), H: f1(h),
			Title: bucketLabel(m.Minuto, bucket) + ": " + plural(int(m.N), "evento", "eventos")})
	}
	return bars, peak
}

// bucketLabel names a column: its minute, or its span of hours.
func bucketLabel(start time.Time, bucket time.Duration) string {
	from, to := start.In(brt), start.Add(bucket).In(brt)
	if bucket <= time.Minute {
		return from.Format("15:04")
	}
	return from.Format("02/01 15:04") + "–" + to.Format("15:04")
}

// sparkline draws gauge samples as a polyline over the last hour.
func sparkline(ss []app.Sample, now time.Time) (points string, peak int64) {
	for _, s := range ss {
		peak = max(peak, s.N)
	}
	var b strings.Builder
	start := now.Add(-time.Hour)
	for _, s := range ss {
		x := float64(s.Em.Sub(start)) / float64(time.Hour) * chartW
		if x < 0 {
			continue
		}
		y := chartH - 4
		if peak > 0 {
			y = chartH - 4 - float64(s.N)/float64(peak)*(chartH-12)
		}
		fmt.Fprintf(&b, "%s,%s ", f1(x), f1(y))
	}
	return strings.TrimSpace(b.String()), peak
}

// outcome is one row of the deliveries-by-outcome chart.
type outcome struct {
	Status, Label, Class string
	N                    int64
	W                    string // bar width, percent of the widest
}

var outcomeOrder = []struct{ status, label, class string }{
	{app.EntregaEntregue, "Entregues", "ok"},
	{app.EntregaPendente, "Pendentes", "pendente"},
	{app.EntregaProcessando, "Em envio", "envio"},
	{app.EntregaFalhou, "Falharam", "falha"},
}

func outcomes(counts map[string]int64) []outcome {
	var peak int64
	for _, n := range counts {
		peak = max(peak, n)
	}
	var out []outcome
	for _, o := range outcomeOrder {
		w := 0.0
		if peak > 0 {
			w = float64(counts[o.status]) / float64(peak) * 100
		}
		out = append(out, outcome{Status: o.status, Label: o.label, Class: o.class, N: counts[o.status], W: f1(w)})
	}
	return out
}

func sum(ms []app.MinuteCount) int64 {
	var n int64
	for _, m := range ms {
		n += m.N
	}
	return n
}

func f1(v float64) string { return fmt.Sprintf("%.1f", v) }

// brt is the municipality's clock on every page. Brazil has had no daylight
// saving time since 2019, so a fixed zone needs no tz database.
var brt = time.FixedZone("BRT", -3*60*60)

// when formats a time for people: local, to the second.
func when(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.In(brt).Format("02/01/2006 15:04:05")
}

// num formats a count with Brazilian thousands separators.
func num(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte('.')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
