package app

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
)

// The outcome event types of a command (SPEC 7), routed to the requester.
const (
	TipoComandoConcluido = "integracao:comando-concluido"
	TipoComandoRecusado  = "integracao:comando-recusado"
	// PluginIntegracao is the origem of outcome events: receivers never
	// discard it as an echo.
	PluginIntegracao = "integracao"
)

// outcomeNamespace makes an outcome's event_id a function of (integrator,
// x-solicitacao-id): looking a command up is one primary-key read, and a
// second outcome for the same command cannot be inserted.
var outcomeNamespace = uuid.MustParse("5f0c1c1e-8f1a-4d8e-9a57-6c1b3f0e2a41")

// maxEchoedBody bounds the command body an outcome carries back.
const maxEchoedBody = 64 << 10

// Command is one request to act on the domain, by an integrator or by an
// operator (SPEC 7).
type Command struct {
	Integrador string // the authenticated integrator's id; "" for an operator
	// Operador is the id of the operator's token or console account when
	// an operator sends the command: its events have autoria usuario, and
	// it may act on every ocorrência.
	Operador    string
	Solicitacao string // x-solicitacao-id: the idempotency key
	Metodo      string
	Rota        string // the request path, ids included
	Body        []byte // the raw request body
	// Acao names the command in the audit trail; "" derives it from Rota
	// (see commandAction).
	Acao string
}

// Result is what a command handler decided: the HTTP status and body of
// success and the domain events to publish with it. The Commands service
// stamps autoria, solicitacao and correlacao_id on every event.
type Result struct {
	Status int
	Body   any
	Events []PublishRequest
}

// Outcome is a command's answer: the first one, also for every repeat.
type Outcome struct {
	Status int
	Body   json.RawMessage
	// Repeat says the answer was recorded by an earlier request.
	Repeat bool
}

// Commands runs integrator commands: idempotent by x-solicitacao-id, each
// outcome published as integracao:comando-concluido or -recusado in the
// same transaction as the command's domain events.
//
// No lock is held while a command runs (issue 27: a replica frozen while
// it held the one command lock stopped every command on every replica).
// Instead each run is checked when it is stored: a handler reads the
// aggregates it decides on through ReadAggregate, and the outcome, with
// the run's events, is appended only if none of them has a new event
// since (Pending.Expect); otherwise the command runs again on what is
// stored now. The same command sent twice at once (to one replica or to
// two) may run twice, but its outcome decides its append (Pending.Decides):
// one run is stored, and both callers get its one recorded answer.
type Commands struct {
	Publisher *Publisher
	Log       EventLog
	// Audit records the refusals that come before a command runs (its
	// x-solicitacao-id malformed or reused with another body), which no
	// outcome records.
	Audit AuditLog
	// Key is the HMAC key of the body digest that tells a retry from a
	// different command under the same id.
	Key []byte
	Now func() time.Time

	turns turns
}

// maxCommandRuns bounds the runs of one command whose aggregates keep
// moving under it (other replicas' commands on the same ocorrência): past
// them the caller is asked to send it again.
const maxCommandRuns = 8

// commandReads are the aggregates a command's run read (ReadAggregate),
// and the turns it holds on them in this process.
type commandReads struct {
	turns *turns
	mu    sync.Mutex
	last  map[string]int64
	held  map[string]func()
}

type commandReadsKey struct{}

// ReadAggregate tells the command running in ctx, if any, that its handler
// is about to read agregado: it waits for this process's other commands on
// it to finish (so they do not run each other's work again), and done says
// which event the read ended at (0: none). The run is stored only if none
// was appended to agregado since, by any replica.
func ReadAggregate(ctx context.Context, agregado string) (done func(last int64)) {
	r, _ := ctx.Value(commandReadsKey{}).(*commandReads)
	if r == nil {
		return func(int64) {}
	}
	r.mu.Lock()
	_, holding := r.held[agregado]
	r.mu.Unlock()
	if !holding {
		if release, err := r.turns.take(ctx, agregado); err == nil {
			r.mu.Lock()
			r.held[agregado] = release
			r.mu.Unlock()
		}
	}
	return func(last int64) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if prev, ok := r.last[agregado]; !ok || last < prev {
			r.last[agregado] = last
		}
	}
}

