package app

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the domain's Prometheus series. A nil *Metrics records nothing,
// which keeps tests and tools free of a registry.
type Metrics struct {
	Published *prometheus.CounterVec
	Handled   *prometheus.CounterVec
}

// NewMetrics creates the series and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "geohub_events_published_total",
			Help: "Events appended to the log, by type.",
		}, []string{"tipo"}),
		Handled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "geohub_consumer_handled_total",
			Help: "In-process handler runs, by colonia and outcome.",
		}, []string{"colonia", "resultado"}),
	}
	reg.MustRegister(m.Published, m.Handled)
	return m
}

func (m *Metrics) published(tipo string) {
	if m != nil {
		m.Published.WithLabelValues(tipo).Inc()
	}
}

func (m *Metrics) handled(colonia string, ok bool) {
	if m == nil {
		return
	}
	r := "erro"
	if ok {
		r = "ok"
	}
	m.Handled.WithLabelValues(colonia, r).Inc()
}
