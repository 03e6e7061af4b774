package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// MaxPayloadBytes caps one event's payload.
const MaxPayloadBytes = 1 << 20

// DefaultVersao is the schema version of a publish that names none.
const DefaultVersao = "1.0.0"

// Publisher runs the publish contract (SPEC 4.1) in its order: payload shape,
// defaults, formats, registry, schema, redaction, durable append; then the
// store's commit hook hands the full payload to live consumers.
type Publisher struct {
	Log          EventLog
	Registry     *Registry
	Integrators  *Integrators // routes events to the outbox; nil routes nothing
	RedactionKey []byte
	Now          func() time.Time
	Metrics      *Metrics
}

// Publish validates, redacts and appends one event, and returns the stored
// (redacted) record: the same answer for a new event and for a repeat. created
// is false when the event_id already existed; nothing is emitted again then.
// Live consumers get the full payload through the store's commit hook.
func (p *Publisher) Publish(ctx context.Context, req PublishRequest) (ev Event, created bool, err error) {
	var stored []Stored
	for try := 0; ; try++ {
		pending, err := p.prepare(req)
		if err != nil {
			return p.existingOr(ctx, req, err)
		}
		stored, err = p.appendAll(ctx, []Pending{pending})
		if p.rerouted(ctx, err, try) {
			continue
		}
		if err != nil {
			return Event{}, false, unrouted(err)
		}
		break
	}
	if !stored[0].Created && !sameSender(stored[0].Event, req) {
		return Event{}, false, errIDTaken()
	}
	return stored[0].Event, stored[0].Created, nil
}

// PublishExternal is the publish of everyone but the built-in plugins: the
// API's POST /api/events, whatever the token's role. It refuses what is the
// plugins' own (CheckExternalPublish) before anything else runs; the plugins
// publish through Commands, which calls PublishAudited.
func (p *Publisher) PublishExternal(ctx context.Context, req PublishRequest) (Event, bool, error) {
	if err := CheckExternalPublish(req); err != nil {
		return Event{}, false, err
	}
	return p.Publish(ctx, req)
}

// sameSender says whether a repeat of an event_id is the publish that
// stored it (same tipo and origem) and may see its record: a retry is; a
// producer that learnt another event's id and sends its own publish with
// it is not.
func sameSender(stored Event, req PublishRequest) bool {
	return stored.Tipo == req.Tipo && stored.Origem == req.Origem
}

func errIDTaken() error {
	return &Error{Code: EConflict, Message: "event_id já pertence a outro evento",
		Details: []Detail{{"/event_id", "já usado por um evento de outro tipo ou origem"}}}
}

// PublishAll validates every request, then appends them all in one durable
// transaction, or none: a command's domain events and its outcome are one
// fact. Any invalid request fails the whole batch before anything is written.
func (p *Publisher) PublishAll(ctx context.Context, reqs []PublishRequest) ([]Stored, error) {
	return p.publishBatch(ctx, reqs, func([]Pending) {})
}

// rerouted says whether an append refused for an older cadastro should be
// prepared and appended again, after reading the cadastro: the refusal
// means another replica changed it since this one last looked. A few
// tries, for a cadastro changing while this one reads it.
func (p *Publisher) rerouted(ctx context.Context, err error, try int) bool {
	if !errors.Is(err, ErrStaleCadastro) || try >= 3 {
		return false
	}
	return p.Integrators.Load(ctx) == nil
}

// unrouted is the answer to a publish still refused for an older cadastro
// after its tries: a 503, which the client retries with the same event_id.
func unrouted(err error) error {
	if errors.Is(err, ErrStaleCadastro) {
		return &Error{Code: EUnavailable, Err: err,
			Message: "o cadastro de integradores mudou durante a publicação; envie de novo com o mesmo event_id"}
	}
	return err
}

func (p *Publisher) prepareAll(reqs []PublishRequest) ([]Pending, error) {
	batch := make([]Pending, len(reqs))
	for i, req := range reqs {
		var err error
		if batch[i], err = p.prepare(req); err != nil {
			return nil, fmt.Errorf("publish %s: %w", req.Tipo, err)
		}
	}
	return batch, nil
}

// PublishAudited is a command's publish: PublishAll with audit written in
// the same transaction, decided by the last request's event (a command's
// outcome is last). When that event is already stored, nothing of the
// batch is written (see Pending.Decides) and only the last Stored is
// filled, not Created: the command ran before, and its domain events are
// in the log. Otherwise it is stored only while the aggregates in expect
// are as the command read them (ErrAggregateMoved).
func (p *Publisher) PublishAudited(ctx context.Context, reqs []PublishRequest, audit *AuditEntry, expect []Expectation) ([]Stored, error) {
	return p.publishBatch(ctx, reqs, func(batch []Pending) {
		if len(batch) > 0 {
			batch[len(batch)-1].Audit = audit
			batch[len(batch)-1].Decides = true
			batch[len(batch)-1].Expect = expect
		}
	})
}

