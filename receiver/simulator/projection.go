package simulator

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"geohub/receiver"
)

// Projection is the CAD's state: its ocorrências with the state of EACH
// despacho, the jornadas it heard of and the outcomes of its commands. It
// implements [receiver.Handler]; it is safe for concurrent use.
//
// # Merging, and why the order of arrival does not matter
//
// The projection learns from three sources that arrive in no mutual order:
// full snapshots of an ocorrência (the HTTP response of a command, or the
// resultado of integracao:comando-concluido, which reaches the CAD in its
// own aggregate solicitacao:<id>), and the incremental ocorrencia:* events
// caused by someone else (an operator), in order within ocorrencia:<id>.
//
// Every status only moves forward (aberta → em_atendimento → encerrada;
// em_deslocamento → no_local → liberado, or → cancelado) and a despacho is
// never removed, so each source is merged as a join, commutative and
// idempotent:
//
//   - a status becomes the later one of the stored and the new (by its
//     place in its state machine);
//   - versao becomes the higher one. A snapshot with a higher versao is a
//     superset of every older one, so merging it is replacing the stored
//     snapshot; a snapshot with a lower versao changes nothing. Unlike a
//     plain replacement, the merge keeps a despacho move that arrived as an
//     event before an older snapshot;
//   - despachos are ordered as the longest snapshot lists them, followed by
//     those learned only from events, in the order of their aggregate.
//
// The incremental events carry no versao. The delivery's
// X-Geohub-Sequencia on ocorrencia:<id> is used instead: Geohub numbers the
// events of an ocorrência for its originator 1, 2, 3…, one per event, so
// the sequence is the versao that event produced when the CAD receives
// every event of the ocorrência, and a lower bound otherwise; it never
// lowers the stored versao.
type Projection struct {
	mu          sync.Mutex
	ocorrencias map[string]*ocState
	owner       map[string]string // despacho id → ocorrência id
	jornadas    map[string]string
	outcomes    map[string]Outcome
	changed     chan struct{}
}

type ocState struct {
	id, natureza, status string
	versao               int64
	prefix               []string            // despacho ids of the longest snapshot
	learned              []string            // despacho ids from events, in aggregate order
	despachos            map[string]Despacho // by id
}

// NewProjection returns an empty projection.
func NewProjection() *Projection {
	return &Projection{
		ocorrencias: map[string]*ocState{},
		owner:       map[string]string{},
		jornadas:    map[string]string{},
		outcomes:    map[string]Outcome{},
		changed:     make(chan struct{}),
	}
}

var (
	ocorrenciaRank = map[string]int{StatusAberta: 1, StatusEmAtendimento: 2, StatusEncerrada: 3}
	despachoRank   = map[string]int{DespachoEmDeslocamento: 1, DespachoNoLocal: 2, DespachoLiberado: 3, DespachoCancelado: 3}
	jornadaRank    = map[string]int{JornadaIniciada: 1, JornadaEncerrada: 2}
)

// join returns the later of two statuses. An unknown status ranks below
// the known ones; ties (which a valid history never has) break by name so
// the result does not depend on the order of the arguments.
func join(rank map[string]int, a, b string) string {
	switch {
	case b == "":
		return a
	case a == "":
		return b
	}
	ra, rb := rank[a], rank[b]
	if rb > ra || (rb == ra && b > a) {
		return b
	}
	return a
}

// Apply implements [receiver.Handler]. The receiver has already verified,
// deduplicated, ordered and dropped the CAD's own echo. Unknown types are
// ignored; a payload that does not decode is an error (500: Geohub retries,
// then dead-letters it where an operator sees it).
func (p *Projection) Apply(_ context.Context, d receiver.Delivery) error {
	var err error
	switch {
	case strings.HasPrefix(d.Tipo, "ocorrencia:"):
		err = p.applyOcorrenciaEvent(d)
	case d.Tipo == TipoComandoConcluido || d.Tipo == TipoComandoRecusado:
		err = p.applyOutcomeEvent(d)
	case d.Tipo == TipoJornadaIniciada || d.Tipo == TipoJornadaEncerrada:
		err = p.applyJornada(d)
	}
	if err != nil {
		return fmt.Errorf("simulator: %s %s: %w", d.Tipo, d.ID, err)
	}
	return nil
}

