package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"geohub/app"
)

// apiResolver stands in for DNS, which tests cannot reach: public names
// resolve to public unicast addresses (registro.br's, never dialed here:
// documentation ranges are refused like every special-purpose range), the
// others to the inside.
var apiResolver = apiFakeDNS{
	"cad.exemplo.gov.br":       {"200.160.2.3"},
	"bombeiros.exemplo.gov.br": {"200.160.4.6", "2001:12ff:0:4::6"},
	"interno.exemplo.gov.br":   {"10.0.0.5"},
	"rebind.exemplo.gov.br":    {"200.160.2.4", "127.0.0.1"},
	"cgnat.exemplo.gov.br":     {"100.64.1.1"},
	"meta.exemplo.gov.br":      {"169.254.169.254"},
}

type apiFakeDNS map[string][]string

func (d apiFakeDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	addrs, ok := d[host]
	if !ok {
		return nil, fmt.Errorf("no such host %s", host)
	}
	var out []netip.Addr
	for _, a := range addrs {
		out = append(out, netip.MustParseAddr(a))
	}
	return out, nil
}

func apiNewIntegrator(url string, hosts ...string) map[string]any {
	return map[string]any{"nome": "CAD Bombeiros", "callback_url": url, "hosts_permitidos": hosts}
}

