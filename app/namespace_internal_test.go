package app

import (
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
			l := unicode.ToLower(r)
			if to, ok := homoglyphs[l]; ok {
				l = to
			}
			want = string(l)
		}
		if got := skeleton(string(r)); got != want {
			t.Errorf("skeleton(%q) = %q, want %q", r, got, want)
		}
	}
}
