package app

import (
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
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &maxErr):
		return Errorf(ETooLarge, "corpo maior que %d bytes", maxErr.Limit)
	case errors.As(err, &syntaxErr):
		return &Error{Code: EMalformed, Message: fmt.Sprintf("JSON malformado na posição %d", syntaxErr.Offset), Err: err}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return Errorf(EMalformed, "JSON malformado: corpo vazio ou incompleto")
	case errors.As(err, &typeErr):
		path := "/" + strings.ReplaceAll(typeErr.Field, ".", "/")
		return &Error{Code: EInvalid, Message: "tipo de campo inválido",
			Details: []Detail{{Caminho: path, Mensagem: fmt.Sprintf("deve ser %s", jsonKind(typeErr.Type.Kind().String()))}}}
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return &Error{Code: EInvalid, Message: "campo desconhecido",
			Details: []Detail{{Caminho: "/" + field, Mensagem: "campo desconhecido"}}}
	}
	return &Error{Code: EMalformed, Message: "JSON malformado", Err: err}
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
