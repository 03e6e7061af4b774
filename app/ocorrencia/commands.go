package ocorrencia

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"

	"geohub/app"
)

// Local is a point, as the CAD sends it.
// Pointers, so a missing coordinate reaches the schema as null rather than
// as a plausible 0.
type Local struct {
	Lat *float64 `json:"lat"`
	Lng *float64 `json:"lng"`
}

// RegisterRequest is the body of POST /api/ocorrencias.
type RegisterRequest struct {
	Natureza  string `json:"natureza"`
	Descricao string `json:"descricao,omitempty"`
	Endereco  string `json:"endereco,omitempty"`
	Local     *Local `json:"local,omitempty"`
}

// DispatchRequest is the body of POST /api/ocorrencias/{id}/despachos.
type DispatchRequest struct {
	Recurso Recurso `json:"recurso"`
}

// StatusRequest is the body of both status routes.
type StatusRequest struct {
	Para string `json:"para"`
}

// despachoNext is the despacho state machine: em_deslocamento → no_local →
// liberado, or em_deslocamento → cancelado.
var despachoNext = map[string][]string{
	EmDeslocamento: {NoLocal, Cancelado},
	NoLocal:        {Liberado},
}

// ocorrenciaNext is the ocorrência state machine. em_atendimento normally
// follows the first arrival on its own, but an operator's CAD may set it.
var ocorrenciaNext = map[string][]string{
	Aberta:        {EmAtendimento, Encerrada},
	EmAtendimento: {Encerrada},
}

func decode(body []byte, v any) error {
	return app.DecodeJSON(bytes.NewReader(body), v)
}

func newID() string {
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.NewString()
	}
	return id.String()
}

// Register opens an ocorrência; the caller becomes its originator.
func (s *Service) Register(ctx context.Context, cmd app.Command) (app.Outcome, error) {
	return s.Commands.Run(ctx, cmd, func(ctx context.Context) (app.Result, error) {
		var req RegisterRequest
		if err := decode(cmd.Body, &req); err != nil {
			return app.Result{}, err
		}
		req.Natureza = strings.TrimSpace(req.Natureza)
		id := newID()
		payload, err := json.Marshal(struct {
			ID     string `json:"id"`
			Status string `json:"status"`
			RegisterRequest
		}{id, Aberta, req})
		if err != nil {
			return app.Result{}, err
		}
		ev := app.PublishRequest{Tipo: TipoRegistrada, Origem: Plugin, Agregado: "ocorrencia:" + id, Payload: payload}
		// The registry's schema is the one set of rules for the body.
		if err := s.Publisher.Validate(ev); err != nil {
			return app.Result{}, underPayload(err)
		}
		o := Ocorrencia{ID: id, Natureza: req.Natureza, Status: Aberta, Versao: 1}
		return app.Result{Status: http.StatusCreated, Body: o.answer(nil), Events: []app.PublishRequest{ev}}, nil
	})
}

// Dispatch sends a resource to the ocorrência.
func (s *Service) Dispatch(ctx context.Context, cmd app.Command, ocorrenciaID string) (app.Outcome, error) {
	return s.Commands.Run(ctx, cmd, func(ctx context.Context) (app.Result, error) {
		var req DispatchRequest
		if err := decode(cmd.Body, &req); err != nil {
			return app.Result{}, err
		}
		ident := strings.TrimSpace(req.Recurso.Identificador)
		if ident == "" || utf8.RuneCountInString(ident) > 40 {
			return app.Result{}, invalid("/recurso/identificador", "obrigatório, até 40 caracteres")
		}
		o, err := s.owned(ctx, cmd, ocorrenciaID)
		if err != nil {
			return app.Result{}, err
		}
		if o.Status == Encerrada {
			return app.Result{}, conflict("ocorrência %s está encerrada: não recebe despachos", o.ID)
		}
		for _, d := range o.Despachos {
			if d.active() && d.Recurso.Identificador == ident {
				return app.Result{}, conflict("recurso %s já está despachado nesta ocorrência (despacho %s, %s)", ident, d.ID, d.Status)
			}
		}
		if len(o.Despachos) >= MaxDespachos {
			return app.Result{}, invalid("/recurso", fmt.Sprintf("a ocorrência já tem %d despachos, o máximo: registre uma nova ocorrência para os próximos recursos", MaxDespachos))
		}
		d := Despacho{ID: newID(), OcorrenciaID: o.ID, Recurso: Recurso{Identificador: ident}, Status: EmDeslocamento}
		payload, err := json.Marshal(struct {
			Despacho Despacho `json:"despacho"`
		}{d})
		if err != nil {
			return app.Result{}, err
		}
		o.Versao++
		return app.Result{Status: http.StatusCreated, Body: o.answer(&d), Events: []app.PublishRequest{
			{Tipo: TipoDespachada, Origem: Plugin, Agregado: "ocorrencia:" + o.ID, Payload: payload},
		}}, nil
	})
}

