// Package redact builds the persisted copy of an event payload from the
// redaction rules of its event type (LGPD). Redaction is an allowlist: the
// output holds only what the rules name, everything else is dropped.
//
// Paths are JSON Pointers (RFC 6901) with these decisions:
//
//   - A pointer is "" (the root) or starts with "/"; "~" must be followed by
//     "0" or "1". The root is accepted only in manter.
//   - Empty reference tokens ("/", "/a//b") are refused: an empty key is
//     legal JSON but in a rule it is almost always a typo, and a typo in an
//     allowlist silently drops data.
//   - "*" matches every element of an array. On an object it is the literal
//     key "*", not every member: object keys can themselves be personal data
//     (a map keyed by CPF or e-mail), so a wildcard over members would
//     persist them.
//   - A numeric token ("0", "12"; no leading zeros, no sign) indexes an
//     array; on an object it is the key. "-" never matches an element.
//   - A path that does not exist, or that goes through a scalar, is skipped.
//
// Output shape: parents are created only when something below them is kept.
// Arrays keep the input's indices: the output array runs up to the highest
// index that kept something, with null in elements that kept nothing. When
// an enclosing value is kept whole (manter), its arrays keep their full
// length and an element dropped by a failed arredondar becomes null.
//
// Actions:
//
//   - manter keeps the value verbatim (deep copied). "" keeps the whole
//     payload; hash and arredondar still transform their paths inside it.
//   - hash replaces the value with "hmac-sha256:" + hex(HMAC-SHA256(key, b)),
//     b being a string's UTF-8 bytes or, for any other value, its compact
//     JSON (keys sorted, numbers as their literal text, no HTML escaping).
//     The key is derived from the master key (keys.Redaction),
//     never the master key itself.
//   - arredondar rounds a number to 3 decimal places (half away from zero,
//     computed on the decimal text, not on a float), or an object with
//     numeric lat and lng to just those two rounded. A number that already
//     has at most 3 decimals is kept as written. Anything else is dropped:
//     redaction fails closed.
//   - A value named by manter and by a transform (at it or above it) is
//     transformed; a transform covers everything below it.
//   - hash and arredondar paths that overlap (one equal to or inside the
//     other, counting "*" as any index) are refused: there is no single
//     safe answer, and the rule author should choose.
//
// Apply never mutates its input and never panics on values produced by
// encoding/json (with or without UseNumber); values of other types are
// dropped where they would be transformed and kept by reference elsewhere.
package redact

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"sync"
)

// Rules is the wire form of an event type's redaction rules.
type Rules struct {
	Manter     []string `json:"manter,omitempty"`
	Hash       []string `json:"hash,omitempty"`
	Arredondar []string `json:"arredondar,omitempty"`
}

// RuleError names an offending rule by its JSON Pointer inside the rules
// object (e.g. "/hash/1") and says why it was refused.
type RuleError struct {
	Path   string
	Reason string
}

func (e RuleError) Error() string { return e.Path + ": " + e.Reason }

// RuleErrors is the error Compile returns: every broken rule, in order.
type RuleErrors []RuleError

func (es RuleErrors) Error() string {
	msgs := make([]string, len(es))
	for i, e := range es {
		msgs[i] = e.Error()
	}
	return "regras de redação inválidas: " + strings.Join(msgs, "; ")
}

type op uint8

const (
	opNone op = iota
	opHash
	opRound
)

// node is one reference token of the compiled rule trie. The payload is
// walked along the trie, so Apply costs the size of what is kept, not of
// the payload.
type node struct {
	keep   bool
	op     op
	fields map[string]*node // by unescaped token; the only lookup on objects

	// Derived by finalize, for arrays:
	each       *node         // fields["*"]
	elems      map[int]*node // numeric tokens, with the "*" rules merged in
	transforms bool          // op here or below: a kept subtree can't just be copied
}

// Program is a compiled, immutable rule set, safe for concurrent use.
type Program struct {
	root *node
}