// publishBatch prepares reqs, lets decorate mark the batch, and appends it,
// routing it again when the store holds a newer cadastro.
func (p *Publisher) publishBatch(ctx context.Context, reqs []PublishRequest, decorate func([]Pending)) ([]Stored, error) {
	for try := 0; ; try++ {
		batch, err := p.prepareAll(reqs)
		if err != nil {
			return nil, err
		}
		decorate(batch)
		stored, err := p.appendAll(ctx, batch)
		if p.rerouted(ctx, err, try) {
			continue
		}
		return stored, unrouted(err)
	}
}

// Validate runs every publish step but the append: a command handler checks
// its event before it decides on it.
func (p *Publisher) Validate(req PublishRequest) error {
	_, err := p.prepare(req)
	return err
}

func (p *Publisher) appendAll(ctx context.Context, batch []Pending) ([]Stored, error) {
	stored, err := p.Log.Append(ctx, batch)
	if err != nil {
		return nil, err
	}
	for _, s := range stored {
		if s.Created {
			p.Metrics.published(s.Event.Tipo)
		}
	}
	return stored, nil
}

// prepare runs the publish steps up to the append: payload shape, defaults,
// formats, registry, schema, redaction and routing.
func (p *Publisher) prepare(req PublishRequest) (Pending, error) {
	// Steps 1 to 5 report every finding at once, each at its path; a step
	// runs as far as what it needs is sound (the schema needs the type).
	var findings invalid

	// 1. The payload is a non-null JSON object.
	raw := bytes.TrimSpace(req.Payload)
	if len(raw) > MaxPayloadBytes {
		return Pending{}, Errorf(ETooLarge, "payload maior que %d bytes", MaxPayloadBytes)
	}
	if err := checkDepth(raw, MaxDepth, "/payload"); err != nil {
		return Pending{}, err
	}
	object := len(raw) > 0 && raw[0] == '{'
	if !object {
		findings.add("payload deve ser um objeto não nulo", Detail{"/payload", "deve ser um objeto JSON"})
	}
	var missing []Detail
	if req.Tipo == "" {
		missing = append(missing, Detail{"/tipo", "obrigatório"})
	}
	if strings.TrimSpace(req.Origem) == "" {
		missing = append(missing, Detail{"/origem", "obrigatório"})
	} else if len(req.Origem) > 100 {
		missing = append(missing, Detail{"/origem", "no máximo 100 caracteres"})
	}
	findings.add("campos obrigatórios ausentes", missing...)

	// 2. Defaults. 3. Formats.
	now := p.Now().UTC()
	ev := Event{
		Tipo:         req.Tipo,
		VersaoSchema: req.VersaoSchema,
		Origem:       req.Origem,
		Agregado:     req.Agregado,
		Autoria:      req.Autoria,
		Solicitacao:  req.Solicitacao,
	}
	if ev.Autoria == nil {
		// Every envelope names who caused it (SPEC 6.3): without a person or
		// an integrator, the system that published it, by its origem (a
		// built-in plugin's name). The API fills in the token's name first.
		ev.Autoria = &Autoria{Tipo: "sistema", ID: strings.TrimSpace(req.Origem)}
	}
	var bad []Detail
	if req.EventID == "" {
		ev.EventID = newID()
	} else if id, ok := canonicalUUID(req.EventID); ok {
		ev.EventID = id
	} else {
		bad = append(bad, Detail{"/event_id", "deve ser um UUID"})
	}
	if ev.VersaoSchema == "" {
		ev.VersaoSchema = DefaultVersao
	}
	if req.Timestamp == "" {
		ev.Timestamp = now
	} else if ts, err := time.Parse(time.RFC3339Nano, req.Timestamp); err == nil {
		ev.Timestamp = ts.UTC()
	} else {
		bad = append(bad, Detail{"/timestamp", "deve ser uma data RFC 3339 (ex.: 2026-10-31T12:04:11Z)"})
	}
	if req.CorrelacaoID == "" {
		ev.CorrelacaoID = ev.EventID
	} else if id, ok := canonicalUUID(req.CorrelacaoID); ok {
		ev.CorrelacaoID = id
	} else {
		bad = append(bad, Detail{"/correlacao_id", "deve ser um UUID"})
	}
	if req.Solicitacao != "" {
		if id, ok := canonicalUUID(req.Solicitacao); ok {
			ev.Solicitacao = id
		} else {
			bad = append(bad, Detail{"/solicitacao", "deve ser o UUID (x-solicitacao-id) do comando"})
		}
	}
	if strings.TrimSpace(req.Origem) != "" {
		if d := checkIdentifier("/origem", req.Origem); d != nil {
			bad = append(bad, *d)
		}
	}
	if req.Agregado != "" && (strings.TrimSpace(req.Agregado) != req.Agregado || len(req.Agregado) > 255) {
		bad = append(bad, Detail{"/agregado", "sem espaços nas pontas, até 255 caracteres"})
	} else if d := checkIdentifier("/agregado", req.Agregado); d != nil {
		// It travels in X-Geohub-Agregado, where a control character would
		// make every delivery impossible, and receivers order by it byte
		// for byte, where an invisible one would make a second aggregate
		// that reads like the first.
		bad = append(bad, *d)
	}
	if a := req.Autoria; a != nil {
		if a.ID == "" || len(a.ID) > 255 {
			bad = append(bad, Detail{"/autoria/id", "obrigatório, até 255 caracteres"})
		} else if d := checkIdentifier("/autoria/id", a.ID); d != nil {
			// Shown as who caused the event: an invisible character would
			// make "geohub" pass the reserved-name check and read as the
			// server on the console (issue 26, L1).
			bad = append(bad, *d)
		}
		switch a.Tipo {
		case "usuario", "integrador", "sistema":
		default:
			bad = append(bad, Detail{"/autoria/tipo", "deve ser usuario, integrador ou sistema"})
		}
	}
	findings.add("formato inválido", bad...)

	// 4. Type and version against the registry.
	var tv *compiled
	if ev.Tipo != "" {
		var err error
		if tv, err = p.Registry.lookup(ev.Tipo, ev.VersaoSchema); err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Code != EInvalid {
				return Pending{}, err
			}
			findings.add(e.Message, e.Details...)
		}
	}

	// 5. Payload against the version's schema.
	if !object {
		return Pending{}, findings.err()
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return Pending{}, &Error{Code: EMalformed, Message: "payload não é JSON válido", Err: err}
	}
	obj := doc.(map[string]any) // raw starts with '{' and parsed
	if tv != nil {
		// The schema's findings fill what the steps above left of MaxDetalhes.
		findings.add(fmt.Sprintf("payload inválido para %s@%s", ev.Tipo, ev.VersaoSchema),
			tv.checkPayload(doc, MaxDetalhes-len(findings.details))...)
	}
	if err := findings.err(); err != nil {
		return Pending{}, err
	}

	// 6. A redacted copy is what the log keeps.
	redacted, err := appendJSONValue(nil, tv.rules.Apply(p.RedactionKey, obj))
	if err != nil {
		return Pending{}, fmt.Errorf("encode redacted payload: %w", err)
	}
	ev.Payload = redacted
	// 7. Route: the event and its outbox rows are appended in one durable
	// transaction; the store's commit hook delivers to live consumers (the
	// payload as sent: valid JSON, parsed above, so it needs no re-encoding)
	// and wakes the dispatcher.
	out, cadastro := p.Integrators.outboxFor(ev, tv.Audiencia)
	if out != nil {
		sorted, err := sortedPayload(obj)
		if err != nil {
			return Pending{}, fmt.Errorf("encode envelope payload: %w", err)
		}
		if out.Body, err = buildEnvelope(ev, sorted); err != nil {
			return Pending{}, fmt.Errorf("encode envelope: %w", err)
		}
		// The envelope is the full payload: the store only ever sees it sealed.
		out.Body = p.Integrators.Sealer.SealBody(out.Body, ev.EventID)
	}
	pending := Pending{Event: ev, Full: raw, Outbox: out}
	if p.Integrators != nil {
		pending.Cadastro = &cadastro
	}
	return pending, nil
}

