package app

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"
)

// Autoria says who caused an event.
type Autoria struct {
	ID   string `json:"id"`
	Tipo string `json:"tipo"` // usuario | integrador | sistema
}

// UnmarshalJSON decodes strictly, as the envelope around it is decoded,
// so that an unknown or wrongly typed field is reported at /autoria/...:
// encoding/json names only the key of an unknown field, wherever it is.
func (a *Autoria) UnmarshalJSON(b []byte) error {
	type fields Autoria // without this method
	return decodeNested(b, (*fields)(a), "/autoria")
}

// Event is a record of the log (EventoConsultado). Payload is the redacted
// copy when read from the log, the full one when handed to a live consumer.
type Event struct {
	Sequence     int64           `json:"sequence_number,string"`
	EventID      string          `json:"event_id"`
	Tipo         string          `json:"tipo"`
	VersaoSchema string          `json:"versao_schema"`
	Timestamp    time.Time       `json:"timestamp"`
	Origem       string          `json:"origem"`
	CorrelacaoID string          `json:"correlacao_id"`
	Agregado     string          `json:"agregado,omitempty"`
	Autoria      *Autoria        `json:"autoria,omitempty"`
	Solicitacao  string          `json:"solicitacao,omitempty"`
	Payload      json.RawMessage `json:"payload"`
	CriadoEm     time.Time       `json:"criado_em"`
}

// PublishRequest is the publish contract (PublicarEventoDto). Payload stays
// raw so the service can tell null, arrays and strings from objects.
type PublishRequest struct {
	Tipo         string          `json:"tipo"`
	Payload      json.RawMessage `json:"payload"`
	Origem       string          `json:"origem"`
	EventID      string          `json:"event_id,omitempty"`
	VersaoSchema string          `json:"versao_schema,omitempty"`
	Timestamp    string          `json:"timestamp,omitempty"`
	CorrelacaoID string          `json:"correlacao_id,omitempty"`
	Agregado     string          `json:"agregado,omitempty"`
	Autoria      *Autoria        `json:"autoria,omitempty"`
	Solicitacao  string          `json:"solicitacao,omitempty"`
}

// Appended is one event the store committed, with the full payload kept in
// memory for live consumers (the log holds only the redacted one).
type Appended struct {
	Event       Event
	FullPayload json.RawMessage
	Deliveries  int // outbox rows enqueued with it
}

// TypeFamily reads a type filter that is a family pattern ("jornada:*",
// as the integrator form teaches): the types from lo (included) to hi
// (excluded) are the family's. ok is false for an exact type.
func TypeFamily(tipo string) (lo, hi string, ok bool) {
	fam, found := strings.CutSuffix(tipo, ":*")
	if !found || fam == "" || strings.Contains(fam, ":") {
		return "", "", false
	}
	return fam + ":", fam + ";", true // ';' follows ':' in byte order
}

// TypeMatches says whether tipo passes the filter f (exact or family).
func TypeMatches(f, tipo string) bool {
	if lo, hi, ok := TypeFamily(f); ok {
		return tipo >= lo && tipo < hi
	}
	return f == "" || f == tipo
}

// EventFilter selects log records; zero values mean "no filter". Tipo may
// be a family pattern (TypeFamily).
type EventFilter struct {
	Tipo            string
	Origem          string
	CorrelacaoID    string
	Agregado        string
	TimestampInicio time.Time
	TimestampFim    time.Time
	SequenceInicio  int64
	SequenceFim     int64
	// Desc orders newest first (ordem=desc); the default is oldest first.
	Desc         bool
	Limite       int
	Deslocamento int
}

// Page is one page of a query, in the wire shape of the audit routes.
type Page[T any] struct {
	Linhas       []T `json:"linhas"`
	Total        int `json:"total"`
	Limite       int `json:"limite"`
	Deslocamento int `json:"deslocamento"`
	// Proximo continues a full page by keyset, so that paging while rows
	// arrive neither repeats nor skips one: pass it as sequence_inicio
	// (events, oldest first) or sequence_fim (newest first), id_inicio or
	// id_fim for deliveries, with the same filters and ordem.
	Proximo string `json:"proximo,omitempty"`
	// TruncadaPorTamanho says the page stopped before limite because its
	// rows reached PageBytes (SPEC 10); Proximo continues it as any other.
	TruncadaPorTamanho bool `json:"truncada_por_tamanho,omitempty"`
}

