package proxy

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestClientBehindTrustedProxies(t *testing.T) {
	proxies, err := Parse(" 10.0.0.0/8, 192.168.1.1 ,::1, ::ffff:172.16.0.0/108")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, peer string
		xff        []string
		proto      string
		tls        bool
		addr       string
		https      bool
	}{
		{"no proxy", "203.0.113.5:4000", nil, "", false, "203.0.113.5", false},
		{"an untrusted peer's headers are ignored", "203.0.113.5:4000", []string{"198.51.100.1"}, "https", false, "203.0.113.5", false},
		{"TLS to geohub itself", "203.0.113.5:4000", nil, "", true, "203.0.113.5", true},
		{"one trusted proxy", "10.1.2.3:4000", []string{"198.51.100.1"}, "https", false, "198.51.100.1", true},
		{"a client's forged entry is left of the real one", "10.1.2.3:4000", []string{"1.2.3.4, 198.51.100.1"}, "http", false, "198.51.100.1", false},
		{"a chain of trusted proxies", "192.168.1.1:4000", []string{"198.51.100.1, 10.9.9.9", "10.8.8.8"}, "", false, "198.51.100.1", false},
		// Entries with the client's port, as some proxies append them: the
		// review found these stopped the walk at the proxy, which put
		// everyone behind it on one login-limit counter.
		{"an IPv4 entry with a port", "10.1.2.3:4000", []string{"203.0.113.7:5555"}, "", false, "203.0.113.7", false},
		{"a bracketed IPv6 entry with a port", "10.1.2.3:4000", []string{"[2001:db8::1]:5555"}, "", false, "2001:db8::1", false},
		{"a bracketed IPv6 entry without a port", "10.1.2.3:4000", []string{"[2001:db8::1]"}, "", false, "2001:db8::1", false},
		{"an IPv4-mapped entry with a port", "10.1.2.3:4000", []string{"[::ffff:198.51.100.3]:80"}, "", false, "198.51.100.3", false},
		{"a zone is dropped", "10.1.2.3:4000", []string{"fe80::1%eth0"}, "", false, "fe80::1", false},
		{"a trusted hop with a port is still a trusted hop", "10.1.2.3:4000", []string{"198.51.100.1, 10.2.2.2:8080"}, "", false, "198.51.100.1", false},
		{"a port does not hide a forged entry", "10.1.2.3:4000", []string{"1.2.3.4:1, 198.51.100.1:2"}, "", false, "198.51.100.1", false},
		// An entry that is no address is the trusted proxy's word for its
		// client: taken as written, never skipped for the entries left of
		// it, which the client wrote.
		{"a name the proxy wrote is the client", "10.1.2.3:4000", []string{"bogus1"}, "", false, "bogus1", false},
		{"a name stops the walk", "10.1.2.3:4000", []string{"198.51.100.1, nonsense, 10.2.2.2"}, "", false, "nonsense", false},
		{"a forged entry left of a name stays ignored", "10.1.2.3:4000", []string{"1.2.3.4, unknown"}, "", false, "unknown", false},
		{"brackets around IPv4 are no address", "10.1.2.3:4000", []string{"[203.0.113.7]"}, "", false, "[203.0.113.7]", false},
		{"an out-of-range port is no address", "10.1.2.3:4000", []string{"203.0.113.7:99999"}, "", false, "203.0.113.7:99999", false},
		{"an empty entry leaves the last trusted hop", "10.1.2.3:4000", []string{"198.51.100.1, "}, "", false, "10.1.2.3", false},
		{"an entry with a space inside is no name", "10.1.2.3:4000", []string{"198.51.100.1, un known, 10.2.2.2"}, "", false, "10.2.2.2", false},
		{"a non-ASCII entry is no name", "10.1.2.3:4000", []string{"198.51.100.1, clienté"}, "", false, "10.1.2.3", false},
		{"an overlong entry is no name", "10.1.2.3:4000", []string{"198.51.100.1, " + strings.Repeat("x", 65)}, "", false, "10.1.2.3", false},
		{"a trusted proxy without the header", "10.1.2.3:4000", nil, "", false, "10.1.2.3", false},
		{"IPv6 loopback proxy", "[::1]:4000", []string{"2001:db8::7"}, "HTTPS", false, "2001:db8::7", true},
		{"IPv4-mapped peer", "[::ffff:10.1.2.3]:4000", []string{"198.51.100.9"}, "", false, "198.51.100.9", false},
		{"IPv4-mapped prefix", "172.16.5.5:4000", []string{"198.51.100.10"}, "", false, "198.51.100.10", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/login", nil)
			r.RemoteAddr = tt.peer
			for _, v := range tt.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			if tt.proto != "" {
				r.Header.Set("X-Forwarded-Proto", tt.proto)
			}
			if tt.tls {
				r.TLS = &tls.ConnectionState{}
			}
			addr, https := proxies.Client(r)
			if addr != tt.addr || https != tt.https {
				t.Fatalf("client = %s, https %v; want %s, %v", addr, https, tt.addr, tt.https)
			}
		})
	}
	for _, bad := range []string{"10.0.0.0/33", "proxy.local", "10.0.0", "::ffff:0.0.0.0/90"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
