package app

// The bounds of the registry's work on what clients send (SPEC 10, bounded
// work): the findings of a refused payload, the validator's steps on one
// publish, and the expansion of a new schema.

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The bounds of one refused publish's findings. A payload of 1 MiB can break
// its schema half a million times (a list of 524,000 numbers where strings
// belong): the answer names the first findings in path order and says how
// many more there were, each finding cut to a path and a sentence, so it
// stays a few kilobytes whatever was sent. 100 is what a command's outcome
// carries (maxOutcomeDetalhes), so a refused command's outcome keeps the
// count too; 1024 is its caminho (a pointer 64 levels deep).
const (
	MaxDetalhes        = 100
	maxDetalheCaminho  = maxOutcomeCaminho
	maxDetalheMensagem = 500
)

// leafDetails lists the leaves of a validation error, the precise findings
// (inner nodes only say "validation failed"), at most room of them: when
// there are more, the room-1 first by path and a last one counting the
// rest. Only the kept leaves are turned into text; the others are counted,
// a pointer step each, over a tree no larger than the validator's steps
// (MaxValidationSteps).
func leafDetails(root *jsonschema.ValidationError, room int) []Detail {
	room = max(room, 1)
	var kept []*jsonschema.ValidationError // the first room leaves, in order
	total := 0
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		for _, c := range e.Causes {
			walk(c)
		}
		if len(e.Causes) > 0 {
			return
		}
		total++
		// After the equal ones: leaves at one place keep the validator's order.
		i := sort.Search(len(kept), func(j int) bool { return leafCompare(kept[j], e) > 0 })
		if i < room {
			kept = slices.Insert(kept, i, e)
			kept = kept[:min(len(kept), room)]
		}
	}
	walk(root)
	listed := len(kept)
	if total > room {
		listed = room - 1
	}
	out := make([]Detail, 0, len(kept))
	for _, e := range kept[:listed] {
		out = append(out, Detail{clip("/payload"+pointer(e.InstanceLocation), maxDetalheCaminho),
			clip(e.ErrorKind.LocalizedString(schemaPrinter), maxDetalheMensagem)})
	}
	if more := total - listed; more > 0 { // at least 2: one more would have fit
		out = append(out, Detail{"/payload", fmt.Sprintf("e mais %d erros não listados", more)})
	}
	return out
}

// leafCompare orders findings by the place of the value in the payload
// (list indexes as numbers), then by the subschema that refused it.
func leafCompare(a, b *jsonschema.ValidationError) int {
	for i := range min(len(a.InstanceLocation), len(b.InstanceLocation)) {
		if c := tokenCompare(a.InstanceLocation[i], b.InstanceLocation[i]); c != 0 {
			return c
		}
	}
	if c := len(a.InstanceLocation) - len(b.InstanceLocation); c != 0 {
		return c
	}
	return strings.Compare(a.SchemaURL, b.SchemaURL)
}

func tokenCompare(a, b string) int {
	if isIndex(a) && isIndex(b) && len(a) != len(b) {
		return len(a) - len(b)
	}
	return strings.Compare(a, b)
}

func isIndex(t string) bool {
	for _, r := range t {
		if r < '0' || r > '9' {
			return false
		}
	}
	return t != ""
}

// MaxValidationSteps bounds the validator's work on one publish. A step is
// one subschema applied to one value, and the validator's other work in
// proportion, at about a microsecond each (see costWalk): a second of one
// core. It is twice the values a 1 MiB payload can hold (524,288 of
// "1,"), so any schema that applies one or two subschemas to each value
// takes any payload the size limit lets through; a schema that applies
// hundreds to each value of a long list is refused on that list, not
// left to work for minutes. Counted, before the validator runs, by a walk
// that itself stops at the limit.
const MaxValidationSteps = 1 << 20

// validationCost is how many steps validating v against s would take,
// counted up to just past limit, and where in v the count passed it (a
// JSON pointer, "" for v itself).
func validationCost(s *jsonschema.Schema, v any, limit int) (int, string) {
	w := costWalk{limit: limit}
	w.visit(s, v, false)
	return w.steps, w.at
}

