package app

import (
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// Health is how an integrator's deliveries went over the last hour (SPEC
// 9), as operators see it on GET /api/integradores and the console, beside
// the integrator's stored ultimo_sucesso and falhando_desde. It counts the
// attempts this process made: after a restart the window starts at the
// start (Desde says where).
type Health struct {
	// Desde is where the window starts: an hour ago, or the server's start.
	Desde      time.Time `json:"desde"`
	Tentativas int       `json:"tentativas"`
	Sucessos   int       `json:"sucessos"`
	// TaxaSucesso is Sucessos/Tentativas; absent without attempts.
	TaxaSucesso *float64 `json:"taxa_sucesso,omitempty"`
	// The latency of attempts that got an HTTP answer, in milliseconds.
	LatenciaP50MS *int64 `json:"latencia_p50_ms,omitempty"`
	LatenciaP95MS *int64 `json:"latencia_p95_ms,omitempty"`
	// Pendentes is the backlog: deliveries waiting or on the wire now.
	Pendentes int `json:"pendentes"`
}

// healthWindow is an hour of minutes.
const healthWindow = time.Hour

// healthSamples bounds the latencies kept per integrator and minute: a busy
// integrator's percentiles come from a uniform sample of each minute.
const healthSamples = 256

// healths keeps each integrator's last hour in one-minute buckets, fed by the
// dispatcher with the attempts it recorded.
type healths struct {
	mu      sync.Mutex
	started time.Time
	by      map[string]*[60]healthMinute
}

type healthMinute struct {
	minute      int64 // unix minute the bucket holds; another means empty
	tries, ok   int
	answered    int // attempts with an HTTP answer: the latency sample's population
	latenciesMS []int64
}

// record adds one attempt that ended at end.
func (h *healths) record(id string, ok, answered bool, latencyMS int64, end time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.by == nil {
		h.by = map[string]*[60]healthMinute{}
	}
	w := h.by[id]
	if w == nil {
		w = &[60]healthMinute{}
		h.by[id] = w
	}
	minute := end.Unix() / 60
	b := &w[minute%60]
	if b.minute != minute {
		*b = healthMinute{minute: minute, latenciesMS: b.latenciesMS[:0]}
	}
	b.tries++
	if ok {
		b.ok++
	}
	if !answered {
		return
	}
	b.answered++
	// Reservoir sampling: every answered attempt of the minute is equally
	// likely to be among the kept ones.
	if len(b.latenciesMS) < healthSamples {
		b.latenciesMS = append(b.latenciesMS, latencyMS)
	} else if i := rand.IntN(b.answered); i < healthSamples {
		b.latenciesMS[i] = latencyMS
	}
}

// health sums the buckets of the hour before now.
func (h *healths) health(id string, now time.Time) Health {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := Health{Desde: now.Add(-healthWindow).UTC()}
	if !h.started.IsZero() && h.started.After(out.Desde) {
		out.Desde = h.started.UTC()
	}
	w := h.by[id]
	if w == nil {
		return out
	}
	var lat []int64
	first := now.Add(-healthWindow).Unix()/60 + 1
	for _, b := range w {
		if b.minute < first || b.minute > now.Unix()/60 {
			continue
		}
		out.Tentativas += b.tries
		out.Sucessos += b.ok
		lat = append(lat, b.latenciesMS...)
	}
	if out.Tentativas > 0 {
		rate := float64(out.Sucessos) / float64(out.Tentativas)
		out.TaxaSucesso = &rate
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		p50, p95 := percentile(lat, 50), percentile(lat, 95)
		out.LatenciaP50MS, out.LatenciaP95MS = &p50, &p95
	}
	return out
}

// percentile is the nearest-rank percentile of sorted values.
func percentile(sorted []int64, p int) int64 {
	rank := (p*len(sorted) + 99) / 100 // ceil(p/100 × n)
	return sorted[max(rank, 1)-1]
}
