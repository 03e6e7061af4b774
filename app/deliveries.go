package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"geohub/app/keys"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Deliveries is the operator's view of the outbox: list, inspect, resend.
type Deliveries struct {
	Store OutboxStore
	// Slots bounds "Tentar agora" to one per integrator per
	// RetryNowInterval, across replicas.
	Slots      ReprocessLimitStore
	Dispatcher *Dispatcher
	Sealer     *keys.Sealer // opens the receivers' answers
	Now        func() time.Time
	// Tester is the receiver tester, posting as the dispatcher does.
	Tester *Tester
	// testing holds the integrators whose tester runs now: one at a time
	// each, so repeated clicks or calls do not multiply its requests.
	testing sync.Map
	// Publisher publishes the test event an integrator sends itself.
	Publisher *Publisher
}

// List returns one page of deliveries; limite as for events.
func (s *Deliveries) List(ctx context.Context, f DeliveryFilter) (Page[Delivery], error) {
	if f.Status != "" && f.Status != EntregaPendente && f.Status != EntregaProcessando &&
		f.Status != EntregaEntregue && f.Status != EntregaFalhou {
		return Page[Delivery]{}, &Error{Code: EInvalid, Message: "status inválido",
			Details: []Detail{{"/status", "deve ser pendente, processando, entregue ou falhou"}}}
	}
	f.Limite, f.Deslocamento = pageBounds(f.Limite, f.Deslocamento)
	rows, total, err := s.Store.Deliveries(ctx, f)
	if err != nil {
		return Page[Delivery]{}, err
	}
	p := Page[Delivery]{Linhas: rows, Total: total, Limite: f.Limite, Deslocamento: f.Deslocamento}
	// Rows carry no body, so a page of them is small; it is still cut at
	// PageBytes, as every list is, should their strings grow.
	size := 0
	for i, d := range rows {
		if size += d.size(); size >= PageBytes && i < len(rows)-1 {
			p.Linhas, p.TruncadaPorTamanho = rows[:i+1], true
			p.Proximo = cursorAfter(d.ID, f.Desc)
			return p, nil
		}
	}
	if len(rows) > 0 {
		p.Proximo = nextCursor(len(rows), f.Limite, rows[len(rows)-1].ID, f.Desc)
	}
	return p, nil
}

// size is near what the row takes encoded (see Event.Size).
func (d Delivery) size() int {
	return 320 + len(d.EventID) + len(d.Integrador) + len(d.Tipo) + len(d.Agregado) + len(d.Status) + len(d.UltimoErro)
}

// DeliveryDetail is one delivery with every attempt.
type DeliveryDetail struct {
	Delivery
	Tentativas []Attempt `json:"tentativas_registradas"`
}

// Get returns a delivery and its attempts.
func (s *Deliveries) Get(ctx context.Context, id int64) (DeliveryDetail, error) {
	d, attempts, err := s.Store.Delivery(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return DeliveryDetail{}, Errorf(ENotFound, "entrega não encontrada")
	} else if err != nil {
		return DeliveryDetail{}, err
	}
	for i := range attempts {
		a := &attempts[i]
		if a.RespostaSelada == nil {
			continue // no answer, or one an earlier version kept in clear that the upgrade has not reached
		}
		var oerr error
		if a.Resposta, oerr = s.Sealer.OpenResponse(a.RespostaSelada, a.EntregaID); oerr != nil {
			a.Resposta = keys.ResponseUnopenable
		}
		a.RespostaSelada = nil
	}
	return DeliveryDetail{Delivery: d, Tentativas: attempts}, nil
}

// Resend puts one dead letter back in line: same body, same sequence.
func (s *Deliveries) Resend(ctx context.Context, id int64) (err error) {
	audit := NewAudit(ctx, AcaoEntregaReenviar, AuditTarget{Tipo: "entrega", ID: strconv.FormatInt(id, 10)},
		Changed("status", EntregaFalhou, EntregaPendente))
	defer func() { recordRefusal(ctx, s.Store, audit, err) }()
	err = s.Store.Resend(ctx, id, s.Now(), audit)
	var c *StateConflict
	switch {
	case errors.Is(err, ErrNotFound):
		return Errorf(ENotFound, "entrega não encontrada")
	case errors.As(err, &c) && c.Status != EntregaFalhou:
		return Errorf(EConflict, "só entregas na situação Falhou podem ser reenviadas (situação atual: %s)", c.Status)
	case errors.As(err, &c):
		return Errorf(EConflict, "o corpo desta entrega já foi expurgado (o prazo de retenção das falhas venceu): ela não pode mais ser reenviada")
	}
	if err == nil {
		s.Dispatcher.Wake()
	}
	return err
}