// release ends the run's turns.
func (r *commandReads) release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, release := range r.held {
		release()
	}
	clear(r.held)
}

// turns are one process's commands taking turns per aggregate. Nothing is
// held in the database, so a replica that freezes holding a turn stops
// only its own commands on that aggregate.
type turns struct {
	mu sync.Mutex
	by map[string]*turn
}

type turn struct {
	slot    chan struct{}
	waiting int
}

func (t *turns) take(ctx context.Context, key string) (func(), error) {
	t.mu.Lock()
	if t.by == nil {
		t.by = map[string]*turn{}
	}
	tu := t.by[key]
	if tu == nil {
		tu = &turn{slot: make(chan struct{}, 1)}
		t.by[key] = tu
	}
	tu.waiting++
	t.mu.Unlock()
	done := func() {
		t.mu.Lock()
		if tu.waiting--; tu.waiting == 0 {
			delete(t.by, key)
		}
		t.mu.Unlock()
	}
	select {
	case tu.slot <- struct{}{}:
		return func() { <-tu.slot; done() }, nil
	case <-ctx.Done():
		done()
		return nil, ctx.Err()
	}
}

func (r *commandReads) expect() []Expectation {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Expectation, 0, len(r.last))
	for agg, last := range r.last {
		out = append(out, Expectation{Agregado: agg, Ultima: last})
	}
	slices.SortFunc(out, func(a, b Expectation) int { return strings.Compare(a.Agregado, b.Agregado) })
	return out
}

// outcomePayload is the payload of both outcome types.
type outcomePayload struct {
	Comando   commandRecord   `json:"comando"`
	Status    int             `json:"status"`
	Resultado json.RawMessage `json:"resultado,omitempty"`
	Motivo    *motivo         `json:"motivo,omitempty"`
}

type commandRecord struct {
	Metodo    string          `json:"metodo"`
	Rota      string          `json:"rota"`
	Corpo     json.RawMessage `json:"corpo,omitempty"` // dropped from the log by redaction
	CorpoHMAC string          `json:"corpo_hmac"`
}

type motivo struct {
	Erro     string   `json:"erro"`
	Codigo   Code     `json:"codigo"`
	Detalhes []Detail `json:"detalhes,omitempty"`
}

// Run executes cmd once: a repeat of a recorded command returns its first
// outcome and publishes nothing; the same id with a different method, route
// or body is a conflict. exec decides the outcome: a Result, or an *Error
// whose code is a refusal (4xx), which is recorded and published as
// integracao:comando-recusado. Any other error (the database, a bug) is
// returned without recording anything, so a retry runs the command again.
func (c *Commands) Run(ctx context.Context, cmd Command, exec func(ctx context.Context) (Result, error)) (_ Outcome, err error) {
	if (cmd.Integrador == "") == (cmd.Operador == "") {
		return Outcome{}, fmt.Errorf("a command needs exactly one requester, integrator %q or operator %q", cmd.Integrador, cmd.Operador)
	}
	ran := false
	defer func() {
		if !ran {
			// Refused before it ran: no outcome says so, this entry does
			// (issue 26, L4).
			acao, alvo := commandAction(cmd)
			recordRefusal(ctx, c.Audit, NewAudit(ctx, acao, alvo, Set("solicitacao", cmd.Solicitacao)), err)
		}
	}()
	sol, ok := canonicalUUID(cmd.Solicitacao)
	if !ok {
		return Outcome{}, Errorf(EMalformed, "cabeçalho x-solicitacao-id ausente ou inválido: use um UUID novo por comando")
	}
	cmd.Solicitacao = sol
	digest := c.digest(cmd)
	autoria := cmd.autoria()
	requester := cmd.Integrador
	if autoria.Tipo != "integrador" {
		requester = autoria.Tipo + ":" + autoria.ID // apart from every integrator's ids
	}
	outcomeID := uuid.NewSHA1(outcomeNamespace, []byte(requester+"\n"+sol)).String()

	if prev, err := c.Log.Event(ctx, outcomeID); err == nil {
		return recorded(prev, digest)
	} else if !errors.Is(err, ErrNotFound) {
		return Outcome{}, err
	}
	ran = true
	for range maxCommandRuns {
		o, err := c.runOnce(ctx, cmd, exec, outcomeID, digest, autoria)
		if !errors.Is(err, ErrAggregateMoved) {
			return o, err
		}
	}
	return Outcome{}, &Error{Code: EUnavailable, Err: ErrAggregateMoved,
		Message: "a ocorrência mudou a cada tentativa de executar o comando; envie-o de novo com o mesmo x-solicitacao-id"}
}

