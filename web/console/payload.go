package console

import (
	"encoding/json"
	"net/http"
	"unicode/utf8"

	"geohub/app"
)

// maxShownJSON bounds the text a page shows of one stored JSON document (an
// event's payload, a schema). 64 KiB is some twenty times what a CAD's
// events and the built-in schemas take indented, so they always show whole
// and readable; past it a page would only be slower to read, and a stored
// document may be up to 1 MiB, which indented at depth grows without
// bound. HTML escaping at most sextuples it, so a page stays well under a
// megabyte whatever was stored.
const maxShownJSON = 64 << 10

// shownJSON is a stored document as a page shows it.
type shownJSON struct {
	Text string
	// Compact says it did not fit indented within maxShownJSON and is shown
	// without indentation; Truncated, that even so only its first
	// maxShownJSON bytes are shown. Either way the page links to the raw
	// record.
	Compact, Truncated bool
}

// showJSON renders raw indented when that fits in maxShownJSON, else
// compact and cut at the limit. Both passes stop at the limit, so the work
// is bounded by it and by one read of raw, whatever raw's depth: json.Indent
// writes every level's indentation on every line, quadratic in depth.
func showJSON(raw []byte) shownJSON {
	if !json.Valid(raw) {
		// Deeper than encoding/json reads (10,000 levels), which an older
		// binary stored, or not JSON, which nothing stores: shown as stored.
		text, cut := cutAt(raw, maxShownJSON)
		return shownJSON{Text: string(text), Compact: true, Truncated: cut}
	}
	if text, ok := indentWithin(raw, maxShownJSON); ok {
		return shownJSON{Text: string(text)}
	}
	text, cut := compactWithin(raw, maxShownJSON)
	return shownJSON{Text: string(text), Compact: true, Truncated: cut}
}

// indentWithin indents valid JSON two spaces a level, as json.Indent does,
// and gives up (false) as soon as the text would pass limit.
func indentWithin(raw []byte, limit int) ([]byte, bool) {
	out := make([]byte, 0, min(2*len(raw), limit))
	depth := 0
	fits := func(n int) bool { return len(out)+n <= limit }
	newline := func() bool {
		if !fits(1 + 2*depth) {
			return false
		}
		out = append(out, '\n')
		for range depth {
			out = append(out, ' ', ' ')
		}
		return true
	}
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; c {
		case ' ', '\t', '\n', '\r':
		case '"':
			end := stringEnd(raw, i)
			if !fits(end - i) {
				return nil, false
			}
			out = append(out, raw[i:end]...)
			i = end - 1
		case '{', '[':
			if next := skipSpace(raw, i+1); next < len(raw) && (raw[next] == '}' || raw[next] == ']') {
				if !fits(2) {
					return nil, false
				}
				out = append(out, c, raw[next]) // {} and [] stay on one line
				i = next
				continue
			}
			if !fits(1) {
				return nil, false
			}
			out = append(out, c)
			depth++
			if !newline() {
				return nil, false
			}
		case '}', ']':
			depth--
			if !newline() || !fits(1) {
				return nil, false
			}
			out = append(out, c)
		case ',':
			if !fits(1) {
				return nil, false
			}
			out = append(out, ',')
			if !newline() {
				return nil, false
			}
		case ':':
			if !fits(2) {
				return nil, false
			}
			out = append(out, ':', ' ')
		default:
			if !fits(1) {
				return nil, false
			}
			out = append(out, c)
		}
	}
	return out, true
}

// compactWithin drops the whitespace between tokens of valid JSON and stops
// at limit bytes, on a character boundary; cut says it stopped early.
func compactWithin(raw []byte, limit int) (out []byte, cut bool) {
	out = make([]byte, 0, min(len(raw), limit))
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c == ' ' || c == '\t' || c == '\n' || c == '\r' {
			continue
		}
		end := i + 1
		if c == '"' {
			end = stringEnd(raw, i)
		}
		if len(out)+end-i > limit {
			return append(out, raw[i:i+boundary(raw[i:end], limit-len(out))]...), true
		}
		out = append(out, raw[i:end]...)
		i = end - 1
	}
	return out, false
}

// cutAt keeps at most limit bytes of b, without splitting a character.
func cutAt(b []byte, limit int) ([]byte, bool) {
	if len(b) <= limit {
		return b, false
	}
	return b[:boundary(b, limit)], true
}

// boundary is the largest cut of b at most n (n < len(b)) that does not
// split a UTF-8 character.
func boundary(b []byte, n int) int {
	for k := n; k > 0 && k > n-utf8.UTFMax; k-- {
		if utf8.RuneStart(b[k]) {
			return k
		}
	}
	return n
}

// stringEnd is the offset just past the JSON string that opens at i.
func stringEnd(raw []byte, i int) int {
	for i++; i < len(raw); i++ {
		switch raw[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(raw)
}

func skipSpace(raw []byte, i int) int {
	for i < len(raw) && (raw[i] == ' ' || raw[i] == '\t' || raw[i] == '\n' || raw[i] == '\r') {
		i++
	}
	return i
}

// rawEventURL is the console's link to an event's raw record.
func rawEventURL(id string) string { return "/eventos/" + id + "/bruto" }

// eventRaw serves an event's stored record as GET /api/events/{id} does, to
// an operator signed in on the console (the API takes tokens only): the
// whole document that a page shows cut. It is a download for the browser
// to show or save, never a page: nosniff keeps it from being read as HTML.
func (c *Console) eventRaw(w http.ResponseWriter, r *http.Request) {
	ev, err := c.Queries.Event(r.Context(), r.PathValue("eventId"))
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	writeRawJSON(w, ev.AppendJSON(make([]byte, 0, 512+len(ev.Payload))))
}

// schemaRaw serves one registered version's JSON Schema as stored.
func (c *Console) schemaRaw(w http.ResponseWriter, r *http.Request) {
	tipo, versao := r.PathValue("tipo"), r.PathValue("versao")
	versions, err := c.Registry.Versions(tipo)
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	for _, tv := range versions {
		if tv.Versao == versao {
			writeRawJSON(w, tv.Schema)
			return
		}
	}
	c.Fail(w, r, app.Errorf(app.ENotFound, "tipo %s não tem a versão %s", tipo, versao))
}

func writeRawJSON(w http.ResponseWriter, doc []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	// Opened in a tab, it runs nothing and reaches nothing, whatever it holds.
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	w.WriteHeader(http.StatusOK)
	w.Write(doc)
	w.Write([]byte{'\n'})
}
