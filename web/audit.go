package web

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"geohub/app"
)

// remoteAddr is the API client's address for the audit trail: the peer,
// or behind --trusted-proxies the client they forwarded for, as the
// console reads it.
func (s *Server) remoteAddr(r *http.Request) string {
	addr, _ := s.TrustedProxies.Client(r)
	return addr
}

// routeTarget names a request refused before any service ran.
func routeTarget(r *http.Request) app.AuditTarget {
	return app.AuditTarget{Tipo: "rota", ID: r.Method + " " + r.URL.Path}
}

// auditFilter reads the query of GET /api/auditoria, naming every bad
// parameter; quem is returned apart, for AuditTrail.List to tell an id
// from a name.
func auditFilter(r *http.Request) (string, app.AuditFilter, error) {
	q := r.URL.Query()
	if err := knownParams(q, "quem", "acao", "alvo", "inicio", "fim", "antes", "limite"); err != nil {
		return "", app.AuditFilter{}, err
	}
	f := app.AuditFilter{Acao: strings.TrimSpace(q.Get("acao")), Alvo: strings.TrimSpace(q.Get("alvo"))}
	var bad []app.Detail
	timeParam(q, "inicio", &f.Inicio, &bad)
	timeParam(q, "fim", &f.Fim, &bad)
	f.Antes = nonNegative(q, "antes", &bad)
	f.Limite = int(nonNegative(q, "limite", &bad))
	if len(bad) > 0 {
		return "", f, &app.Error{Code: app.EInvalid, Message: "filtro inválido", Details: bad}
	}
	return q.Get("quem"), f, nil
}

// listAudit answers a page of the trail, newest first (admin).
func (s *Server) listAudit(w http.ResponseWriter, r *http.Request) {
	quem, f, err := auditFilter(r)
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	page, err := s.Audit.List(r.Context(), quem, f)
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, page)
}

// exportAudit streams every row matching the filters as NDJSON, newest
// first, one page in memory at a time: the export of the trail, which is
// kept forever.
func (s *Server) exportAudit(w http.ResponseWriter, r *http.Request) {
	quem, f, err := auditFilter(r)
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	if f.Antes > 0 || f.Limite > 0 {
		s.Fail(w, r, &app.Error{Code: app.EInvalid, Message: "a exportação traz todas as linhas do filtro",
			Details: []app.Detail{{Caminho: "/antes", Mensagem: "não use antes nem limite na exportação"}}})
		return
	}
	f.Limite = app.MaxLimite
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Content-Disposition", `attachment; filename="auditoria.ndjson"`)
	out := newStreamWriter(w)
	for n := 0; ; n++ {
		page, err := s.Audit.List(r.Context(), quem, f)
		if err != nil {
			if n == 0 {
				s.Fail(w, r, err)
				return
			}
			// Headers are gone: the stream ends early; the last line's id
			// is where to resume (antes on /api/auditoria).
			s.Logger.Error("audit export interrupted", "err", err)
			return
		}
		for _, e := range page.Linhas {
			if err := jsonLine(out, e); err != nil {
				return
			}
		}
		if out.Flush() != nil {
			return
		}
		if page.Proximo == "" {
			return
		}
		f.Antes = page.Linhas[len(page.Linhas)-1].ID
	}
}

// jsonLine writes v as one NDJSON line.
func jsonLine(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