// runOnce runs exec on the state stored now and appends its outcome, its
// events and its audit entry, on the condition that what exec read is
// still so (ErrAggregateMoved otherwise: nothing was stored).
func (c *Commands) runOnce(ctx context.Context, cmd Command, exec func(ctx context.Context) (Result, error),
	outcomeID, digest string, autoria *Autoria) (Outcome, error) {
	sol := cmd.Solicitacao
	reads := &commandReads{turns: &c.turns, last: map[string]int64{}, held: map[string]func(){}}
	defer reads.release()
	res, err := exec(context.WithValue(ctx, commandReadsKey{}, reads))
	record := commandRecord{Metodo: cmd.Metodo, Rota: cmd.Rota, CorpoHMAC: digest}
	// The requester gets its own body back in the outcome, unless that would
	// push the outcome past the payload limit: the HMAC identifies it anyway.
	// Nor past the nesting limit, two levels down in the outcome (/comando/corpo).
	if len(cmd.Body) <= maxEchoedBody && json.Valid(cmd.Body) && bytes.HasPrefix(bytes.TrimSpace(cmd.Body), []byte("{")) &&
		checkDepth(cmd.Body, MaxDepth-2, "") == nil {
		record.Corpo = cmd.Body
	}
	out := outcomePayload{Comando: record}
	tipo := TipoComandoConcluido
	var events []PublishRequest
	if err != nil {
		var e *Error
		if !errors.As(err, &e) || e.Code.HTTPStatus() >= 500 {
			return Outcome{}, err
		}
		tipo = TipoComandoRecusado
		out.Status = e.Code.HTTPStatus()
		out.Motivo = &motivo{Erro: e.Message, Codigo: e.Code, Detalhes: e.Details}
	} else {
		out.Status = res.Status
		if out.Resultado, err = json.Marshal(res.Body); err != nil {
			return Outcome{}, fmt.Errorf("encode command result: %w", err)
		}
		events = res.Events
	}
	out.bound()
	payload, err := json.Marshal(out)
	if err != nil {
		return Outcome{}, fmt.Errorf("encode command outcome: %w", err)
	}
	events = append(events, PublishRequest{EventID: outcomeID, Tipo: tipo, VersaoSchema: OutcomeVersao, Origem: PluginIntegracao,
		Agregado: "solicitacao:" + sol, Payload: payload})
	audit := commandAudit(ctx, cmd, events, out.Motivo)
	ts := c.Now().UTC().Format(time.RFC3339Nano)
	for i := range events {
		events[i].Autoria = autoria
		events[i].Solicitacao = sol
		events[i].CorrelacaoID = sol
		events[i].Timestamp = ts
	}
	// The audit entry commits with the outcome, refusals included: a
	// refused command is recorded (as comando-recusado) like any other.
	stored, err := c.Publisher.PublishAudited(ctx, events, audit, reads.expect())
	if err != nil {
		if ErrorCode(err) == EInvalid {
			return Outcome{}, RegistryRefused(err)
		}
		return Outcome{}, err
	}
	// The answer is read back from the stored outcome, so the first answer
	// and every repeat are the same bytes. Not created: another run of the
	// command (the same command sent twice at once) stored it first.
	last := stored[len(stored)-1]
	o, err := recorded(last.Event, digest)
	o.Repeat = !last.Created
	return o, err
}

