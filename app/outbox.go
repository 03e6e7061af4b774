package app

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// Delivery statuses (SPEC 6.4).
const (
	EntregaPendente    = "pendente"
	EntregaProcessando = "processando"
	EntregaEntregue    = "entregue"
	EntregaFalhou      = "falhou"
)

// Delivery is one outbox row: an event on its way to one integrator.
type Delivery struct {
	ID               int64      `json:"id,string"`
	EventID          string     `json:"event_id"`
	Integrador       string     `json:"integrador"`
	Tipo             string     `json:"tipo"`
	Agregado         string     `json:"agregado"`
	Sequencia        int64      `json:"sequencia"`
	Status           string     `json:"status"`
	Tentativas       int        `json:"tentativas"`
	ProximaTentativa time.Time  `json:"proxima_tentativa"`
	UltimoStatus     int        `json:"ultimo_status,omitempty"`
	UltimoErro       string     `json:"ultimo_erro,omitempty"`
	EntregueEm       *time.Time `json:"entregue_em,omitempty"`
	CriadoEm         time.Time  `json:"criado_em"`
	// CorpoExpurgado: the body was purged after its retention (SPEC 6.4),
	// so the row can no longer be sent, nor resent.
	CorpoExpurgado bool `json:"corpo_expurgado"`

	Corpo  []byte `json:"-"` // the envelope, sealed (Sealer.SealBody); nil once purged
	Quedas int    `json:"-"`
	// Token names the claim that leased the row (0: not leased): its
	// outcome and its renewals count only while the row is still leased by
	// that claim, not by a later one, this worker's own included.
	Token int64 `json:"-"`
	// TentativasAntes is how many attempts the row had when an operator last
	// resent it: the attempt budget counts from there, the numbering does not.
	TentativasAntes int `json:"-"`
}

// Attempt is one recorded delivery attempt.
type Attempt struct {
	EntregaID  string    `json:"entrega_id"`
	Tentativa  int       `json:"tentativa"`
	Inicio     time.Time `json:"inicio"`
	DuracaoMS  int64     `json:"duracao_ms"`
	StatusCode int       `json:"status_code,omitempty"`
	Erro       string    `json:"erro,omitempty"`
	Resposta   string    `json:"resposta,omitempty"`
	// RespostaSelada is Resposta as stored: sealed (Sealer.SealResponse).
	// The dispatcher records only this; reads open it into Resposta.
	RespostaSelada []byte `json:"-"`
}

// Outbox is what one publish enqueues, decided inside its append
// transaction so that the event and its deliveries commit together.
type Outbox struct {
	Body     []byte // the envelope, identical for every recipient
	Agregado string // the sequence key
	// Claim, when set, makes this integrator the aggregate's originator if
	// it has none yet.
	Claim string
	// NeedsOwner asks the store to look the aggregate's originator up.
	NeedsOwner bool
	// Recipients returns the integrators that receive the event, given the
	// aggregate's originator ("" when it has none).
	Recipients func(owner string) []string
}

// DeliveryResult is one finished attempt, reported back to the store in
// batches.
type DeliveryResult struct {
	ID         int64
	Worker     string
	Token      int64  // the claim's (Delivery.Token)
	Status     string // entregue, pendente (retry) or falhou
	Proxima    time.Time
	Attempt    Attempt
	UltimoErr  string
	Integrador string
	// Kind is what the row's attempt says of the receiver (the zero value:
	// it accepted).
	Kind ResultKind
}

// StateConflict is the store's answer to a change the row's state refuses
// (a resend, a "tentar agora"): the facts, which the service words for the
// person who asked (as River's JobSetStateIfRunning answers with the job).
type StateConflict struct {
	Status string // the row's status when the change was refused
	Purged bool   // its body was purged: a dead letter past its retention
}

func (e *StateConflict) Error() string {
	return fmt.Sprintf("delivery is %s (body purged: %v)", e.Status, e.Purged)
}

// TooMany is a store's refusal of a change over more rows than Limit.
type TooMany struct{ Limit int }

func (e *TooMany) Error() string { return fmt.Sprintf("more than %d rows", e.Limit) }

// ResultKind is what one finished row says of its receiver, which the
// breaker, the failing period and the health panel count.
type ResultKind int

