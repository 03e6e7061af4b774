package callback_test

import (
	"context"
	"errors"
	"hash/fnv"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"geohub/app/callback"
)

// fuzzResolver is a fake DNS: names under exemplo.gov.br (and a few others)
// resolve as the table says, anything else to an address picked by a hash
// of the name from a pool that mixes public and inside addresses. Like DNS,
// it ignores case and a trailing dot.
type fuzzResolver struct{}

var errFuzzNX = errors.New("no such host")

var fuzzResolverTable = map[string][]string{
	"cad.exemplo.gov.br":       {"200.152.38.10"},
	"info.exemplo.gov.br":      {"200.152.38.13"},
	"cad6.exemplo.gov.br":      {"2804:14c:65a0::10", "200.152.38.11"},
	"interno.exemplo.gov.br":   {"10.1.2.3"},
	"rebind.exemplo.gov.br":    {"200.152.38.12", "127.0.0.1"}, // one inside answer is enough to refuse
	"loop.exemplo.gov.br":      {"127.0.0.1", "::1"},
	"mapeado.exemplo.gov.br":   {"::ffff:192.168.0.1"},
	"cgnat.exemplo.gov.br":     {"100.64.0.1"},
	"metadata.exemplo.gov.br":  {"169.254.169.254"},
	"ula.exemplo.gov.br":       {"fd00::1"},
	"multicast.exemplo.gov.br": {"224.0.0.1"},
	"zero.exemplo.gov.br":      {"0.0.0.0"},
	"vazio.exemplo.gov.br":     {},
	"doc.exemplo.gov.br":       {"200.152.38.14", "192.0.2.1"},
	"teredo.exemplo.gov.br":    {"2001::1"},
	"doc6.exemplo.gov.br":      {"3fff::1"},
	"descarte.exemplo.gov.br":  {"100::1"},
	"localhost":                {"127.0.0.1", "::1"},
	// What getaddrinfo makes of the inet_aton forms.
	"2130706433":   {"127.0.0.1"},
	"0x7f.1":       {"127.0.0.1"},
	"0177.0.0.1":   {"127.0.0.1"},
	"017700000001": {"127.0.0.1"},
}

// The pool holds at least one address of each special-purpose range the
// review found open (documentation, Teredo, 6to4 relay, discard-only, SRv6
// and the rest), so random names land in them too.
var fuzzResolverPool = []string{"200.152.38.20", "2804:14c::20", "8.8.8.8", "10.0.0.1", "192.168.1.1", "172.16.0.1",
	"127.0.0.2", "::1", "fe80::1", "100.100.100.100", "169.254.0.1", "::ffff:10.0.0.1", "255.255.255.255", "ff02::1",
	"192.0.0.8", "192.0.2.1", "198.51.100.7", "203.0.113.9", "192.88.99.1", "198.18.3.4", "240.0.0.1",
	"2001::1", "2001:db8::1", "3fff::1", "2001:2::1", "100::1", "5f00::1", "2002:c000:0204::1", "64:ff9b::a00:1",
	"fec0::1", "4000::1", "2a00:1450:4001::200e"}

