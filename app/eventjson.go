package app

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// MarshalJSON encodes the record by hand: every publish answers with one and
// replay streams millions, and reflection was a visible share of both. The
// output is what encoding/json would produce for the struct tags of Event.
func (e Event) MarshalJSON() ([]byte, error) {
	return e.AppendJSON(make([]byte, 0, 256+len(e.Payload))), nil
}

// AppendJSON appends the record's JSON encoding to b.
func (e Event) AppendJSON(b []byte) []byte {
	b = append(b, `{"sequence_number":"`...)
	b = strconv.AppendInt(b, e.Sequence, 10)
	b = append(b, `","event_id":`...)
	b = appendJSONString(b, e.EventID)
	b = append(b, `,"tipo":`...)
	b = appendJSONString(b, e.Tipo)
	b = append(b, `,"versao_schema":`...)
	b = appendJSONString(b, e.VersaoSchema)
	b = append(b, `,"timestamp":`...)
	b = appendJSONTime(b, e.Timestamp)
	b = append(b, `,"origem":`...)
	b = appendJSONString(b, e.Origem)
	b = append(b, `,"correlacao_id":`...)
	b = appendJSONString(b, e.CorrelacaoID)
	if e.Agregado != "" {
		b = append(b, `,"agregado":`...)
		b = appendJSONString(b, e.Agregado)
	}
	if e.Autoria != nil {
		b = append(b, `,"autoria":{"id":`...)
		b = appendJSONString(b, e.Autoria.ID)
		b = append(b, `,"tipo":`...)
		b = appendJSONString(b, e.Autoria.Tipo)
		b = append(b, '}')
	}
	if e.Solicitacao != "" {
		b = append(b, `,"solicitacao":`...)
		b = appendJSONString(b, e.Solicitacao)
	}
	b = append(b, `,"payload":`...)
	if len(e.Payload) == 0 {
		b = append(b, "null"...)
	} else {
		// Payloads are JSON the publish path parsed or encoded itself.
		b = append(b, e.Payload...)
	}
	b = append(b, `,"criado_em":`...)
	b = appendJSONTime(b, e.CriadoEm)
	return append(b, '}')
}

func appendJSONTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, EnvelopeTime)
	return append(b, '"')
}

// appendJSONString quotes s as encoding/json does without HTML escaping:
// quotes, backslashes and control characters escaped, invalid UTF-8 replaced
// by U+FFFD, and U+2028/U+2029 escaped for JavaScript consumers.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendJSONValue encodes a decoded JSON document (what the schema decoder
// and redaction produce: maps, slices, strings, json.Number, bools, nil)
// compactly with sorted keys, as the log and the envelope keep payloads.
// It does what json.Marshal does for these types minus its reflection and
// HTML escaping, on the publish path of every event; any other type goes
// through json.Marshal.
func appendJSONValue(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case string:
		return appendJSONString(b, x), nil
	case json.Number:
		if !json.Valid([]byte(x)) {
			return nil, fmt.Errorf("invalid number literal %q", string(x))
		}
		return append(b, x...), nil
	case bool:
		return strconv.AppendBool(b, x), nil
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, k)
			b = append(b, ':')
			var err error
			if b, err = appendJSONValue(b, x[k]); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	case []any:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendJSONValue(b, e); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, raw...), nil
}