// costWalk counts what santhosh-tekuri/jsonschema does on a value: the
// subschemas it applies (in place: $ref, allOf, anyOf, oneOf, not,
// if/then/else, dependentSchemas; one level down: properties,
// patternProperties, additionalProperties, propertyNames, items,
// prefixItems, contains, unevaluated*) and what one application scans
// (scanCost). It counts more than the validator does, never less: every
// branch of anyOf and oneOf and both of if, though the validator stops at a
// match; the target of $dynamicRef is its static one.
type costWalk struct {
	steps, limit int
	at           string     // where the count passed limit
	path         []costStep // the value's place, to say where
	// chain holds the subschemas applied in place to the current value, as
	// the validator's scope does: it stops a cycle of them (a $ref back to
	// an enclosing schema without a level down), and looks through them all
	// on every application (64 to a step).
	chain []*jsonschema.Schema
}

// costStep is one token of the walk's path: a key, or a list index.
type costStep struct {
	key   string
	index int // -1 for a key
}

func (w *costWalk) add(n int) bool {
	if w.steps <= w.limit && w.steps+n > w.limit {
		tokens := make([]string, len(w.path))
		for i, t := range w.path {
			tokens[i] = t.key
			if t.index >= 0 {
				tokens[i] = strconv.Itoa(t.index)
			}
		}
		w.at = pointer(tokens)
	}
	w.steps += n
	return w.steps <= w.limit
}

func (w *costWalk) visit(s *jsonschema.Schema, v any, uneval bool) {
	// Under an unevaluated* keyword the validator tracks the members
	// through every in-place application: each one copies the keys.
	uneval = uneval || s.UnevaluatedProperties != nil || s.UnevaluatedItems != nil
	if w.steps > w.limit || !w.add(1+len(w.chain)/64+scanCost(s, v, uneval)) {
		return
	}
	if s.Bool != nil || slices.Contains(w.chain, s) {
		return // the validator reports a cycle and stops
	}
	w.chain = append(w.chain, s)
	defer func() { w.chain = w.chain[:len(w.chain)-1] }()
	for _, c := range []*jsonschema.Schema{s.Ref, s.RecursiveRef, s.Not, s.If, s.Then, s.Else} {
		if c != nil {
			w.visit(c, v, uneval)
		}
	}
	if s.DynamicRef != nil && s.DynamicRef.Ref != nil {
		w.visit(s.DynamicRef.Ref, v, uneval)
	}
	for _, list := range [][]*jsonschema.Schema{s.AllOf, s.AnyOf, s.OneOf} {
		for _, c := range list {
			w.visit(c, v, uneval)
		}
	}
	switch v := v.(type) {
	case map[string]any:
		w.object(s, v, uneval)
	case []any:
		w.array(s, v)
	}
}

// down applies c to a member of the current value, one level down, where
// the validator starts a new chain.
func (w *costWalk) down(c *jsonschema.Schema, v any, step costStep) {
	chain := w.chain
	w.chain = w.chain[len(w.chain):] // the same array, past the enclosing chain
	w.path = append(w.path, step)
	w.visit(c, v, false)
	w.path = w.path[:len(w.path)-1]
	w.chain = chain
}

func (w *costWalk) object(s *jsonschema.Schema, obj map[string]any, uneval bool) {
	for k, c := range s.DependentSchemas {
		if _, ok := obj[k]; ok {
			w.visit(c, obj, uneval)
		}
	}
	for k, d := range s.Dependencies {
		if c, ok := d.(*jsonschema.Schema); ok {
			if _, ok := obj[k]; ok {
				w.visit(c, obj, uneval)
			}
		}
	}
	if len(s.Properties) == 0 && len(s.PatternProperties) == 0 && s.PropertyNames == nil && s.UnevaluatedProperties == nil && !uneval {
		if _, ok := s.AdditionalProperties.(*jsonschema.Schema); !ok {
			return // nothing applies to a member (the key loop is in scanCost)
		}
	}
	for k, v := range obj {
		at := costStep{k, -1}
		matched := false
		// A long key is hashed at each lookup and copy: a step per KB.
		if !w.add(len(k) / 1024) {
			return
		}
		if c, ok := s.Properties[k]; ok {
			w.down(c, v, at)
			matched = true
		}
		// A pattern reads the key: a quarter step, and one per 64 bytes.
		if len(s.PatternProperties) > 0 && !w.add(len(s.PatternProperties)*(16+len(k))/64) {
			return
		}
		for re, c := range s.PatternProperties {
			if re.MatchString(k) {
				w.down(c, v, at)
				matched = true
			}
		}
		if c, ok := s.AdditionalProperties.(*jsonschema.Schema); ok && !matched {
			w.down(c, v, at)
		}
		if s.PropertyNames != nil {
			w.down(s.PropertyNames, k, at) // the key is the value
		}
		if s.UnevaluatedProperties != nil {
			w.down(s.UnevaluatedProperties, v, at)
		}
		if w.steps > w.limit {
			return
		}
	}
}