func (fuzzResolver) LookupNetIP(_ context.Context, network, host string) ([]netip.Addr, error) {
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	if network != "ip" {
		return nil, errors.New("unexpected network " + network)
	}
	var out []netip.Addr
	if addrs, ok := fuzzResolverTable[name]; ok {
		for _, a := range addrs {
			out = append(out, netip.MustParseAddr(a))
		}
		return out, nil
	}
	if name == "" || strings.HasPrefix(name, "nx.") || strings.ContainsAny(name, " /") {
		return nil, errFuzzNX
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	n := h.Sum32()
	for i := range 1 + n%2 {
		out = append(out, netip.MustParseAddr(fuzzResolverPool[(n>>(4*i))%uint32(len(fuzzResolverPool))]))
	}
	return out, nil
}

// fuzzInside are the ranges SPEC 10 forbids a callback to resolve to:
// loopback, private, link-local, CGNAT, multicast, unspecified, and the
// rest of IANA's special-purpose registries (documentation, benchmarking,
// Teredo, 6to4, ORCHIDv2, discard-only, NAT64, SRv6), plus every IPv6
// address outside global unicast 2000::/3. Written out here, not taken from
// the policy's table, so the two are checked against each other.
var fuzzInside = func() []netip.Prefix {
	var out []netip.Prefix
	for _, p := range []string{"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
		"172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15",
		"198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
		"::/3", "4000::/2", "8000::/1", // outside 2000::/3: loopback, mapped, NAT64, discard, ULA, link-local, multicast
		"2001::/32", "2001:2::/48", "2001:10::/28", "2001:20::/28", "2001:db8::/32", "2002::/16", "3fff::/20"} {
		out = append(out, netip.MustParsePrefix(p))
	}
	return out
}()

func fuzzIsInside(a netip.Addr, insecure bool) bool {
	a = a.Unmap().WithZone("")
	if insecure && (netip.MustParsePrefix("127.0.0.0/8").Contains(a) || a == netip.IPv6Loopback()) {
		return false // --insecure-callbacks allows loopback, and only that
	}
	for _, p := range fuzzInside {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// fuzzAllowed is the allowlist rule of SPEC 6.1 written independently:
// exact names and "*.suffix" (subdomains only), ignoring case and a
// trailing dot.
func fuzzAllowed(host string, allowed []string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	for _, a := range allowed {
		a = strings.TrimSuffix(strings.ToLower(a), ".")
		if rest, wild := strings.CutPrefix(a, "*."); wild {
			if len(host) > len(rest)+1 && strings.HasSuffix(host, rest) && host[len(host)-len(rest)-1] == '.' {
				return true
			}
		} else if host == a {
			return true
		}
	}
	return false
}

// fuzzDialedHost returns the host:port net/http dials for raw, as the
// dispatcher's client would (it normalises IDN hosts to punycode), or ""
// when it would not dial at all.
func fuzzDialedHost(raw string) string {
	req, err := http.NewRequest(http.MethodPost, raw, strings.NewReader("{}"))
	if err != nil {
		return ""
	}
	var dialed string
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true,
		DialContext: func(_ context.Context, _, addr string) (net.Conn, error) {
			dialed = addr
			return nil, errors.New("fuzz: not dialing")
		}}}
	if resp, err := client.Do(req); err == nil {
		resp.Body.Close()
	}
	return dialed
}

// FuzzCallbackURL checks the callback policy (SPEC 6.1) on arbitrary URLs
// and allowlists: it never panics, every refusal names /callback_url, and
// whatever it accepts is https (http only when Insecure), carries no
// userinfo, and the host the dispatcher's client actually dials is in the
// allowlist and resolves only to public addresses.
func FuzzCallbackURL(f *testing.F) {
	allow := "cad.exemplo.gov.br\n*.bombeiros.gov.br"
	for _, s := range []struct {
		raw, allowed string
		insecure     bool
	}{
		{"https://cad.exemplo.gov.br/geohub/eventos", allow, false},
		{"https://cad.exemplo.gov.br:8443/geohub?x=1", allow, false},
		{"https://CAD.Exemplo.GOV.BR./eventos", allow, false},
		{"HTTPS://cad.exemplo.gov.br/", allow, false},
		{"http://cad.exemplo.gov.br/", allow, false},
		{"http://cad.exemplo.gov.br/", allow, true},
		{"ftp://cad.exemplo.gov.br/", allow, true},
		{"//cad.exemplo.gov.br/", allow, false},
		{"cad.exemplo.gov.br/eventos", allow, false},
		{"https:cad.exemplo.gov.br", allow, false},
		{"https:///eventos", allow, false},
		{"https://cad.exemplo.gov.br/#frag", allow, false},
		{"https://cad.exemplo.gov.br:/", allow, false},
		{"https://cad.exemplo.gov.br:0/", allow, false},
		{"https://cad.exemplo.gov.br:99999/", allow, false},
		{"https://:443/", "\n", false},
		{"https://a.bombeiros.gov.br/", allow, false},
		{"https://bombeiros.gov.br/", allow, false},
		{"https://evilbombeiros.gov.br/", allow, false},
		{"https://a.bombeiros.gov.br.evil/", allow, false},
		{"https://cad.exemplo.gov.br@evil.example/", allow, false},
		{"https://evil.example@cad.exemplo.gov.br/", allow, false},
		{"https://user:senha@cad.exemplo.gov.br/", allow, false},
		{"https://cad.exemplo.gov.br\\@evil.example/", allow, false},
		{"https://cad%2eexemplo.gov.br/", allow, false},
		{"https://cad.exemplo.gov.br%00.evil/", allow, false},
		{"https://cad.exemplo.gov.br%2f@evil/", allow, false},
		{"https://interno.exemplo.gov.br/", "*.exemplo.gov.br", false},
		{"https://rebind.exemplo.gov.br/", "*.exemplo.gov.br", false},
		{"https://loop.exemplo.gov.br/", "*.exemplo.gov.br", true},
		{"https://mapeado.exemplo.gov.br/", "*.exemplo.gov.br", true},
		{"https://cgnat.exemplo.gov.br/", "*.exemplo.gov.br", false},
		{"https://metadata.exemplo.gov.br/latest", "*.exemplo.gov.br", false},
		{"https://ula.exemplo.gov.br/", "*.exemplo.gov.br", false},
		{"https://cad6.exemplo.gov.br/", "*.exemplo.gov.br", false},
		{"https://vazio.exemplo.gov.br/", "*.exemplo.gov.br", false},
		{"https://doc.exemplo.gov.br/", "*.exemplo.gov.br", false},
		{"https://teredo.exemplo.gov.br/", "*.exemplo.gov.br", false},
		{"https://doc6.exemplo.gov.br/", "*.exemplo.gov.br", true},
		{"https://descarte.exemplo.gov.br/", "*.exemplo.gov.br", false},
		{"https://198.51.100.7/", "198.51.100.7", false},
		{"https://[2001:2::1]/", "2001:2::1", false},
		{"https://[5f00::1]/", "5f00::1", false},
		{"https://nx.exemplo.gov.br/", "*.exemplo.gov.br", false},
		{"https://localhost/", "localhost", false},
		{"http://localhost:8080/", "localhost", true},
		{"https://127.0.0.1/", "127.0.0.1", false},
		{"http://127.0.0.1:9/", "127.0.0.1", true},
		{"https://200.152.38.10/", "200.152.38.10", false},
		{"http://2130706433/", "2130706433", true},
		{"https://2130706433/", "2130706433", false},
		{"https://0x7f.1/", "0x7f.1", false},
		{"https://0177.0.0.1/", "0177.0.0.1", false},
		{"https://017700000001/", "017700000001", false},
		{"https://127.1/", "127.1", false},
		{"https://[::1]/", "::1", false},
		{"https://[::ffff:127.0.0.1]/", "::ffff:127.0.0.1", false},
		{"https://[::ffff:7f00:1]/", "::ffff:7f00:1", false},
		{"https://[::ffff:10.0.0.1]:8443/", "::ffff:10.0.0.1", true},
		{"https://[::]/", "::", true},
		{"https://0.0.0.0/", "0.0.0.0", true},
		{"https://[fe80::1%25eth0]/", "fe80::1%eth0", false},
		{"https://[2804:14c::1]/", "2804:14c::1", false},
		{"https://[2804:14c::1]/", "[2804:14c::1]", false},
		{"https://100.64.1.1/", "100.64.1.1", false},
		{"https://169.254.169.254/", "169.254.169.254", false},
		{"https://255.255.255.255/", "255.255.255.255", false},
		{"https://exämple.gov.br/", "exämple.gov.br", false},
		{"https://xn--exmple-cua.gov.br/", "exämple.gov.br", false},
		{"https://exämple.gov.br/", "xn--exmple-cua.gov.br", false},
		{"https://ＣＡＤ.exemplo.gov.br/", allow, false},
		{"https://cad。exemplo。gov。br/", allow, false},
		{"https://\u212Aad.exemplo.gov.br/", "kad.exemplo.gov.br", false},
		{"https://\u0130nfo.exemplo.gov.br/", "info.exemplo.gov.br", false},
		{"https://cad.exemplo.gov.br/\u0000", allow, false},
		{"https://cad.exemplo.gov.br /", allow, false},
		{" https://cad.exemplo.gov.br/", allow, false},
		{"", allow, false},
	} {
		f.Add(s.raw, s.allowed, s.insecure)
	}

	f.Fuzz(func(t *testing.T, raw, allowedList string, insecure bool) {
		allowed := strings.Split(allowedList, "\n")
		p := callback.Policy{Insecure: insecure, Resolver: fuzzResolver{}}
		refused := p.Check(context.Background(), raw, allowed)
		// The check at start and before every attempt (without DNS) never
		// refuses what registration accepts, or a server would dead-letter
		// deliveries to a callback it just accepted.
		if why := p.Refusal(raw, allowed); refused == "" && why != "" {
			t.Fatalf("Check accepted %q, Refusal refuses it: %s", raw, why)
		}
		if refused != "" {
			return
		}
		t.Logf("accepted %q for %q (insecure=%v)", raw, allowed, insecure)

		u, err := url.Parse(raw)
		if err != nil {
			t.Fatalf("accepted an unparsable URL: %v", err)
		}
		if u.Scheme != "https" && !(insecure && u.Scheme == "http") {
			t.Fatalf("accepted scheme %q", u.Scheme)
		}
		if u.User != nil {
			t.Fatalf("accepted userinfo %v", u.User)
		}
		if u.Hostname() == "" {
			t.Fatal("accepted a URL without a host")
		}

		// What the dispatcher's client would connect to.
		dialed := fuzzDialedHost(raw)
		if dialed == "" {
			return // the client refuses the URL: nothing is ever sent
		}
		host, _, err := net.SplitHostPort(dialed)
		if err != nil {
			t.Fatalf("dial address %q: %v", dialed, err)
		}
		if checked := strings.ToLower(u.Hostname()); !strings.EqualFold(host, checked) {
			// Check must have looked at the very name net/http dials.
			t.Fatalf("checked host %q, dialed host %q", checked, host)
		}
		if !fuzzAllowed(host, allowed) {
			t.Fatalf("accepted host %q (dialed as %q), not in the allowlist %q", u.Hostname(), host, allowed)
		}
		var addrs []netip.Addr
		if a, err := netip.ParseAddr(host); err == nil {
			addrs = []netip.Addr{a}
		} else if addrs, err = (fuzzResolver{}).LookupNetIP(context.Background(), "ip", host); err != nil || len(addrs) == 0 {
			t.Fatalf("accepted host %q, which does not resolve: %v", host, err)
		}
		for _, a := range addrs {
			if fuzzIsInside(a, insecure) {
				t.Fatalf("accepted host %q, which resolves to %v (insecure=%v)", host, a, insecure)
			}
		}
	})
}

// TestCallbackCheckAndDialAgreeOnTheHost pins the known bug that
// FuzzCallbackURL tolerates: the policy checks one name, the dispatcher
// dials another.
func TestCallbackCheckAndDialAgreeOnTheHost(t *testing.T) {
	raw := "https://\u0130nfo.exemplo.gov.br/" // U+0130: capital I with a dot above
	p := callback.Policy{Resolver: fuzzResolver{}}
	refused := p.Check(context.Background(), raw, []string{"info.exemplo.gov.br"})
	dialed := fuzzDialedHost(raw)
	if refused == "" && dialed != "info.exemplo.gov.br:443" {
		t.Fatalf("%q was checked as %q but net/http dials %q, which the allowlist does not name",
			raw, "info.exemplo.gov.br", dialed)
	}
}
