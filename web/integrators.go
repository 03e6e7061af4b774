package web

import (
	"net/http"

	"geohub/app"
)

func (s *Server) createIntegrator(w http.ResponseWriter, r *http.Request) {
	var req app.NewIntegrator
	if err := decodeJSON(r, &req); err != nil {
		s.Fail(w, r, err)
		return
	}
	created, err := s.Integrators.Create(r.Context(), req)
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	// The secret and API key are in this answer only: never cache it.
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Location", "/api/integradores/"+created.ID)
	writeJSON(w, http.StatusCreated, created)
}

func (s *Server) listIntegrators(w http.ResponseWriter, r *http.Request) {
	all, err := s.Integrators.List(r.Context())
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	// linhas, as every other list answers; integradores is the same list
	// under its old key, kept for this release only (README, HTTP API).
	writeJSON(w, http.StatusOK, map[string]any{"linhas": all, "integradores": all})
}

func (s *Server) getIntegrator(w http.ResponseWriter, r *http.Request) {
	id, err := s.integratorID(r)
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	in, err := s.Integrators.Get(r.Context(), id)
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, in)
}

func (s *Server) patchIntegrator(w http.ResponseWriter, r *http.Request) {
	var p app.IntegratorPatch
	if err := decodeJSON(r, &p); err != nil {
		s.Fail(w, r, err)
		return
	}
	in, err := s.Integrators.Update(r.Context(), r.PathValue("id"), p)
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, in)
}

func (s *Server) rotateAPIKey(w http.ResponseWriter, r *http.Request) {
	rot, err := s.Integrators.RotateAPIKey(r.Context(), r.PathValue("id"))
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, rot)
}

func (s *Server) rotateSecret(w http.ResponseWriter, r *http.Request) {
	id, err := s.integratorID(r)
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	rot, err := s.Integrators.RotateSecret(r.Context(), id)
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, rot)
}
