package web

import (
	"net/http"
	"slices"

	"geohub/app"
)

func (s *Server) registerType(w http.ResponseWriter, r *http.Request) {
	var tv app.TypeVersion
	if err := decodeJSON(r, &tv); err != nil {
		s.Fail(w, r, err)
		return
	}
	stored, created, err := s.Registry.Register(r.Context(), tv)
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, stored)
}

func (s *Server) listTypes(w http.ResponseWriter, r *http.Request) {
	all := s.Registry.List()
	if in, own := ownIntegrator(r); own {
		// An integrator's key reads the types it receives.
		all = slices.DeleteFunc(all, func(t app.TypeVersion) bool { return !in.Wants(t.Tipo) })
	}
	writeJSON(w, http.StatusOK, map[string]any{"tipos": all})
}

func (s *Server) getType(w http.ResponseWriter, r *http.Request) {
	versions, err := s.Registry.Versions(r.PathValue("tipo"))
	if in, own := ownIntegrator(r); own && err == nil && !in.Wants(r.PathValue("tipo")) {
		err = app.Errorf(app.ENotFound, "tipo %s não está entre os eventos deste integrador", r.PathValue("tipo"))
	}
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"tipo": r.PathValue("tipo"), "versoes": versions})
}

func (s *Server) patchType(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Status string `json:"status"`
	}
	if err := decodeJSON(r, &body); err != nil {
		s.Fail(w, r, err)
		return
	}
	tv, err := s.Registry.SetStatus(r.Context(), r.PathValue("tipo"), r.PathValue("versao"), body.Status)
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, tv)
}