// SetDispatchStatus moves one despacho. The ocorrência's first arrival
// (no_local while it is still aberta) also moves it to em_atendimento.
func (s *Service) SetDispatchStatus(ctx context.Context, cmd app.Command, ocorrenciaID, despachoID string) (app.Outcome, error) {
	return s.Commands.Run(ctx, cmd, func(ctx context.Context) (app.Result, error) {
		var req StatusRequest
		if err := decode(cmd.Body, &req); err != nil {
			return app.Result{}, err
		}
		switch req.Para {
		case EmDeslocamento, NoLocal, Liberado, Cancelado:
		default:
			return app.Result{}, invalid("/para", "deve ser em_deslocamento, no_local, liberado ou cancelado")
		}
		o, err := s.owned(ctx, cmd, ocorrenciaID)
		if err != nil {
			return app.Result{}, err
		}
		if d, err := uuid.Parse(despachoID); err == nil && len(despachoID) == 36 {
			despachoID = d.String()
		}
		i, ok := o.despacho(despachoID)
		if !ok {
			return app.Result{}, app.Errorf(app.ENotFound, "despacho %s não encontrado na ocorrência %s", despachoID, o.ID)
		}
		d := o.Despachos[i]
		if !slices.Contains(despachoNext[d.Status], req.Para) {
			return app.Result{}, conflict("transição inválida: despacho %s", transitionReason(d.Status, req.Para, despachoNext))
		}
		agregado := "ocorrencia:" + o.ID
		events := []app.PublishRequest{{Tipo: TipoDespachoMudouStatus, Origem: Plugin, Agregado: agregado,
			Payload: mustJSON(map[string]string{"id": d.ID, "ocorrenciaId": o.ID, "de": d.Status, "para": req.Para})}}
		o.Despachos[i].Status = req.Para
		o.Versao++
		if req.Para == NoLocal && o.Status == Aberta {
			events = append(events, app.PublishRequest{Tipo: TipoMudouStatus, Origem: Plugin, Agregado: agregado,
				Payload: mustJSON(map[string]string{"id": o.ID, "de": o.Status, "para": EmAtendimento})})
			o.Status = EmAtendimento
			o.Versao++
		}
		changed := o.Despachos[i]
		return app.Result{Status: http.StatusOK, Body: o.answer(&changed), Events: events}, nil
	})
}

// SetStatus moves the ocorrência. It cannot be closed while a resource is
// still on its way or on site: those despachos are released or cancelled
// first, so no vehicle is left assigned to a closed ocorrência.
func (s *Service) SetStatus(ctx context.Context, cmd app.Command, ocorrenciaID string) (app.Outcome, error) {
	return s.Commands.Run(ctx, cmd, func(ctx context.Context) (app.Result, error) {
		var req StatusRequest
		if err := decode(cmd.Body, &req); err != nil {
			return app.Result{}, err
		}
		switch req.Para {
		case Aberta, EmAtendimento, Encerrada:
		default:
			return app.Result{}, invalid("/para", "deve ser aberta, em_atendimento ou encerrada")
		}
		o, err := s.owned(ctx, cmd, ocorrenciaID)
		if err != nil {
			return app.Result{}, err
		}
		if !slices.Contains(ocorrenciaNext[o.Status], req.Para) {
			return app.Result{}, conflict("transição inválida: ocorrência %s", transitionReason(o.Status, req.Para, ocorrenciaNext))
		}
		if req.Para == Encerrada {
			var busy []string
			for _, d := range o.Despachos {
				if d.active() {
					busy = append(busy, fmt.Sprintf("%s (%s, %s)", d.ID, d.Recurso.Identificador, d.Status))
				}
			}
			if len(busy) > 0 {
				return app.Result{}, conflict("ocorrência com despachos ativos não pode ser encerrada: libere ou cancele %s", strings.Join(busy, ", "))
			}
		}
		events := []app.PublishRequest{{Tipo: TipoMudouStatus, Origem: Plugin, Agregado: "ocorrencia:" + o.ID,
			Payload: mustJSON(map[string]string{"id": o.ID, "de": o.Status, "para": req.Para})}}
		o.Status = req.Para
		o.Versao++
		return app.Result{Status: http.StatusOK, Body: o.answer(nil), Events: events}, nil
	})
}

// transitionReason says why from → to is refused and what is allowed.
func transitionReason(from, to string, next map[string][]string) string {
	allowed := next[from]
	switch {
	case from == to:
		return fmt.Sprintf("já está em %s", from)
	case len(allowed) == 0:
		return fmt.Sprintf("está em %s, que é final", from)
	}
	return fmt.Sprintf("está em %s e só pode ir para %s, não para %s", from, strings.Join(allowed, " ou "), to)
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // maps of strings always encode
	}
	return b
}
