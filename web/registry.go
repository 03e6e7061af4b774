package web

import (
	"net/http"

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
	writeJSON(w, http.StatusOK, map[string]any{"tipos": s.Registry.List()})
}

func (s *Server) getType(w http.ResponseWriter, r *http.Request) {
	versions, err := s.Registry.Versions(r.PathValue("tipo"))
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
