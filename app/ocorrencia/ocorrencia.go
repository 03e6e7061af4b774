// Package ocorrencia is the built-in ocorrência plugin (SPEC 7): the command
// handlers that register ocorrências, dispatch resources and move their
// statuses, the projection of GET /api/ocorrencias/{id} and the read model
// of GET /api/ocorrencias.
//
// The log is the plugin's state. The projection of an ocorrência is the
// fold of the events of its aggregate (ocorrencia:<id>), read on demand
// through the read pool: a command's events are stored only if no event
// was appended to the ocorrência since it read it (app.Commands,
// app.ReadAggregate), so the state a command checks is exactly the state
// its events follow from. The
// list, which needs filters and paging over every ocorrência, reads a read
// model instead (readmodel.go): a copy of those folds kept by an in-process
// consumer, which may lag the log by a moment but never decides anything.
// The log keeps the redacted payloads, so both hold only what redaction
// keeps: ids, natureza, statuses and resources, never descricao or endereco.
package ocorrencia

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/google/uuid"

	"geohub/app"
)

// Plugin is the origem of the plugin's events.
const Plugin = "ocorrencia"

// The event types the plugin publishes (registered by app.RegisterBuiltinTypes).
const (
	TipoRegistrada          = "ocorrencia:registrada"
	TipoDespachada          = "ocorrencia:despachada"
	TipoDespachoMudouStatus = "ocorrencia:despacho-mudou-status"
	TipoMudouStatus         = "ocorrencia:mudou-status"
)

// Ocorrência statuses.
const (
	Aberta        = "aberta"
	EmAtendimento = "em_atendimento"
	Encerrada     = "encerrada"
)

// Despacho statuses.
const (
	EmDeslocamento = "em_deslocamento"
	NoLocal        = "no_local"
	Liberado       = "liberado"
	Cancelado      = "cancelado"
)

// Recurso is the dispatched resource (a vehicle, a team).
type Recurso struct {
	Identificador string `json:"identificador"`
}

// Despacho is one resource sent to an ocorrência, with its own status.
type Despacho struct {
	ID           string  `json:"id"`
	OcorrenciaID string  `json:"ocorrenciaId"`
	Recurso      Recurso `json:"recurso"`
	Status       string  `json:"status"`
}

func (d Despacho) active() bool { return d.Status == EmDeslocamento || d.Status == NoLocal }

// MaxDespachos bounds the despachos of one ocorrência (SPEC 10): each
// adds to every read of it, and one key dispatching without end made a
// database of 1.28 GB (issue 26, M2). A large fire takes a few dozen.
const MaxDespachos = 100

// Answer is what a command answers and its outcome records: the
// ocorrência's own fields and, for the two despacho commands, the despacho
// it created or changed. Never the list of despachos, which would make
// every answer as large as the ocorrência has grown (SPEC 10): GET
// /api/ocorrencias/{id} gives it.
type Answer struct {
	ID       string    `json:"id"`
	Natureza string    `json:"natureza"`
	Status   string    `json:"status"`
	Versao   int       `json:"versao"`
	Despacho *Despacho `json:"despacho,omitempty"`
}

func (o Ocorrencia) answer(d *Despacho) Answer {
	return Answer{ID: o.ID, Natureza: o.Natureza, Status: o.Status, Versao: o.Versao, Despacho: d}
}

// Ocorrencia is the projection: the ocorrência and the state of EACH
// despacho. Versao counts the events folded into it, so of two copies the
// higher versao is the newer. Despacho is set only in an Ocorrencia
// decoded from a command's Answer: the one it created or changed.
type Ocorrencia struct {
	ID        string     `json:"id"`
	Natureza  string     `json:"natureza"`
	Status    string     `json:"status"`
	Versao    int        `json:"versao"`
	Despachos []Despacho `json:"despachos"`
	Despacho  *Despacho  `json:"despacho,omitempty"`

	originador string // the integrator that registered it, "" when none did
	// What the read model keeps beside the projection: the registration's
	// sequence and time, and the last event folded.
	registradaSeq, ultimaSeq   int64
	registradaEm, atualizadaEm time.Time
}

// Originador is the integrator that registered the ocorrência.
func (o Ocorrencia) Originador() string { return o.originador }

// RegistradaEm is when the ocorrência was registered.
func (o Ocorrencia) RegistradaEm() time.Time { return o.registradaEm }

func (o *Ocorrencia) despacho(id string) (int, bool) {
	for i, d := range o.Despachos {
		if d.ID == id {
			return i, true
		}
	}
	return 0, false
}

