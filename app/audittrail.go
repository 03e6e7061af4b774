package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// The audit trail (SPEC 10): every change an operator, a token, an
// integrator or the CLI makes, every login, failed login and logout, and
// every refused attempt at a change. A service builds the entry of a change
// and hands it to the store method that commits the change, which writes
// both in one transaction: an entry exists exactly when its change does. A
// refusal changes nothing, so its entry is appended on its own.
//
// Entries never carry a secret, an API key, a token, a password or any
// hash of one: a rotation records that it happened, not what it produced.

// Kinds of actor (quem.tipo).
const (
	ActorOperador   = "operador"   // a console session
	ActorToken      = "token"      // an API token
	ActorIntegrador = "integrador" // an integrator's API key (commands)
	ActorCLI        = "cli"        // a geohub command on the server's machine
	ActorSistema    = "sistema"    // the server itself
	ActorAnonimo    = "anonimo"    // a failed login for no existing account
)

// Outcomes of an entry (resultado).
const (
	AuditOK       = "ok"
	AuditRecusado = "recusado" // refused with an error code: nothing changed
	AuditFalhou   = "falhou"   // ran and did not succeed (a verificar without 2xx)
)

// Actor is who makes a change: it travels in the request's context, put
// there by the edge that authenticated the caller.
type Actor struct {
	Tipo  string `json:"tipo"`
	ID    string `json:"id"`
	Nome  string `json:"nome"`
	Papel Papel  `json:"papel"` // "" for who has no role (an integrator, the CLI, the system)
	// Endereco is where the request came from, as the edge saw it (the
	// console believes its trusted proxies); it goes to the entry's
	// endereco, not inside quem.
	Endereco string `json:"-"`
}

// System is the actor of what the server does on its own: the first start's
// admin, the built-in types, an auto-disable, the demo's integrator.
var System = Actor{Tipo: ActorSistema, ID: ServerName, Nome: ServerName}

// ServerName is how the server names itself: the actor of what it does on
// its own, and the origem and autoria of the pings it sends.
const ServerName = "geohub"

type actorKey struct{}

// WithActor returns ctx carrying a as the author of the changes made with it.
func WithActor(ctx context.Context, a Actor) context.Context {
	return context.WithValue(ctx, actorKey{}, a)
}

// ActorOf is the author ctx carries; System when there is none, so that no
// change goes unattributed.
func ActorOf(ctx context.Context) Actor {
	if a, ok := ctx.Value(actorKey{}).(Actor); ok && a.Tipo != "" {
		return a
	}
	a := System
	if e, ok := ctx.Value(actorKey{}).(Actor); ok {
		a.Endereco = e.Endereco // an edge that knows only the address
	}
	return a
}

// AuditTarget is what an entry is about (alvo).
type AuditTarget struct {
	Tipo string `json:"tipo"`
	ID   string `json:"id"`
	Nome string `json:"nome,omitempty"`
}

// AuditField is one field a change set: its value before (de) when the
// change replaced one, and after (para). Either may be absent.
type AuditField struct {
	Campo string          `json:"campo"`
	De    json.RawMessage `json:"de,omitempty"`
	Para  json.RawMessage `json:"para,omitempty"`
}

// Changed records a field that went from de to para.
func Changed(campo string, de, para any) AuditField {
	return AuditField{Campo: campo, De: rawJSON(de), Para: rawJSON(para)}
}

// Set records a field's new value, with no previous one to show.
func Set(campo string, para any) AuditField {
	return AuditField{Campo: campo, Para: rawJSON(para)}
}

func rawJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(fmt.Sprint(v))
	}
	return b
}

// AuditEntry is one row of the trail (GET /api/auditoria).
type AuditEntry struct {
	ID        int64        `json:"id"`
	Em        time.Time    `json:"em"`
	Quem      Actor        `json:"quem"`
	Endereco  string       `json:"endereco"`
	Acao      string       `json:"acao"`
	Alvo      AuditTarget  `json:"alvo"`
	Campos    []AuditField `json:"campos"`
	Resultado string       `json:"resultado"`
	Codigo    Code         `json:"codigo,omitempty"`
	Detalhe   string       `json:"detalhe,omitempty"`
	// CountAs names a field the store adds with the number of rows the
	// change touched, which only the transaction knows (a resend of many).
	CountAs string `json:"-"`
}

