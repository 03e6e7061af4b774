package app

import (
	"context"
	"sync"
	"time"
)

// MinuteCount is how many events were logged in one minute.
type MinuteCount struct {
	Minuto time.Time
	N      int64
}

// Sample is one reading of a gauge.
type Sample struct {
	Em time.Time
	N  int64
}

// StatsStore answers the overview's aggregate questions.
type StatsStore interface {
	// EventsPerMinute counts events by minute of their timestamp in [from, to).
	EventsPerMinute(ctx context.Context, from, to time.Time) ([]MinuteCount, error)
	// DeliveryCounts counts outbox rows by status.
	DeliveryCounts(ctx context.Context) (map[string]int64, error)
	OutboxBacklog(ctx context.Context) (int64, error)
	DLQStats(ctx context.Context, limit int) (DLQStats, error)
}

// statsEvery is how often Run samples the gauges; statsKeep how many
// samples it keeps (one hour).
const (
	statsEvery = 15 * time.Second
	statsKeep  = 240
)

// Stats feeds the console's overview: counts read on demand, and the
// recent history of the outbox backlog and DLQ size, which no table keeps,
// sampled in memory while the server runs.
type Stats struct {
	Store StatsStore
	Now   func() time.Time

	mu      sync.Mutex
	backlog []Sample
	dlq     []Sample
}

// Overview is the numbers of the console's first page.
type Overview struct {
	// EventosPorMinuto covers the last hour, one entry per minute, oldest
	// first, zero where nothing was logged.
	EventosPorMinuto []MinuteCount
	Entregas         map[string]int64
	Backlog, DLQ     []Sample
	BacklogAgora     int64
	DLQAgora         int64
}

// Run samples the gauges until ctx ends.
func (s *Stats) Run(ctx context.Context) {
	t := time.NewTicker(statsEvery)
	defer t.Stop()
	for {
		s.sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Stats) sample(ctx context.Context) {
	backlog, dlq, err := s.gauges(ctx)
	if err != nil {
		return // a missed reading is a gap in the chart, nothing more
	}
	now := s.Now().UTC()
	s.mu.Lock()
	s.backlog = appendSample(s.backlog, Sample{now, backlog})
	s.dlq = appendSample(s.dlq, Sample{now, dlq})
	s.mu.Unlock()
}

func (s *Stats) gauges(ctx context.Context) (backlog, dlq int64, err error) {
	if backlog, err = s.Store.OutboxBacklog(ctx); err != nil {
		return 0, 0, err
	}
	st, err := s.Store.DLQStats(ctx, 0)
	if err != nil {
		return 0, 0, err
	}
	return backlog, int64(st.TotalPendentes), nil
}

func appendSample(ss []Sample, v Sample) []Sample {
	if len(ss) >= statsKeep {
		ss = append(ss[:0], ss[len(ss)-statsKeep+1:]...)
	}
	return append(ss, v)
}

// Overview reads the current numbers. Only Run keeps samples: a page view
// must not crowd the hour of history the charts promise.
func (s *Stats) Overview(ctx context.Context) (Overview, error) {
	var o Overview
	var err error
	if o.BacklogAgora, o.DLQAgora, err = s.gauges(ctx); err != nil {
		return o, err
	}
	if o.Entregas, err = s.Store.DeliveryCounts(ctx); err != nil {
		return o, err
	}
	end := s.Now().UTC().Truncate(time.Minute).Add(time.Minute)
	start := end.Add(-time.Hour)
	counts, err := s.Store.EventsPerMinute(ctx, start, end)
	if err != nil {
		return o, err
	}
	byMinute := make(map[time.Time]int64, len(counts))
	for _, c := range counts {
		byMinute[c.Minuto.UTC()] = c.N
	}
	for m := start; m.Before(end); m = m.Add(time.Minute) {
		o.EventosPorMinuto = append(o.EventosPorMinuto, MinuteCount{m, byMinute[m]})
	}
	s.mu.Lock()
	o.Backlog = append([]Sample(nil), s.backlog...)
	o.DLQ = append([]Sample(nil), s.dlq...)
	s.mu.Unlock()
	return o, nil
}
