package simulator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
)

// Ocorrência statuses (SPEC 7).
const (
	StatusAberta        = "aberta"
	StatusEmAtendimento = "em_atendimento"
	StatusEncerrada     = "encerrada"
)

// Despacho statuses (SPEC 7).
const (
	DespachoEmDeslocamento = "em_deslocamento"
	DespachoNoLocal        = "no_local"
	DespachoLiberado       = "liberado"
	DespachoCancelado      = "cancelado"
)

// The event types the projection reads.
const (
	TipoRegistrada          = "ocorrencia:registrada"
	TipoDespachada          = "ocorrencia:despachada"
	TipoDespachoMudouStatus = "ocorrencia:despacho-mudou-status"
	TipoMudouStatus         = "ocorrencia:mudou-status"
	TipoComandoConcluido    = "integracao:comando-concluido"
	TipoComandoRecusado     = "integracao:comando-recusado"
	TipoJornadaIniciada     = "jornada:iniciada"
	TipoJornadaEncerrada    = "jornada:encerrada"
)

// Jornada statuses, as kept by [Projection.Jornadas].
const (
	JornadaIniciada  = "iniciada"
	JornadaEncerrada = "encerrada"
)

// HeaderSolicitacao carries a command's idempotency key (a UUID).
const HeaderSolicitacao = "X-Solicitacao-Id"

const (
	ocorrenciasPath = "/api/ocorrencias"
	maxResponseBody = 4 << 20
)

// Recurso is the resource (vehicle, team) a despacho sends.
type Recurso struct {
	Identificador string `json:"identificador"`
}

// Despacho is one resource sent to an ocorrência. Its status is its own:
// one despacho no_local says nothing about the others.
type Despacho struct {
	ID           string  `json:"id"`
	OcorrenciaID string  `json:"ocorrenciaId"`
	Recurso      Recurso `json:"recurso"`
	Status       string  `json:"status"`
}

// Ocorrencia is the wire shape of Geohub's ocorrência projection (GET
// /api/ocorrencias/{id}), limited to what the CAD keeps: decoding the
// server's answer into it drops the rest, so it can be compared with the
// simulator's [Projection]. A successful command's response has the same
// fields but Despachos, which it never lists (it would grow with the
// ocorrência): it decodes to an empty list.
//
// Despachos is ordered by creation. Values returned by this package never
// have a nil Despachos (an empty list marshals as []), so decode the
// server's answer with [DecodeOcorrencia] before comparing with
// reflect.DeepEqual. Despacho is set only in the responses to the two
// despacho commands: the despacho the command created or changed.
type Ocorrencia struct {
	ID        string     `json:"id"`
	Natureza  string     `json:"natureza"`
	Status    string     `json:"status"`
	Versao    int64      `json:"versao"`
	Despachos []Despacho `json:"despachos"`
	Despacho  *Despacho  `json:"despacho,omitempty"`
}

// DecodeOcorrencia decodes an Ocorrencia and normalises it: Despachos is
// never nil.
func DecodeOcorrencia(b []byte) (Ocorrencia, error) {
	var o Ocorrencia
	if err := json.Unmarshal(b, &o); err != nil {
		return Ocorrencia{}, err
	}
	if o.Despachos == nil {
		o.Despachos = []Despacho{}
	}
	return o, nil
}

// Local is a point, WGS 84.
type Local struct {
	Lat float64 `json:"lat"`
	Lng float64 `json:"lng"`
}

// RegisterRequest is the body of POST /api/ocorrencias. Natureza is
// required.
type RegisterRequest struct {
	Natureza  string `json:"natureza"`
	Descricao string `json:"descricao,omitempty"`
	Endereco  string `json:"endereco,omitempty"`
	Local     *Local `json:"local,omitempty"`
}

// Detalhe points at one problem of a refused request.
type Detalhe struct {
	Caminho  string `json:"caminho"`
	Mensagem string `json:"mensagem"`
}

// Motivo is Geohub's error body, and the reason of a refused command.
type Motivo struct {
	Erro     string    `json:"erro"`
	Codigo   string    `json:"codigo,omitempty"`
	Detalhes []Detalhe `json:"detalhes,omitempty"`
}

// APIError is a command or query answered with a non-2xx status (after the
// retries, for 429 and 5xx). Use errors.As to read it.
type APIError struct {
	Method      string
	Path        string
	Solicitacao string // x-solicitacao-id sent; reuse it to repeat the command
	Status      int
	Motivo      Motivo // decoded error body; empty if it was not one
	Body        []byte // raw error body
}

func (e *APIError) Error() string {
	msg := e.Motivo.Erro
	if msg == "" {
		msg = string(bytes.TrimSpace(e.Body))
		if len(msg) > 200 {
			msg = msg[:200] + "…"
		}
	}
	s := fmt.Sprintf("geohub %s %s: %d %s", e.Method, e.Path, e.Status, http.StatusText(e.Status))
	if e.Motivo.Codigo != "" {
		s += " (" + e.Motivo.Codigo + ")"
	}
	if msg != "" {
		s += ": " + msg
	}
	return s
}

// Outcome is what the CAD knows of one command, by x-solicitacao-id: from
// the HTTP response, from the integracao:* event, or both (they carry the
// same first outcome).
type Outcome struct {
	Solicitacao  string
	Status       int  // HTTP status of the command's outcome
	Concluded    bool // integracao:comando-concluido / 2xx; false: refused
	Metodo       string
	Rota         string
	OcorrenciaID string  // the result's id, when concluded on an ocorrência
	Motivo       *Motivo // the reason, when refused
	FromResponse bool    // seen in the HTTP response
	FromEvent    bool    // seen as an integracao:* event
}