// Counted is e with its CountAs field set to n; nil stays nil.
func (e *AuditEntry) Counted(n int64) *AuditEntry {
	if e == nil || e.CountAs == "" {
		return e
	}
	c := *e
	c.Campos = append(append([]AuditField(nil), e.Campos...), Set(e.CountAs, n))
	return &c
}

// SetOld fills in the previous value of a field the entry names, for a
// store that reads it inside the change's transaction.
func (e *AuditEntry) SetOld(campo string, de any) {
	if e == nil {
		return
	}
	for i := range e.Campos {
		if e.Campos[i].Campo == campo {
			e.Campos[i].De = rawJSON(de)
		}
	}
}

// NewAudit starts the entry of a change by ctx's actor; it is ok until a
// refusal says otherwise.
func NewAudit(ctx context.Context, acao string, alvo AuditTarget, campos ...AuditField) *AuditEntry {
	a := ActorOf(ctx)
	return &AuditEntry{Quem: a, Endereco: a.Endereco, Acao: acao, Alvo: alvo, Campos: campos, Resultado: AuditOK}
}

// AuditLog appends entries that join no change's transaction.
type AuditLog interface {
	AppendAudit(ctx context.Context, e AuditEntry) error
}

// AuditFilter selects a page of the trail, newest first.
type AuditFilter struct {
	// QuemID and QuemNome match the actor's id or name (an operator's
	// login, a token's or integrator's name, the CLI's OS user).
	QuemID, QuemNome string
	Acao             string
	Alvo             string    // the target's id
	Inicio, Fim      time.Time // em in [Inicio, Fim); zero = open
	Antes            int64     // rows older than this id; 0 = from the newest
	Limite           int
	// SemAcoes leaves out these actions; SemIntegradores leaves out what
	// the integrators' keys did (their commands, at a CAD's pace).
	SemAcoes        []string
	SemIntegradores bool
}

// AdminOnlyActions are the rows of the trail only an admin reads: people's
// accounts, sign-ins and the API's tokens. An operador reads the rest.
var AdminOnlyActions = []string{AcaoLogin, AcaoLoginFalhou, AcaoLogout, AcaoOperadorCriar, AcaoOperadorAtivar,
	AcaoOperadorDesativar, AcaoOperadorPapelAlterar, AcaoOperadorSenhaRedefinir, AcaoOperadorSenhaTrocar,
	AcaoTokenCriar, AcaoTokenRevogar}

// AuditStore keeps the trail (implemented by package store).
type AuditStore interface {
	AuditLog
	// AuditEntries returns up to f.Limite rows matching f, newest first,
	// fewer when the page reaches AuditPageBytes, and whether more follow.
	AuditEntries(ctx context.Context, f AuditFilter) ([]AuditEntry, bool, error)
}

// AuditPageBytes bounds a page of the trail by size as well as by rows
// (SPEC 10, bounded work): a page stops early and gives its cursor.
const AuditPageBytes = 1 << 20

// AuditPage is a page of the trail.
type AuditPage struct {
	Linhas []AuditEntry `json:"linhas"`
	Limite int          `json:"limite"`
	// Proximo is the next page's cursor (the antes parameter), "" at the end.
	Proximo string `json:"proximo"`
	// TruncadaPorTamanho says the page stopped before limite at
	// AuditPageBytes.
	TruncadaPorTamanho bool `json:"truncada_por_tamanho,omitempty"`
}

// AuditTrail is the trail's read side, and the writer of the refusals that
// the edges decide before any service runs (a role that does not allow an
// action, a form without its CSRF token).
type AuditTrail struct {
	Store AuditStore
	Now   func() time.Time

	refusals refusalLimiter
}

// ListFor answers a page of the trail as papel may read it: an admin all
// of it, anyone else without AdminOnlyActions.
func (t *AuditTrail) ListFor(ctx context.Context, papel Papel, quem string, f AuditFilter) (AuditPage, error) {
	if papel != PapelAdmin {
		f.SemAcoes = AdminOnlyActions
		if slices.Contains(AdminOnlyActions, f.Acao) {
			return AuditPage{Limite: f.Limite}, nil
		}
	}
	return t.List(ctx, quem, f)
}

