package web

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"

	"geohub/app"
	"geohub/app/ocorrencia"
)

// integratorAuthed admits a request carrying an active integrator's API key:
// 401 without a valid key, 403 when the integrator is inactive.
func (s *Server) integratorAuthed(h func(w http.ResponseWriter, r *http.Request, in app.Integrator)) http.Handler {
	return s.keyed(true, h)
}

// keyed admits a request carrying an integrator's API key, active or, when
// active is false, not (self-service, web/self.go), and makes the
// integrator the author of what it changes.
func (s *Server) keyed(active bool, h func(w http.ResponseWriter, r *http.Request, in app.Integrator)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in, err := s.integratorKey(r, active)
		if err != nil {
			if app.ErrorCode(err) == app.EUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="geohub-integradores"`)
			}
			s.Fail(w, r, err)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
		ctx := app.WithActor(r.Context(), app.Actor{Tipo: app.ActorIntegrador, ID: in.ID, Nome: in.Nome, Endereco: s.remoteAddr(r)})
		s.limitRefusals("integrador:"+in.ID, w, r.WithContext(ctx), func(w http.ResponseWriter, r *http.Request) { h(w, r, in) })
	})
}

func (s *Server) integrator(r *http.Request) (app.Integrator, error) { return s.integratorKey(r, true) }

func (s *Server) integratorKey(r *http.Request, active bool) (app.Integrator, error) {
	scheme, key, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	key = strings.TrimSpace(key)
	if !strings.EqualFold(scheme, "Bearer") || key == "" {
		return app.Integrator{}, app.Errorf(app.EUnauthorized, "chave de API ausente: use Authorization: Bearer <api_key>")
	}
	in, err := s.Integrators.Authenticate(r.Context(), key)
	if err != nil {
		return app.Integrator{}, err
	}
	if active && !in.Ativo {
		return app.Integrator{}, app.Errorf(app.EForbidden, "integrador inativo: um administrador precisa reativá-lo para que envie comandos")
	}
	return in, nil
}

// command reads a command request and answers its outcome: the first one,
// byte for byte, also when the x-solicitacao-id is a repeat. An integrator
// sends it with its API key; an operator with a token of papel admin or
// operador (SPEC 7), and then its events name the token as a usuario.
func (s *Server) command(run func(ctx context.Context, cmd app.Command, r *http.Request) (app.Outcome, error)) http.Handler {
	handle := func(w http.ResponseWriter, r *http.Request, cmd app.Command) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			var maxErr *http.MaxBytesError
			if errors.As(err, &maxErr) {
				err = app.Errorf(app.ETooLarge, "corpo maior que %d bytes", maxErr.Limit)
				// Refused before the command runs: named here, as a
				// refused command would be (issue 26, L4).
				s.Audit.Refused(r.Context(), app.AcaoComando, routeTarget(r), err)
			}
			s.Fail(w, r, err)
			return
		}
		cmd.Solicitacao, cmd.Metodo, cmd.Rota, cmd.Body = r.Header.Get("X-Solicitacao-Id"), r.Method, r.URL.Path, body
		out, err := run(r.Context(), cmd, r)
		if err != nil {
			s.Fail(w, r, err)
			return
		}
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(out.Status)
		w.Write(append(out.Body, '\n'))
	}
	byIntegrator := s.integratorAuthed(func(w http.ResponseWriter, r *http.Request, in app.Integrator) {
		handle(w, r, app.Command{Integrador: in.ID})
	})
	byOperator := s.authed(app.Operators, func(w http.ResponseWriter, r *http.Request) {
		t, _ := tokenOf(r)
		handle(w, r, app.Command{Operador: t.ID})
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if scheme, secret, _ := strings.Cut(r.Header.Get("Authorization"), " "); !strings.EqualFold(scheme, "Bearer") ||
			strings.TrimSpace(secret) == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="geohub-integradores"`)
			s.Fail(w, r, app.Errorf(app.EUnauthorized,
				"credencial ausente: use Authorization: Bearer <api_key> (integrador) ou Bearer <token> (operador)"))
			return
		}
		if isAPIKey(r) {
			byIntegrator.ServeHTTP(w, r)
			return
		}
		byOperator.ServeHTTP(w, r)
	})
}

