package ocorrencia

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"geohub/app"
)

// Colonia is the read model's consumer (SPEC 4.5, 7): its failures go to the
// DLQ under this name, and reprocessing it repairs the read model.
const Colonia = "ocorrencias"

// Summary is one row of the list: the projection with who registered it and
// when, and when it last changed.
type Summary struct {
	Ocorrencia
	Integrador   string    `json:"integrador,omitempty"` // the originator; "" when an operator registered it
	RegistradaEm time.Time `json:"registrada_em"`
	AtualizadaEm time.Time `json:"atualizada_em"`
	// Cursor is the registration's sequence: the list's keyset (Filter.Antes).
	Cursor int64 `json:"-"`
	// UltimaSequencia is the last event folded into the row.
	UltimaSequencia int64 `json:"-"`
}

// Filter selects a page of the list, newest registration first.
type Filter struct {
	Status, Natureza, Integrador string
	Inicio, Fim                  time.Time // registration time in [Inicio, Fim); zero = open
	Antes                        int64     // rows registered before this cursor; 0 = from the newest
	Limite                       int       // default 100, capped at 500
}

// List is a page of ocorrências.
type List struct {
	Linhas []Summary `json:"linhas"`
	Limite int       `json:"limite"`
	// Proximo is the next page's cursor (as the antes parameter), "" at the end.
	Proximo string `json:"proximo,omitempty"`
	// TruncadaPorTamanho says the page stopped before limite at
	// app.PageBytes.
	TruncadaPorTamanho bool `json:"truncada_por_tamanho,omitempty"`
}

// ReadModel keeps the list's rows (implemented by package store).
type ReadModel interface {
	// SaveOcorrencia writes a row, unless the stored one already folded a
	// later event: a slow fold never overwrites a newer one.
	SaveOcorrencia(ctx context.Context, s Summary) error
	// Ocorrencias returns up to f.Limite rows matching f, newest
	// first, fewer once they reach app.PageBytes: cut says so.
	Ocorrencias(ctx context.Context, f Filter) (rows []Summary, cut bool, err error)
}

// The list's paging bounds, as every list's.
const (
	defaultLimite = 100
	maxLimite     = 500
)

// Subscribe registers the read model's handlers, one per event type of the
// plugin, with the in-process consumers. Call it before Consumers.Start.
func (s *Service) Subscribe(c *app.Consumers) {
	for _, tipo := range []string{TipoRegistrada, TipoDespachada, TipoDespachoMudouStatus, TipoMudouStatus} {
		c.Subscribe(tipo, Colonia, "ocorrencia.projetar", s.project)
	}
}

// project brings the row of ev's ocorrência up to date. It folds the
// aggregate from the log rather than applying ev to the stored row, so it is
// idempotent and order-free: a replay after a crash, an event applied once
// more, or a failed event reprocessed after later ones all end in the fold
// of the log. The cost is one read of the aggregate (a handful of events)
// per event.
func (s *Service) project(ctx context.Context, ev app.Event) error {
	if s.BeforeProject != nil {
		if err := s.BeforeProject(ctx, ev); err != nil {
			return err
		}
	}
	id, ok := strings.CutPrefix(ev.Agregado, "ocorrencia:")
	if !ok {
		return nil // not an ocorrência's event: nothing to project
	}
	o, err := s.load(ctx, id)
	if errors.Is(err, app.ErrNotFound) {
		return nil // an aggregate without a registration has no row
	}
	if err != nil {
		return fmt.Errorf("fold ocorrência %s: %w", id, err)
	}
	if err := s.ReadModel.SaveOcorrencia(ctx, summary(o)); err != nil {
		return fmt.Errorf("save ocorrência %s: %w", id, err)
	}
	s.Changed.Notify()
	return nil
}

func summary(o Ocorrencia) Summary {
	o.Despacho = nil
	return Summary{Ocorrencia: o, Integrador: o.originador, RegistradaEm: o.registradaEm,
		AtualizadaEm: o.atualizadaEm, Cursor: o.registradaSeq, UltimaSequencia: o.ultimaSeq}
}

// List answers a page of the read model. An integrator's caller passes its
// own id as f.Integrador and sees only the ocorrências it registered.
func (s *Service) List(ctx context.Context, f Filter) (List, error) {
	if f.Limite <= 0 {
		f.Limite = defaultLimite
	}
	f.Limite = min(f.Limite, maxLimite)
	if !f.Inicio.IsZero() && !f.Fim.IsZero() && !f.Fim.After(f.Inicio) {
		return List{}, &app.Error{Code: app.EInvalid, Message: "período inválido",
			Details: []app.Detail{{Caminho: "/registrada_fim", Mensagem: "deve ser posterior a registrada_inicio"}}}
	}
	if f.Status != "" && f.Status != Aberta && f.Status != EmAtendimento && f.Status != Encerrada {
		return List{}, &app.Error{Code: app.EInvalid, Message: "filtro inválido",
			Details: []app.Detail{{Caminho: "/status", Mensagem: "aberta, em_atendimento ou encerrada"}}}
	}
	rows, cut, err := s.ReadModel.Ocorrencias(ctx, f)
	if err != nil {
		return List{}, err
	}
	l := List{Linhas: rows, Limite: f.Limite, TruncadaPorTamanho: cut}
	if len(rows) == f.Limite || cut {
		l.Proximo = strconv.FormatInt(rows[len(rows)-1].Cursor, 10)
	}
	return l, nil
}