// List answers a page of the trail. quem is an id or a name: ids are UUIDs
// (operators, tokens, integrators), names are not.
func (t *AuditTrail) List(ctx context.Context, quem string, f AuditFilter) (AuditPage, error) {
	if f.Limite <= 0 {
		f.Limite = DefaultLimite
	}
	f.Limite = min(f.Limite, MaxLimite)
	if quem = strings.TrimSpace(quem); quem != "" {
		if id, err := uuid.Parse(quem); err == nil && len(quem) == 36 {
			f.QuemID = id.String()
		} else {
			f.QuemNome = quem
		}
	}
	if !f.Inicio.IsZero() && !f.Fim.IsZero() && !f.Fim.After(f.Inicio) {
		return AuditPage{}, &Error{Code: EInvalid, Message: "período inválido",
			Details: []Detail{{Caminho: "/fim", Mensagem: "deve ser posterior a inicio"}}}
	}
	rows, more, err := t.Store.AuditEntries(ctx, f)
	if err != nil {
		return AuditPage{}, err
	}
	p := AuditPage{Linhas: rows, Limite: f.Limite}
	if more && len(rows) > 0 {
		p.Proximo = strconv.FormatInt(rows[len(rows)-1].ID, 10)
		p.TruncadaPorTamanho = len(rows) < f.Limite // the store stopped by size
	}
	return p, nil
}

// Refused records that ctx's actor was refused acao on alvo by err before
// any service ran. A credential's refusals are each recorded, by name: the
// edge bounds how many a credential can have (Refusals), so junk cannot
// spend a budget that a refused change then misses (issue 26, L2). A
// request without one (its address is all there is) records at most
// refusalBudget a minute per address; the next one recorded counts those
// that were not (recusas_nao_registradas).
func (t *AuditTrail) Refused(ctx context.Context, acao string, alvo AuditTarget, err error) {
	if t == nil || t.Store == nil {
		return
	}
	if _, ok := refusal(err); !ok {
		return
	}
	a := ActorOf(ctx)
	now := time.Now
	if t.Now != nil {
		now = t.Now
	}
	// A credential's budget is a backstop, past what the edges' limiter
	// lets through, for any way in that it may not cover.
	key, budget := a.Tipo+" "+a.ID, credentialRefusalBudget
	if a.ID == "" {
		key, budget = "endereco "+a.Endereco, refusalBudget
	}
	ok, dropped := t.refusals.admit(key, now(), budget)
	if !ok {
		return
	}
	e := NewAudit(ctx, acao, alvo)
	if dropped > 0 {
		e.Campos = append(e.Campos, Set("recusas_nao_registradas", dropped))
	}
	recordRefusal(ctx, t.Store, e, err)
}

// Record appends an entry that joins no change's transaction: a failed
// login, a verificar, a reprocess made of many transactions.
func (t *AuditTrail) Record(ctx context.Context, e *AuditEntry) error {
	return t.Store.AppendAudit(context.WithoutCancel(ctx), *e)
}

// refusal says whether err refused the request (a 4xx app error): then the
// change did not happen and the refusal is recorded. Any other error (the
// database, a bug) records nothing: its transaction, the entry's included,
// was rolled back, and the server's log has it.
func refusal(err error) (*Error, bool) {
	var e *Error
	if errors.As(err, &e) && e.Code.HTTPStatus() < 500 {
		return e, true
	}
	return nil, false
}

// recordRefusal appends e as refused by err, when err is a refusal. It is
// best effort: the caller's answer is the refusal, and a failure to record
// it must not turn that answer into a 500. A client that went away was
// refused all the same, hence WithoutCancel.
func recordRefusal(ctx context.Context, log AuditLog, e *AuditEntry, err error) {
	ae, ok := refusal(err)
	if !ok || e == nil || log == nil {
		return
	}
	r := *e
	r.Resultado, r.Codigo, r.Detalhe = AuditRecusado, ae.Code, refusalText(ae)
	log.AppendAudit(context.WithoutCancel(ctx), r)
}

// refusalText is a refusal's public message with its findings, which name
// fields (never their values, beyond what the message itself says).
func refusalText(e *Error) string {
	var b strings.Builder
	b.WriteString(e.Message)
	for i, d := range e.Details {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(d.Caminho + " " + d.Mensagem)
	}
	return b.String()
}

