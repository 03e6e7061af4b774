package app

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// The built-in plugins' namespaces (SPEC 10): the origens they publish
// under and the aggregates whose sequences they number. An event there from
// outside would pass for the plugin in a trace and take sequence numbers in
// an ocorrência or in a requester's outcome aggregate. evento: is the
// outbox's own: an event without an aggregate is sequenced alone as
// evento:<its id>, a sequence of one that nobody else may join.
var (
	reservedOrigens    = []string{PluginIntegracao, "ocorrencia"}
	reservedAggregates = []string{"solicitacao:", "ocorrencia:", "integracao:", "evento:"}
)

// CheckExternalPublish refuses what no publish from outside the built-in
// plugins may carry, whatever the caller's role: the plugins' types, origens
// and aggregates, also spelt so that a person would take them for the real
// ones (see lookalike), and integrator authorship, which routes events and
// claims aggregates and so comes only from the command API, where the
// integrator is authenticated. All of it is EForbidden: the request is well
// formed, and the same values are the plugins' own.
func CheckExternalPublish(req PublishRequest) error {
	if req.Autoria != nil && req.Autoria.Tipo == "integrador" {
		return &Error{Code: EForbidden, Message: "autoria de integrador é reservada à API de comandos",
			Details: []Detail{{Caminho: "/autoria/tipo", Mensagem: "use usuario ou sistema"}}}
	}
	var bad []Detail
	for _, f := range pluginFamilies {
		if strings.HasPrefix(req.Tipo, f) {
			bad = append(bad, Detail{"/tipo", fmt.Sprintf("tipos %s* são publicados só pelo plugin embutido (use a API de comandos)", f)})
		}
	}
	if req.Origem != "" {
		o := skeleton(head(req.Origem))
		for _, r := range reservedOrigens {
			switch {
			case req.Origem == r:
				bad = append(bad, Detail{"/origem", fmt.Sprintf("a origem %s é reservada ao plugin embutido", r)})
			case o == reservedSkeletons[r]:
				bad = append(bad, Detail{"/origem", fmt.Sprintf("parecida demais com a origem reservada %s (difere só em maiúsculas, acentos, espaços ou caracteres invisíveis ou de aparência igual)", r)})
			}
		}
	}
	if req.Agregado != "" {
		a := skeleton(head(req.Agregado))
		for _, r := range reservedAggregates {
			switch {
			case strings.HasPrefix(req.Agregado, r):
				bad = append(bad, Detail{"/agregado", fmt.Sprintf("agregados %s* pertencem ao plugin embutido", r)})
			case strings.HasPrefix(a, reservedSkeletons[r]):
				bad = append(bad, Detail{"/agregado", fmt.Sprintf("parecido demais com os agregados reservados %s* (difere só em maiúsculas, acentos, espaços ou caracteres invisíveis ou de aparência igual)", r)})
			}
		}
	}
	if len(bad) > 0 {
		return &Error{Code: EForbidden, Message: "reservado aos plugins embutidos", Details: bad}
	}
	return nil
}

// reservedSkeletons are the skeletons of the reserved names, made once.
var reservedSkeletons = func() map[string]string {
	m := map[string]string{}
	for _, r := range append(append([]string{}, reservedOrigens...), reservedAggregates...) {
		m[r] = skeleton(r)
	}
	return m
}()

// head is the start of an identifier that the namespace checks look at.
// They run before publish's own checks, on values as long as the body, and
// NFKD can make a string 18 times longer (U+FDFA). Past 256 bytes publish
// refuses an agregado anyway, and a reserved name padded that far with
// invisible characters is refused by checkIdentifier.
func head(s string) string { return s[:min(len(s), 256)] }