// Compile validates the rules and builds a Program. On failure the error is
// a RuleErrors listing every broken rule.
func Compile(r Rules) (*Program, error) {
	var errs RuleErrors
	root := &node{}
	type parsed struct {
		path string // rule's own path, for error messages
		ptr  string
		toks []string
	}
	var hashes, rounds []parsed
	add := func(list string, ptrs []string, o op, allowRoot bool) {
		for i, ptr := range ptrs {
			at := "/" + list + "/" + strconv.Itoa(i)
			toks, reason := parsePointer(ptr)
			if reason == "" && ptr == "" && !allowRoot {
				reason = `a raiz ("") só é permitida em manter`
			}
			if reason != "" {
				errs = append(errs, RuleError{at, reason})
				continue
			}
			n := root
			for _, t := range toks {
				c := n.fields[t]
				if c == nil {
					c = &node{}
					if n.fields == nil {
						n.fields = map[string]*node{}
					}
					n.fields[t] = c
				}
				n = c
			}
			switch o {
			case opNone:
				n.keep = true
			case opHash:
				n.op = opHash
				hashes = append(hashes, parsed{at, ptr, toks})
			case opRound:
				// Overlaps with hash are refused below, so this never
				// overwrites a hash.
				n.op = opRound
				rounds = append(rounds, parsed{at, ptr, toks})
			}
		}
	}
	add("manter", r.Manter, opNone, true)
	add("hash", r.Hash, opHash, false)
	add("arredondar", r.Arredondar, opRound, false)
	for _, a := range rounds {
		for _, h := range hashes {
			if overlaps(a.toks, h.toks) {
				errs = append(errs, RuleError{a.path, fmt.Sprintf("%q sobrepõe hash %q (%s): escolha um dos dois", a.ptr, h.ptr, h.path)})
				break
			}
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	finalize(root)
	return &Program{root: root}, nil
}

// parsePointer splits and unescapes an RFC 6901 pointer; reason is "" when
// it is valid.
func parsePointer(p string) (toks []string, reason string) {
	if p == "" {
		return nil, ""
	}
	if p[0] != '/' {
		return nil, fmt.Sprintf("%q não é um JSON Pointer: deve ser \"\" ou começar com \"/\"", p)
	}
	for i, t := range strings.Split(p[1:], "/") {
		if t == "" {
			return nil, fmt.Sprintf("%q: segmento %d vazio", p, i+1)
		}
		for j := 0; j < len(t); j++ {
			if t[j] == '~' && (j+1 == len(t) || (t[j+1] != '0' && t[j+1] != '1')) {
				return nil, fmt.Sprintf("%q: escape inválido (use ~0 para ~ e ~1 para /)", p)
			}
		}
		// RFC 6901 order: ~1 first, so "~01" becomes "~1", not "/".
		toks = append(toks, strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~"))
	}
	return toks, ""
}

// overlaps reports whether one path equals or lies inside the other.
func overlaps(a, b []string) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		x, y := a[i], b[i]
		if x == y {
			continue
		}
		if x == "*" {
			_, ok := arrayIndex(y)
			if ok {
				continue
			}
		}
		if y == "*" {
			_, ok := arrayIndex(x)
			if ok {
				continue
			}
		}
		return false
	}
	return true
}

// arrayIndex parses an RFC 6901 array index: "0" or digits without a
// leading zero.
func arrayIndex(t string) (int, bool) {
	if t == "" || len(t) > 9 || (t[0] == '0' && len(t) > 1) {
		return 0, false
	}
	n := 0
	for i := 0; i < len(t); i++ {
		if t[i] < '0' || t[i] > '9' {
			return 0, false
		}
		n = n*10 + int(t[i]-'0')
	}
	return n, true
}

// finalize precomputes the array lookups so that Apply needs no string
// conversion per element.
func finalize(n *node) {
	n.transforms = n.op != opNone
	for _, c := range n.fields {
		finalize(c)
		n.transforms = n.transforms || c.transforms
	}
	n.each = n.fields["*"]
	for t, c := range n.fields {
		i, ok := arrayIndex(t)
		if !ok {
			continue
		}
		if n.each != nil {
			c = union(c, n.each)
			finalize(c)
		}
		if n.elems == nil {
			n.elems = map[int]*node{}
		}
		n.elems[i] = c
	}
}

// union returns a fresh trie holding the rules of both a and b.
func union(a, b *node) *node {
	n := &node{keep: a.keep || b.keep, op: a.op}
	if n.op == opNone {
		n.op = b.op
	}
	for _, src := range []*node{a, b} {
		for t, c := range src.fields {
			if n.fields == nil {
				n.fields = map[string]*node{}
			}
			if have := n.fields[t]; have != nil {
				n.fields[t] = union(have, c)
			} else {
				n.fields[t] = union(c, &node{})
			}
		}
	}
	return n
}

func (n *node) elem(i int) *node {
	if c := n.elems[i]; c != nil {
		return c
	}
	return n.each
}

// Apply returns a new payload holding only what the rules name. key is the
// HMAC key for hash rules (keys.Redaction). The result is never nil.
func (p *Program) Apply(key []byte, payload map[string]any) map[string]any {
	if p == nil || p.root == nil {
		return map[string]any{}
	}
	a := appliers.Get().(*applier)
	defer a.release()
	a.setKey(key)
	if out, ok := a.walk(p.root, payload, false); ok {
		if m, ok := out.(map[string]any); ok && m != nil {
			return m
		}
	}
	return map[string]any{}
}

// appliers recycles the HMAC state and encoding buffer: Apply runs on every
// publish, nearly always with the same key.
var appliers = sync.Pool{New: func() any { return new(applier) }}

// applier holds per-call scratch state.
type applier struct {
	key []byte // copy of the key mac was built with
	mac hash.Hash
	buf bytes.Buffer
	sum [sha256.Size]byte
}

func (a *applier) release() {
	if a.buf.Cap() > 64<<10 {
		a.buf = bytes.Buffer{} // don't pin the memory of one huge hashed value
	}
	appliers.Put(a)
}

func (a *applier) setKey(key []byte) {
	if a.mac == nil || !hmac.Equal(a.key, key) {
		a.key = append(a.key[:0], key...)
		a.mac = nil // built lazily: most payloads hash nothing
	}
}

// walk returns the output for v under trie node n; ok is false when
// nothing is kept. keep means an ancestor (or n) is kept by manter.
func (a *applier) walk(n *node, v any, keep bool) (any, bool) {
	switch n.op {
	case opHash:
		return a.hash(v)
	case opRound:
		return round(v)
	}
	keep = keep || n.keep
	if keep && !n.transforms {
		return deepCopy(v), true
	}
	switch c := v.(type) {
	case map[string]any:
		if keep {
			out := make(map[string]any, len(c))
			for k, x := range c {
				if ch := n.fields[k]; ch != nil {
					if r, ok := a.walk(ch, x, true); ok {
						out[k] = r
					}
				} else {
					out[k] = deepCopy(x)
				}
			}
			return out, true
		}
		var out map[string]any
		for k, ch := range n.fields {
			x, found := c[k]
			if !found {
				continue
			}
			if r, ok := a.walk(ch, x, false); ok {
				if out == nil {
					out = make(map[string]any, len(n.fields))
				}
				out[k] = r
			}
		}
		return out, out != nil
	case []any:
		if keep {
			out := make([]any, len(c))
			for i, x := range c {
				if ch := n.elem(i); ch != nil {
					if r, ok := a.walk(ch, x, true); ok {
						out[i] = r // else null: dropped, index kept
					}
				} else {
					out[i] = deepCopy(x)
				}
			}
			return out, true
		}
		if n.each == nil && len(n.elems) == 0 {
			return nil, false
		}
		var out []any
		last := -1
		for i, x := range c {
			ch := n.elem(i)
			if ch == nil {
				continue
			}
			if r, ok := a.walk(ch, x, false); ok {
				if out == nil {
					out = make([]any, len(c))
				}
				out[i], last = r, i
			}
		}
		return out[:last+1], out != nil
	default:
		// A scalar: kept only if kept whole; rules below it don't exist.
		return v, keep
	}
}

// deepCopy copies the containers of a decoded JSON value; scalars are
// immutable and shared.
func deepCopy(v any) any {
	switch c := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(c))
		for k, x := range c {
			out[k] = deepCopy(x)
		}
		return out
	case []any:
		out := make([]any, len(c))
		for i, x := range c {
			out[i] = deepCopy(x)
		}
		return out
	default:
		return v
	}
}