const (
	// ResultAccepted: a 2xx. It ends the integrator's failing period.
	ResultAccepted ResultKind = iota
	// ResultRefused: an HTTP answer that is not 2xx. It starts or extends
	// the failing period.
	ResultRefused
	// ResultNoAnswer: no HTTP answer (connection refused or reset, TLS
	// failure, timeout): a failure, and evidence against the endpoint
	// itself, whichever event it carried.
	ResultNoAnswer
	// ResultUnsent: the request could not be put on the wire (its body was
	// purged, or a header value is not one HTTP allows). Its attempt is
	// recorded, but it says nothing of the receiver: neither the breaker
	// nor the failing period counts it.
	ResultUnsent
	// ResultDeferred: the row was claimed but never sent (its integrator's
	// circuit opened, or it was disabled, meanwhile); it goes back to
	// pendente at Proxima with no attempt recorded.
	ResultDeferred
)

// Failed says the receiver did not accept the request.
func (k ResultKind) Failed() bool { return k == ResultRefused || k == ResultNoAnswer }

// OfReceiver says the row's attempt tells something of the receiver: it
// reached the wire.
func (k ResultKind) OfReceiver() bool { return k != ResultUnsent && k != ResultDeferred }

// Leased is a row a renewal kept leased, and the claim it belongs to.
type Leased struct{ ID, Token int64 }

// Quota is how many rows a claim may take for one integrator.
type Quota struct {
	Integrador string
	N          int
}

// DeliveryFilter selects deliveries for GET /api/entregas.
type DeliveryFilter struct {
	Integrador, Status, Tipo, Agregado, EventID string // Tipo may be a family pattern (TypeFamily)
	IDInicio, IDFim                             int64  // an id range, both ends included
	// CriadoInicio and CriadoFim bound when the rows were enqueued, both
	// ends included; zero is no bound.
	CriadoInicio, CriadoFim time.Time
	Desc                    bool // newest first
	Limite, Deslocamento    int
}

// OutboxStore keeps deliveries.
type OutboxStore interface {
	// ClaimDeliveries leases to worker, in one transaction, up to N due rows
	// of each integrator in quotas, oldest due first, keeping each aggregate
	// in order: a row is taken only when no row of its (integrator,
	// aggregate) is in flight and no earlier one is due or waiting for its
	// first attempt.
	ClaimDeliveries(ctx context.Context, worker string, now time.Time, lease time.Duration, quotas []Quota) ([]Delivery, error)
	// FinishDeliveries records outcomes and each integrator's failing period,
	// returning when each integrator that failed in the batch started failing,
	// and in the same transaction claims by quotas (none when nil): one
	// commit, not two, per round of the dispatcher.
	FinishDeliveries(ctx context.Context, results []DeliveryResult, worker string, now time.Time, lease time.Duration,
		quotas []Quota) (map[string]time.Time, []Delivery, error)
	// RenewDeliveries moves the end of worker's live leases to lease after
	// the store's now, and says which rows (and claims) it renewed. A lease
	// already ended is the reaper's, never renewed.
	RenewDeliveries(ctx context.Context, worker string, now time.Time, lease time.Duration) ([]Leased, error)
	// ReapDeliveries returns rows whose lease expired to pendente, or to
	// falhou once they took a worker down maxQuedas times.
	ReapDeliveries(ctx context.Context, now time.Time, maxQuedas int) (int, error)
	ReleaseDeliveries(ctx context.Context, worker string) error
	// ReconcileDeliveries returns to pendente, counting no queda, the rows
	// leased to worker but not in held, the rows it holds (claimed and not
	// yet finished): after a claim or finish whose commit it could not
	// confirm, the worker is alive, but rows that commit leased it may
	// have no one to send them.
	ReconcileDeliveries(ctx context.Context, worker string, held []int64) (int, error)
	PurgeDelivered(ctx context.Context, before time.Time) (int, error)
	// PurgeDeadLetters drops the bodies of rows that dead-lettered before
	// before: from then on they say so, and a resend is refused.
	PurgeDeadLetters(ctx context.Context, before time.Time) (int, error)
	// NextDue says when the earliest pending row of these integrators that
	// is not yet due at after comes due.
	NextDue(ctx context.Context, integrators []string, after time.Time) (time.Time, bool, error)
	Deliveries(ctx context.Context, f DeliveryFilter) ([]Delivery, int, error)
	Delivery(ctx context.Context, id int64) (Delivery, []Attempt, error)
	// Resend puts dead letters back to pendente, same body and sequence.
	// These three changes write their audit entry (nil: none) in their own
	// transaction, with the count of rows for its CountAs.
	Resend(ctx context.Context, id int64, now time.Time, audit *AuditEntry) error
	// ResendAll resends the integrator's rows in status that still have
	// their body, and counts those it left because theirs was purged.
	ResendAll(ctx context.Context, integrador, status string, now time.Time, audit *AuditEntry) (resent, purged int, err error)
	// Redeliver puts back in line, as new attempts of the same rows, the
	// integrator's delivered and dead rows in r's range that still have
	// their body, and counts those whose body was purged. A range of more
	// than MaxRedeliver rows is refused whole.
	Redeliver(ctx context.Context, integrador string, r Redelivery, now time.Time, audit *AuditEntry) (resent, purged int, err error)
	// DueNow makes pending rows due at now: the integrator's (id 0), or the
	// one row id of it, which must be pendente (EConflict otherwise).
	DueNow(ctx context.Context, integrador string, id int64, now time.Time, audit *AuditEntry) (int, error)
	AuditLog
}