func TestIntegratorsCadastro(t *testing.T) {
	env := apiSetup(t)
	refused := []struct {
		name string
		body any
		why  string
		path string
	}{
		{"http is refused", apiNewIntegrator("http://cad.exemplo.gov.br/x", "cad.exemplo.gov.br"), "https", "/callback_url"},
		{"a host outside the allowlist is refused", apiNewIntegrator("https://cad.exemplo.gov.br/x", "outro.gov.br"), "hosts_permitidos", "/callback_url"},
		{"an unresolvable host is refused", apiNewIntegrator("https://nada.exemplo.gov.br/x", "nada.exemplo.gov.br"), "não resolve", "/callback_url"},
		{"a private address is refused", apiNewIntegrator("https://interno.exemplo.gov.br/x", "interno.exemplo.gov.br"), "privada", "/callback_url"},
		{"a name with one loopback address is refused", apiNewIntegrator("https://rebind.exemplo.gov.br/x", "rebind.exemplo.gov.br"), "loopback", "/callback_url"},
		{"CGNAT is refused", apiNewIntegrator("https://cgnat.exemplo.gov.br/x", "cgnat.exemplo.gov.br"), "CGNAT", "/callback_url"},
		{"link-local (cloud metadata) is refused", apiNewIntegrator("https://meta.exemplo.gov.br/x", "meta.exemplo.gov.br"), "link-local", "/callback_url"},
		{"a literal loopback IP is refused", apiNewIntegrator("https://127.0.0.1/x", "127.0.0.1"), "loopback", "/callback_url"},
		{"the unspecified address is refused", apiNewIntegrator("https://0.0.0.0/x", "0.0.0.0"), "RFC 791", "/callback_url"},
		{"IPv6 loopback is refused", apiNewIntegrator("https://[::1]/x", "::1"), "", "/hosts_permitidos/0"},
		{"credentials in the URL are refused", apiNewIntegrator("https://u:p@cad.exemplo.gov.br/x", "cad.exemplo.gov.br"), "usuário", "/callback_url"},
		{"a malformed backoff is refused", map[string]any{"nome": "x", "callback_url": "https://cad.exemplo.gov.br/x",
			"hosts_permitidos": []string{"cad.exemplo.gov.br"}, "backoff": []string{"5s", "amanhã", "11h"}}, "intervalo", "/backoff/1"},
		{"a bad event pattern is refused", map[string]any{"nome": "x", "callback_url": "https://cad.exemplo.gov.br/x",
			"hosts_permitidos": []string{"cad.exemplo.gov.br"}, "eventos": []string{"ocorrencia*"}}, "padrão", "/eventos/0"},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			res := env.do(t, http.MethodPost, "/api/integradores", app.PapelAdmin, c.body).want(t, 422)
			e := apiDecodeError(t, res)
			found := false
			for _, d := range e.Detalhes {
				if d.Caminho == c.path && strings.Contains(d.Mensagem, c.why) {
					found = true
				}
			}
			if !found {
				t.Fatalf("want %q at %s, got %+v", c.why, c.path, e.Detalhes)
			}
		})
	}
	t.Run("every finding comes at once, the callback's included", func(t *testing.T) {
		body := map[string]any{"nome": "", "callback_url": "http://cad.exemplo.gov.br/x",
			"hosts_permitidos": []string{"cad.exemplo.gov.br/x"}, "eventos": []string{"ocorrencia*"}, "backoff": []string{"amanhã"}}
		e := apiDecodeError(t, env.do(t, http.MethodPost, "/api/integradores", app.PapelAdmin, body).want(t, 422))
		var paths []string
		for _, d := range e.Detalhes {
			paths = append(paths, d.Caminho)
		}
		if want := []string{"/nome", "/hosts_permitidos/0", "/callback_url", "/eventos/0", "/backoff/0"}; !slices.Equal(paths, want) {
			t.Fatalf("findings at %v, want %v: %+v", paths, want, e.Detalhes)
		}
	})
	if all, _ := env.Integrators.List(t.Context()); len(all) != 0 {
		t.Fatalf("%d refused integrators were stored", len(all))
	}

	t.Run("create shows the secret and API key once; reads never do", func(t *testing.T) {
		body := apiNewIntegrator("https://bombeiros.exemplo.gov.br/geohub", "*.exemplo.gov.br")
		body["eventos"] = []string{"ocorrencia:*", "jornada:iniciada"}
		body["backoff"] = []string{"5s", "30s"}
		var created app.CreatedIntegrator
		env.do(t, http.MethodPost, "/api/integradores", app.PapelAdmin, body).want(t, 201).decode(t, &created)
		if !strings.HasPrefix(created.Segredo, "whsec_") || !strings.HasPrefix(created.APIKey, "gk_") || !created.Ativo {
			t.Fatalf("created %+v", created)
		}
		got := env.do(t, http.MethodGet, "/api/integradores/"+created.ID, app.PapelLeitor, nil).want(t, 200)
		list := env.do(t, http.MethodGet, "/api/integradores", app.PapelLeitor, nil).want(t, 200)
		for _, raw := range [][]byte{got.Body, list.Body} {
			if strings.Contains(string(raw), created.Segredo) || strings.Contains(string(raw), created.APIKey) ||
				strings.Contains(string(raw), "segredo") || strings.Contains(string(raw), "api_key") {
				t.Fatalf("a read leaks a secret: %s", raw)
			}
		}
		// The secret is sealed at rest: the database never holds it in clear.
		cur, _, err := env.Integrators.Secrets(t.Context(), created.ID)
		if err != nil || string(cur) != created.Segredo {
			t.Fatalf("secret round trip: %v", err)
		}
		if in, err := env.Integrators.Authenticate(t.Context(), created.APIKey); err != nil || in.ID != created.ID {
			t.Fatalf("API key: %v", err)
		}

		rot := env.do(t, http.MethodPost, "/api/integradores/"+created.ID+"/segredo/rotacionar", app.PapelAdmin, nil).want(t, 200)
		var rs app.RotatedSecret
		rot.decode(t, &rs)
		cur, prev, err := env.Integrators.Secrets(t.Context(), created.ID)
		if err != nil || string(cur) != rs.Segredo || string(prev) != created.Segredo {
			t.Fatal("rotation must keep the previous secret for the grace period")
		}
		env.Clock.Advance(app.SecretGrace + 1)
		if _, prev, _ = env.Integrators.Secrets(t.Context(), created.ID); prev != nil {
			t.Fatal("the previous secret outlived its grace period")
		}

		// A new API key works at once and the old one stops at once.
		var rk app.RotatedAPIKey
		keyRes := env.do(t, http.MethodPost, "/api/integradores/"+created.ID+"/api_key/rotacionar", app.PapelAdmin, nil).want(t, 200)
		keyRes.decode(t, &rk)
		if !strings.HasPrefix(rk.APIKey, "gk_") || rk.APIKey == created.APIKey {
			t.Fatalf("rotated key %q", rk.APIKey)
		}
		if cc := keyRes.Header.Get("Cache-Control"); cc != "no-store" {
			t.Fatalf("Cache-Control %q on the answer that shows a key", cc)
		}
		someOcorrencia := "/api/ocorrencias/" + uuid.NewString()
		env.doAuth(t, http.MethodGet, someOcorrencia, "Bearer "+created.APIKey, nil).want(t, 401)
		env.doAuth(t, http.MethodGet, someOcorrencia, "Bearer "+rk.APIKey, nil).want(t, 404)
		if cur, _, err := env.Integrators.Secrets(t.Context(), created.ID); err != nil || string(cur) != rs.Segredo {
			t.Fatal("an API key rotation changed the signing secret")
		}
		env.run(t, apiScenario{method: http.MethodPost, route: "/api/integradores/" + created.ID + "/api_key/rotacionar",
			role: app.PapelOperador, status: 403})

		var patched app.Integrator
		env.do(t, http.MethodPatch, "/api/integradores/"+created.ID, app.PapelAdmin, map[string]any{"ativo": false}).
			want(t, 200).decode(t, &patched)
		if patched.Ativo || patched.MotivoInativo == "" {
			t.Fatalf("patched %+v", patched)
		}
		env.run(t, apiScenario{method: http.MethodPatch, route: "/api/integradores/" + created.ID, role: app.PapelAdmin,
			body: map[string]any{"callback_url": "https://interno.exemplo.gov.br/x"}, status: 422, caminhos: []string{"/callback_url"}})
		env.run(t, apiScenario{method: http.MethodPatch, route: "/api/integradores/" + created.ID, role: app.PapelOperador,
			body: map[string]any{"ativo": true}, status: 403})
	})
	env.run(t, apiScenario{name: "unknown integrator", method: http.MethodGet, route: "/api/integradores/nada",
		role: app.PapelLeitor, status: 404, codigo: app.ENotFound})
	env.run(t, apiScenario{name: "unknown integrator rotation", method: http.MethodPost,
		route: "/api/integradores/nada/segredo/rotacionar", role: app.PapelAdmin, status: 404})
	env.run(t, apiScenario{name: "unknown integrator API key rotation", method: http.MethodPost,
		route: "/api/integradores/nada/api_key/rotacionar", role: app.PapelAdmin, status: 404})
}
