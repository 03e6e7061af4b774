package callback

import "net/netip"

// specialPurpose is every range of IANA's IPv4 and IPv6 Special-Purpose
// Address Registries (as of 2026-12), plus multicast, that a callback may
// not reach, each with the document that assigns it. A callback resolves
// to a public unicast address or it is refused: documentation and
// benchmarking ranges are never a real CAD, and the rest either reach
// inside (private, shared, loopback, link-local), carry an IPv4 address
// inside an IPv6 one (NAT64, 6to4, Teredo), or go to anycast services that
// are not CADs. Loopback is listed too: --insecure-callbacks allows it
// before this table is read.
var specialPurpose = []struct {
	prefix netip.Prefix
	name   string // pt-BR, shown to the admin who registers the callback
	ref    string
}{
	// IPv4 (https://www.iana.org/assignments/iana-ipv4-special-registry).
	{netip.MustParsePrefix("0.0.0.0/8"), "rede \"esta rede\"", "RFC 791"},
	{netip.MustParsePrefix("10.0.0.0/8"), "rede privada", "RFC 1918"},
	{netip.MustParsePrefix("100.64.0.0/10"), "espaço compartilhado (CGNAT)", "RFC 6598"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback", "RFC 1122"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local", "RFC 3927"},
	{netip.MustParsePrefix("172.16.0.0/12"), "rede privada", "RFC 1918"},
	{netip.MustParsePrefix("192.0.0.0/24"), "atribuições de protocolo da IETF", "RFC 6890"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentação (TEST-NET-1)", "RFC 5737"},
	{netip.MustParsePrefix("192.31.196.0/24"), "AS112-v4", "RFC 7535"},
	{netip.MustParsePrefix("192.52.193.0/24"), "AMT", "RFC 7450"},
	{netip.MustParsePrefix("192.88.99.0/24"), "relay anycast 6to4 (descontinuado)", "RFC 7526"},
	{netip.MustParsePrefix("192.168.0.0/16"), "rede privada", "RFC 1918"},
	{netip.MustParsePrefix("192.175.48.0/24"), "delegação direta AS112", "RFC 7534"},
	{netip.MustParsePrefix("198.18.0.0/15"), "testes de desempenho (benchmarking)", "RFC 2544"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentação (TEST-NET-2)", "RFC 5737"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentação (TEST-NET-3)", "RFC 5737"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast", "RFC 5771"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reservado (inclui broadcast limitado)", "RFC 1112, RFC 919"},
	// IPv6 (https://www.iana.org/assignments/iana-ipv6-special-registry).
	{netip.MustParsePrefix("::1/128"), "loopback", "RFC 4291"},
	{netip.MustParsePrefix("::/128"), "endereço não especificado", "RFC 4291"},
	{netip.MustParsePrefix("::/96"), "IPv4-compatível (descontinuado)", "RFC 4291"},
	{netip.MustParsePrefix("::ffff:0:0/96"), "IPv4 mapeado", "RFC 4291"},
	{netip.MustParsePrefix("::ffff:0:0:0/96"), "IPv4 traduzido (SIIT)", "RFC 2765"},
	{netip.MustParsePrefix("64:ff9b::/96"), "tradução IPv4/IPv6 (NAT64)", "RFC 6052"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "tradução IPv4/IPv6 de uso local", "RFC 8215"},
	{netip.MustParsePrefix("100::/64"), "descarte (discard-only)", "RFC 6666"},
	{netip.MustParsePrefix("100:0:0:1::/64"), "prefixo IPv6 fictício", "RFC 9780"},
	{netip.MustParsePrefix("2001::/23"), "atribuições de protocolo da IETF (Teredo, ORCHIDv2, benchmarking, AMT, AS112)", "RFC 2928"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentação", "RFC 3849"},
	{netip.MustParsePrefix("2002::/16"), "6to4", "RFC 3056"},
	{netip.MustParsePrefix("2620:4f:8000::/48"), "delegação direta AS112", "RFC 7534"},
	{netip.MustParsePrefix("3fff::/20"), "documentação", "RFC 9637"},
	{netip.MustParsePrefix("5f00::/16"), "identificadores de Segment Routing (SRv6 SIDs)", "RFC 9602"},
	{netip.MustParsePrefix("fc00::/7"), "endereço local único (rede privada)", "RFC 4193"},
	{netip.MustParsePrefix("fe80::/10"), "link-local", "RFC 4291"},
	{netip.MustParsePrefix("fec0::/10"), "site-local (descontinuado)", "RFC 3879"},
	{netip.MustParsePrefix("ff00::/8"), "multicast", "RFC 4291"},
}

// globalUnicast6 is the only IPv6 space IANA allocates to the public
// Internet today; the rest is reserved, so nothing outside it is a CAD.
var globalUnicast6 = netip.MustParsePrefix("2000::/3")

// specialPurposeRefusal names the special range a holds, or "" for none.
func specialPurposeRefusal(a netip.Addr) string {
	for _, r := range specialPurpose {
		if r.prefix.Contains(a) {
			return r.name + " (" + r.prefix.String() + ", " + r.ref + ")"
		}
	}
	if a.Is6() && !globalUnicast6.Contains(a) {
		return "fora do espaço IPv6 global (2000::/3)"
	}
	return ""
}
