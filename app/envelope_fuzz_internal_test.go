package app

// The envelope encoder (buildEnvelope) is unexported, so its fuzz target
// lives in package app. It imports the receiver SDK to check that what
// Geohub signs is what an integrator verifies.

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"geohub/receiver"
)

// Envelope times are UTC milliseconds of years 0000 to 9999: the only
// years RFC 3339 (the publish contract) can name.
var (
	fuzzEnvMinMS = time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	fuzzEnvMaxMS = time.Date(9999, 12, 31, 23, 59, 59, 999e6, time.UTC).UnixMilli()
)

// FuzzEnvelope builds an envelope from arbitrary event fields and payload
// the way Publish does (payload decoded with json.Number, re-encoded with
// sorted keys) and checks SPEC 6.3: compact JSON, keys in lexicographic
// order at every level, deterministic, stable through decode and rebuild;
// and that its signature is what the receiver SDK accepts, and nothing else.
func FuzzEnvelope(f *testing.F) {
	const (
		id   = "0199bb3e-0000-7000-8000-00000000004a"
		sol  = "0199bb3e-0000-7000-8000-0000000000bb"
		aut  = "0199bb3e-0000-7000-8000-0000000000aa"
		tipo = "ocorrencia:despacho-mudou-status"
		spec = `{"para":"no_local","ocorrenciaId":"0199bb3e-0000-7000-8000-0000000000dd","id":"0199bb3e-0000-7000-8000-0000000000cc","de":"em_deslocamento"}`
	)
	example := time.Date(2026, 10, 31, 12, 4, 11, 0, time.UTC).UnixMilli()
	type seed struct {
		id, tipo, plugin, versao, solicitacao, autoriaID, autoriaTipo string
		autoria                                                       bool
		ms                                                            int64
		nanos                                                         uint32
		zone                                                          int16
		payload, secret                                               string
		ts                                                            int64
		flip                                                          uint32
	}
	for _, s := range []seed{
		// The example of SPEC 6.3 and of the first signature vector.
		{id, tipo, "ocorrencia", "1.0.0", sol, aut, "usuario", true, example, 0, 0, spec, "whsec-exemplo-0001", 1761912251, 0},
		{id, "jornada:iniciada", "rh", "1.0.0", "", "", "", false, example, 999_999, -180, `{}`, "s", 1761912251, 7},
		{id, tipo, "ocorrencia", "2.1.0", sol, "integ-1", "integrador", true, example, 123_456, 330,
			`{"z":{"b":[1,2.50,-0,1e400,1E-7],"a":null},"a":true,"A":false,"é":"ç","😀":"\ud83d\ude00","":""}`, "k", 0, 1 << 20},
		{id, tipo, "o<&>", "1.0.0", "", "a&b<c>", "usuario", true, example, 0, 0,
			`{"html":"<script>&amp;</script>","ls":"\u2028\u2029","ctl":"\u0000\u001f\t\n","esc":"\"\\/"}`, "whsec", 1, 3},
		{"", tipo, "", "", "", "", "", false, fuzzEnvMinMS, 0, 0, `{"a":1}`, "", 42, 1},                          // no id: a receiver's 400
		{id, "", "x", "1", "", "", "", true, fuzzEnvMaxMS, 0, -1439, `{"a":{"b":{"c":[{"d":{}}]}}}`, "k", -1, 9}, // no tipo; empty autoria
		{"\xff\xfe", "t\xc3", "p\xed\xa0\x80", "v", "s\x00", "a\"", "\\", true, -1, 0, 0, "{\"k\xff\":\"v\xfe\",\"k\":1}", "\x00", 9_999_999_999, 5},
		{id, tipo, "ocorrencia", "1.0.0", "", "", "", false, example, 0, 0,
			`{"b":1,"a":2,"aa":3,"a\u0000":4,"B":5,"_":6,"~":7,"\u00e9":8,"\uffff":9,"\ud800":10}`, "k", 1761912251, 255},
		{id, tipo, "ocorrencia", "1.0.0", "", "", "", false, example, 0, 0, `{"dup":1,"dup":2}`, "k", 1761912251, 0},
		{id, tipo, "ocorrencia", "1.0.0", "", "", "", false, example, 0, 0, `{"n":12345678901234567890123456789,"f":0.1e-999,"neg":-0.0}`, "k", 1761912251, 0},
		{id, tipo, "ocorrencia", "1.0.0", "", "", "", false, example, 0, 0, `[1]`, "k", 1, 0},       // not an object: not an envelope payload
		{id, tipo, "ocorrencia", "1.0.0", "", "", "", false, example, 0, 0, `{"a":1} x`, "k", 1, 0}, // trailing data
	} {
		f.Add(s.id, s.tipo, s.plugin, s.versao, s.solicitacao, s.autoriaID, s.autoriaTipo, s.autoria,
			s.ms, s.nanos, s.zone, []byte(s.payload), []byte(s.secret), s.ts, s.flip)
	}

	f.Fuzz(func(t *testing.T, id, tipo, plugin, versao, solicitacao, autoriaID, autoriaTipo string, autoria bool,
		ms int64, nanos uint32, zone int16, payload, secret []byte, ts int64, flip uint32) {
		// The payload as Publish holds it: a decoded object (numbers kept as
		// written), re-encoded with sorted keys.
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
		if err != nil {
			return
		}
		obj, ok := doc.(map[string]any)
		if !ok {
			return
		}
		sorted, err := sortedPayload(obj)
		if err != nil {
			t.Fatalf("sortedPayload of a decoded object: %v", err)
		}
		if span := fuzzEnvMaxMS - fuzzEnvMinMS + 1; ms < fuzzEnvMinMS || ms > fuzzEnvMaxMS {
			ms = fuzzEnvMinMS + ((ms-fuzzEnvMinMS)%span+span)%span
		}
		at := time.UnixMilli(ms).
			Add(time.Duration(nanos % 1_000_000)).           // below the envelope's precision
			In(time.FixedZone("fuzz", int(zone)%(24*60)*60)) // the zone must not matter
		event := func(id, tipo, plugin, versao, solicitacao, autoriaID, autoriaTipo string) Event {
			ev := Event{EventID: id, Tipo: tipo, VersaoSchema: versao, Origem: plugin, Solicitacao: solicitacao, Timestamp: at}
			if autoria {
				ev.Autoria = &Autoria{ID: autoriaID, Tipo: autoriaTipo}
			}
			return ev
		}
		// Fields reach Publish through a JSON decoder, which has replaced
		// invalid UTF-8 already. Raw bytes still make a valid envelope with
		// the same meaning (encoding/json writes them as \ufffd escapes,
		// which is why the fixed point below starts from valid text).
		raw, err := buildEnvelope(event(id, tipo, plugin, versao, solicitacao, autoriaID, autoriaTipo), sorted)
		if err != nil || !json.Valid(raw) {
			t.Fatalf("buildEnvelope of raw fields: %v %q", err, raw)
		}
		ev := event(fuzzEnvUTF8(id), fuzzEnvUTF8(tipo), fuzzEnvUTF8(plugin), fuzzEnvUTF8(versao), fuzzEnvUTF8(solicitacao),
			fuzzEnvUTF8(autoriaID), fuzzEnvUTF8(autoriaTipo))
		body, err := buildEnvelope(ev, sorted)
		if err != nil {
			t.Fatalf("buildEnvelope: %v", err)
		}
		t.Logf("envelope %s", body)
		if !reflect.DeepEqual(fuzzEnvDecode(t, raw), fuzzEnvDecode(t, body)) {
			t.Fatalf("invalid UTF-8 changed the meaning:\n %s\n %s", raw, body)
		}

		// Compact, valid, one value, keys sorted at every level.
		if !json.Valid(body) {
			t.Fatalf("not valid JSON: %q", body)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, body); err != nil || !bytes.Equal(compact.Bytes(), body) {
			t.Fatalf("not compact:\n got  %q\n want %q", body, compact.Bytes())
		}
		top := fuzzEnvCheckKeys(t, body)
		want := []string{"id", "ocorridoEm", "origem", "payload", "tipo"}
		if strings.Join(top, ",") != strings.Join(want, ",") {
			t.Fatalf("top-level keys %q, want %q", top, want)
		}

		// Deterministic: the same event, and the payload decoded again (a
		// new map, another iteration order), give the same bytes.
		doc2, _ := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
		sorted2, _ := sortedPayload(doc2.(map[string]any))
		if again, _ := buildEnvelope(ev, sorted2); !bytes.Equal(again, body) {
			t.Fatalf("not deterministic:\n %s\n %s", body, again)
		}

		// The fields come back as sent (invalid UTF-8 becomes U+FFFD) and
		// a rebuild from the decoded envelope is byte-identical.
		var got struct {
			ID         string          `json:"id"`
			OcorridoEm string          `json:"ocorridoEm"`
			Origem     envelopeOrigem  `json:"origem"`
			Payload    json.RawMessage `json:"payload"`
			Tipo       string          `json:"tipo"`
		}
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatalf("decode: %v", err)
		}
		if got.ID != fuzzEnvUTF8(id) || got.Tipo != fuzzEnvUTF8(tipo) || got.Origem.Plugin != fuzzEnvUTF8(plugin) ||
			got.Origem.Versao != fuzzEnvUTF8(versao) || got.Origem.Solicitacao != fuzzEnvUTF8(solicitacao) {
			t.Fatalf("fields changed on the way: %+v", got)
		}
		if (got.Origem.Autoria != nil) != autoria || autoria && (got.Origem.Autoria.ID != fuzzEnvUTF8(autoriaID) ||
			got.Origem.Autoria.Tipo != fuzzEnvUTF8(autoriaTipo)) {
			t.Fatalf("autoria changed on the way: %+v", got.Origem.Autoria)
		}
		if !bytes.Equal(got.Payload, sorted) {
			t.Fatalf("payload changed inside the envelope:\n got  %s\n want %s", got.Payload, sorted)
		}
		when, err := time.Parse(EnvelopeTime, got.OcorridoEm)
		if err != nil || !when.Equal(at.Truncate(time.Millisecond)) {
			t.Fatalf("ocorridoEm %q for %v: %v", got.OcorridoEm, at, err)
		}
		back, err := jsonschema.UnmarshalJSON(bytes.NewReader(got.Payload))
		if err != nil {
			t.Fatalf("payload does not decode: %v", err)
		}
		resorted, _ := sortedPayload(back.(map[string]any))
		rebuilt, err := buildEnvelope(Event{EventID: got.ID, Tipo: got.Tipo, VersaoSchema: got.Origem.Versao,
			Origem: got.Origem.Plugin, Solicitacao: got.Origem.Solicitacao, Autoria: got.Origem.Autoria, Timestamp: when}, resorted)
		if err != nil || !bytes.Equal(rebuilt, body) {
			t.Fatalf("decode and rebuild is not byte-identical (%v):\n got  %s\n want %s", err, rebuilt, body)
		}
		// A generic decode and encoding/json give the same bytes too: the
		// envelope escapes what encoding/json does, minus HTML escaping
		// (<, > and & stay as they are, in the fields and in the payload).
		var re bytes.Buffer
		enc := json.NewEncoder(&re)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(fuzzEnvDecode(t, body)); err != nil || !bytes.Equal(bytes.TrimSuffix(re.Bytes(), []byte("\n")), body) {
			t.Fatalf("decode and re-encode is not byte-identical (%v):\n got  %s\n want %s", err, re.Bytes(), body)
		}

		// Signing: Geohub's signer, the SDK's and the definition agree.
		sig := Sign(secret, ts, body)
		m := hmac.New(sha256.New, secret)
		m.Write([]byte(strconv.FormatInt(ts, 10) + "." + string(body)))
		if want := "sha256=" + hex.EncodeToString(m.Sum(nil)); sig != want || receiver.Sign(secret, ts, body) != sig {
			t.Fatalf("signatures disagree: app %s, receiver %s, HMAC %s", sig, receiver.Sign(secret, ts, body), want)
		}

		// The receiver accepts exactly this body with this signature. An
		// empty secret never verifies (the SDK skips it, and with no other
		// answers 503: not configured yet), and a body without id or tipo is
		// not an envelope (400, after the signature passed).
		code, applied := fuzzEnvDeliver(t, secret, ts, body, sig)
		switch {
		case len(secret) == 0:
			if code != http.StatusServiceUnavailable || applied != nil {
				t.Fatalf("an empty secret verified: %d", code)
			}
		case got.ID == "" || got.Tipo == "":
			if code != http.StatusBadRequest || applied != nil {
				t.Fatalf("an envelope without id or tipo answered %d (applied %v)", code, applied != nil)
			}
		default:
			if code != http.StatusNoContent || applied == nil {
				t.Fatalf("the receiver refused a correctly signed envelope: %d\n%s", code, body)
			}
			a := applied.Envelope
			if a.ID != got.ID || a.Tipo != got.Tipo || !bytes.Equal(a.Payload, sorted) || !a.OcorridoEm.Equal(when) ||
				a.Origem.Plugin != got.Origem.Plugin || a.Origem.Versao != got.Origem.Versao ||
				a.Origem.Solicitacao != got.Origem.Solicitacao || (a.Origem.Autoria != nil) != autoria ||
				autoria && (a.Origem.Autoria.ID != got.Origem.Autoria.ID || a.Origem.Autoria.Tipo != got.Origem.Autoria.Tipo) {
				t.Fatalf("the receiver read another envelope:\n %+v\n from %s", a, body)
			}
		}

		// One flipped bit anywhere in the body, or another timestamp, fails
		// verification and never reaches the handler.
		tampered := bytes.Clone(body)
		pos := int(flip % uint32(len(tampered)))
		tampered[pos] ^= 1 << ((flip >> 24) % 8)
		if Sign(secret, ts, tampered) == sig {
			t.Fatalf("flipping byte %d kept the signature", pos)
		}
		refused := http.StatusUnauthorized
		if len(secret) == 0 {
			refused = http.StatusServiceUnavailable // no secret configured yet
		}
		if code, applied := fuzzEnvDeliver(t, secret, ts, tampered, sig); code != refused || applied != nil {
			t.Fatalf("a body with byte %d flipped answered %d (applied %v)", pos, code, applied != nil)
		}
		if ts < 1<<62 {
			if code, applied := fuzzEnvDeliver(t, secret, ts+1, body, sig); code != refused || applied != nil {
				t.Fatalf("the signature of %d passed for %d: %d", ts, ts+1, code)
			}
		}
	})
}