// nextCursor is a full page's Proximo: one past its last key, in its order.
func nextCursor(n, limite int, last int64, desc bool) string {
	switch {
	case n < limite || n == 0:
		return ""
	case desc && last <= 1:
		return ""
	case desc:
		return strconv.FormatInt(last-1, 10)
	}
	return strconv.FormatInt(last+1, 10)
}

// Pending is one validated event on its way into the log.
type Pending struct {
	Event  Event           // its Payload already redacted
	Full   json.RawMessage // the payload as published, for live consumers
	Outbox *Outbox         // its deliveries; nil routes it nowhere
	// Cadastro, when set, is the integrators' cadastro version Outbox was
	// decided at: the store refuses the event with ErrStaleCadastro when it
	// holds a later one, so that an event published after an integrator was
	// created on another replica is never routed without it (issue 27).
	Cadastro *int64
	// Audit, when set, is written in the batch's transaction if the event
	// is new: a command's outcome carries the command's audit entry.
	Audit *AuditEntry
	// Decides makes the whole batch conditional on this event: when its
	// event_id is already stored, nothing of the batch is inserted, and
	// only this entry's Stored is filled (with the stored record). A
	// command's outcome decides: stored, it says the command ran, and
	// another run's domain events, which have fresh ids, must not follow it.
	Decides bool
	// Expect makes the whole batch conditional on these aggregates being
	// as a command's handler read them: when an event was appended to one
	// since, nothing of the batch is stored and Append fails with
	// ErrAggregateMoved (after Decides: a batch decided by a stored event
	// answers it instead).
	Expect []Expectation
}

// RoutedAt is the oldest cadastro version some event of batch was routed
// by (Pending.Cadastro), and whether any was: a store that holds a later
// version refuses the batch with ErrStaleCadastro.
func RoutedAt(batch []Pending) (oldest int64, routed bool) {
	for _, p := range batch {
		if p.Cadastro != nil && (!routed || *p.Cadastro < oldest) {
			oldest, routed = *p.Cadastro, true
		}
	}
	return oldest, routed
}

// Expectation is an aggregate as a command read it: Ultima is the
// sequence_number of its last event then, 0 for none.
type Expectation struct {
	Agregado string
	Ultima   int64
}

// ErrAggregateMoved is Append's refusal of a batch whose Expect no longer
// holds: the command runs again on what is stored now.
var ErrAggregateMoved = errors.New("an aggregate the command read has new events")

// Stored is what the log answers for one Pending: the stored record and
// whether it was new.
type Stored struct {
	Event   Event
	Created bool
}

// EventLog is the part of the store that keeps events.
type EventLog interface {
	// Append inserts the batch, each event with its outbox rows, all or none:
	// a command's events and its outcome commit together. An event whose
	// event_id exists is not inserted again; its stored record is returned.
	// The store commits in a group transaction and calls the commit hook
	// before answering, so live consumers see events in sequence order.
	Append(ctx context.Context, batch []Pending) ([]Stored, error)
	Event(ctx context.Context, eventID string) (Event, error)
	Events(ctx context.Context, f EventFilter) ([]Event, int, error)
	// EventsAfter returns up to limit records with sequence > after, in
	// order, optionally only of the given types, and stops early, at least
	// one row in, once their sizes (Event.Size) reach maxBytes; cut reports
	// that early stop (more rows may follow). Every reader that follows the
	// log (replay, consumers, live tails) passes ChunkBytes, so no batch of
	// large events is ever held whole.
	EventsAfter(ctx context.Context, after int64, tipos []string, limit, maxBytes int) (rows []Event, cut bool, err error)
	MaxSequence(ctx context.Context) (int64, error)
	CountEvents(ctx context.Context) (int64, error)
}
