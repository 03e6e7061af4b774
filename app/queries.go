package app

import (
	"context"
	"errors"
	"iter"
	"strconv"
)

// Query caps (seed 001, section 6.2).
const (
	DefaultLimite = 100
	MaxLimite     = 500
	ReplayBatch   = 1000
	ReplayBatches = 100
)

// PageBytes bounds a page by size as well as by rows (SPEC 10): a page ends
// after the row that brings it to this many bytes, and gives its cursor. It
// is the largest publish body, so a page holds at least one of any stored
// record, and a page of ordinary events (500 of a few hundred bytes to a
// couple of KB) is still cut by limite alone. The audit trail's
// AuditPageBytes is the same size.
const PageBytes = 1 << 20

// ChunkBytes bounds one read of the store while a page or a replay is
// written out: a request holds one chunk (plus the row that crossed it) in
// memory, not its page, and gives its pooled connection back between
// chunks, so a slow reader pins neither memory nor the read pool.
const ChunkBytes = 256 << 10

// PageLog is the log as the read side uses it: reads that stop early by
// size, so that pages and replays stream instead of being loaded whole.
type PageLog interface {
	EventLog
	// EventChunk returns up to f.Limite records matching f in its order,
	// skipping f.Deslocamento, and stops early, at least one row in, once
	// their sizes (Event.Size) reach maxBytes; cut reports that early stop
	// (more rows may follow).
	EventChunk(ctx context.Context, f EventFilter, maxBytes int) (rows []Event, cut bool, err error)
	// CountMatching counts the records matching f's filters.
	CountMatching(ctx context.Context, f EventFilter) (int, error)
}

// Queries serves the read side of the log: queries, traces, replay, DLQ stats.
type Queries struct {
	Log   PageLog
	Store ConsumerStore
}

// Size is near what the record takes encoded, which is what bounds pages:
// its payload and strings as stored plus the keys and fixed-width fields.
// Escapes are not counted; the strings they could grow are a few hundred
// bytes beside a payload of up to a MiB.
func (e Event) Size() int {
	n := 240 + len(e.Payload) + len(e.EventID) + len(e.Tipo) + len(e.VersaoSchema) + len(e.Origem) +
		len(e.CorrelacaoID) + len(e.Agregado) + len(e.Solicitacao)
	if e.Autoria != nil {
		n += len(e.Autoria.ID) + len(e.Autoria.Tipo)
	}
	return n
}

// EventPage is one page of the log read from the store chunk by chunk as
// its rows are written out. Total, Limite and Deslocamento are known before
// the rows; Proximo and TruncadaPorTamanho once Rows has run to its end.
type EventPage struct {
	Total, Limite, Deslocamento int
	Proximo                     string
	TruncadaPorTamanho          bool
	// Rows yields the page's records in order; an error ends it.
	Rows iter.Seq2[Event, error]
}

// EventPage answers one page of GET /api/events as a stream; limite
// defaults to 100 and is capped at 500, and the page also ends at
// PageBytes. Its count and first chunk are read before it returns, so a
// failing store is still an error the caller can answer with a status.
func (a *Queries) EventPage(ctx context.Context, f EventFilter) (*EventPage, error) {
	f.Limite, f.Deslocamento = pageBounds(f.Limite, f.Deslocamento)
	total, err := a.Log.CountMatching(ctx, f)
	if err != nil {
		return nil, err
	}
	chunk, cut, err := a.Log.EventChunk(ctx, f, ChunkBytes)
	if err != nil {
		return nil, err
	}
	p := &EventPage{Total: total, Limite: f.Limite, Deslocamento: f.Deslocamento}
	p.Rows = func(yield func(Event, error) bool) {
		n, size := 0, 0
		var last int64
		for {
			for i, ev := range chunk {
				if !yield(ev, nil) {
					return
				}
				n, size, last = n+1, size+ev.Size(), ev.Sequence
				// A row still in hand, or a chunk the store cut, means more
				// may follow: only then is the page cut by size.
				if n < f.Limite && size >= PageBytes && (i < len(chunk)-1 || cut) {
					p.Proximo = cursorAfter(last, f.Desc)
					p.TruncadaPorTamanho = p.Proximo != ""
					return
				}
			}
			if n == f.Limite {
				p.Proximo = nextCursor(n, f.Limite, last, f.Desc)
				return
			}
			if !cut || len(chunk) == 0 {
				return // the store had no more
			}
			// The rest of the page by keyset from its last row: the offset
			// applied to the first chunk only.
			next := f
			next.Limite, next.Deslocamento = f.Limite-n, 0
			if f.Desc {
				if last <= 1 {
					return
				}
				next.SequenceFim = last - 1
			} else {
				next.SequenceInicio = last + 1
			}
			var err error
			if chunk, cut, err = a.Log.EventChunk(ctx, next, ChunkBytes); err != nil {
				yield(Event{}, err)
				return
			}
		}
	}
	return p, nil
}