func aggregateID(d receiver.Delivery, family string) string {
	id, _ := strings.CutPrefix(d.Agregado, family+":")
	if id == d.Agregado {
		return ""
	}
	return id
}

func (p *Projection) applyOcorrenciaEvent(d receiver.Delivery) error {
	aggID := aggregateID(d, "ocorrencia")
	var ocID string
	p.mu.Lock()
	defer p.mu.Unlock()
	switch d.Tipo {
	case TipoRegistrada:
		var pl struct {
			ID       string `json:"id"`
			Natureza string `json:"natureza"`
			Status   string `json:"status"`
		}
		if err := json.Unmarshal(d.Payload, &pl); err != nil {
			return err
		}
		ocID = firstOf(pl.ID, aggID)
		if ocID == "" {
			return errMissing("id")
		}
		s := p.ensure(ocID)
		if s.natureza == "" {
			s.natureza = pl.Natureza
		}
		s.status = join(ocorrenciaRank, s.status, firstOf(pl.Status, StatusAberta))
	case TipoDespachada:
		var pl struct {
			Despacho Despacho `json:"despacho"`
		}
		if err := json.Unmarshal(d.Payload, &pl); err != nil {
			return err
		}
		if pl.Despacho.ID == "" {
			return errMissing("despacho.id")
		}
		ocID = firstOf(pl.Despacho.OcorrenciaID, aggID)
		if ocID == "" {
			return errMissing("despacho.ocorrenciaId")
		}
		p.mergeDespacho(p.ensure(ocID), pl.Despacho, true)
	case TipoDespachoMudouStatus:
		var pl struct {
			ID           string `json:"id"`
			OcorrenciaID string `json:"ocorrenciaId"`
			Para         string `json:"para"`
		}
		if err := json.Unmarshal(d.Payload, &pl); err != nil {
			return err
		}
		if pl.ID == "" || pl.Para == "" {
			return errMissing("id/para")
		}
		ocID = firstOf(pl.OcorrenciaID, firstOf(p.owner[pl.ID], aggID))
		if ocID == "" {
			return errMissing("ocorrenciaId")
		}
		p.mergeDespacho(p.ensure(ocID), Despacho{ID: pl.ID, OcorrenciaID: ocID, Status: pl.Para}, true)
	case TipoMudouStatus:
		var pl struct {
			ID   string `json:"id"`
			Para string `json:"para"`
		}
		if err := json.Unmarshal(d.Payload, &pl); err != nil {
			return err
		}
		ocID = firstOf(pl.ID, aggID)
		if ocID == "" || pl.Para == "" {
			return errMissing("id/para")
		}
		s := p.ensure(ocID)
		s.status = join(ocorrenciaRank, s.status, pl.Para)
	default:
		return nil
	}
	if ocID == aggID && d.Sequencia > 0 {
		s := p.ocorrencias[ocID]
		s.versao = max(s.versao, d.Sequencia)
	}
	p.notify()
	return nil
}