const hashPrefix = "hmac-sha256:"

func (a *applier) hash(v any) (any, bool) {
	a.buf.Reset()
	if s, ok := v.(string); ok {
		a.buf.WriteString(s)
	} else {
		// encoding/json sorts map keys and writes json.Number verbatim,
		// which gives the canonical bytes we need.
		enc := json.NewEncoder(&a.buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			return nil, false // not JSON (e.g. invalid json.Number): drop
		}
		a.buf.Truncate(a.buf.Len() - 1) // Encode's trailing newline
	}
	if a.mac == nil {
		a.mac = hmac.New(sha256.New, a.key)
	}
	a.mac.Reset()
	a.mac.Write(a.buf.Bytes())
	var out [len(hashPrefix) + 2*sha256.Size]byte
	copy(out[:], hashPrefix)
	hex.Encode(out[len(hashPrefix):], a.mac.Sum(a.sum[:0]))
	return string(out[:]), true
}

// round applies arredondar; ok is false when v is not roundable.
func round(v any) (any, bool) {
	if m, ok := v.(map[string]any); ok {
		lat, ok1 := roundNumber(m["lat"])
		lng, ok2 := roundNumber(m["lng"])
		if !ok1 || !ok2 {
			return nil, false
		}
		return map[string]any{"lat": lat, "lng": lng}, true
	}
	if n, ok := roundNumber(v); ok {
		return n, true
	}
	return nil, false
}

