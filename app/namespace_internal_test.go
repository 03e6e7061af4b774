package app

import (
	"testing"
	"unicode"
)

// skeleton's ASCII fast path applies the same rules as its Unicode path.
func TestSkeletonOfASCIIFollowsTheUnicodeRules(t *testing.T) {
	for r := rune(0); r < 0x80; r++ {
		want := ""
		if !unicode.In(r, unicode.Mn, unicode.Me, unicode.Z) && !invisible(r) {
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