// Resent is the answer of a bulk resend.
type Resent struct {
	Reenviadas int `json:"reenviadas"`
	// Expurgadas counts the dead letters it left as they were: their body
	// was purged after the retention, so they can no longer be resent.
	Expurgadas int `json:"expurgadas"`
}

// ResendAll resends an integrator's deliveries in a status (falhou) that
// still have their body.
func (s *Deliveries) ResendAll(ctx context.Context, integrador, status string) (_ Resent, err error) {
	audit := NewAudit(ctx, AcaoEntregaReenviarLote, AuditTarget{Tipo: "integrador", ID: integrador},
		Set("status", status))
	audit.CountAs = "reenviadas"
	defer func() { recordRefusal(ctx, s.Store, audit, err) }()
	if status == "" {
		status = EntregaFalhou
	}
	if status != EntregaFalhou {
		return Resent{}, &Error{Code: EInvalid, Message: "só entregas na situação Falhou podem ser reenviadas",
			Details: []Detail{{"/status", "deve ser falhou"}}}
	}
	if integrador == "" {
		return Resent{}, &Error{Code: EInvalid, Message: "integrador obrigatório",
			Details: []Detail{{"/integrador", "obrigatório"}}}
	}
	audit.Campos = []AuditField{Changed("status", status, EntregaPendente)}
	n, purged, err := s.Store.ResendAll(ctx, integrador, status, s.Now(), audit)
	if err != nil {
		return Resent{}, err
	}
	if n > 0 {
		s.Dispatcher.Wake()
	}
	return Resent{Reenviadas: n, Expurgadas: purged}, nil
}

// RedeliverRequest is a gap repair as the API takes it (SPEC 8c): an
// aggregate from a sequence (1 when omitted), or the rows enqueued from
// desde to ate, both included (ate now when omitted).
type RedeliverRequest struct {
	Agregado       string `json:"agregado,omitempty"`
	SequenciaDesde int64  `json:"sequencia_desde,omitempty"`
	Desde          string `json:"desde,omitempty"` // RFC 3339
	Ate            string `json:"ate,omitempty"`
}

// Redeliver is a gap repair: for a CAD that lost its database, the
// integrator's rows in the range are delivered again, as new attempts of
// the same rows (same body, same sequence, a fresh X-Geohub-Entrega-Id),
// in their order. Rows whose body was purged cannot be, and are counted.
func (s *Deliveries) Redeliver(ctx context.Context, integrators *Integrators, id string, req RedeliverRequest) (_ Resent, err error) {
	audit := NewAudit(ctx, AcaoIntegradorReenviar, AuditTarget{Tipo: "integrador", ID: id})
	audit.CountAs = "reenviadas"
	defer func() { recordRefusal(ctx, s.Store, audit, err) }()
	in, err := integrators.Get(ctx, id)
	if err != nil {
		return Resent{}, err
	}
	audit.Alvo.Nome = in.Nome
	r, err := redelivery(req, s.Now())
	if err != nil {
		return Resent{}, err
	}
	if r.Agregado != "" {
		audit.Campos = []AuditField{Set("agregado", r.Agregado), Set("sequencia_desde", r.SequenciaDesde)}
	} else {
		audit.Campos = []AuditField{Set("desde", r.Desde), Set("ate", r.Ate)}
	}
	n, purged, err := s.Store.Redeliver(ctx, id, r, s.Now(), audit)
	var many *TooMany
	if errors.As(err, &many) {
		return Resent{}, Errorf(EInvalid, "o intervalo tem mais de %d entregas: peça em janelas menores", many.Limit)
	}
	if err != nil {
		return Resent{}, err
	}
	if n > 0 {
		s.Dispatcher.Wake()
	}
	return Resent{Reenviadas: n, Expurgadas: purged}, nil
}