// isAPIKey says whether the request's bearer is an integrator's API key
// rather than an operator token: their prefixes differ.
func isAPIKey(r *http.Request) bool {
	_, key, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	return strings.HasPrefix(strings.TrimSpace(key), app.APIKeyPrefix)
}

func (s *Server) registerOcorrencia(ctx context.Context, cmd app.Command, r *http.Request) (app.Outcome, error) {
	return s.Ocorrencias.Register(ctx, cmd)
}

func (s *Server) dispatch(ctx context.Context, cmd app.Command, r *http.Request) (app.Outcome, error) {
	return s.Ocorrencias.Dispatch(ctx, cmd, r.PathValue("id"))
}

func (s *Server) setDispatchStatus(ctx context.Context, cmd app.Command, r *http.Request) (app.Outcome, error) {
	return s.Ocorrencias.SetDispatchStatus(ctx, cmd, r.PathValue("id"), r.PathValue("despachoId"))
}

func (s *Server) setOcorrenciaStatus(ctx context.Context, cmd app.Command, r *http.Request) (app.Outcome, error) {
	return s.Ocorrencias.SetStatus(ctx, cmd, r.PathValue("id"))
}

// listOcorrencias answers a page of the read model: to an operator token
// of any reading role every ocorrência, to an integrator's API key only
// those it registered (its integrador filter is its own id, whatever the
// query says).
func (s *Server) listOcorrencias(w http.ResponseWriter, r *http.Request) {
	list := func(w http.ResponseWriter, r *http.Request, integrador string) {
		f, err := parseOcorrenciaFilter(r)
		if err != nil {
			s.Fail(w, r, err)
			return
		}
		if integrador != "" {
			f.Integrador = integrador
		}
		page, err := s.Ocorrencias.List(r.Context(), f)
		if err != nil {
			s.Fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, page)
	}
	if !isAPIKey(r) {
		s.authed(app.Readers, func(w http.ResponseWriter, r *http.Request) { list(w, r, "") }).ServeHTTP(w, r)
		return
	}
	in, err := s.integrator(r)
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	list(w, r, in.ID)
}

// parseOcorrenciaFilter reads the query of GET /api/ocorrencias, naming
// every bad parameter.
func parseOcorrenciaFilter(r *http.Request) (ocorrencia.Filter, error) {
	q := r.URL.Query()
	if err := knownParams(q, "status", "natureza", "integrador", "registrada_inicio", "registrada_fim",
		"antes", "limite"); err != nil {
		return ocorrencia.Filter{}, err
	}
	f := ocorrencia.Filter{Status: q.Get("status"), Natureza: q.Get("natureza"), Integrador: q.Get("integrador")}
	var bad []app.Detail
	timeParam(q, "registrada_inicio", &f.Inicio, &bad)
	timeParam(q, "registrada_fim", &f.Fim, &bad)
	f.Antes = nonNegative(q, "antes", &bad)
	f.Limite = int(nonNegative(q, "limite", &bad))
	if len(bad) > 0 {
		return f, &app.Error{Code: app.EInvalid, Message: "filtro inválido", Details: bad}
	}
	return f, nil
}

// getOcorrencia answers the projection to its originator's API key, or to
// an operator token of any reading role.
func (s *Server) getOcorrencia(w http.ResponseWriter, r *http.Request) {
	if !isAPIKey(r) {
		s.authed(app.Readers, func(w http.ResponseWriter, r *http.Request) {
			s.writeOcorrencia(w, r, "")
		}).ServeHTTP(w, r)
		return
	}
	in, err := s.integrator(r)
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	s.writeOcorrencia(w, r, in.ID)
}

func (s *Server) writeOcorrencia(w http.ResponseWriter, r *http.Request, integrador string) {
	o, err := s.Ocorrencias.Get(r.Context(), r.PathValue("id"), integrador)
	if err != nil {
		s.Fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, o)
}