func (w *costWalk) array(s *jsonschema.Schema, arr []any) {
	if len(s.PrefixItems) == 0 && s.Items2020 == nil && s.Items == nil && s.Contains == nil && s.UnevaluatedItems == nil {
		if _, ok := s.AdditionalItems.(*jsonschema.Schema); !ok {
			return // nothing applies to an item: the validator does not loop
		}
	}
	for i, v := range arr {
		at := costStep{index: i}
		if i < len(s.PrefixItems) {
			w.down(s.PrefixItems[i], v, at)
		} else if s.Items2020 != nil {
			w.down(s.Items2020, v, at)
		}
		// items and additionalItems before 2020-12.
		var before int
		switch items := s.Items.(type) {
		case *jsonschema.Schema:
			w.down(items, v, at)
			before = len(arr)
		case []*jsonschema.Schema:
			if i < len(items) {
				w.down(items[i], v, at)
			}
			before = len(items)
		}
		if c, ok := s.AdditionalItems.(*jsonschema.Schema); ok && i >= before {
			w.down(c, v, at)
		}
		for _, c := range []*jsonschema.Schema{s.Contains, s.UnevaluatedItems} {
			if c != nil {
				w.down(c, v, at)
			}
		}
		if w.steps > w.limit {
			return
		}
	}
}

// scanCost is what one application of s reads of v besides applying
// subschemas, in steps of about a microsecond: every key of an object
// (16 to a step; four when unevaluated* copies them), the whole string for a
// pattern, format, length, const or enum (64 bytes to a step), every digit
// of a number for a bound or multipleOf (64 to a step, plus the square of
// its kilobytes: the conversion to a fraction is quadratic), every value
// uniqueItems hashes or const and enum compare (8 to a step), and the names
// required lists (16 to a step).
func scanCost(s *jsonschema.Schema, v any, uneval bool) int {
	n := (len(s.Required) + len(s.DependentRequired)) / 16
	compares := s.Const != nil || s.Enum != nil
	if s.Enum != nil {
		n += len(s.Enum.Values) / 16
	}
	switch v := v.(type) {
	case map[string]any:
		n += len(v) / 16
		if uneval {
			n += len(v) / 4
		}
		if compares {
			n += valueCount(v) / 8
		}
	case []any:
		if uneval {
			n += len(v) / 4
		}
		if compares || s.UniqueItems {
			n += valueCount(v) / 8
		}
	case string:
		if compares || s.Pattern != nil || s.Format != nil || s.MinLength != nil || s.MaxLength != nil {
			n += len(v) / 64
		}
	case json.Number:
		if compares || s.Types != nil || s.Minimum != nil || s.Maximum != nil ||
			s.ExclusiveMinimum != nil || s.ExclusiveMaximum != nil || s.MultipleOf != nil {
			kb := len(v) / 1024
			n += len(v)/64 + kb*kb
		}
	}
	return n
}

// valueCount is how many values v holds, itself included, counted up to
// MaxValidationSteps*8 (past it the walk is over anyway).
func valueCount(v any) int {
	n := 0
	var count func(v any)
	count = func(v any) {
		if n++; n > MaxValidationSteps*8 {
			return
		}
		switch v := v.(type) {
		case map[string]any:
			for _, c := range v {
				count(c)
			}
		case []any:
			for _, c := range v {
				count(c)
			}
		}
	}
	count(v)
	return n
}

