package proxy

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
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
		{"garbage stops the walk at the last trusted hop", "10.1.2.3:4000", []string{"198.51.100.1, nonsense, 10.2.2.2"}, "", false, "10.2.2.2", false},
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
