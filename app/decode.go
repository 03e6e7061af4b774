package app

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// DecodeJSON reads one JSON value into v, refusing unknown fields, trailing
// data and bodies over the limit (an http.MaxBytesReader), each with its own
// precise error.
func DecodeJSON(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
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