// cursorAfter is the key one past last in its order, "" when none can
// follow.
func cursorAfter(last int64, desc bool) string {
	if desc {
		if last <= 1 {
			return ""
		}
		return strconv.FormatInt(last-1, 10)
	}
	return strconv.FormatInt(last+1, 10)
}

// Events returns one page whole, for callers that render it (the console):
// limite defaults to 100 and is capped at 500, and the page ends at
// PageBytes, so what it holds is bounded.
func (a *Queries) Events(ctx context.Context, f EventFilter) (Page[Event], error) {
	p, err := a.EventPage(ctx, f)
	if err != nil {
		return Page[Event]{}, err
	}
	return collect(p)
}

func collect(p *EventPage) (Page[Event], error) {
	rows := []Event{}
	for ev, err := range p.Rows {
		if err != nil {
			return Page[Event]{}, err
		}
		rows = append(rows, ev)
	}
	return Page[Event]{Linhas: rows, Total: p.Total, Limite: p.Limite, Deslocamento: p.Deslocamento,
		Proximo: p.Proximo, TruncadaPorTamanho: p.TruncadaPorTamanho}, nil
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
	if errors.Is(err, ErrNotFound) {
		return Event{}, Errorf(ENotFound, "evento não encontrado")
	}
	return ev, err
}

// TracePage streams the flow of one correlation id, in order, at most 500
// records and PageBytes; Proximo continues it as sequence_inicio of
// GET /api/events?correlacao_id=.
func (a *Queries) TracePage(ctx context.Context, correlacaoID string) (*EventPage, error) {
	id, ok := canonicalUUID(correlacaoID)
	if !ok {
		return nil, &Error{Code: EInvalid, Message: "correlacao_id inválido",
			Details: []Detail{{"/correlacaoId", "deve ser um UUID"}}}
	}
	return a.EventPage(ctx, EventFilter{CorrelacaoID: id, Limite: MaxLimite})
}

// Trace returns the flow of one correlation id whole, as TracePage bounds it.
func (a *Queries) Trace(ctx context.Context, correlacaoID string) (Page[Event], error) {
	p, err := a.TracePage(ctx, correlacaoID)
	if err != nil {
		return Page[Event]{}, err
	}
	return collect(p)
}

// Replay yields records with sequence > after, optionally of some types,
// reading the log in chunks of at most 1000 records and ChunkBytes and
// stopping after 100,000 records, so one request can neither pin a reader
// forever nor hold more than a chunk; the client continues from the last
// sequence it got.
func (a *Queries) Replay(ctx context.Context, after int64, tipos []string) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		for left := ReplayBatch * ReplayBatches; left > 0; {
			want := min(ReplayBatch, left)
			batch, cut, err := a.Log.EventsAfter(ctx, after, tipos, want, ChunkBytes)
			if err != nil {
				yield(Event{}, err)
				return
			}
			for _, ev := range batch {
				if !yield(ev, nil) {
					return
				}
			}
			if len(batch) == 0 || (len(batch) < want && !cut) {
				return
			}
			left -= len(batch)
			after = batch[len(batch)-1].Sequence
		}
	}
}

// DLQ returns counts of open entries per colonia and the latest 100 of them.
func (a *Queries) DLQ(ctx context.Context) (DLQStats, error) {
	return a.Store.DLQStats(ctx, 100)
}
