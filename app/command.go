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
// Commands run one at a time on the whole database: a handler reads the
// state it checks and publishes what follows from it without another
// command in between, and a command id looked up as unrecorded stays so
// until its outcome commits, so the same command sent twice at once (to
// one replica or to two) runs once and both callers get its one recorded
// answer. The store's lock (LockCommands) is what holds across replicas;
// the in-process mutex in front of it keeps a replica's waiting commands
// from each holding a database connection while they wait.
type Commands struct {
	Publisher *Publisher
	Log       interface {
		EventLog
		CommandLocker
	}
	// Audit records the refusals that come before a command runs (its
	// x-solicitacao-id malformed or reused with another body), which no
	// outcome records.
	Audit AuditLog
	// Key is the HMAC key of the body digest that tells a retry from a
	// different command under the same id.
	Key []byte
	Now func() time.Time

	mu sync.Mutex
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

	c.mu.Lock()
	defer c.mu.Unlock()
	unlock, err := c.Log.LockCommands(ctx)
	if err != nil {
		return Outcome{}, err
	}
	// Held until the outcome committed (or nothing was recorded): the next
	// holder's lookup then sees it. A lock lost before that (unlock's
	// error) changes no answer: the outcome decides its append (see
	// PublishAudited), so of two overlapping runs one is stored, and both
	// callers get it.
	defer unlock()
	if prev, err := c.Log.Event(ctx, outcomeID); err == nil {
		return recorded(prev, digest)
	} else if !errors.Is(err, ErrNotFound) {
		return Outcome{}, err
	}

	ran = true
	res, err := exec(ctx)
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
	stored, err := c.Publisher.PublishAudited(ctx, events, audit)
	if err != nil {
		if ErrorCode(err) == EInvalid {
			return Outcome{}, RegistryRefused(err)
		}
		return Outcome{}, err
	}
	// The answer is read back from the stored outcome, so the first answer
	// and every repeat are the same bytes. Not created: another run of the
	// command (on a replica whose lock it took over) stored it first.
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
