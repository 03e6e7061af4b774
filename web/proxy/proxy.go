// Package proxy tells who sent a request when geohub runs behind reverse
// proxies (--trusted-proxies): the API's audit trail and the console's
// login limits and cookies read the client the same way.
package proxy

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// Trusted are the reverse proxies whose X-Forwarded-For and
// X-Forwarded-Proto are believed; empty, every peer is the client.
type Trusted []netip.Prefix

// Parse reads --trusted-proxies: addresses or CIDR prefixes,
// comma-separated, of the reverse proxies in front of geohub.
func Parse(s string) (Trusted, error) {
	var out Trusted
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if p, err := netip.ParsePrefix(f); err == nil {
			if a := p.Addr(); a.Is4In6() {
				// Peers are compared unmapped: ::ffff:10.0.0.0/104 is 10.0.0.0/8.
				if p.Bits() < 96 {
					return nil, fmt.Errorf("trusted proxy %q: an IPv4-mapped prefix needs at least 96 bits", f)
				}
				p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q: want an IP address or a CIDR prefix", f)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

// Client is who sent a request, as far as geohub can tell: the peer,
// or, when the peer is a trusted proxy, the address that proxy (and any
// trusted one before it) saw, from X-Forwarded-For read right to left; and
// whether the browser reached us over TLS (X-Forwarded-Proto from a trusted
// proxy). Headers from anyone else are ignored: they are the client's to
// forge. The console's login limits key on this address and its cookies
// are Secure when https is true; the audit trail records the address.
func (t Trusted) Client(r *http.Request) (addr string, https bool) {
	https = r.TLS != nil
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr, https
	}
	ip := peer.Addr().Unmap()
	if !t.contains(ip) {
		return ip.String(), https
	}
	if v := r.Header.Values("X-Forwarded-Proto"); len(v) > 0 {
		protos := strings.Split(v[len(v)-1], ",")
		https = https || strings.EqualFold(strings.TrimSpace(protos[len(protos)-1]), "https")
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		hop, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			break // garbage: keep the last address we could trust
		}
		ip = hop.Unmap()
		if !t.contains(ip) {
			break
		}
	}
	return ip.String(), https
}

func (t Trusted) contains(ip netip.Addr) bool {
	for _, p := range t {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}
