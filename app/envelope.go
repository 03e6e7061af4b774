package app

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"time"
)

// envelope is the webhook body (SPEC 6.3). Fields are declared in
// lexicographic order and the payload is re-encoded from a map, whose keys
// encoding/json sorts, so the body is canonical: byte for byte the same for
// every recipient and every attempt.
type envelope struct {
	ID         string          `json:"id"`
	OcorridoEm string          `json:"ocorridoEm"`
	Origem     envelopeOrigem  `json:"origem"`
	Payload    json.RawMessage `json:"payload"`
	Tipo       string          `json:"tipo"`
}

type envelopeOrigem struct {
	Autoria     *Autoria `json:"autoria,omitempty"`
	Plugin      string   `json:"plugin"`
	Solicitacao string   `json:"solicitacao,omitempty"`
	Versao      string   `json:"versao"`
}

// EnvelopeTime is the layout of every timestamp Geohub writes, in the
// envelope (ocorridoEm) and the API: UTC, always milliseconds, so that the
// strings sort as the instants do. The store keeps milliseconds.
const EnvelopeTime = "2006-01-02T15:04:05.000Z"

// buildEnvelope encodes ev with payload (the full one, keys sorted).
func buildEnvelope(ev Event, sortedPayload json.RawMessage) ([]byte, error) {
	var buf jsonBuffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	err := enc.Encode(envelope{
		ID:         ev.EventID,
		OcorridoEm: ev.Timestamp.UTC().Format(EnvelopeTime),
		Origem: envelopeOrigem{Autoria: ev.Autoria, Plugin: ev.Origem, Solicitacao: ev.Solicitacao,
			Versao: ev.VersaoSchema},
		Payload: sortedPayload,
		Tipo:    ev.Tipo,
	})
	// Encode ends with a newline, which is not part of the body.
	return buf.b[:max(len(buf.b)-1, 0)], err
}

type jsonBuffer struct{ b []byte }

func (j *jsonBuffer) Write(p []byte) (int, error) { j.b = append(j.b, p...); return len(p), nil }

// Sign returns the X-Geohub-Assinatura value for body sent at ts:
// sha256=hex(HMAC-SHA256(secret, "<ts>.<body>")).
func Sign(secret []byte, ts int64, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(strconv.AppendInt(nil, ts, 10))
	m.Write([]byte{'.'})
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// SecretPrefix begins every signing secret, as Standard Webhooks writes
// them.
const SecretPrefix = "whsec_"

// NewSecret returns a signing secret: SecretPrefix and the standard base64
// of 32 random bytes, the form Standard Webhooks libraries accept unchanged.
func NewSecret() string {
	b := make([]byte, 32)
	rand.Read(b) // never fails (crypto/rand panics on failure)
	return SecretPrefix + base64.StdEncoding.EncodeToString(b)
}

// StandardKey is the HMAC key of webhook-signature for secret: the
// base64-decoded part after SecretPrefix. Secrets issued before Standard
// Webhooks were unpadded URL-safe base64, decoded as such; a secret that
// decodes neither way (never issued by Geohub) is its own key.
func StandardKey(secret []byte) []byte {
	s, ok := bytes.CutPrefix(secret, []byte(SecretPrefix))
	if !ok {
		return secret
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawURLEncoding} {
		if key, err := enc.DecodeString(string(s)); err == nil && len(key) > 0 {
			return key
		}
	}
	return secret
}

// LibraryReady says whether Standard Webhooks libraries accept secret as
// it is: SecretPrefix and standard base64. Secrets issued before were
// URL-safe and unpadded; one rotation replaces such a secret.
func LibraryReady(secret []byte) bool {
	s, ok := bytes.CutPrefix(secret, []byte(SecretPrefix))
	if !ok {
		return false
	}
	key, err := base64.StdEncoding.DecodeString(string(s))
	return err == nil && len(key) > 0
}

// SignStandard returns one webhook-signature entry (Standard Webhooks):
// v1,base64(HMAC-SHA256(key, "<id>.<ts>.<body>")), with key from
// StandardKey.
func SignStandard(key []byte, id string, ts int64, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write(strconv.AppendInt(nil, ts, 10))
	m.Write([]byte{'.'})
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// Timestamp is the X-Geohub-Timestamp value for t.
func Timestamp(t time.Time) int64 { return t.Unix() }
