package app

import (
	"strings"
	"testing"
	"unicode"
)

// The ASCII fast paths of skeleton and invisible apply the same rules as
// their Unicode tables.
func TestSkeletonOfASCIIFollowsTheUnicodeRules(t *testing.T) {
	for r := rune(0); r < 0x80; r++ {
		if got, want := invisible(r), unicode.In(r, invisibleTables...); got != want {
			t.Errorf("invisible(%q) = %v, want %v", r, got, want)
		}
		if unicode.Is(unicode.Zs, r) && r != ' ' {
			t.Errorf("%q is an ASCII space other than U+0020: checkIdentifier's fast path misses it", r)
		}
		want := ""
		if !unicode.In(r, unicode.Mn, unicode.Me, unicode.Z) && !unicode.In(r, invisibleTables...) {
			l, ok := homoglyph(r)
			if !ok {
				l = unicode.ToLower(r)
			}
			want = string(l)
		}
		if got := skeleton(string(r)); got != want {
			t.Errorf("skeleton(%q) = %q, want %q", r, got, want)
		}
	}
}

// Every character of the table reaches its letter through the whole
// skeleton, NFKD included: ϲ (U+03F2) and ︰ (U+FE30) were in the table and
// still passed, because NFKD had made them ς and .. before the table was
// looked at.
func TestEveryConfusableSkeletonsToItsLetter(t *testing.T) {
	seen := map[rune]rune{}
	for letter, chars := range confusables {
		if got := skeleton(string(letter)); got != string(letter) {
			t.Errorf("the letter %q skeletons to %q: the table's letters must be their own skeletons", letter, got)
		}
		for _, r := range chars {
			if other, dup := seen[r]; dup {
				t.Errorf("%q (U+%04X) is listed for both %q and %q", r, r, other, letter)
			}
			seen[r] = letter
			if _, isLetter := confusables[r]; isLetter {
				t.Errorf("%q is a letter of the table and listed for %q", r, letter)
			}
			if got := skeleton(string(r)); got != string(letter) {
				t.Errorf("skeleton(%q U+%04X) = %q, want %q", r, r, got, letter)
			}
		}
	}
}

// A reserved name with a new letter needs that letter's confusables.
func TestConfusablesCoverTheReservedNames(t *testing.T) {
	for name, sk := range reservedSkeletons {
		for _, r := range sk {
			if _, ok := confusables[r]; !ok {
				t.Errorf("%q of the reserved %s has no entry in confusables", r, name)
			}
		}
	}
}

// The outside review's lookalikes, which were accepted: letters the table
// lost to NFKD, small capitals and a colon-like sign that were not in it.
func TestReviewedLookalikesAreReserved(t *testing.T) {
	for _, c := range []struct{ origem, agregado string }{
		{"rh", "o\u03f2orren\u03f2ia:1"},  // ϲ GREEK LUNATE SIGMA SYMBOL
		{"rh", "soli\u03f2ita\u03f2ao:1"}, // the same in solicitacao
		{"rh", "solicitacao\ufe301"},      // ︰ PRESENTATION FORM FOR VERTICAL TWO DOT LEADER
		{"rh", "solicitacao\u09031"},      // ः DEVANAGARI SIGN VISARGA
		{"rh", "ᴏᴄᴏʀʀᴇɴᴄɪᴀ:1"},
		{"rh", "ꜱᴏʟɪᴄɪᴛᴀᴄᴀᴏ:1"},
		{"rh", "ɪntegracao:1"},
		{"rh", "ᴇᴠᴇɴᴛᴏ:1"},
		{"rh", "O\u03f9ORRENCIA:1"}, // Ϲ, the capital, which NFKD makes Σ
		{"rh", "ΙΝΤΕGRΑCΑΟ:1"},      // Greek capitals: Ν is N though ν is v
		{"rh", "øcorrencia:1"},      // o with a stroke: confusables.txt's o and U+0338
		{"o\u03f2orrencia", "lote:1"},
		{"ᴏᴄᴏʀʀᴇɴᴄɪᴀ", "lote:1"},
		{"ɪntegracao", "lote:1"},
		{"\U0001d6b0\U0001d6b4tegracao", "lote:1"}, // mathematical Greek capitals, which NFKD makes Ι and Ν
	} {
		err := CheckExternalPublish(PublishRequest{Tipo: "teste:livre", Origem: c.origem, Agregado: c.agregado})
		if ErrorCode(err) != EForbidden {
			t.Errorf("origem %q, agregado %q: %v, want %s", c.origem, c.agregado, err, EForbidden)
		}
	}
}

// What is not the plugins' stays open, Portuguese spelling included.
func TestNeighboursOfTheReservedNamesStayOpen(t *testing.T) {
	for _, c := range []struct{ origem, agregado string }{
		{"solicitacoes", "solicitacoes:1"},
		{"ocorrencias-legadas", "jornada:ocorrencia:1"},
		{"São Paulo", "unidade:São Paulo"},
		{"integração-sp", "integrações:1"},
		{"evento", "eventos:1"},
		{"Ocorrências Antigas", "ocorrência-antiga:1"},
	} {
		if err := CheckExternalPublish(PublishRequest{Tipo: "teste:livre", Origem: c.origem, Agregado: c.agregado}); err != nil {
			t.Errorf("origem %q, agregado %q refused: %v", c.origem, c.agregado, err)
		}
	}
}

// A value with an invisible character is left to Publish's character
// rule, which answers 422 naming it; every value that rule refuses is
// refused by Publish, so none passes by skipping the comparison here.
func TestInvisibleCharactersAreLeftToTheCharacterRule(t *testing.T) {
	for _, c := range []struct{ origem, agregado string }{
		{"integ\u200bracao", "lote:1"},
		{"ocorrencia\u00a0", "lote:1"},
		{"rh", "solici\u200btacao:1"},
		{"rh", "ocor\u00adrencia:1"},
	} {
		req := PublishRequest{Tipo: "teste:livre", Origem: c.origem, Agregado: c.agregado}
		if err := CheckExternalPublish(req); err != nil {
			t.Errorf("origem %q, agregado %q: %v, want it left to the character rule", c.origem, c.agregado, err)
		}
		if checkIdentifier("/origem", c.origem) == nil && checkIdentifier("/agregado", c.agregado) == nil {
			t.Errorf("origem %q, agregado %q: the character rule does not refuse them", c.origem, c.agregado)
		}
	}
	if !strings.Contains(checkIdentifier("/origem", "integ\u200bracao").Mensagem, "U+200B") {
		t.Error("the finding does not name the character")
	}
}
