package app

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// MaxDepth is how deeply a value a client hands over (an event payload, a
// registry schema, a field of a command) may nest objects and lists (SPEC
// 10): deep enough for any document a CAD sends, shallow enough that no
// recursive step behind it (schema validation, redaction, rendering) does
// unbounded work.
const MaxDepth = 64

// DecodeJSON reads one JSON value into v, refusing unknown fields, trailing
// data, bodies over the limit (an http.MaxBytesReader) and values nested
// deeper than MaxDepth, each with its own precise error. The body's own
// object is the request's envelope, not content, so it adds one level to
// what its fields may nest: a publish body carries a payload of MaxDepth.
func DecodeJSON(r io.Reader, v any) error {
	body, err := io.ReadAll(r)
	if maxErr := (*http.MaxBytesError)(nil); errors.As(err, &maxErr) {
		return Errorf(ETooLarge, "corpo maior que %d bytes", maxErr.Limit)
	} else if err != nil {
		return &Error{Code: EMalformed, Message: "corpo ilegível", Err: err}
	}
	// Before decoding: the decoder's work on what it keeps as values
	// (json.RawMessage, any) is what the limit protects.
	if err := checkDepth(body, MaxDepth+1, ""); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err = dec.Decode(v)
	if err == nil {
		_, err = dec.Token()
		if err == io.EOF {
			return nil
		}
		if maxErr := (*http.MaxBytesError)(nil); errors.As(err, &maxErr) {
			return Errorf(ETooLarge, "corpo maior que %d bytes", maxErr.Limit)
		}
		return Errorf(EMalformed, "JSON malformado: há dados após o objeto")
	}
	var maxErr *http.MaxBytesError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &maxErr):
		return Errorf(ETooLarge, "corpo maior que %d bytes", maxErr.Limit)
	case errors.As(err, &syntaxErr):
		return &Error{Code: EMalformed, Message: fmt.Sprintf("JSON malformado na posição %d", syntaxErr.Offset), Err: err}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return Errorf(EMalformed, "JSON malformado: corpo vazio ou incompleto")
	}
	if e := fieldError("", err); e != nil {
		return e
	}
	return &Error{Code: EMalformed, Message: "JSON malformado", Err: err}
}

// decodeNested decodes b strictly into v, for an UnmarshalJSON method: its
// field errors carry path, the JSON Pointer of the object being decoded.
func decodeNested(b []byte, v any, path string) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &nestedError{path: path, err: err}
	}
	return nil
}

// nestedError is a field error from inside an object decoded by its own
// UnmarshalJSON, which encoding/json reports without the object's path.
type nestedError struct {
	path string // JSON Pointer of the object
	err  error
}

func (e *nestedError) Error() string { return e.path + ": " + e.err.Error() }
func (e *nestedError) Unwrap() error { return e.err }

// fieldError turns a wrongly typed or unknown field into a 422 naming its
// path under prefix, or returns nil for any other error.
func fieldError(prefix string, err error) *Error {
	var nested *nestedError
	if errors.As(err, &nested) {
		return fieldError(prefix+nested.path, nested.err)
	}
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &typeErr):
		path := prefix
		if typeErr.Field != "" || prefix == "" {
			// "/" for a body of the wrong type, as before nested paths.
			path += "/" + strings.ReplaceAll(typeErr.Field, ".", "/")
		}
		return &Error{Code: EInvalid, Message: "tipo de campo inválido",
			Details: []Detail{{Caminho: path, Mensagem: fmt.Sprintf("deve ser %s", jsonKind(typeErr.Type.Kind().String()))}}}
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return &Error{Code: EInvalid, Message: "campo desconhecido",
			Details: []Detail{{Caminho: prefix + "/" + field, Mensagem: "campo desconhecido"}}}
	}
	return nil
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "string"
	case "struct", "map":
		return "objeto"
	case "slice", "array":
		return "lista"
	case "bool":
		return "booleano"
	}
	return "número"
}

// checkDepth refuses data when it nests objects and lists deeper than limit
// levels (the outermost value is level 1), naming under prefix the JSON
// Pointer of the first value past it. It is one pass over the bytes that
// keeps, per open level, where its current key is or which element it is
// at, so a 1 MiB body of brackets costs what reading it costs. It does not
// validate: malformed input is left to the decoder, which runs after it.
func checkDepth(data []byte, limit int, prefix string) error {
	var open []depthLevel
	for i := 0; i < len(data); i++ {
		switch c := data[i]; c {
		case '"':
			start := i
			for i++; i < len(data) && data[i] != '"'; i++ {
				if data[i] == '\\' {
					i++
				}
			}
			if n := len(open); n > 0 && open[n-1].expectsKey {
				open[n-1].keyAt, open[n-1].expectsKey = start, false
			}
		case '{', '[':
			if len(open) == limit {
				return depthError(data, prefix, open)
			}
			open = append(open, depthLevel{object: c == '{', expectsKey: c == '{'})
		case '}', ']':
			if len(open) > 0 {
				open = open[:len(open)-1]
			}
		case ',':
			if n := len(open); n > 0 {
				open[n-1].index++
				open[n-1].expectsKey = open[n-1].object
			}
		}
	}
	return nil
}

// depthLevel is one open object or list of checkDepth.
type depthLevel struct {
	object     bool
	expectsKey bool // an object before its next key
	keyAt      int  // offset of the current key's opening quote
	index      int  // the current element, in a list
}

// depthError is the 422 of checkDepth, located by the levels open at the
// value that passed the limit; only this path decodes keys.
func depthError(data []byte, prefix string, open []depthLevel) error {
	var b strings.Builder
	b.WriteString(prefix)
	for _, l := range open {
		b.WriteByte('/')
		if !l.object {
			b.WriteString(strconv.Itoa(l.index))
			continue
		}
		var key string
		if json.NewDecoder(bytes.NewReader(data[l.keyAt:])).Decode(&key) != nil {
			key = "?"
		}
		b.WriteString(pointerEscaper.Replace(key))
	}
	path := b.String()
	if path == "" {
		path = "/"
	}
	return &Error{Code: EInvalid, Message: fmt.Sprintf("JSON aninhado demais: no máximo %d níveis de objetos e listas", MaxDepth),
		Details: []Detail{{Caminho: path, Mensagem: fmt.Sprintf("passa de %d níveis de objetos e listas", MaxDepth)}}}
}

var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")