func redelivery(req RedeliverRequest, now time.Time) (Redelivery, error) {
	invalid := func(path, why string) error {
		return &Error{Code: EInvalid, Message: "pedido de reenvio inválido: " + why, Details: []Detail{{path, why}}}
	}
	byTime := req.Desde != "" || req.Ate != ""
	switch {
	case req.Agregado != "" && byTime:
		return Redelivery{}, invalid("", "peça por agregado (agregado, sequencia_desde) ou por janela de tempo (desde, ate), não os dois")
	case req.Agregado != "":
		if req.SequenciaDesde < 0 {
			return Redelivery{}, invalid("/sequencia_desde", "deve ser 1 ou mais")
		}
		return Redelivery{Agregado: req.Agregado, SequenciaDesde: max(req.SequenciaDesde, 1)}, nil
	case req.SequenciaDesde != 0:
		return Redelivery{}, invalid("/agregado", "sequencia_desde precisa do agregado")
	case req.Desde == "":
		return Redelivery{}, invalid("/desde", "obrigatório: informe agregado (e sequencia_desde) ou desde (e ate)")
	}
	r := Redelivery{Ate: now.UTC()}
	for _, f := range []struct {
		path, v string
		t       *time.Time
	}{{"/desde", req.Desde, &r.Desde}, {"/ate", req.Ate, &r.Ate}} {
		if f.v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, f.v)
		if err != nil {
			return Redelivery{}, invalid(f.path, "deve ser uma data e hora RFC 3339, como 2026-12-06T14:00:00-03:00")
		}
		*f.t = t.UTC()
	}
	if r.Ate.Before(r.Desde) {
		return Redelivery{}, invalid("/ate", "deve ser depois de desde")
	}
	return r, nil
}

// Test runs the receiver tester (SPEC 8b) against a registered
// integrator's callback with its current secret. Its requests are not
// deliveries: nothing is recorded but the audit entry saying it ran.
func (s *Deliveries) Test(ctx context.Context, integrators *Integrators, id string) (_ TestReport, err error) {
	audit := NewAudit(ctx, AcaoIntegradorTestar, AuditTarget{Tipo: "integrador", ID: id})
	defer func() { recordRefusal(ctx, s.Store, audit, err) }()
	in, err := integrators.Get(ctx, id)
	if err != nil {
		return TestReport{}, err
	}
	audit.Alvo.Nome = in.Nome
	if in.Entrega == EntregaSessao {
		// The tester's requests are POSTs to a URL, and a session
		// integrator has none; the session's own checks are its client's.
		return TestReport{}, Errorf(EInvalid, "este integrador recebe por sessão, sem callback: o teste de receptor envia POSTs a um callback. "+
			"Confira a sessão com o cliente de sessão do SDK (guia, seção 2.1) e com \"Verificar\", que vai pela sessão conectada")
	}
	if _, running := s.testing.LoadOrStore(id, true); running {
		return TestReport{}, &Error{Code: ERateLimited, RetryAfter: TesterBudget,
			Message: "um teste deste receptor já está em andamento: espere ele terminar"}
	}
	defer s.testing.Delete(id)
	current, _, err := integrators.Secrets(ctx, id)
	if err != nil {
		return TestReport{}, err
	}
	rep := s.Tester.Run(ctx, TestTarget{URL: in.CallbackURL, Secret: current, Allowed: in.HostsPermitidos})
	var failed []string
	for _, c := range rep.Verificacoes {
		if c.Resultado == TesteFalhou {
			failed = append(failed, c.ID)
		}
	}
	if !rep.Aprovado {
		audit.Resultado = AuditFalhou
		audit.Detalhe = "falhou em: " + strings.Join(failed, ", ")
	}
	s.Store.AppendAudit(context.WithoutCancel(ctx), *audit)
	return rep, nil
}

// TestEvent is the answer of an integrator's test event: the event, and
// the deliveries it made (one, or none, saying why).
type TestEvent struct {
	Evento   Event  `json:"evento"`
	Entregas int    `json:"entregas"`
	Motivo   string `json:"motivo,omitempty"`
}

