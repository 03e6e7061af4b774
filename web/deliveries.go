package web

import (
	"net/http"
	"strconv"
	"time"

	"geohub/app"
)

func (s *Server) listDeliveries(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if err := knownParams(q, "integrador", "status", "tipo", "agregado", "event_id", "id_inicio", "id_fim", "ordem",
		"limite", "deslocamento", "criado_inicio", "criado_fim"); err != nil {
		s.Fail(w, r, err)
		return
	}
	f := app.DeliveryFilter{Integrador: q.Get("integrador"), Status: q.Get("status"), Tipo: q.Get("tipo"),
		Agregado: q.Get("agregado"), EventID: q.Get("event_id")}
	var bad []app.Detail
	f.Limite = int(nonNegative(q, "limite", &bad))
	f.Deslocamento = int(nonNegative(q, "deslocamento", &bad))
	f.IDInicio = nonNegative(q, "id_inicio", &bad)
	f.IDFim = nonNegative(q, "id_fim", &bad)
	f.Desc = descending(q, &bad)
	for name, t := range map[string]*time.Time{"criado_inicio": &f.CriadoInicio, "criado_fim": &f.CriadoFim} {
		if v := q.Get(name); v != "" {
			at, err := time.Parse(time.RFC3339, v)
			if err != nil {
				bad = append(bad, app.Detail{Caminho: "/" + name, Mensagem: "deve ser uma data e hora RFC 3339"})
			}
			*t = at
		}
	}
	if len(bad) > 0 {
		s.Fail(w, r, &app.Error{Code: app.EInvalid, Message: "filtro inválido", Details: bad})
		return
	}
	if in, own := ownIntegrator(r); own {
		if f.Integrador != "" && f.Integrador != in.ID {
			s.Fail(w, r, app.Errorf(app.EForbidden, "esta chave de API só alcança as entregas do próprio integrador"))
			return
		}
		f.Integrador = in.ID
	}
	page, err := s.Deliveries.List(r.Context(), f)
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, page)
}

func deliveryID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, app.Errorf(app.ENotFound, "entrega não encontrada")
	}
	return id, nil
}

func (s *Server) getDelivery(w http.ResponseWriter, r *http.Request) {
	id, err := deliveryID(r)
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	d, err := s.Deliveries.Get(r.Context(), id)
	if err == nil {
		err = ownDelivery(r, d.Integrador)
	}
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

// checkOwnDelivery refuses a change to another integrator's delivery made
// with an integrator's key, as not found.
func (s *Server) checkOwnDelivery(r *http.Request, id int64) error {
	if _, own := ownIntegrator(r); !own {
		return nil
	}
	d, err := s.Deliveries.Get(r.Context(), id)
	if err != nil {
		return err
	}
	return ownDelivery(r, d.Integrador)
}

func (s *Server) resendDelivery(w http.ResponseWriter, r *http.Request) {
	id, err := deliveryID(r)
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	if err := s.checkOwnDelivery(r, id); err != nil {
		s.Fail(w, r, err)
		return
	}
	if err := s.Deliveries.Resend(r.Context(), id); err != nil {
		s.Fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"reenviadas": 1})
}

func (s *Server) resendDeliveries(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Integrador string `json:"integrador"`
		Status     string `json:"status"`
	}
	if err := decodeJSON(r, &body); err != nil {
		s.Fail(w, r, err)
		return
	}
	if in, own := ownIntegrator(r); own {
		if body.Integrador != "" && body.Integrador != in.ID {
			s.Fail(w, r, app.Errorf(app.EForbidden, "esta chave de API só reenvia as entregas do próprio integrador"))
			return
		}
		body.Integrador = in.ID
	}
	res, err := s.Deliveries.ResendAll(r.Context(), body.Integrador, body.Status)
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res) // reenviadas, and expurgadas: those left, their body purged
}

func (s *Server) verifyIntegrator(w http.ResponseWriter, r *http.Request) {
	a, err := s.Deliveries.Verify(r.Context(), s.Integrators, r.PathValue("id"))
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"verificado": a.Succeeded(), "tentativa": a})
}

// retryIntegrator is "Tentar agora" for an integrator: its circuit closes
// and its pending deliveries are due now.
func (s *Server) retryIntegrator(w http.ResponseWriter, r *http.Request) {
	id, err := s.integratorID(r)
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	res, err := s.Deliveries.RetryNow(r.Context(), s.Integrators, id)
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// retryDelivery is "Tentar agora" for one pending delivery.
func (s *Server) retryDelivery(w http.ResponseWriter, r *http.Request) {
	id, err := deliveryID(r)
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	if err := s.checkOwnDelivery(r, id); err != nil {
		s.Fail(w, r, err)
		return
	}
	d, err := s.Deliveries.RetryDeliveryNow(r.Context(), id)
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

// testIntegrator runs the receiver tester against the integrator's
// callback (SPEC 8b): 200 with the report, whether or not it passed.
func (s *Server) testIntegrator(w http.ResponseWriter, r *http.Request) {
	id, err := s.integratorID(r)
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	rep, err := s.Deliveries.Test(r.Context(), s.Integrators, id)
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

// redeliver is a gap repair (SPEC 8c): the integrator's delivered and dead
// rows of an aggregate from a sequence, or of a time window, sent again.
func (s *Server) redeliver(w http.ResponseWriter, r *http.Request) {
	id, err := s.integratorID(r)
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	var req app.RedeliverRequest
	if err := decodeJSON(r, &req); err != nil {
		s.Fail(w, r, err)
		return
	}
	res, err := s.Deliveries.Redeliver(r.Context(), s.Integrators, id, req)
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res) // reenviadas, and expurgadas: those whose body was purged
}

// sendTestEvent publishes an integracao:teste event that only the
// integrator receives, through the outbox (SPEC 8c).
func (s *Server) sendTestEvent(w http.ResponseWriter, r *http.Request) {
	id, err := s.integratorID(r)
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	res, err := s.Deliveries.SendTestEvent(r.Context(), s.Integrators, id)
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, res)
}
