// Package callback is the SSRF policy of integrators' callback URLs: what
// registration accepts, what the server refuses at start and before every
// attempt, and what the dialer connects to, on the same rules.
package callback

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
)

// Policy decides which callback URLs Geohub may call. The same rules
// run at registration and again at dial time on the address actually
// connected to, so a name that later resolves inside (DNS rebinding) is
// refused where it matters.
type Policy struct {
	// Insecure allows http:// and loopback addresses: local demos and tests
	// only (--insecure-callbacks). Private networks stay refused.
	Insecure bool
	// Resolver resolves callback hosts; nil means net.DefaultResolver.
	Resolver interface {
		LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
	}
}

// refusal says why an address may not be called, or "" when it may. The
// address is unmapped first, so an IPv4-mapped IPv6 address is judged as
// the IPv4 address it is.
func (p Policy) refusal(a netip.Addr) string {
	a = a.Unmap()
	if a.IsLoopback() && p.Insecure {
		return ""
	}
	if why := specialPurposeRefusal(a); why != "" {
		return "endereço de uso especial: " + why
	}
	return ""
}

// Check validates a callback URL against the policy and the integrator's
// host allowlist, resolving its host: why it is refused (pt-BR, for the
// person registering it), or "".
func (p Policy) Check(ctx context.Context, raw string, allowed []string) string {
	host, why := p.parse(raw, allowed)
	if why != "" {
		return why
	}
	addrs, err := p.resolve(ctx, host)
	if err != nil || len(addrs) == 0 {
		return fmt.Sprintf("o host %s não resolve", host)
	}
	for _, a := range addrs {
		if why := p.refusal(a); why != "" {
			return fmt.Sprintf("o host %s resolve para %s: %s", host, a, why)
		}
	}
	return ""
}

// Refusal is Check without DNS: why this server would refuse a stored
// callback now, or "". A callback accepted by a server with other rules
// (--insecure-callbacks, an older address table, a since-narrowed
// allowlist) is caught by it at start and before every attempt; names that
// resolve somewhere refused are caught by the dialer.
func (p Policy) Refusal(raw string, allowed []string) string {
	host, why := p.parse(raw, allowed)
	if why != "" {
		return why
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if why := p.refusal(a); why != "" {
			return fmt.Sprintf("o host %s é um %s", a, why)
		}
	}
	// RFC 6761: these names are loopback wherever they are resolved.
	if !p.Insecure && (host == "localhost" || strings.HasSuffix(host, ".localhost")) {
		return fmt.Sprintf("o host %s é loopback, aceito só com --insecure-callbacks", host)
	}
	return ""
}

// parse checks what a callback URL says by itself: scheme, form, port and
// the allowlist. It returns the lowered host, or why the URL is refused.
func (p Policy) parse(raw string, allowed []string) (host, why string) {
	if host, why = p.form(raw); why != "" {
		return "", why
	}
	if !HostAllowed(host, allowed) {
		return "", fmt.Sprintf("o host %s não está em hosts_permitidos", host)
	}
	return host, ""
}

// FormRefusal is why the URL itself is refused (scheme, form, port), or "":
// what can be said of a callback while its allowlist is still invalid, so
// a form reports both at once.
func (p Policy) FormRefusal(raw string) string {
	_, why := p.form(raw)
	return why
}

func (p Policy) form(raw string) (host, why string) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return "", "URL inválida"
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && p.Insecure:
	case u.Scheme == "http":
		return "", "o esquema deve ser https (http só com --insecure-callbacks)"
	default:
		return "", "o esquema deve ser https"
	}
	if u.User != nil {
		return "", "a URL não pode conter usuário ou senha"
	}
	if u.Fragment != "" {
		return "", "a URL não pode conter fragmento (#)"
	}
	// Before lowering: strings.ToLower maps some non-ASCII letters to ASCII
	// ("İ" to "i").
	raw = u.Hostname()
	for i := 0; i < len(raw); i++ {
		if raw[i] >= 0x80 {
			// net/http maps such a name with IDNA before dialing, which can
			// land on another name than the one checked here: only the
			// ASCII (punycode) form is accepted, so both are the same.
			return "", "o host deve estar em ASCII: use a forma punycode (xn--…)"
		}
	}
	host = strings.ToLower(raw)
	if _, err := netip.ParseAddr(host); err != nil && !hostName(host) {
		// url.Parse lets through hosts such as "].exemplo.gov.br" that no
		// resolver or allowlist reads the way net/http dials them.
		return "", "host inválido: use um nome DNS (letras, dígitos, hífen e pontos) ou um endereço IP"
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return "", "porta inválida"
		}
	}
	return host, ""
}

// hostName says whether host is a DNS name: dot-separated labels of 1 to 63
// letters, digits, hyphens or underscores, 253 characters at most.
func hostName(host string) bool {
	if host == "" || len(host) > 253 {
		return false
	}
	for label := range strings.SplitSeq(host, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range []byte(label) {
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

func (p Policy) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	var r interface {
		LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
	} = net.DefaultResolver
	if p.Resolver != nil {
		r = p.Resolver
	}
	return r.LookupNetIP(ctx, "ip", host)
}

// HostAllowed matches host against an allowlist of exact names and
// "*.suffix" wildcards (which match subdomains, not the bare suffix).
func HostAllowed(host string, allowed []string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, h := range allowed {
		h = strings.ToLower(strings.TrimSuffix(h, "."))
		if h == host {
			return true
		}
		if suffix, ok := strings.CutPrefix(h, "*."); ok && strings.HasSuffix(host, "."+suffix) {
			return true
		}
	}
	return false
}

// ErrRefusedAddress is returned by a dial the policy refused.
var ErrRefusedAddress = errors.New("callback address refused")

// Dialer returns a dialer that refuses, at connect time, any address the
// policy refuses: the check runs on the resolved IP the socket is about to
// connect to, after every DNS answer.
func (p Policy) Dialer(base *net.Dialer) *net.Dialer {
	d := *base
	d.Control = func(network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("%w: %s", ErrRefusedAddress, address)
		}
		if why := p.refusal(ap.Addr()); why != "" {
			return fmt.Errorf("%w: %s (%s)", ErrRefusedAddress, address, why)
		}
		return nil
	}
	return &d
}