// The actions (acao), <what>[.<part>].<verb>, verbs in the infinitive.
const (
	AcaoLogin       = "login"
	AcaoLoginFalhou = "login.falhou"
	AcaoLogout      = "logout"

	AcaoOperadorCriar          = "operador.criar"
	AcaoOperadorAtivar         = "operador.ativar"
	AcaoOperadorDesativar      = "operador.desativar"
	AcaoOperadorPapelAlterar   = "operador.papel.alterar"
	AcaoOperadorSenhaRedefinir = "operador.senha.redefinir"
	AcaoOperadorSenhaTrocar    = "operador.senha.trocar"

	AcaoTokenCriar   = "token.criar"
	AcaoTokenRevogar = "token.revogar"

	AcaoIntegradorCriar             = "integrador.criar"
	AcaoIntegradorEditar            = "integrador.editar"
	AcaoIntegradorAtivar            = "integrador.ativar"
	AcaoIntegradorDesativar         = "integrador.desativar"
	AcaoIntegradorSegredoRotacionar = "integrador.segredo.rotacionar"
	AcaoIntegradorAPIKeyRotacionar  = "integrador.api_key.rotacionar"
	AcaoIntegradorVerificar         = "integrador.verificar"
	AcaoIntegradorTentarAgora       = "integrador.tentar_agora" // closes the circuit, pending rows due now
	AcaoIntegradorReenviar          = "integrador.reenviar"     // gap repair: delivered rows sent again
	AcaoIntegradorTestar            = "integrador.testar"       // the receiver tester
	AcaoIntegradorEventoTeste       = "integrador.evento_teste" // an integracao:teste event to itself

	AcaoRegistroRegistrar    = "registro.registrar"
	AcaoRegistroDescontinuar = "registro.descontinuar"
	AcaoRegistroReativar     = "registro.reativar"

	AcaoPortalLinkCriar       = "portal.link.criar"
	AcaoPortalLinkRevogar     = "portal.link.revogar"
	AcaoPortalEntrar          = "portal.entrar"
	AcaoPortalSair            = "portal.sair"
	AcaoPortalSessoesEncerrar = "portal.sessoes.encerrar"

	AcaoEntregaReenviar     = "entrega.reenviar"
	AcaoEntregaReenviarLote = "entrega.reenviar_lote"
	AcaoEntregaTentarAgora  = "entrega.tentar_agora"
	AcaoDLQReprocessar      = "dlq.reprocessar"

	AcaoOcorrenciaRegistrar      = "ocorrencia.registrar"
	AcaoOcorrenciaDespachar      = "ocorrencia.despachar"
	AcaoOcorrenciaDespachoStatus = "ocorrencia.despacho.status.alterar"
	AcaoOcorrenciaStatus         = "ocorrencia.status.alterar"
	AcaoComando                  = "comando" // a command of a route without a name of its own

	// AcaoAcessoNegado is a change refused at the edge: the role does
	// not allow it, or the form did not come from the console.
	AcaoAcessoNegado = "acesso.negado"
)

// AuditActions lists every action, for the console's filter.
var AuditActions = []string{
	AcaoLogin, AcaoLoginFalhou, AcaoLogout,
	AcaoOperadorCriar, AcaoOperadorAtivar, AcaoOperadorDesativar, AcaoOperadorPapelAlterar,
	AcaoOperadorSenhaRedefinir, AcaoOperadorSenhaTrocar,
	AcaoTokenCriar, AcaoTokenRevogar,
	AcaoIntegradorCriar, AcaoIntegradorEditar, AcaoIntegradorAtivar, AcaoIntegradorDesativar,
	AcaoIntegradorSegredoRotacionar, AcaoIntegradorAPIKeyRotacionar, AcaoIntegradorVerificar, AcaoIntegradorTentarAgora,
	AcaoIntegradorReenviar, AcaoIntegradorTestar, AcaoIntegradorEventoTeste,
	AcaoPortalLinkCriar, AcaoPortalLinkRevogar, AcaoPortalEntrar, AcaoPortalSair, AcaoPortalSessoesEncerrar,
	AcaoRegistroRegistrar, AcaoRegistroDescontinuar, AcaoRegistroReativar,
	AcaoEntregaReenviar, AcaoEntregaReenviarLote, AcaoEntregaTentarAgora, AcaoDLQReprocessar,
	AcaoOcorrenciaRegistrar, AcaoOcorrenciaDespachar, AcaoOcorrenciaDespachoStatus, AcaoOcorrenciaStatus,
	AcaoComando, AcaoAcessoNegado,
}