// commandAudit is a command's audit entry: its action, the ocorrência it
// acts on, the solicitacao that finds its events (the correlacao_id of each)
// and the types it published, its outcome's last. The body is not copied: it may carry personal
// data that the log keeps only redacted.
func commandAudit(ctx context.Context, cmd Command, events []PublishRequest, refused *motivo) *AuditEntry {
	acao, alvo := commandAction(cmd)
	if alvo.ID == "" {
		for _, ev := range events {
			if id, ok := strings.CutPrefix(ev.Agregado, "ocorrencia:"); ok {
				alvo.ID = id
				break
			}
		}
	}
	e := NewAudit(ctx, acao, alvo, Set("solicitacao", cmd.Solicitacao))
	if parts := strings.Split(strings.Trim(cmd.Rota, "/"), "/"); acao == AcaoOcorrenciaDespachoStatus && len(parts) == 6 {
		e.Campos = append(e.Campos, Set("despacho", parts[4]))
	}
	tipos := make([]string, len(events))
	for i, ev := range events {
		tipos[i] = ev.Tipo
	}
	e.Campos = append(e.Campos, Set("eventos", tipos))
	if refused != nil {
		e.Resultado, e.Codigo = AuditRecusado, refused.Codigo
		e.Detalhe = refusalText(&Error{Code: refused.Codigo, Message: refused.Erro, Details: refused.Detalhes})
	}
	return e
}

// commandAction names a command by its route (SPEC 7), so that every
// caller of Commands.Run, the API's and the console's, gets the same names.
func commandAction(cmd Command) (string, AuditTarget) {
	alvo := AuditTarget{Tipo: "ocorrencia"}
	parts := strings.Split(strings.Trim(cmd.Rota, "/"), "/")
	if len(parts) >= 3 && parts[0] == "api" && parts[1] == "ocorrencias" {
		alvo.ID = parts[2]
	}
	acao := cmd.Acao
	if acao == "" {
		switch {
		case len(parts) == 2 && parts[0] == "api" && parts[1] == "ocorrencias":
			acao = AcaoOcorrenciaRegistrar
		case len(parts) == 4 && parts[3] == "despachos":
			acao = AcaoOcorrenciaDespachar
		case len(parts) == 6 && parts[3] == "despachos" && parts[5] == "status":
			acao = AcaoOcorrenciaDespachoStatus
		case len(parts) == 4 && parts[3] == "status":
			acao = AcaoOcorrenciaStatus
		default:
			acao = AcaoComando
		}
	}
	if alvo.ID == "" && acao == AcaoComando {
		alvo = AuditTarget{Tipo: "rota", ID: cmd.Metodo + " " + cmd.Rota}
	}
	return acao, alvo
}

// autoria is who the command's events name as their author: the integrator,
// or the operator (usuario), whose events reach the ocorrência's originating
// integrator as somebody else's act, not as its echo.
func (cmd Command) autoria() *Autoria {
	if cmd.Integrador == "" {
		return &Autoria{ID: cmd.Operador, Tipo: "usuario"}
	}
	return &Autoria{ID: cmd.Integrador, Tipo: "integrador"}
}

// recorded turns a stored outcome event into the command's answer.
func recorded(ev Event, digest string) (Outcome, error) {
	var p outcomePayload
	if err := json.Unmarshal(ev.Payload, &p); err != nil {
		return Outcome{}, fmt.Errorf("decode recorded outcome %s: %w", ev.EventID, err)
	}
	if !hmac.Equal([]byte(p.Comando.CorpoHMAC), []byte(digest)) {
		return Outcome{}, Errorf(EConflict, "x-solicitacao-id já usado por outro comando (outro método, rota ou corpo): um novo comando precisa de um novo x-solicitacao-id")
	}
	body := p.Resultado
	if p.Motivo != nil {
		var err error
		if body, err = json.Marshal(p.Motivo); err != nil {
			return Outcome{}, err
		}
	}
	return Outcome{Status: p.Status, Body: body, Repeat: true}, nil
}

// digest identifies a command's content: method, route and exact body.
func (c *Commands) digest(cmd Command) string {
	m := hmac.New(sha256.New, c.Key)
	fmt.Fprintf(m, "%s %s\n", cmd.Metodo, cmd.Rota)
	m.Write(cmd.Body)
	return "hmac-sha256:" + hex.EncodeToString(m.Sum(nil))
}

// RegistryRefused is the answer to a command whose plugin built an event the
// registry refuses for reasons of its own state (a built-in version stored
// with other content before an upgrade made it built in): not the caller's
// fault, and nothing was written. It is 503 with what an operator must fix,
// never a bare 500.
func RegistryRefused(err error) error {
	msg := "o registro de tipos recusa um evento que o plugin publica; um administrador precisa corrigir o registro"
	var e *Error
	if errors.As(err, &e) && e.Message != "" {
		msg += ": " + e.Message
	}
	return &Error{Code: EUnavailable, Message: msg, Err: err}
}