// MaxSchemaExpansion bounds a new schema's size counted the way the
// validator can meet it: each subschema once per path that reaches it
// through $ref, allOf, anyOf, oneOf, not, if/then/else, properties, items
// and every other applicator (a $ref back to a schema on the path counts
// once: it recurses only as deep as the payload, which MaxValidationSteps
// bounds). A chain of anyOf that offers two $refs to the next link doubles
// at each link: 1.2 KB of 16 links expands to 262,142 subschemas, and a
// wrong value makes the validator try them all. The built-in types expand
// to at most 14; a CAD schema of a few hundred fields with shared $defs
// stays in the low thousands.
const MaxSchemaExpansion = 10_000

// checkExpansion refuses a schema that expands past MaxSchemaExpansion,
// naming the innermost subschema that does.
func checkExpansion(s *jsonschema.Schema) error {
	e := expansion{size: map[*jsonschema.Schema]int{}, onPath: map[*jsonschema.Schema]bool{}}
	if e.of(s) <= MaxSchemaExpansion {
		return nil
	}
	at := "/schema"
	if rest, ok := strings.CutPrefix(e.at.Location, schemaURL+"#"); ok {
		at += rest
	}
	return &Error{Code: EInvalid, Message: "registro de tipo inválido", Details: []Detail{{clip(at, maxDetalheCaminho),
		fmt.Sprintf("o schema se expande em mais de %d subschemas a partir daqui, contando cada um uma vez por caminho "+
			"($ref, anyOf, oneOf, allOf, items, properties…): a validação de um valor errado passaria por todos", MaxSchemaExpansion)}}}
}

// expansion counts paths through the compiled schema, each subschema's
// count kept once computed and capped just past MaxSchemaExpansion, so the
// count costs one visit per subschema.
type expansion struct {
	size   map[*jsonschema.Schema]int
	onPath map[*jsonschema.Schema]bool
	at     *jsonschema.Schema // the first subschema found past the bound: the innermost
}

func (e *expansion) of(s *jsonschema.Schema) int {
	if e.onPath[s] {
		return 1
	}
	if n, ok := e.size[s]; ok {
		return n
	}
	e.onPath[s] = true
	n := 1
	for _, c := range subschemas(s) {
		if n = min(n+e.of(c), MaxSchemaExpansion+1); n > MaxSchemaExpansion {
			break
		}
	}
	delete(e.onPath, s)
	e.size[s] = n
	if n > MaxSchemaExpansion && e.at == nil {
		e.at = s
	}
	return n
}

// subschemas lists every subschema s applies, in a fixed order.
func subschemas(s *jsonschema.Schema) []*jsonschema.Schema {
	var out []*jsonschema.Schema
	for _, c := range []*jsonschema.Schema{s.Ref, s.RecursiveRef, s.Not, s.If, s.Then, s.Else,
		s.PropertyNames, s.UnevaluatedProperties, s.Contains, s.Items2020, s.UnevaluatedItems, s.ContentSchema} {
		if c != nil {
			out = append(out, c)
		}
	}
	if s.DynamicRef != nil && s.DynamicRef.Ref != nil {
		out = append(out, s.DynamicRef.Ref)
	}
	for _, member := range []any{s.AdditionalProperties, s.Items, s.AdditionalItems} {
		switch c := member.(type) {
		case *jsonschema.Schema:
			out = append(out, c)
		case []*jsonschema.Schema:
			out = append(out, c...)
		}
	}
	out = append(out, s.AllOf...)
	out = append(out, s.AnyOf...)
	out = append(out, s.OneOf...)
	out = append(out, s.PrefixItems...)
	out = append(out, sortedValues(s.Properties)...)
	out = append(out, sortedValues(s.DependentSchemas)...)
	patterns := map[string]*jsonschema.Schema{}
	for re, c := range s.PatternProperties {
		patterns[re.String()] = c
	}
	out = append(out, sortedValues(patterns)...)
	deps := map[string]*jsonschema.Schema{}
	for k, d := range s.Dependencies {
		if c, ok := d.(*jsonschema.Schema); ok {
			deps[k] = c
		}
	}
	return append(out, sortedValues(deps)...)
}

func sortedValues(m map[string]*jsonschema.Schema) []*jsonschema.Schema {
	out := make([]*jsonschema.Schema, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, m[k])
	}
	return out
}
