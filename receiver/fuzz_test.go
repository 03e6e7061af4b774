package receiver_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"geohub/receiver"
)

// Modes of FuzzReceiver: how the request is built from the fuzzed fields.
const (
	fuzzBuild       = 1 << iota // body = an envelope of (id, tipo, body as payload); else body as is
	fuzzSign                    // sign correctly (with the fuzzed timestamp header); else send sig as is
	fuzzPrevious                // sign with the previous secret (a rotation)
	fuzzAnterior                // put the signature in X-Geohub-Assinatura-Anterior
	fuzzNowOffset               // timestamp = now + int8(mode>>8) * 3 s; else the fuzzed header
	fuzzTamper                  // flip a bit of the body after signing
	fuzzNotPost                 // send it as PUT
	fuzzEcho                    // built envelope caused by this integrator (its echo)
	fuzzOffsetShift = 8
)

var fuzzPrev = []byte("whsec-anterior")

// fuzzMaxBody is small so the fuzzer reaches the 413 path.
const fuzzMaxBody = 4 << 10

// FuzzReceiver sends arbitrary bodies and headers, twice, to the SDK
// receiver and checks SPEC 8: it never panics, answers only its documented
// codes, never calls the handler for a body that is not correctly signed
// over its raw bytes with a timestamp inside the window, and applies a
// correctly signed envelope exactly once however often it comes.
func FuzzReceiver(f *testing.F) {
	ts := strconv.FormatInt(now.Unix(), 10)
	env := string(ev("0199bb3e-0000-7000-8000-000000000001"))
	type seed struct {
		mode                              uint16
		body, id, tipo, ts, sig, agg, seq string
	}
	off := func(seconds int) uint16 { return uint16(uint8(int8(seconds/3))) << fuzzOffsetShift }
	good := uint16(fuzzBuild | fuzzSign)
	for _, s := range []seed{
		// Correctly signed envelopes: unordered, first of an aggregate,
		// early (held), the echo, a command outcome with the echo's autoria.
		{good, `{"de":"em_deslocamento","para":"no_local"}`, "e1", "ocorrencia:despacho-mudou-status", ts, "", "", ""},
		{good, `{"a":1}`, "e2", "ocorrencia:despachada", ts, "", "ocorrencia:1", "1"},
		{good, `{"a":1}`, "e3", "ocorrencia:despachada", ts, "", "ocorrencia:1", "3"},
		{good, `{"a":1}`, "e4", "ocorrencia:despachada", ts, "", "ocorrencia:1", "x"},
		{good, `{"a":1}`, "e5", "ocorrencia:despachada", ts, "", "ocorrencia:1", "-1"},
		{good | fuzzEcho, `{"a":1}`, "e6", "ocorrencia:registrada", ts, "", "ocorrencia:2", "1"},
		{good | fuzzEcho, `{"a":1}`, "e7", "integracao:comando-concluido", ts, "", "solicitacao:1", "1"},
		{good | fuzzPrevious, `[1,"x"]`, "e8", "jornada:iniciada", ts, "", "", ""},
		{good | fuzzAnterior, `"texto"`, "e9", "jornada:iniciada", ts, "", "", ""},
		{good | fuzzPrevious | fuzzAnterior, `0`, "e10", "jornada:iniciada", ts, "", "", ""},
		{good | fuzzNowOffset | off(300), `{}`, "e11", "t", "", "", "", ""},
		{good | fuzzNowOffset | off(-300), `{}`, "e12", "t", "", "", "", ""},
		{fuzzSign, env, "", "", ts, "", "ocorrencia:9", "1"},
		// Signed, not an envelope: 400.
		{fuzzSign, `not json`, "", "", ts, "", "", ""},
		{fuzzSign, `{"id":"x","tipo":"t","payload":null}`, "", "", ts, "", "", ""},
		{fuzzSign, `{"id":"","tipo":"t","payload":{}}`, "", "", ts, "", "", ""},
		{fuzzSign, `{"id":"x","tipo":"t"}`, "", "", ts, "", "", ""},
		{fuzzSign, `[{"id":"x","tipo":"t","payload":{}}]`, "", "", ts, "", "", ""},
		{fuzzSign, `{"id":"x","tipo":"t","payload":{},"ocorridoEm":"ontem"}`, "", "", ts, "", "", ""},
		{fuzzSign, `{"ID":"x","TIPO":"t","Payload":{}}`, "", "", ts, "", "", ""},
		{fuzzSign, `{"id":"x","id":"","tipo":"t","payload":{}}`, "", "", ts, "", "", ""},
		{fuzzSign, "", "", "", ts, "", "", ""},
		{good, `null`, "e13", "t", ts, "", "", ""},
		// Not correctly signed: 401, never applied.
		{0, env, "", "", ts, "", "", ""},
		{0, env, "", "", ts, "sha256=" + strings.Repeat("0", 64), "", ""},
		{0, env, "", "", ts, receiver.Sign([]byte("outro-segredo"), now.Unix(), []byte(env)), "", ""},
		{0, env, "", "", ts, strings.TrimPrefix(receiver.Sign(secret, now.Unix(), []byte(env)), "sha256="), "", ""},
		{0, env, "", "", ts, "sha1=" + strings.TrimPrefix(receiver.Sign(secret, now.Unix(), []byte(env)), "sha256="), "", ""},
		{0, env, "", "", ts, strings.ToUpper(receiver.Sign(secret, now.Unix(), []byte(env))), "", ""},
		{0, env, "", "", ts, "sha256=" + strings.ToUpper(strings.TrimPrefix(receiver.Sign(secret, now.Unix(), []byte(env)), "sha256=")), "", ""},
		{0, env, "", "", ts, receiver.Sign(secret, now.Unix(), []byte(env)) + " ", "", ""},
		{0, env + " ", "", "", ts, receiver.Sign(secret, now.Unix(), []byte(env)), "", ""},
		{good | fuzzTamper, `{"a":1}`, "e14", "t", ts, "", "", ""},
		{good | fuzzNowOffset | off(303), `{}`, "e15", "t", "", "", "", ""},
		{good | fuzzNowOffset | off(-303), `{}`, "e16", "t", "", "", "", ""},
		{good, `{}`, "e17", "t", "+" + ts, "", "", ""},
		{good, `{}`, "e18", "t", "0" + ts, "", "", ""},
		{good, `{}`, "e19", "t", ts + ".0", "", "", ""},
		{good, `{}`, "e20", "t", "", "", "", ""},
		{good, `{}`, "e21", "t", "99999999999999999999", "", "", ""},
		{good | fuzzNotPost, `{}`, "e22", "t", ts, "", "", ""},
		{fuzzSign, strings.Repeat("x", fuzzMaxBody+1), "", "", ts, "", "", ""},
		{fuzzSign, env + strings.Repeat(" ", fuzzMaxBody), "", "", ts, "", "", ""},
	} {
		f.Add(uint16(s.mode), []byte(s.body), s.id, s.tipo, s.ts, s.sig, s.agg, s.seq)
	}

	f.Fuzz(func(t *testing.T, mode uint16, body []byte, id, tipo, tsHeader, sig, agregado, seq string) {
		validEnvelope := false
		if mode&fuzzBuild != 0 {
			payload := json.RawMessage(body)
			if !json.Valid(body) {
				payload, _ = json.Marshal(string(body))
			}
			autoria := &receiver.Autoria{ID: "usuario-1", Tipo: "usuario"}
			if mode&fuzzEcho != 0 {
				autoria = &receiver.Autoria{ID: self, Tipo: "integrador"}
			}
			plugin, _, _ := strings.Cut(tipo, ":")
			var err error
			body, err = json.Marshal(receiver.Envelope{ID: id, OcorridoEm: now.UTC(), Tipo: tipo, Payload: payload,
				Origem: receiver.Origem{Autoria: autoria, Plugin: plugin, Versao: "1.0.0"}})
			if err != nil {
				return // a payload json.Marshal will not embed
			}
			validEnvelope = id != "" && tipo != "" && !bytes.Equal(bytes.TrimSpace(payload), []byte("null"))
		}
		// The plugin is the type's family: a command's outcome (plugin or
		// type integracao) is never an echo.
		plugin, _, _ := strings.Cut(tipo, ":")
		echo := validEnvelope && mode&fuzzEcho != 0 && plugin != receiver.PluginIntegracao &&
			!strings.HasPrefix(tipo, receiver.PluginIntegracao+":")
		if mode&fuzzNowOffset != 0 {
			tsHeader = strconv.FormatInt(now.Unix()+3*int64(int8(mode>>fuzzOffsetShift)), 10)
		}
		key := secret
		if mode&fuzzPrevious != 0 {
			key = fuzzPrev
		}
		sign := func(ts string) string {
			if mode&fuzzSign == 0 {
				return sig
			}
			m := hmac.New(sha256.New, key)
			m.Write([]byte(ts + "." + string(body)))
			return "sha256=" + hex.EncodeToString(m.Sum(nil))
		}
		sent := body
		if mode&fuzzTamper != 0 && len(body) > 0 {
			sent = bytes.Clone(body)
			sent[int(mode>>fuzzOffsetShift)%len(sent)] ^= 1 << (mode % 8)
		}
		method := http.MethodPost
		if mode&fuzzNotPost != 0 {
			method = http.MethodPut
		}

		var calls []receiver.Delivery
		r := receiver.New(receiver.Config{
			Secrets: func() [][]byte { return [][]byte{secret, fuzzPrev} },
			Self:    self,
			Now:     func() time.Time { return now },
			MaxBody: fuzzMaxBody,
			Seen:    receiver.NewMemorySeen(16), // the default preallocates 100 000 ids
		}, receiver.HandlerFunc(func(_ context.Context, d receiver.Delivery) error {
			calls = append(calls, d)
			return nil
		}))
		send := func(ts, entrega string) int {
			req := httptest.NewRequest(method, "/geohub/eventos", bytes.NewReader(sent))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(receiver.HeaderTimestamp, ts)
			name := receiver.HeaderAssinatura
			if mode&fuzzAnterior != 0 {
				name = receiver.HeaderAssinaturaAnterior
			}
			req.Header.Set(name, sign(ts))
			req.Header.Set(receiver.HeaderAgregado, agregado)
			req.Header.Set(receiver.HeaderSequencia, seq)
			req.Header.Set(receiver.HeaderEntregaID, entrega)
			req.Header.Set(receiver.HeaderTentativa, "1")
			w := httptest.NewRecorder()
			r.ServeHTTP(w, req)
			return w.Code
		}

		// The oracle, independent of the SDK's code: a POST of at most
		// MaxBody bytes, a canonical timestamp within ±5 min, and a
		// signature header whose hex is HMAC-SHA256 of "<ts>.<raw body>"
		// under one of the secrets.
		verified := func(ts string) bool {
			n, err := strconv.ParseInt(ts, 10, 64)
			if err != nil || strconv.FormatInt(n, 10) != ts || n < now.Unix()-300 || n > now.Unix()+300 {
				return false
			}
			hexSum, ok := strings.CutPrefix(sign(ts), "sha256=")
			got, err := hex.DecodeString(hexSum)
			if !ok || err != nil {
				return false
			}
			for _, k := range [][]byte{secret, fuzzPrev} {
				m := hmac.New(sha256.New, k)
				m.Write([]byte(ts + "." + string(sent)))
				if hmac.Equal(got, m.Sum(nil)) {
					return true
				}
			}
			return false
		}
		expect := func(code int, ts string) {
			t.Helper()
			switch {
			case method != http.MethodPost:
				if code != http.StatusMethodNotAllowed {
					t.Fatalf("%s answered %d, want 405", method, code)
				}
			case len(sent) > fuzzMaxBody:
				if code != http.StatusRequestEntityTooLarge {
					t.Fatalf("a body of %d bytes answered %d, want 413", len(sent), code)
				}
			case !verified(ts):
				if code != http.StatusUnauthorized {
					t.Fatalf("a request not correctly signed answered %d, want 401 (ts %q, sig %q, body %q)", code, ts, sign(ts), sent)
				}
			case validEnvelope && mode&fuzzTamper == 0:
				if code != http.StatusNoContent {
					t.Fatalf("a correctly signed envelope answered %d, want 204: %s", code, sent)
				}
			default: // signed, and an envelope or not
				if code != http.StatusNoContent && code != http.StatusBadRequest {
					t.Fatalf("a signed body answered %d, want 204 or 400: %q", code, sent)
				}
			}
		}

		first := send(tsHeader, "entrega-1")
		expect(first, tsHeader)
		if first != http.StatusNoContent && len(calls) > 0 {
			t.Fatalf("answered %d but applied %+v", first, calls)
		}
		// Geohub's retry: the same body with a fresh timestamp (re-signed
		// when it was signed) and a new delivery id.
		retryTS := tsHeader
		if mode&fuzzSign != 0 {
			retryTS = strconv.FormatInt(now.Unix(), 10)
		}
		second := send(retryTS, "entrega-2")
		expect(second, retryTS)
		if first == http.StatusNoContent && second != http.StatusNoContent {
			t.Fatalf("a repeat of an accepted delivery answered %d", second)
		}

		t.Logf("answered %d, %d; applied %d", first, second, len(calls))
		if len(calls) > 1 {
			t.Fatalf("applied %d times: %+v", len(calls), calls)
		}
		for _, d := range calls {
			if d.ID == "" || d.Tipo == "" || len(d.Payload) == 0 || string(d.Payload) == "null" {
				t.Fatalf("applied something that is not an envelope: %+v", d)
			}
			if d.Agregado != agregado {
				t.Fatalf("applied under aggregate %q, sent %q", d.Agregado, agregado)
			}
		}
		if first != http.StatusNoContent && second != http.StatusNoContent && len(calls) > 0 {
			t.Fatal("applied although never accepted")
		}
		// A correctly signed envelope, not the integrator's echo and not
		// early in its aggregate, is applied exactly once.
		n, err := strconv.ParseInt(seq, 10, 64)
		inTurn := agregado == "" || err != nil || n <= 1
		if first == http.StatusNoContent && validEnvelope && mode&fuzzTamper == 0 && !echo && inTurn && len(calls) != 1 {
			t.Fatalf("a correctly signed envelope (seq %q) was applied %d times", seq, len(calls))
		}
		if echo && len(calls) > 0 {
			t.Fatalf("the integrator's own echo was applied: %+v", calls[0])
		}
	})
}