// invalid gathers the findings of the publish steps into one 422.
type invalid struct {
	messages []string
	details  []Detail
}

func (v *invalid) add(message string, details ...Detail) {
	if len(details) > 0 {
		v.messages = append(v.messages, message)
		v.details = append(v.details, details...)
	}
}

// err is nil without findings; its message is the one step's, or every
// failing step's.
func (v *invalid) err() error {
	switch len(v.messages) {
	case 0:
		return nil
	case 1:
		return &Error{Code: EInvalid, Message: v.messages[0], Details: v.details}
	}
	return &Error{Code: EInvalid, Message: "publicação inválida: " + strings.Join(v.messages, "; "), Details: v.details}
}

// existingOr answers a publisher's retry with the stored record even when
// the event would no longer validate (its version was deprecated since, say):
// idempotency means a repeat gets the first outcome. The lookup runs only on
// this failure path, so valid publishes pay nothing for it.
func (p *Publisher) existingOr(ctx context.Context, req PublishRequest, err error) (Event, bool, error) {
	id, ok := canonicalUUID(req.EventID)
	if !ok || ErrorCode(err) != EInvalid {
		return Event{}, false, err
	}
	if ev, lerr := p.Log.Event(ctx, id); lerr == nil && sameSender(ev, req) {
		return ev, false, nil
	}
	return Event{}, false, err
}

// newID returns a UUIDv7: time-ordered ids keep the unique index append-only.
func newID() string {
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.NewString()
	}
	return id.String()
}

// canonicalUUID accepts only the 36-character textual form, returned in
// lower case so equal ids compare equal in the unique index.
func canonicalUUID(s string) (string, bool) {
	if len(s) != 36 {
		return "", false
	}
	id, err := uuid.Parse(s)
	if err != nil {
		return "", false
	}
	return id.String(), true
}
