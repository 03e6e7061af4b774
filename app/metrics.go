package app

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the domain's Prometheus series. A nil *Metrics records nothing,
// which keeps tests and tools free of a registry.
type Metrics struct {
	Published  *prometheus.CounterVec
	Handled    *prometheus.CounterVec
	Deliveries *prometheus.CounterVec
	Latency    prometheus.Histogram
	Breaker    *prometheus.GaugeVec
	// LiveRenders counts the console's live-view reads: one per change
	// for all the sockets showing the same view, not one per socket.
	LiveRenders *prometheus.CounterVec
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
			Help: "In-process handler runs, by colonia and outcome: ok, erro, or abandonado (ignored the cancellation after its timeout and still runs).",
		}, []string{"colonia", "resultado"}),
		Deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "geohub_deliveries_total",
			Help: "Webhook attempts by outcome: entregue, pendente (will retry) or falhou (dead letter).",
		}, []string{"resultado"}),
		Latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "geohub_delivery_seconds",
			Help:    "Duration of webhook attempts.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		Breaker: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "geohub_breaker_open",
			Help: "1 while an integrator's circuit breaker is open, else 0.",
		}, []string{"integrador"}),
		LiveRenders: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "geohub_console_live_renders_total",
			Help: "Reads and renders of the console's live views, by view; sockets showing the same view share each one.",
		}, []string{"vista"}),
	}
	reg.MustRegister(m.Published, m.Handled, m.Deliveries, m.Latency, m.Breaker, m.LiveRenders)
	return m
}

func (m *Metrics) delivered(r DeliveryResult) {
	if m != nil {
		m.Deliveries.WithLabelValues(r.Status).Inc()
		m.Latency.Observe(float64(r.Attempt.DuracaoMS) / 1000)
	}
}

// LiveRendered counts one render of the console's live view vista.
func (m *Metrics) LiveRendered(vista string) {
	if m != nil {
		m.LiveRenders.WithLabelValues(vista).Inc()
	}
}

func (m *Metrics) breaker(integrador string, open bool) {
	if m != nil {
		v := 0.0
		if open {
			v = 1
		}
		m.Breaker.WithLabelValues(integrador).Set(v)
	}
}

func (m *Metrics) published(tipo string) {
	if m != nil {
		m.Published.WithLabelValues(tipo).Inc()
	}
}

// handled counts a handler run: ok, erro, or abandonado (it ignored the
// cancellation after its timeout and still runs).
func (m *Metrics) handled(colonia, resultado string) {
	if m != nil {
		m.Handled.WithLabelValues(colonia, resultado).Inc()
	}
}
