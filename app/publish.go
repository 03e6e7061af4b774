package app

import (
	"bytes"
	"context"
	"encoding/json"
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
	// 1. The payload is a non-null JSON object.
	raw := bytes.TrimSpace(req.Payload)
	if len(raw) > MaxPayloadBytes {
		return Event{}, false, Errorf(ETooLarge, "payload maior que %d bytes", MaxPayloadBytes)
	}
	if len(raw) == 0 || raw[0] != '{' {
		return Event{}, false, &Error{Code: EInvalid, Message: "payload deve ser um objeto não nulo",
			Details: []Detail{{"/payload", "deve ser um objeto JSON"}}}
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
	if len(missing) > 0 {
		return Event{}, false, &Error{Code: EInvalid, Message: "campos obrigatórios ausentes", Details: missing}
	}

	// 2. Defaults. 3. Formats.
	now := p.Now().UTC()
	ev = Event{
		Tipo:         req.Tipo,
		VersaoSchema: req.VersaoSchema,
		Origem:       req.Origem,
		Agregado:     req.Agregado,
		Autoria:      req.Autoria,
		Solicitacao:  req.Solicitacao,
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
	if req.Agregado != "" && (strings.TrimSpace(req.Agregado) != req.Agregado || len(req.Agregado) > 255) {
		bad = append(bad, Detail{"/agregado", "sem espaços nas pontas, até 255 caracteres"})
	}
	if a := req.Autoria; a != nil {
		if a.ID == "" || len(a.ID) > 255 {
			bad = append(bad, Detail{"/autoria/id", "obrigatório, até 255 caracteres"})
		}
		switch a.Tipo {
		case "usuario", "integrador", "sistema":
		default:
			bad = append(bad, Detail{"/autoria/tipo", "deve ser usuario, integrador ou sistema"})
		}
	}
	if len(bad) > 0 {
		return Event{}, false, &Error{Code: EInvalid, Message: "formato inválido", Details: bad}
	}

	// 4. Type and version against the registry.
	tv, err := p.Registry.lookup(ev.Tipo, ev.VersaoSchema)
	if err != nil {
		return p.existingOr(ctx, req.EventID != "", ev.EventID, err)
	}

	// 5. Payload against the version's schema.
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return Event{}, false, &Error{Code: EMalformed, Message: "payload não é JSON válido", Err: err}
	}
	obj := doc.(map[string]any) // raw starts with '{' and parsed
	if details := tv.validatePayload(doc); len(details) > 0 {
		return p.existingOr(ctx, req.EventID != "", ev.EventID, &Error{Code: EInvalid,
			Message: fmt.Sprintf("payload inválido para %s@%s", ev.Tipo, ev.VersaoSchema), Details: details})
	}

	// 6. A redacted copy is what the log keeps.
	redacted, err := json.Marshal(tv.rules.Apply(p.RedactionKey, obj))
	if err != nil {
		return Event{}, false, fmt.Errorf("encode redacted payload: %w", err)
	}
	ev.Payload = redacted
	// Live consumers get the payload as sent: valid JSON (it was parsed
	// above), so it needs no re-encoding.
	full := raw
	// 7. Route, then append the event and its outbox rows in one durable
	// transaction; the store's commit hook delivers to live consumers and
	// wakes the dispatcher.
	out := p.Integrators.outboxFor(ev, tv.Audiencia)
	if out != nil {
		sorted, err := sortedPayload(obj)
		if err != nil {
			return Event{}, false, fmt.Errorf("encode envelope payload: %w", err)
		}
		if out.Body, err = buildEnvelope(ev, sorted); err != nil {
			return Event{}, false, fmt.Errorf("encode envelope: %w", err)
		}
	}
	stored, created, err := p.Log.Append(ctx, ev, full, out)
	if err != nil {
		return Event{}, false, err
	}
	if created {
		p.Metrics.published(stored.Tipo)
	}
	return stored, created, nil
}

// existingOr answers a publisher's retry with the stored record even when
// the event would no longer validate (its version was deprecated since, say):
// idempotency means a repeat gets the first outcome. The lookup runs only on
// this failure path, so valid publishes pay nothing for it.
func (p *Publisher) existingOr(ctx context.Context, hasID bool, eventID string, err error) (Event, bool, error) {
	if !hasID {
		return Event{}, false, err
	}
	if ev, lerr := p.Log.Event(ctx, eventID); lerr == nil {
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
