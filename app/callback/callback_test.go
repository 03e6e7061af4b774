package callback_test

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"geohub/app/callback"
)

func TestDialerRefusesInsideAddressesAtConnectTime(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }))
	defer srv.Close()
	// "localhost" is a real name that resolves to loopback: the check must
	// happen on the address connected to, whatever the name said.
	url := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
	client := func(p callback.Policy) *http.Client {
		d := p.Dialer(&net.Dialer{Timeout: 2 * time.Second})
		return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	}
	_, err := client(callback.Policy{}).Get(url)
	if !errors.Is(err, callback.ErrRefusedAddress) {
		t.Fatalf("a name resolving to loopback must be refused at dial time, got %v", err)
	}
	res, err := client(callback.Policy{Insecure: true}).Get(url)
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
		if got := callback.HostAllowed(host, allowed); got != want {
			t.Errorf("HostAllowed(%q) = %v, want %v", host, got, want)
		}
	}
}

// Literal addresses need no resolver, so each refusal is checked as the
// cadastro would meet it.
func TestCallbackRefusesHiddenInsideAddressesNonASCIIHostsAndBadPorts(t *testing.T) {
	p := callback.Policy{}
	cases := map[string]string{
		"https://[64:ff9b::a00:1]/x":   "RFC 6052", // NAT64 of 10.0.0.1
		"https://[2002:7f00:1::1]/x":   "RFC 3056", // 6to4 of 127.0.0.1
		"https://[64:ff9b:1::a00:1]/x": "RFC 8215", // local-use NAT64 of 10.0.0.1
		"https://[::ffff:0:a00:1]/x":   "RFC 2765", // IPv4-translated (SIIT) 10.0.0.1
		"https://[::a00:1]/x":          "RFC 4291", // IPv4-compatible 10.0.0.1
		"https://[fec0::1]/x":          "RFC 3879", // site-local
		"https://198.18.0.1/x":         "RFC 2544", // benchmarking
		"https://240.0.0.1/x":          "RFC 1112", // class E
		// Found open by the security review (issue 16): IANA special-purpose
		// ranges that a deny-list of private and loopback space let through.
		"https://192.0.0.9/x":               "RFC 6890", // IETF protocol assignments (PCP anycast)
		"https://192.0.2.10/x":              "RFC 5737", // TEST-NET-1
		"https://198.51.100.7/x":            "RFC 5737", // TEST-NET-2
		"https://203.0.113.200/x":           "RFC 5737", // TEST-NET-3
		"https://192.88.99.1/x":             "RFC 7526", // 6to4 relay anycast
		"https://[2001:0:4136:e378::1]/x":   "RFC 2928", // Teredo
		"https://[2001:2::1]/x":             "RFC 2928", // benchmarking
		"https://[2001:db8::1]/x":           "RFC 3849", // documentation
		"https://[3fff::1]/x":               "RFC 9637", // documentation
		"https://[100::1]/x":                "RFC 6666", // discard-only
		"https://[5f00::1]/x":               "RFC 9602", // SRv6 SIDs
		"https://[4000::1]/x":               "2000::/3", // reserved, outside global unicast
		"https://[::ffff:192.168.0.1]/x":    "RFC 1918", // IPv4-mapped: judged as the IPv4 it is
		"https://\u0130nfo.gov.br/x":        "ASCII",    // dialed as xn--…, checked as "info"
		"https://cad.exemplo.gov.br:0/":     "porta",
		"https://cad.exemplo.gov.br:99999/": "porta",
	}
	// Public unicast stays allowed.
	for _, raw := range []string{"https://200.160.2.3/x", "https://[2804:14c::1]/x"} {
		u, _ := url.Parse(raw)
		if why := p.Check(t.Context(), raw, []string{u.Hostname()}); why != "" {
			t.Errorf("%s: a public address was refused: %s", raw, why)
		}
	}
	for raw, why := range cases {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		// Allowlisted, so only the reason under test can refuse it.
		got := p.Check(t.Context(), raw, []string{u.Hostname(), "info.gov.br"})
		if !strings.Contains(got, why) {
			t.Errorf("%s: want a refusal mentioning %q, got %q", raw, why, got)
		}
	}
}