// SendTestEvent publishes an integracao:teste event that only the
// integrator receives, through the outbox like any other: a real delivery,
// with its attempts on record, that the receiver accepts and discards.
func (s *Deliveries) SendTestEvent(ctx context.Context, integrators *Integrators, id string) (TestEvent, error) {
	in, err := integrators.Get(ctx, id)
	if err != nil {
		return TestEvent{}, err
	}
	ev, _, err := s.Publisher.Publish(ctx, PublishRequest{Tipo: TestEventType, Origem: ServerName,
		Agregado: "teste:" + uuid.Must(uuid.NewV7()).String(), Autoria: &Autoria{ID: in.ID, Tipo: ActorIntegrador},
		Payload: json.RawMessage(`{"mensagem":"evento de teste pedido pelo integrador: aceite e descarte"}`)})
	if err != nil {
		return TestEvent{}, err
	}
	out := TestEvent{Evento: ev}
	page, err := s.List(ctx, DeliveryFilter{EventID: ev.EventID, Integrador: in.ID})
	if err != nil {
		return TestEvent{}, err
	}
	out.Entregas = page.Total
	audit := NewAudit(ctx, AcaoIntegradorEventoTeste, AuditTarget{Tipo: "integrador", ID: in.ID, Nome: in.Nome},
		Set("event_id", ev.EventID), Set("entregas", out.Entregas))
	s.Store.AppendAudit(context.WithoutCancel(ctx), *audit)
	switch {
	case out.Entregas > 0:
	case !in.Ativo:
		out.Motivo = "o integrador está inativo: não recebe entregas até ser verificado ou reativado"
	case !in.Wants(TestEventType):
		out.Motivo = "os eventos do integrador não incluem integracao:teste: inclua integracao:* nos eventos dele"
	default:
		out.Motivo = "o integrador não tem callback para receber entregas"
	}
	return out, nil
}

// RetryNowInterval is the least time between two "Tentar agora" of one
// integrator: long enough that clicks and scripts do not multiply the
// attempts, short enough for an operator who just fixed the CAD.
const RetryNowInterval = 5 * time.Second

// RetryResult is the answer of "Tentar agora" for an integrator.
type RetryResult struct {
	// Antecipadas counts the pending deliveries that were waiting for a
	// later attempt and are due now.
	Antecipadas int     `json:"antecipadas"`
	Circuito    Circuit `json:"circuito"`
}

// RetryNow is an operator's "Tentar agora" for an integrator (SPEC 9): its
// circuit closes and its pending deliveries are due now, in their order.
// It is for a CAD that came back: without it, its queue keeps the backoff
// slots it earned while down, up to an hour away.
func (s *Deliveries) RetryNow(ctx context.Context, integrators *Integrators, id string) (_ RetryResult, err error) {
	audit := NewAudit(ctx, AcaoIntegradorTentarAgora, AuditTarget{Tipo: "integrador", ID: id}, Set("circuito", "fechado"))
	audit.CountAs = "antecipadas"
	defer func() { recordRefusal(ctx, s.Store, audit, err) }()
	in, err := integrators.Get(ctx, id)
	if err != nil {
		return RetryResult{}, err
	}
	audit.Alvo.Nome = in.Nome
	if !in.Ativo {
		return RetryResult{}, Errorf(EConflict, "integrador inativo: reative-o (ou use Verificar) antes de tentar agora")
	}
	// Each one makes the whole queue due and probes the CAD: repeated,
	// they turned into hundreds of requests to a CAD that was failing
	// (issue 26, L6).
	wait, err := s.Slots.ClaimReprocess(ctx, "tentar-agora:"+id, s.Now(), RetryNowInterval)
	if err != nil {
		return RetryResult{}, err
	}
	if wait > 0 {
		return RetryResult{}, &Error{Code: ERateLimited, RetryAfter: wait,
			Message: fmt.Sprintf("“Tentar agora” deste integrador acabou de ser pedido; de novo em %d s", int(wait.Seconds())+1)}
	}
	d := s.Dispatcher
	n, err := s.Store.DueNow(ctx, id, 0, s.Now(), audit)
	if err != nil {
		return RetryResult{}, err
	}
	d.CloseCircuit(id)
	d.Wake()
	return RetryResult{Antecipadas: n, Circuito: integrators.circuits.circuit(id, d.Now())}, nil
}

