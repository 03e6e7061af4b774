package app

import (
	"context"
	"iter"
)

// Query caps (seed 001, section 6.2).
const (
	DefaultLimite = 100
	MaxLimite     = 500
	ReplayBatch   = 1000
	ReplayBatches = 100
)

// Queries serves the read side of the log: queries, traces, replay, DLQ stats.
type Queries struct {
	Log   EventLog
	Store ConsumerStore
}

// Events returns one page; limite defaults to 100 and is capped at 500.
func (a *Queries) Events(ctx context.Context, f EventFilter) (Page[Event], error) {
	f.Limite, f.Deslocamento = pageBounds(f.Limite, f.Deslocamento)
	rows, total, err := a.Log.Events(ctx, f)
	if err != nil {
		return Page[Event]{}, err
	}
	p := Page[Event]{Linhas: rows, Total: total, Limite: f.Limite, Deslocamento: f.Deslocamento}
	if len(rows) > 0 {
		p.Proximo = nextCursor(len(rows), f.Limite, rows[len(rows)-1].Sequence, f.Desc)
	}
	return p, nil
}

// pageBounds applies the paging rules of every list: limite defaults to 100
// and is capped at 500; deslocamento is never negative.
func pageBounds(limite, deslocamento int) (int, int) {
	if limite <= 0 {
		limite = DefaultLimite
	}
	return min(limite, MaxLimite), max(deslocamento, 0)
}

// Event returns one record or ENotFound.
func (a *Queries) Event(ctx context.Context, eventID string) (Event, error) {
	id, ok := canonicalUUID(eventID)
	if !ok {
		return Event{}, Errorf(ENotFound, "evento não encontrado")
	}
	ev, err := a.Log.Event(ctx, id)
	if err == ErrNotFound {
		return Event{}, Errorf(ENotFound, "evento não encontrado")
	}
	return ev, err
}

// Trace returns the flow of one correlation id, in order, at most 500.
func (a *Queries) Trace(ctx context.Context, correlacaoID string) (Page[Event], error) {
	id, ok := canonicalUUID(correlacaoID)
	if !ok {
		return Page[Event]{}, &Error{Code: EInvalid, Message: "correlacao_id inválido",
			Details: []Detail{{"/correlacaoId", "deve ser um UUID"}}}
	}
	return a.Events(ctx, EventFilter{CorrelacaoID: id, Limite: MaxLimite})
}

// Replay yields records with sequence > after, optionally of some types,
// reading the log in batches of 1000 and stopping after 100 batches so one
// request cannot pin a reader forever; the client continues from the last
// sequence it got.
func (a *Queries) Replay(ctx context.Context, after int64, tipos []string) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		for range ReplayBatches {
			batch, err := a.Log.EventsAfter(ctx, after, tipos, ReplayBatch)
			if err != nil {
				yield(Event{}, err)
				return
			}
			for _, ev := range batch {
				if !yield(ev, nil) {
					return
				}
			}
			if len(batch) < ReplayBatch {
				return
			}
			after = batch[len(batch)-1].Sequence
		}
	}
}

// DLQ returns counts of open entries per colonia and the latest 100 of them.
func (a *Queries) DLQ(ctx context.Context) (DLQStats, error) {
	return a.Store.DLQStats(ctx, 100)
}