// ClearBodies is the store's side of the upgrade that seals the bodies an
// earlier version stored in clear (SealStoredBodies).
type ClearBodies interface {
	// ClearBodiesPending says whether the upgrade has not finished.
	ClearBodiesPending(ctx context.Context) (bool, error)
	// SealClearBodies seals the next batch of at most n bodies, in one
	// transaction that also records how far it got, so a restart resumes
	// there. seal returns a body's sealed form, or nil to leave it (it is
	// sealed already). done is true once no body is left to look at.
	SealClearBodies(ctx context.Context, n int, seal func(eventID string, body []byte) []byte) (sealed int, done bool, err error)
	// SealClearResponses does for the receivers' answers kept with each
	// attempt what SealClearBodies does for bodies, with its own cursor.
	SealClearResponses(ctx context.Context, n int, seal func(entregaID, resposta string) []byte) (sealed int, done bool, err error)
	// ScrubClearBodies rewrites the database file and empties the WAL, so
	// that no free page keeps a clear body or answer, and marks the upgrade
	// finished.
	ScrubClearBodies(ctx context.Context) error
}

// sortedPayload re-encodes a decoded payload with its keys sorted, as the
// envelope requires.
func sortedPayload(doc map[string]any) (json.RawMessage, error) {
	return appendJSONValue(nil, doc)
}

// outboxFor routes ev by its type's audience (SPEC 6.2), narrowed by each
// integrator's eventos patterns, and says the cadastro version it read. It
// returns a nil Outbox when no integrator can receive the event, which
// spares building the envelope.
func (s *Integrators) outboxFor(ev Event, audiencia string) (*Outbox, int64) {
	if s == nil {
		return nil, 0
	}
	s.mu.RLock()
	version := s.version
	eligible := make(map[string]bool)
	for _, in := range s.all {
		if in.Ativo && (in.CallbackURL != "" || in.Entrega == EntregaSessao) && in.Wants(ev.Tipo) {
			eligible[in.ID] = true
		}
	}
	s.mu.RUnlock()
	return route(ev, audiencia, eligible), version
}

// route is outboxFor's choice among the eligible integrators.
func route(ev Event, audiencia string, eligible map[string]bool) *Outbox {
	if len(eligible) == 0 {
		return nil
	}
	var causer string
	if ev.Autoria != nil && ev.Autoria.Tipo == "integrador" {
		causer = ev.Autoria.ID
	}
	out := &Outbox{Agregado: ev.Agregado}
	if out.Agregado == "" {
		// Without an aggregate an event is its own sequence of one.
		out.Agregado = "evento:" + ev.EventID
	}
	pick := func(ids ...string) []string {
		var r []string
		for _, id := range ids {
			if id != "" && eligible[id] && !slices.Contains(r, id) {
				r = append(r, id)
			}
		}
		return r
	}
	switch audiencia {
	case AudienciaTodos:
		all := make([]string, 0, len(eligible))
		for id := range eligible {
			all = append(all, id)
		}
		slices.Sort(all)
		out.Recipients = func(string) []string { return all }
	case AudienciaSolicitante:
		r := pick(causer)
		if len(r) == 0 {
			return nil
		}
		out.Recipients = func(string) []string { return r }
	case AudienciaOriginador:
		if ev.Agregado != "" {
			out.Claim = causer
			out.NeedsOwner = true
		}
		// The originator, and the causer's own echo.
		out.Recipients = func(owner string) []string { return pick(owner, causer) }
	default:
		return nil
	}
	return out
}

// Redelivery is the range of a gap repair (SPEC 8c): one aggregate from a
// sequence on, or every row enqueued from Desde to Ate, both included.
type Redelivery struct {
	Agregado       string
	SequenciaDesde int64
	Desde, Ate     time.Time
}

// MaxRedeliver bounds one gap repair: a CAD rebuilding a long history asks
// in windows.
const MaxRedeliver = 10_000