// RetryDeliveryNow makes one pending delivery due now. An open circuit still
// holds it until the circuit's probe: RetryNow closes the circuit.
func (s *Deliveries) RetryDeliveryNow(ctx context.Context, id int64) (_ DeliveryDetail, err error) {
	audit := NewAudit(ctx, AcaoEntregaTentarAgora, AuditTarget{Tipo: "entrega", ID: strconv.FormatInt(id, 10)})
	defer func() { recordRefusal(ctx, s.Store, audit, err) }()
	del, err := s.Get(ctx, id)
	if err != nil {
		return DeliveryDetail{}, err
	}
	if _, err := s.Store.DueNow(ctx, del.Integrador, id, s.Now(), audit); err != nil {
		var c *StateConflict
		switch {
		case errors.Is(err, ErrNotFound):
			err = Errorf(ENotFound, "entrega não encontrada")
		case errors.As(err, &c) && c.Status == EntregaFalhou:
			err = Errorf(EConflict, "esta entrega falhou: use Reenviar para pô-la de volta na fila")
		case errors.As(err, &c) && c.Status == EntregaProcessando:
			err = Errorf(EConflict, "esta entrega está sendo enviada agora")
		case errors.As(err, &c):
			err = Errorf(EConflict, "esta entrega já foi entregue")
		}
		return DeliveryDetail{}, err
	}
	s.Dispatcher.Wake()
	return s.Get(ctx, id)
}

// Verify sends a signed integracao:verificacao ping straight to the
// integrator (not through the outbox); a 2xx answer makes it active again.
func (s *Deliveries) Verify(ctx context.Context, integrators *Integrators, id string) (_ Attempt, err error) {
	audit := NewAudit(ctx, AcaoIntegradorVerificar, AuditTarget{Tipo: "integrador", ID: id})
	defer func() { recordRefusal(ctx, s.Store, audit, err) }()
	in, err := integrators.Get(ctx, id)
	if err != nil {
		return Attempt{}, err
	}
	audit.Alvo.Nome = in.Nome
	d := s.Dispatcher
	now := d.Now().UTC()
	eventID := uuid.Must(uuid.NewV7()).String()
	body, err := buildEnvelope(Event{EventID: eventID, Tipo: "integracao:verificacao", VersaoSchema: DefaultVersao,
		Origem: ServerName, Autoria: &Autoria{ID: ServerName, Tipo: ActorSistema}, Timestamp: now},
		[]byte(fmt.Sprintf(`{"integrador":%q}`, in.ID)))
	if err != nil {
		return Attempt{}, err
	}
	a := Attempt{EntregaID: uuid.Must(uuid.NewV7()).String(), Tentativa: 1, Inicio: now}
	r := d.send(ctx, in, Request{EventID: eventID, Agregado: "verificacao:" + eventID, Sequencia: 1,
		Corpo: body, EntregaID: a.EntregaID, Tentativa: 1})
	a.DuracaoMS, a.StatusCode, a.Resposta = d.Now().Sub(now).Milliseconds(), r.Status, r.Snippet
	if r.Err != nil {
		a.Erro = r.Err.Error()
		// Nothing changed: the entry stands alone, saying what failed.
		audit.Resultado, audit.Detalhe = AuditFalhou, "sem resposta do receptor: "+withoutDetail(a.Erro)
		s.Store.AppendAudit(context.WithoutCancel(ctx), *audit)
		return a, nil
	}
	audit.Detalhe = fmt.Sprintf("o receptor respondeu HTTP %d", r.Status)
	if !r.Succeeded() {
		audit.Resultado = AuditFalhou
		s.Store.AppendAudit(context.WithoutCancel(ctx), *audit)
	}
	if r.Succeeded() {
		// A success: active again, failing period over, circuit closed,
		// in the transaction that records the verification.
		if err := integrators.reactivate(ctx, id, audit); err != nil {
			return a, err
		}
		d.CloseCircuit(id)
		d.Wake()
	}
	return a, nil
}
