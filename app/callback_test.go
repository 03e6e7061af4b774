package app_test

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"geohub/app"
)

func TestDialerRefusesInsideAddressesAtConnectTime(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }))
	defer srv.Close()
	// "localhost" is a real name that resolves to loopback: the check must
	// happen on the address connected to, whatever the name said.
	url := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
	client := func(p app.CallbackPolicy) *http.Client {
		d := p.Dialer(&net.Dialer{Timeout: 2 * time.Second})
		return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	}
	_, err := client(app.CallbackPolicy{}).Get(url)
	if !errors.Is(err, app.ErrRefusedAddress) {
		t.Fatalf("a name resolving to loopback must be refused at dial time, got %v", err)
	}
	res, err := client(app.CallbackPolicy{Insecure: true}).Get(url)
	if err != nil {
		t.Fatalf("--insecure-callbacks allows loopback: %v", err)
	}
	res.Body.Close()
}

func TestHostAllowed(t *testing.T) {
	allowed := []string{"cad.exemplo.gov.br", "*.bombeiros.gov.br"}
	for host, want := range map[string]bool{
		"cad.exemplo.gov.br":      true,
		"CAD.Exemplo.gov.br.":     true,
		"x.cad.exemplo.gov.br":    false,
		"a.bombeiros.gov.br":      true,
		"bombeiros.gov.br":        false,
		"evilbombeiros.gov.br":    false,
		"a.bombeiros.gov.br.evil": false,
	} {
		if got := app.HostAllowed(host, allowed); got != want {
			t.Errorf("HostAllowed(%q) = %v, want %v", host, got, want)
		}
	}
}

// Literal addresses need no resolver, so each refusal is checked as the
// cadastro would meet it.
func TestCallbackRefusesHiddenInsideAddressesNonASCIIHostsAndBadPorts(t *testing.T) {
	p := app.CallbackPolicy{}
	cases := map[string]string{
		"https://[64:ff9b::a00:1]/x":        "transição", // NAT64 of 10.0.0.1
		"https://[2002:7f00:1::1]/x":        "transição", // 6to4 of 127.0.0.1
		"https://[64:ff9b:1::a00:1]/x":      "transição", // local-use NAT64 (RFC 8215) of 10.0.0.1
		"https://[::ffff:0:a00:1]/x":        "transição", // IPv4-translated (SIIT) 10.0.0.1
		"https://[::a00:1]/x":               "transição", // IPv4-compatible 10.0.0.1
		"https://[fec0::1]/x":               "transição", // site-local
		"https://198.18.0.1/x":              "reservado", // benchmarking
		"https://240.0.0.1/x":               "reservado", // class E
		"https://\u0130nfo.gov.br/x":        "ASCII",     // dialed as xn--…, checked as "info"
		"https://cad.exemplo.gov.br:0/":     "porta",
		"https://cad.exemplo.gov.br:99999/": "porta",
	}
	for raw, why := range cases {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		// Allowlisted, so only the reason under test can refuse it.
		details := p.Check(t.Context(), raw, []string{u.Hostname(), "info.gov.br"})
		if len(details) != 1 || !strings.Contains(details[0].Mensagem, why) {
			t.Errorf("%s: want a refusal mentioning %q, got %+v", raw, why, details)
		}
	}
}