// skeleton is what a person reading s would take it for, so that two
// strings that look alike have the same skeleton: compatibility forms
// unfolded (NFKD: fullwidth letters, ligatures, NBSP), accents and every
// invisible or blank character dropped, case folded, and the letters of
// other scripts (and the digits) that are drawn like the Latin letters of
// the reserved names taken for them, after UTS #39's confusables.
func skeleton(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range norm.NFKD.String(s) {
		if r < utf8.RuneSelf {
			// Every publish passes here, with ASCII names almost always:
			// the same rules without the Unicode tables, which were a
			// twentieth of a publish's CPU.
			switch {
			case r <= ' ' || r == 0x7f: // controls and the space
				continue
			case r >= 'A' && r <= 'Z':
				r += 'a' - 'A'
			}
			if to, ok := asciiHomoglyphs[r]; ok {
				r = to
			}
			b.WriteByte(byte(r))
			continue
		}
		if unicode.In(r, unicode.Mn, unicode.Me, unicode.Z) || invisible(r) {
			continue
		}
		r = unicode.ToLower(r)
		if to, ok := homoglyphs[r]; ok {
			r = to
		}
		b.WriteRune(r)
	}
	return b.String()
}

// homoglyphs maps characters drawn like a letter of the reserved names (or
// like the colon that ends an aggregate's namespace) to one representative.
// i, l, I, 1 and | are one class: sans-serif fonts draw them alike.
var homoglyphs = map[rune]rune{
	'i': 'l', '1': 'l', '|': 'l', 'ı': 'l', 'ǀ': 'l', 'ɩ': 'l', 'ι': 'l', 'і': 'l', 'ӏ': 'l',
	'0': 'o', 'ο': 'o', 'о': 'o', 'օ': 'o', 'ᴏ': 'o',
	'а': 'a', 'ɑ': 'a', 'α': 'a',
	'с': 'c', 'ϲ': 'c', 'ᴄ': 'c',
	'е': 'e', 'ҽ': 'e',
	'ɡ': 'g', 'ց': 'g',
	'ѕ': 's', 'ꜱ': 's',
	'т': 't', 'ᴛ': 't',
	'г': 'r', 'ᴦ': 'r',
	'ո': 'n', 'ռ': 'n',
	'ː': ':', '˸': ':', '꞉': ':', '∶': ':', '։': ':', '׃': ':', '܃': ':', '܄': ':', '᛬': ':', '︰': ':', 'ꓽ': ':', '⁚': ':',
}

// asciiHomoglyphs are the ASCII keys of homoglyphs, for skeleton's fast path.
var asciiHomoglyphs = func() map[rune]rune {
	m := map[rune]rune{}
	for from, to := range homoglyphs {
		if from < utf8.RuneSelf {
			m[from] = to
		}
	}
	return m
}()

// invisible says whether r draws nothing, or nothing a reader can tell
// apart, or steers how its neighbours are drawn: controls (Cc), format
// characters (Cf: zero-width space and joiners, bidi overrides and
// isolates, soft hyphen), private-use characters (Co), line and paragraph
// separators, variation selectors and the other default-ignorable code
// points (Hangul fillers, U+034F).
func invisible(r rune) bool {
	if r < utf8.RuneSelf {
		return r < ' ' || r == 0x7f // the only ASCII in those tables: every publish's agregado and origem pass here
	}
	return unicode.In(r, invisibleTables...)
}

var invisibleTables = []*unicode.RangeTable{unicode.Cc, unicode.Cf, unicode.Co, unicode.Zl, unicode.Zp,
	unicode.Variation_Selector, unicode.Other_Default_Ignorable_Code_Point}

// checkIdentifier is the character rule of agregado and origem, for every
// publish, the plugins' included: an identifier a person reads on the
// console and a receiver compares byte for byte must show what it is. It
// names the first offending character and where it is.
func checkIdentifier(path, s string) *Detail {
	if !utf8.ValidString(s) {
		return &Detail{path, "não é UTF-8 válido"}
	}
	i := 0
	for _, r := range s {
		i++
		switch {
		case invisible(r):
			return &Detail{path, fmt.Sprintf("caractere invisível ou de controle U+%04X no caractere %d: use só caracteres visíveis", r, i)}
		case r >= utf8.RuneSelf && unicode.Is(unicode.Zs, r):
			return &Detail{path, fmt.Sprintf("espaço especial U+%04X no caractere %d: use o espaço comum ou nenhum", r, i)}
		}
	}
	return nil
}
