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
// geohub is the server's own name: the origem and the autoria (sistema) of
// what it sends by itself (a verificar's signed ping), so that a receiver
// can trust an event that says it came from geohub.
var (
	reservedOrigens    = []string{PluginIntegracao, "ocorrencia", ServerName}
	reservedAggregates = []string{"solicitacao:", "ocorrencia:", "integracao:", "evento:"}
)

// CheckExternalPublish refuses what no publish from outside the built-in
// plugins may carry, whatever the caller's role: the plugins' types, origens
// and aggregates, also spelt so that a person would take them for the real
// ones (see lookalike), and integrator authorship, which routes events and
// claims aggregates and so comes only from the command API, where the
// integrator is authenticated. All of it is EForbidden: the request is well
// formed, and the same values are the plugins' own. An origem or agregado
// that breaks the character rule (checkIdentifier: an invisible character,
// a special space) is not compared here: Publish refuses it as EInvalid,
// naming the character, which says more than "looks like integracao".
func CheckExternalPublish(req PublishRequest) error {
	if req.Autoria != nil && req.Autoria.Tipo == "integrador" {
		return &Error{Code: EForbidden, Message: "autoria de integrador é reservada à API de comandos",
			Details: []Detail{{Caminho: "/autoria/tipo", Mensagem: "use usuario ou sistema"}}}
	}
	var bad []Detail
	if a := req.Autoria; a != nil && a.Tipo == ActorSistema && checkIdentifier("/autoria/id", a.ID) == nil &&
		skeleton(head(a.ID)) == reservedSkeletons[ServerName] {
		bad = append(bad, Detail{"/autoria/id", "o sistema geohub é o próprio servidor: use o nome do seu sistema"})
	}
	for _, f := range pluginFamilies {
		if strings.HasPrefix(req.Tipo, f) {
			bad = append(bad, Detail{"/tipo", fmt.Sprintf("tipos %s* são publicados só pelo plugin embutido (use a API de comandos)", f)})
		}
	}
	if req.Origem != "" && checkIdentifier("/origem", req.Origem) == nil {
		o := skeleton(head(req.Origem))
		for _, r := range reservedOrigens {
			switch {
			case req.Origem == r && r == ServerName:
				bad = append(bad, Detail{"/origem", "a origem geohub é reservada ao próprio servidor"})
			case req.Origem == r:
				bad = append(bad, Detail{"/origem", fmt.Sprintf("a origem %s é reservada ao plugin embutido", r)})
			case o == reservedSkeletons[r]:
				bad = append(bad, Detail{"/origem", fmt.Sprintf("parecida demais com a origem reservada %s (difere só em maiúsculas, acentos, espaços ou caracteres de aparência igual)", r)})
			}
		}
	}
	if req.Agregado != "" && checkIdentifier("/agregado", req.Agregado) == nil {
		a := skeleton(head(req.Agregado))
		for _, r := range reservedAggregates {
			switch {
			case strings.HasPrefix(req.Agregado, r):
				bad = append(bad, Detail{"/agregado", fmt.Sprintf("agregados %s* pertencem ao plugin embutido", r)})
			case strings.HasPrefix(a, reservedSkeletons[r]):
				bad = append(bad, Detail{"/agregado", fmt.Sprintf("parecido demais com os agregados reservados %s* (difere só em maiúsculas, acentos, espaços ou caracteres de aparência igual)", r)})
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
// invisible or blank character dropped, case folded, and the characters
// drawn like a letter of the reserved names, or like the colon, taken for it
// (confusables). The confusables are looked up both in what was written and
// in what NFKD makes of it: NFKD turns some of them into characters that are
// not (ϲ into ς, ︰ into ..), and makes others of letters they do not
// list (𝚴, a mathematical capital nu, into Ν).
func skeleton(s string) string {
	if !isASCII(s) {
		s = norm.NFKD.String(strings.Map(confusable, s))
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
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
		if to, ok := homoglyph(r); ok {
			r = to
		} else {
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// confusable is skeleton's pass before NFKD: r's letter if r is drawn like
// one, else r.
func confusable(r rune) rune {
	if r < utf8.RuneSelf {
		return r // NFKD leaves ASCII alone, and the main pass maps it
	}
	if to, ok := homoglyph(r); ok {
		return to
	}
	return r
}

// homoglyph is the letter r is drawn like, if any, or that its lower case
// is drawn like. The character as written goes first, since case folding
// can change what it looks like: the Greek capital Ν reads as N, its lower
// case ν as v.
func homoglyph(r rune) (rune, bool) {
	if to, ok := homoglyphs[r]; ok {
		return to, true
	}
	to, ok := homoglyphs[unicode.ToLower(r)]
	return to, ok
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// confusables are, for each letter of the reserved names (geohub gives b
// and h; u and d are there too) and
// for the colon that ends an aggregate's namespace, the characters drawn
// like it: every character that UTS #39's confusables.txt maps to it, to
// its capital or, for i and l, to 1, I or |, also when the mapping adds
// combining marks, which the skeleton drops (ø is o with U+0338); and the
// small capitals (ᴀ ʀ ᴛ …), which confusables.txt keeps as letters of
// their own (т is ᴛ there) but that read as the capital, and so as the
// letter once case is folded. Left out are those NFKD already makes the
// letter (fullwidth ｃ, mathematical 𝐜, Roman numeral ⅽ) and capitals whose
// lower case is listed (Cyrillic С, as с is): skeleton reaches them.
// Right-to-left characters, marks and those outside the BMP are escaped.
// i, l, I, 1 and | are one class: sans-serif fonts draw them alike.
var confusables = map[rune]string{
	':': "ː˸։\u05C3\u0703\u0704\u0903\u0A83᛬᠃᠉⁚∶ꓽ꞉︰",
	'a': "ɑαаᗅᴀ⍶⍺ꓮꭺ\U000102A0\U00016F40",
	'b': "ƀƄƅʙΒВЬᏏᏴᑲᖯᗷⲂꓐ",
	'c': "¢ȼϲϹсҫᴄ₡ⲥꓚꮯ\U000102A2\U00010302\U0001043D\U0001051C\U000118E9\U000118F2\U0001F74C",
	'd': "ÐđƌɖɗԁᏧᑯᗞᗪᴅ₫ꓒꓓꭰ",
	'e': "ɇΕеҽҿᴇ℮⋿ⴹꓰꬲꭼ\U00010286\U000118A6\U000118AE",
	'g': "ƍǥɠɡɢԍցᏻᶃꓖꮐ",
	'h': "ĦħʜΗНһհᎻᏂᕼⲎꓧ",
	'l': "i1|ıłƚǀɨɩɪɫɭʟ˛ͺιіӏ\u05C0\u05D5\u05DF\u0627١\u0673۱\u07CAᒪᛁᵻᵼ∣⍳⍸⏽Ⲓⳑⵏꓡꓲꙇꭵꮮ￨\U0001028A\U00010309\U00010320\U00010443\U00010526\U000118B2\U000118C3\U00016F16\U00016F28\U0001D22A\U0001E8C7",
	'n': "ƝƞɳɴΝηոռᵰⲚꓠ\U0001018E\U00010513",
	'o': "0øɵθοσоѳөօ\u05E1\u0647٥\u06BE\u06C1\u06D5۵\u06FF\u07C0०০੦૦ଠ୦௦\u0C02౦\u0C82೦\u0D02ഠ൦\u0D82๐໐ဝ၀ჿዐᴏᴑ⊖⊝⍬ⲟⴱⵁⵔ〇ꓳꝋꬽꬾꭴꮎꮻ\U00010292\U000102AB\U0001042C\U000104EA\U00010516\U000114D0\U000118B5\U000118C8\U000118D7\U000118E0\U0001D21A\U0001F714",
	'r': "ɍɼɽʀгғᖇᴦᵲⲅꓣꭇꭈꭱꮁꮢ\U000104B4\U00016F35\U0001D216",
	's': "ƽʂѕՏᏕᵴꓢꜱꮪ\U00010296\U00010448\U000118C1\U00016F3A",
	't': "ŧƭƮȾτтҭᴛᵵ₮⊤⍡⟙Ⲧꓔꭲ\U00010297\U000102B1\U00010315\U000118BC\U00016F0A\U0001F768",
	'u': "Ʉʋυսሀᑌᴜᵾ∪⋃ꓴꞟꭎꭒꮜ\U000104F6\U000118D8\U00016F42",
	'v': "νѵ\u05D8٧۷ᐯᴠ∨⋁ⴸꓦꛟꮩ\U00010197\U0001051D\U00011706\U000118C0\U00016F08\U0001D20D\U0001F708",
}

// homoglyphs maps each of confusables' characters to its letter.
var homoglyphs = func() map[rune]rune {
	m := map[rune]rune{}
	for to, from := range confusables {
		for _, r := range from {
			m[r] = to
		}
	}
	return m
}()

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
// ShowInvisible writes every invisible or control character of s (as the
// character rule reads them, and special spaces) as its code point, [U+202E],
// so text a caller chose reads on the console as what it holds, never
// reordered by a bidi override nor hiding a zero-width character or a
// line break.
func ShowInvisible(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return invisible(r) || r >= utf8.RuneSelf && unicode.Is(unicode.Zs, r) }) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if invisible(r) || r >= utf8.RuneSelf && unicode.Is(unicode.Zs, r) {
			fmt.Fprintf(&b, "[U+%04X]", r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

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
