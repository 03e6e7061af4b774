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
//
// The walk stops at the first entry that is not a trusted proxy's address.
// That entry is the trusted proxy's own, its client as it saw it; everything
// left of it the client sent. So an entry that is no address (a proxy that
// writes "unknown", or an RFC 7239 obfuscated "_a1b2", for clients it
// will not name) is taken as written, as the client's name, rather than
// skipped: skipping it would let the client choose its own address, and
// so its own login-limit counter, while stopping at the proxy before it
// would put everyone behind that proxy on one counter. A value that could
// not be a proxy's name (empty, over 64 bytes, or not printable ASCII)
// leaves the last trusted address.
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
		entry := strings.TrimSpace(hops[i])
		hop, ok := parseHop(entry)
		if !ok {
			if clientName(entry) {
				return entry, https
			}
			break
		}
		ip = hop
		if !t.contains(ip) {
			break
		}
	}
	return ip.String(), https
}

// parseHop reads an X-Forwarded-For entry as an address, bare or in the
// forms proxies write when they append the client's port: 203.0.113.7,
// 203.0.113.7:5555, 2001:db8::1, [2001:db8::1]:5555 and [2001:db8::1]. The
// zone is dropped: it names an interface of the host that wrote it.
func parseHop(s string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	if inner, ok := strings.CutPrefix(s, "["); ok {
		inner, ok = strings.CutSuffix(inner, "]")
		a, err := netip.ParseAddr(inner)
		// Brackets are for IPv6, as ParseAddrPort has them.
		return a.Unmap().WithZone(""), ok && err == nil && a.Is6()
	}
	a, err := netip.ParseAddr(s)
	return a.Unmap().WithZone(""), err == nil
}

// clientName says whether an entry that is no address can be a proxy's
// name for a client: short, printable ASCII, as what the audit trail and
// the login limits store must be.
func clientName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

func (t Trusted) contains(ip netip.Addr) bool {
	for _, p := range t {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}