func (p *Projection) applyOutcomeEvent(d receiver.Delivery) error {
	var pl struct {
		Comando struct {
			Metodo string `json:"metodo"`
			Rota   string `json:"rota"`
		} `json:"comando"`
		Status    int             `json:"status"`
		Resultado json.RawMessage `json:"resultado"`
		Motivo    *Motivo         `json:"motivo"`
	}
	if err := json.Unmarshal(d.Payload, &pl); err != nil {
		return err
	}
	sol := firstOf(d.Origem.Solicitacao, aggregateID(d, "solicitacao"))
	if sol == "" {
		return nil // an outcome of nothing the CAD can name
	}
	o := Outcome{
		Solicitacao: sol,
		Status:      pl.Status,
		Concluded:   d.Tipo == TipoComandoConcluido,
		Metodo:      pl.Comando.Metodo,
		Rota:        pl.Comando.Rota,
		Motivo:      pl.Motivo,
		FromEvent:   true,
	}
	var snap *Ocorrencia
	if o.Concluded && isOcorrenciaRoute(pl.Comando.Rota) && len(pl.Resultado) > 0 && string(pl.Resultado) != "null" {
		r, err := DecodeOcorrencia(pl.Resultado)
		if err != nil {
			return fmt.Errorf("resultado: %w", err)
		}
		if r.ID != "" {
			o.OcorrenciaID = r.ID
			snap = &r
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if snap != nil {
		p.mergeSnapshot(*snap)
	}
	p.recordOutcome(o)
	p.notify()
	return nil
}

func (p *Projection) applyJornada(d receiver.Delivery) error {
	var pl struct {
		JornadaID string `json:"jornadaId"`
	}
	if err := json.Unmarshal(d.Payload, &pl); err != nil {
		return err
	}
	id := firstOf(pl.JornadaID, aggregateID(d, "jornada"))
	if id == "" {
		return errMissing("jornadaId")
	}
	status := JornadaIniciada
	if d.Tipo == TipoJornadaEncerrada {
		status = JornadaEncerrada
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.jornadas[id] = join(jornadaRank, p.jornadas[id], status)
	p.notify()
	return nil
}

// isOcorrenciaRoute reports whether a command's route acts on ocorrências
// (an empty route is taken as one: the resultado is then judged by its id).
func isOcorrenciaRoute(rota string) bool {
	return rota == "" || rota == ocorrenciasPath || strings.HasPrefix(rota, ocorrenciasPath+"/")
}

func errMissing(field string) error { return fmt.Errorf("payload without %s", field) }

// firstOf returns a if it is not empty, else b.
func firstOf(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// ApplySnapshot merges a full ocorrência (a command's response) into the
// projection; see the type's doc. A snapshot without id is ignored.
func (p *Projection) ApplySnapshot(o Ocorrencia) {
	if o.ID == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mergeSnapshot(o)
	p.notify()
}

// recordResponse notes the outcome a command's HTTP response gave.
func (p *Projection) recordResponse(o Outcome) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.recordOutcome(o)
	p.notify()
}

// recordOutcome merges o into the stored outcome: the first one seen
// stands (both paths carry the same first outcome), blanks are filled and
// the paths are added up. The caller holds mu.
func (p *Projection) recordOutcome(o Outcome) {
	old, ok := p.outcomes[o.Solicitacao]
	if !ok {
		p.outcomes[o.Solicitacao] = o
		return
	}
	old.FromEvent = old.FromEvent || o.FromEvent
	old.FromResponse = old.FromResponse || o.FromResponse
	if old.Metodo == "" {
		old.Metodo = o.Metodo
	}
	if old.Rota == "" {
		old.Rota = o.Rota
	}
	if old.OcorrenciaID == "" {
		old.OcorrenciaID = o.OcorrenciaID
	}
	if old.Motivo == nil {
		old.Motivo = o.Motivo
	}
	p.outcomes[o.Solicitacao] = old
}

// ensure returns the state of ocorrência id, creating an empty one. The
// caller holds mu.
func (p *Projection) ensure(id string) *ocState {
	s := p.ocorrencias[id]
	if s == nil {
		s = &ocState{id: id, despachos: map[string]Despacho{}}
		p.ocorrencias[id] = s
	}
	return s
}

// mergeSnapshot joins a full ocorrência into the store. The caller holds mu.
func (p *Projection) mergeSnapshot(o Ocorrencia) {
	s := p.ensure(o.ID)
	if s.natureza == "" {
		s.natureza = o.Natureza
	}
	s.status = join(ocorrenciaRank, s.status, o.Status)
	s.versao = max(s.versao, o.Versao)
	ids := make([]string, 0, len(o.Despachos))
	for _, d := range o.Despachos {
		if d.ID == "" || slices.Contains(ids, d.ID) {
			continue
		}
		ids = append(ids, d.ID)
		p.mergeDespacho(s, d, false)
	}
	if o.Despacho != nil && o.Despacho.ID != "" {
		p.mergeDespacho(s, *o.Despacho, false)
	}
	if len(ids) > len(s.prefix) {
		s.prefix = ids
	}
}

// mergeDespacho joins one despacho into s; fromEvent records it in the
// event order. The caller holds mu.
func (p *Projection) mergeDespacho(s *ocState, d Despacho, fromEvent bool) {
	cur, ok := s.despachos[d.ID]
	if !ok {
		cur = Despacho{ID: d.ID, OcorrenciaID: s.id}
	}
	if cur.Recurso.Identificador == "" {
		cur.Recurso = d.Recurso
	}
	cur.Status = join(despachoRank, cur.Status, d.Status)
	s.despachos[d.ID] = cur
	p.owner[d.ID] = s.id
	if fromEvent && !slices.Contains(s.learned, d.ID) {
		s.learned = append(s.learned, d.ID)
	}
}

// snapshot returns the ocorrência as a value. The caller holds mu.
func (s *ocState) snapshot() Ocorrencia {
	o := Ocorrencia{ID: s.id, Natureza: s.natureza, Status: s.status, Versao: s.versao,
		Despachos: make([]Despacho, 0, len(s.despachos))}
	done := make(map[string]bool, len(s.despachos))
	add := func(id string) {
		if d, ok := s.despachos[id]; ok && !done[id] {
			done[id] = true
			o.Despachos = append(o.Despachos, d)
		}
	}
	for _, id := range s.prefix {
		add(id)
	}
	for _, id := range s.learned {
		add(id)
	}
	// Only an inconsistent history leaves any: keep them, in a fixed order.
	for _, id := range slices.Sorted(maps.Keys(s.despachos)) {
		add(id)
	}
	return o
}

// notify wakes whoever waits for a change. The caller holds mu.
func (p *Projection) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// Changed returns a channel closed at the projection's next change.
func (p *Projection) Changed() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.changed
}

// WaitUntil blocks until cond holds or ctx ends (then it returns ctx's
// error). cond is called without any lock held, so it may use the
// accessors.
func (p *Projection) WaitUntil(ctx context.Context, cond func(*Projection) bool) error {
	for {
		ch := p.Changed()
		if cond(p) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Ocorrencia returns a copy of ocorrência id.
func (p *Projection) Ocorrencia(id string) (Ocorrencia, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.ocorrencias[id]
	if !ok {
		return Ocorrencia{}, false
	}
	return s.snapshot(), true
}

// Ocorrencias returns a copy of every ocorrência, sorted by id.
func (p *Projection) Ocorrencias() []Ocorrencia {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Ocorrencia, 0, len(p.ocorrencias))
	for _, id := range slices.Sorted(maps.Keys(p.ocorrencias)) {
		out = append(out, p.ocorrencias[id].snapshot())
	}
	return out
}

// Despacho returns a copy of despacho id.
func (p *Projection) Despacho(id string) (Despacho, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.ocorrencias[p.owner[id]]
	if !ok {
		return Despacho{}, false
	}
	d, ok := s.despachos[id]
	return d, ok
}

// Jornadas returns jornada id → "iniciada" or "encerrada".
func (p *Projection) Jornadas() map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.jornadas)
}

// Outcome returns what the CAD knows of the command sent with x-solicitacao-id
// solicitacao.
func (p *Projection) Outcome(solicitacao string) (Outcome, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	o, ok := p.outcomes[solicitacao]
	return copyOutcome(o), ok
}

// Outcomes returns every known outcome, by x-solicitacao-id.
func (p *Projection) Outcomes() map[string]Outcome {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]Outcome, len(p.outcomes))
	for k, o := range p.outcomes {
		out[k] = copyOutcome(o)
	}
	return out
}

func copyOutcome(o Outcome) Outcome {
	if o.Motivo != nil {
		m := *o.Motivo
		m.Detalhes = slices.Clone(m.Detalhes)
		o.Motivo = &m
	}
	return o
}