// apply folds one event of the ocorrência id's aggregate into the
// projection and reports whether it counted. Only the plugin publishes
// these types there (app.CheckExternalPublish closes them to producers);
// the fold still takes only the first registration, of this very id, and
// each despacho once, so no event can re-point or duplicate what it built.
func (o *Ocorrencia) apply(id string, ev app.Event) bool {
	switch ev.Tipo {
	case TipoRegistrada:
		var p struct{ ID, Natureza, Status string }
		if json.Unmarshal(ev.Payload, &p) != nil || o.ID != "" || p.ID != id {
			return false
		}
		o.ID, o.Natureza, o.Status = p.ID, p.Natureza, p.Status
		if ev.Autoria != nil && ev.Autoria.Tipo == "integrador" {
			o.originador = ev.Autoria.ID
		}
	case TipoDespachada:
		var p struct{ Despacho Despacho }
		if json.Unmarshal(ev.Payload, &p) != nil || o.ID == "" || p.Despacho.OcorrenciaID != id {
			return false
		}
		if _, dup := o.despacho(p.Despacho.ID); dup {
			return false
		}
		o.Despachos = append(o.Despachos, p.Despacho)
	case TipoDespachoMudouStatus:
		var p struct{ ID, Para string }
		if json.Unmarshal(ev.Payload, &p) != nil {
			return false
		}
		i, ok := o.despacho(p.ID)
		if !ok {
			return false
		}
		o.Despachos[i].Status = p.Para
	case TipoMudouStatus:
		var p struct{ Para string }
		if json.Unmarshal(ev.Payload, &p) != nil || o.ID == "" {
			return false
		}
		o.Status = p.Para
	default:
		return false
	}
	if ev.Tipo == TipoRegistrada {
		o.registradaSeq, o.registradaEm = ev.Sequence, ev.Timestamp
	}
	o.ultimaSeq, o.atualizadaEm = ev.Sequence, ev.Timestamp
	o.Versao++
	return true
}

// Service is the plugin: command handlers, the projection and the read
// model of the list.
type Service struct {
	Commands  *app.Commands
	Publisher *app.Publisher // validates payloads before a command commits to them
	Log       app.EventLog
	ReadModel ReadModel
	// Changed is notified after the read model took in new events: the
	// console's live list wakes on it. New makes it the services'
	// ConsumedChanged, so that on a replica that does not lead, where the
	// consumer does not run, the leader's folds wake it too.
	Changed *app.Notifier
	// BeforeProject, when set, runs before each fold of the read model and
	// its error fails it: how tests make the consumer fail for real.
	BeforeProject func(ctx context.Context, ev app.Event) error
}

// New builds the plugin on the services and subscribes its read model to
// their consumers. Package app cannot build it (the plugin imports app), so
// it is called between app.New and Services.Start; set BeforeProject, when
// wanted, before Start too.
func New(svc *app.Services, rm ReadModel) *Service {
	s := &Service{Commands: svc.Commands, Publisher: svc.Publisher, Log: svc.Store, ReadModel: rm,
		Changed: svc.ConsumedChanged}
	s.Subscribe(svc.Consumers)
	return s
}

// pageSize is how many events of one aggregate a fold reads per query.
const pageSize = 500

// load folds the ocorrência's events. It answers app.ErrNotFound when the
// id is not an ocorrência.
func (s *Service) load(ctx context.Context, id string) (Ocorrencia, error) {
	parsed, err := uuid.Parse(id)
	if err != nil || len(id) != 36 {
		return Ocorrencia{}, app.ErrNotFound
	}
	id = parsed.String()
	f := app.EventFilter{Agregado: "ocorrencia:" + id, Limite: pageSize}
	o := Ocorrencia{Despachos: []Despacho{}}
	// A command decides on what this read: its outcome is stored only if
	// no event was appended to the ocorrência since (app.Commands).
	read := app.ReadAggregate(ctx, f.Agregado)
	defer func() { read(max(f.SequenceInicio-1, 0)) }()
	for {
		evs, _, err := s.Log.Events(ctx, f)
		if err != nil {
			return Ocorrencia{}, err
		}
		for _, ev := range evs {
			o.apply(id, ev)
			f.SequenceInicio = ev.Sequence + 1
		}
		if len(evs) < pageSize {
			break
		}
	}
	if o.ID == "" {
		return Ocorrencia{}, app.ErrNotFound
	}
	return o, nil
}

// Get returns the projection. An integrator (integrador != "") sees only
// the ocorrências it registered; another's answers 404, as one that does
// not exist, so ids do not leak. Operators pass "" and see every one.
func (s *Service) Get(ctx context.Context, id, integrador string) (Ocorrencia, error) {
	o, err := s.load(ctx, id)
	if err == nil && integrador != "" && o.originador != integrador {
		err = app.ErrNotFound
	}
	if errors.Is(err, app.ErrNotFound) {
		return Ocorrencia{}, app.Errorf(app.ENotFound, "ocorrência %s não encontrada", id)
	}
	return o, err
}

// owned loads the ocorrência a command acts on: only its originator may.
func (s *Service) owned(ctx context.Context, cmd app.Command, id string) (Ocorrencia, error) {
	return s.Get(ctx, id, cmd.Integrador)
}

// invalid builds a 422 with one finding.
func invalid(path, msg string) error {
	return &app.Error{Code: app.EInvalid, Message: "comando inválido", Details: []app.Detail{{Caminho: path, Mensagem: msg}}}
}

// conflict builds the 409 of an invalid transition, with its reason.
func conflict(format string, args ...any) error {
	return app.Errorf(app.EConflict, format, args...)
}

// underPayload rewrites schema findings located under /payload to the
// command body's own paths. A finding elsewhere (the registry's own state)
// is not the caller's fault: see app.RegistryRefused.
func underPayload(err error) error {
	e, ok := err.(*app.Error)
	if !ok || e.Code != app.EInvalid {
		return err
	}
	for i, d := range e.Details {
		if !strings.HasPrefix(d.Caminho, "/payload/") {
			return app.RegistryRefused(err)
		}
		e.Details[i].Caminho = strings.TrimPrefix(d.Caminho, "/payload")
	}
	e.Message = "comando inválido"
	return e
}
