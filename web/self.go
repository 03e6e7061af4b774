package web

import (
	"context"
	"net/http"
	"strings"

	"geohub/app"
)

// Integrators serve themselves (SPEC 8c): on the routes below, besides an
// operator token of the route's roles, an integrator's own API key is
// admitted, and then reaches that integrator's data and nothing else. An
// inactive integrator's key is admitted too: a CAD that was disabled is
// the one that most needs to read why and to test its receiver again.

type ownKey struct{}

// ownIntegrator is the integrator whose API key admitted the request.
func ownIntegrator(r *http.Request) (app.Integrator, bool) {
	in, ok := r.Context().Value(ownKey{}).(app.Integrator)
	return in, ok
}

// authedOrOwn admits an operator token of roles, as authed does, or an
// integrator's API key, whose requests the handler keeps to that
// integrator (integratorID, ownDelivery).
func (s *Server) authedOrOwn(roles []app.Papel, h http.HandlerFunc) http.Handler {
	byToken := s.authed(roles, h)
	byKey := s.keyed(false, func(w http.ResponseWriter, r *http.Request, in app.Integrator) {
		h(w, r.WithContext(context.WithValue(r.Context(), ownKey{}, in)))
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if scheme, _, _ := strings.Cut(r.Header.Get("Authorization"), " "); isAPIKey(r) && strings.EqualFold(scheme, "Bearer") {
			byKey.ServeHTTP(w, r)
			return
		}
		byToken.ServeHTTP(w, r) // which answers 401 for another scheme
	})
}

// integratorID is the {id} of the route: "eu" is the key's own integrator,
// and a key reaches no other.
func (s *Server) integratorID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	in, own := ownIntegrator(r)
	switch {
	case own && (id == "eu" || id == in.ID):
		return in.ID, nil
	case own:
		err := app.Errorf(app.EForbidden, "esta chave de API só alcança o próprio integrador (use /api/integradores/eu)")
		if r.Method != http.MethodGet {
			s.Audit.Refused(r.Context(), app.AcaoAcessoNegado, routeTarget(r), err)
		}
		return "", err
	case id == "eu":
		return "", app.Errorf(app.ENotFound, "/api/integradores/eu é o cadastro do integrador dono da chave de API: com um token de operador, use o id")
	}
	return id, nil
}

// ownDelivery refuses, as not found, a delivery of another integrator to
// an integrator's key: a key learns nothing of others' deliveries, not
// even that they exist.
func ownDelivery(r *http.Request, integrador string) error {
	if in, own := ownIntegrator(r); own && in.ID != integrador {
		return app.Errorf(app.ENotFound, "entrega não encontrada")
	}
	return nil
}