// fuzzEnvDeliver posts body to a fresh SDK receiver whose clock reads ts and
// returns the answer and the delivery applied, if any.
func fuzzEnvDeliver(t *testing.T, secret []byte, ts int64, body []byte, sig string) (int, *receiver.Delivery) {
	t.Helper()
	var applied *receiver.Delivery
	r := receiver.New(receiver.Config{
		Secrets: func() [][]byte { return [][]byte{secret} },
		Now:     func() time.Time { return time.Unix(ts, 0) },
		Seen:    receiver.NewMemorySeen(4), // the default preallocates 100 000 ids
	}, receiver.HandlerFunc(func(_ context.Context, d receiver.Delivery) error {
		if applied != nil {
			return errors.New("applied twice")
		}
		applied = &d
		return nil
	}))
	req := httptest.NewRequest(http.MethodPost, "/geohub/eventos", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(receiver.HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(receiver.HeaderAssinatura, sig)
	w := httptest.NewRecorder()
	r.ServeHTTP(w, req)
	return w.Code, applied
}

// fuzzEnvCheckKeys walks body and fails unless every object's keys are in
// strictly increasing byte order (sorted, no repeats). It returns the
// top-level keys.
func fuzzEnvCheckKeys(t *testing.T, body []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	type frame struct {
		object bool
		tokens int // keys and values seen in this object: a key is due when even
		last   string
	}
	var stack []*frame
	var top []string
	value := func() { // a value starts in the enclosing container
		if n := len(stack); n > 0 {
			stack[n-1].tokens++
		}
	}
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return top
		}
		if err != nil {
			t.Fatalf("walk %s: %v", body, err)
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			value()
			stack = append(stack, &frame{object: tok == json.Delim('{')})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			continue
		}
		fr := (*frame)(nil)
		if n := len(stack); n > 0 {
			fr = stack[n-1]
		}
		if fr == nil || !fr.object || fr.tokens%2 == 1 {
			value()
			continue
		}
		key := tok.(string)
		if fr.tokens > 0 && key <= fr.last {
			t.Fatalf("key %q after %q: not in lexicographic order (or repeated) in %s", key, fr.last, body)
		}
		fr.last = key
		fr.tokens++
		if len(stack) == 1 {
			top = append(top, key)
		}
	}
}

// fuzzEnvUTF8 is s as encoding/json writes it: each invalid UTF-8 byte
// replaced by U+FFFD.
func fuzzEnvUTF8(s string) string { return string([]rune(s)) }

func fuzzEnvDecode(t *testing.T, body []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	return v
}