func roundNumber(v any) (json.Number, bool) {
	switch n := v.(type) {
	case json.Number:
		return round3(string(n))
	case float64:
		return round3(strconv.FormatFloat(n, 'g', -1, 64))
	}
	return "", false
}

// round3 rounds a JSON number literal to 3 decimals, half away from zero,
// on its decimal digits: 1.0005 must become 1.001, which float arithmetic
// gets wrong. Work is bounded by the literal's length whatever its exponent.
func round3(s string) (json.Number, bool) {
	neg, intPart, frac, exp, ok := splitNumber(s)
	if !ok {
		return "", false
	}
	digits := intPart + frac
	// The value is 0.digits × 10^point; digits after the decimal point
	// (ignoring trailing zeros) are the decimals.
	point := int64(len(intPart)) + exp
	sig := strings.TrimRight(digits, "0")
	if int64(len(sig))-point <= 3 {
		return json.Number(s), true // already at most 3 decimals
	}
	// Keep the digits up to the 3rd decimal, as an integer count of
	// thousandths; k <= 0 means all of them are leading zeros.
	k := point + 3
	var kept []byte
	next := byte('0')
	if k > 0 {
		kept = []byte(digits[:k]) // k < len(digits), as decimals > 3
		next = digits[k]
	} else if k == 0 {
		next = digits[0]
	}
	if next >= '5' {
		kept = increment(kept)
	}
	return formatMilli(neg, kept), true
}

// splitNumber parses the JSON number grammar. exp is clamped: beyond
// ±1e9 every result is the same.
func splitNumber(s string) (neg bool, intPart, frac string, exp int64, ok bool) {
	i := 0
	if i < len(s) && s[i] == '-' {
		neg = true
		i++
	}
	start := i
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	intPart = s[start:i]
	if intPart == "" || (len(intPart) > 1 && intPart[0] == '0') {
		return false, "", "", 0, false
	}
	if i < len(s) && s[i] == '.' {
		i++
		start = i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		frac = s[start:i]
		if frac == "" {
			return false, "", "", 0, false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		eneg := false
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			eneg = s[i] == '-'
			i++
		}
		start = i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			if exp < 1e9 {
				exp = exp*10 + int64(s[i]-'0')
			}
			i++
		}
		if i == start {
			return false, "", "", 0, false
		}
		if eneg {
			exp = -exp
		}
	}
	return neg, intPart, frac, exp, i == len(s)
}

// increment adds one to a decimal digit string.
func increment(d []byte) []byte {
	for i := len(d) - 1; i >= 0; i-- {
		if d[i] < '9' {
			d[i]++
			return d
		}
		d[i] = '0'
	}
	return append([]byte{'1'}, d...)
}

// formatMilli formats the integer d (decimal digits) divided by 1000.
func formatMilli(neg bool, d []byte) json.Number {
	s := strings.TrimLeft(string(d), "0")
	if s == "" {
		return "0" // no "-0"
	}
	if len(s) < 4 {
		s = strings.Repeat("0", 4-len(s)) + s
	}
	ip, fp := s[:len(s)-3], strings.TrimRight(s[len(s)-3:], "0")
	if neg {
		ip = "-" + ip
	}
	if fp == "" {
		return json.Number(ip)
	}
	return json.Number(ip + "." + fp)
}
