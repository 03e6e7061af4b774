package console

import (
	"bytes"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"

	"geohub/app"
)

// TestShowJSONIndentsWhatFitsAsJSONIndentDoes: within the limit the page
// shows what it showed before, json.Indent's text, byte for byte.
func TestShowJSONIndentsWhatFitsAsJSONIndentDoes(t *testing.T) {
	docs := []string{
		`{}`, `[]`, `1`, `"só texto"`, `null`,
		`{"a":{},"b":[],"c":[{}],"d":[[]]}`,
		` { "espaço" : [ 1 , 2 ] , "vazio" : { } } `,
		`{"s":"aspas \" e barra \\ e {colchetes} [ , : ]","u":"\u00e7 ção 🚒","n":-1.5e-7,"t":true,"f":false,"z":null}`,
		`{"x/y~":[1,"[",{"k":[[[[[[[[1]]]]]]]]}]}`,
		strings.Repeat(`{"a":`, app.MaxDepth) + `1` + strings.Repeat("}", app.MaxDepth),
	}
	types, err := app.BuiltinTypes()
	if err != nil {
		t.Fatal(err)
	}
	for _, tv := range types {
		docs = append(docs, string(tv.Schema))
	}
	for _, doc := range docs {
		var want bytes.Buffer
		if err := json.Indent(&want, []byte(doc), "", "  "); err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		got := showJSON([]byte(doc))
		if got.Compact || got.Truncated || got.Text != strings.TrimSpace(want.String()) {
			t.Errorf("showJSON(%.80s) = %+v\nwant the indented text:\n%s", doc, got, want.String())
		}
	}
}

// TestShowJSONBoundsWhatItShowsAndWhatItCosts: past the limit the text is
// compact, at most maxShownJSON bytes, a prefix of the compact document
// cut between characters; and the work is bounded by the limit, not by
// depth (json.Indent made 162 MB of text of the reviewer's 9,000 levels).
func TestShowJSONBoundsWhatItShowsAndWhatItCosts(t *testing.T) {
	deep := strings.Repeat(`{"a":`, 9000) + `"fundo"` + strings.Repeat("}", 9000)
	wide := `{"itens":[` + strings.Repeat(`{"nome":"Ana Paula","unidade":"Base Centro"},`, 20000) + `{}]}`
	long := `{"texto":"-` + strings.Repeat("ç", maxShownJSON) + `"}` // 11 bytes, then two-byte characters: the limit falls inside one
	arrays := strings.Repeat("[", 200000) + strings.Repeat("]", 200000)
	for name, c := range map[string]struct {
		doc                string
		compact, truncated bool
	}{
		"9,000 levels":          {deep, true, false},
		"20,000 small objects":  {wide, true, true},
		"one long string":       {long, true, true},
		"200,000 nested lists":  {arrays, true, true},
		"indented input, large": {indentOf(t, wide), true, true},
	} {
		t.Run(name, func(t *testing.T) {
			var got shownJSON
			alloc := allocated(func() { got = showJSON([]byte(c.doc)) })
			if got.Compact != c.compact || got.Truncated != c.truncated {
				t.Fatalf("Compact %v, Truncated %v; want %v, %v", got.Compact, got.Truncated, c.compact, c.truncated)
			}
			if len(got.Text) > maxShownJSON {
				t.Fatalf("shows %d bytes, over the limit of %d", len(got.Text), maxShownJSON)
			}
			if !utf8.ValidString(got.Text) {
				t.Fatalf("the cut split a character: %q", got.Text[len(got.Text)-8:])
			}
			var compact bytes.Buffer
			if err := json.Compact(&compact, []byte(c.doc)); err != nil {
				// Deeper than encoding/json goes (10,000 levels): shown as
				// stored, which has no whitespace to drop.
				compact.Reset()
				compact.WriteString(c.doc)
			}
			if !strings.HasPrefix(compact.String(), got.Text) || (!c.truncated && got.Text != compact.String()) {
				t.Fatalf("the text is not the compact document's beginning: %.100s", got.Text)
			}
			if c.truncated && len(got.Text) < maxShownJSON-utf8.UTFMax {
				t.Fatalf("cut at %d bytes, well before the limit", len(got.Text))
			}
			// Checking the document (json.Valid keeps a stack per level) and
			// a few buffers of the limit are the whole cost.
			if limit := uint64(8*len(c.doc) + 4*maxShownJSON); alloc > limit {
				t.Fatalf("allocated %d bytes to show a %d-byte document, over %d", alloc, len(c.doc), limit)
			}
		})
	}
}

func indentOf(t *testing.T, doc string) string {
	var b bytes.Buffer
	if err := json.Indent(&b, []byte(doc), "", "    "); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// allocated is how many bytes f allocates on the heap.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func BenchmarkShowJSONDeep(b *testing.B) {
	deep := []byte(strings.Repeat(`{"a":`, 9000) + `"fundo"` + strings.Repeat("}", 9000))
	b.SetBytes(int64(len(deep)))
	for b.Loop() {
		showJSON(deep)
	}
}
