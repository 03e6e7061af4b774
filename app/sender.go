package app

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"geohub/app/callback"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Request is one signed POST of an envelope to an integrator's callback.
type Request struct {
	EventID   string
	Agregado  string
	Sequencia int64
	Corpo     []byte // nil once purged: unsendable
	EntregaID string
	Tentativa int
}

// SendResult is what one POST got back.
type SendResult struct {
	Status     int // 0 without an HTTP answer
	RetryAfter time.Duration
	Snippet    string // the answer's first bytes
	Err        error
	// Transport: no HTTP answer (connection refused or reset, TLS,
	// timeout). Unsendable requests are not transport failures.
	Transport bool
	TLS       *tls.ConnectionState // the receiver's certificate, over https
	// Nack: a session's CAD answered nack (Status 503), its motivo in
	// Snippet, which the row's last error then shows.
	Nack bool
}

// Succeeded says the receiver accepted the request.
func (r SendResult) Succeeded() bool { return r.Err == nil && accepted(r.Status) }

// accepted is the one rule of acceptance: any 2xx delivers (SPEC 6), the
// dispatcher's attempts and the "verificar" ping alike.
func accepted(status int) bool { return status >= 200 && status < 300 }

// Sender posts a delivery to an integrator: the dispatcher's attempts and
// the "verificar" ping go through the same one.
type Sender interface {
	Send(ctx context.Context, in Integrator, req Request) SendResult
}

// errUnsendable marks a delivery that cannot be sent as it stands.
var errUnsendable = errors.New("entrega impossível de enviar")

// HTTPSender signs and posts deliveries (SPEC 6.3). During a rotation's grace
// period it signs X-Geohub-Assinatura with the secret the receiver last
// accepted (at first the new one) and X-Geohub-Assinatura-Anterior with the
// other; a 401 is answered at once by the same request with the two
// swapped. So a receiver that reads only X-Geohub-Assinatura gets every
// delivery whether it holds the old secret, the new one, or switches at any
// moment of the grace period.
type HTTPSender struct {
	Integrators *Integrators
	Now         func() time.Time
	Version     string
	Client      *http.Client
	// Policy is checked again before every attempt, so a callback stored
	// under other rules (--insecure-callbacks, a narrower allowlist) is
	// refused before any dial: the dialer checks addresses, not schemes.
	Policy callback.Policy

	mu       sync.Mutex
	accepted map[string][]byte // per integrator, the secret its receiver accepted last
}

// NewHTTPSender returns a sender whose client is NewCallbackClient's.
func NewHTTPSender(integrators *Integrators, policy callback.Policy, now func() time.Time, version string,
	timeout time.Duration, perHost int) *HTTPSender {
	return &HTTPSender{Integrators: integrators, Now: now, Version: version, Policy: policy,
		Client: NewCallbackClient(policy, timeout, perHost)}
}

// NewCallbackClient returns the client that posts to receivers: it dials
// only addresses the policy allows, checked at dial time, follows no
// redirect and gives up after timeout.
func NewCallbackClient(policy callback.Policy, timeout time.Duration, perHost int) *http.Client {
	dialer := policy.Dialer(&net.Dialer{Timeout: timeout})
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			DialContext:         dialer.DialContext,
			Proxy:               nil, // a proxy would dial on our behalf, past the address check
			TLSHandshakeTimeout: timeout,
			MaxIdleConnsPerHost: perHost,
			IdleConnTimeout:     90 * time.Second,
		},
		// 3xx is a failure: following it would leave the allowlist.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Send implements Sender.
func (s *HTTPSender) Send(ctx context.Context, in Integrator, req Request) SendResult {
	if req.Corpo == nil {
		return SendResult{Err: fmt.Errorf("%w: o corpo da entrega foi expurgado", errUnsendable)}
	}
	if why := s.Policy.Refusal(in.CallbackURL, in.HostsPermitidos); why != "" {
		return SendResult{Err: fmt.Errorf("%w: este servidor recusa o callback (%s): corrija a URL do integrador", errUnsendable, why)}
	}
	if !headerSafe(req.Agregado) {
		// Publish refuses such an agregado; one stored before it did would
		// otherwise fail every attempt.
		return SendResult{Err: fmt.Errorf("%w: o agregado tem caracteres que um cabeçalho HTTP não admite", errUnsendable)}
	}
	current, previous, err := s.Integrators.Secrets(ctx, in.ID)
	if err != nil {
		return SendResult{Err: err}
	}
	first, second := current, previous
	if previous != nil && bytes.Equal(s.acceptedBy(in.ID), previous) {
		first, second = previous, current
	}
	r := s.post(ctx, in, req, first, second)
	if r.Err == nil && r.Status == http.StatusUnauthorized && second != nil {
		// The receiver may hold the other secret: ask again with it first.
		r = s.post(ctx, in, req, second, first)
		first = second
	}
	if r.Succeeded() && previous != nil {
		s.accept(in.ID, first)
	}
	return r
}

func (s *HTTPSender) acceptedBy(id string) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted[id]
}

func (s *HTTPSender) accept(id string, secret []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.accepted == nil {
		s.accepted = map[string][]byte{}
	}
	s.accepted[id] = secret
}

// post sends the request signed with sign (and other, when set, in
// X-Geohub-Assinatura-Anterior) and reads the start of the answer.
func (s *HTTPSender) post(ctx context.Context, in Integrator, req Request, sign, other []byte) SendResult {
	hr, err := newDeliveryRequest(ctx, in.CallbackURL, s.Version, Timestamp(s.Now()), req, sign, other)
	if err != nil {
		return SendResult{Err: err}
	}
	return roundTrip(s.Client, hr, s.Now)
}

// newDeliveryRequest is a delivery as SPEC 6.3 has it, sent at ts: the
// envelope and every header, signed with sign (and other, when set, in
// X-Geohub-Assinatura-Anterior and as webhook-signature's second entry).
// The dispatcher's attempts, the "verificar" ping and the receiver tester
// all build it here.
func newDeliveryRequest(ctx context.Context, url, version string, ts int64, req Request, sign, other []byte) (*http.Request, error) {
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(req.Corpo))
	if err != nil {
		return nil, err
	}
	hr.Header = deliveryHeaders(version, ts, req, sign, other)
	return hr, nil
}

// deliveryHeaders are a delivery's headers (SPEC 6.3), over HTTP and in a
// session's message alike (SPEC 8d).
func deliveryHeaders(version string, ts int64, req Request, sign, other []byte) http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "Geohub/"+version)
	h.Set("X-Geohub-Evento-Id", req.EventID)
	h.Set("X-Geohub-Timestamp", strconv.FormatInt(ts, 10))
	h.Set("X-Geohub-Assinatura", Sign(sign, ts, req.Corpo))
	if other != nil {
		h.Set("X-Geohub-Assinatura-Anterior", Sign(other, ts, req.Corpo))
	}
	h.Set("X-Geohub-Agregado", req.Agregado)
	h.Set("X-Geohub-Sequencia", strconv.FormatInt(req.Sequencia, 10))
	h.Set("X-Geohub-Entrega-Id", req.EntregaID)
	h.Set("X-Geohub-Tentativa", strconv.Itoa(req.Tentativa))
	// Standard Webhooks, for receivers that verify with a library; during
	// a rotation both signatures, space-separated, as it allows.
	h.Set("webhook-id", req.EventID)
	h.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	standard := SignStandard(StandardKey(sign), req.EventID, ts, req.Corpo)
	if other != nil {
		standard += " " + SignStandard(StandardKey(other), req.EventID, ts, req.Corpo)
	}
	h.Set("webhook-signature", standard)
	return h
}

// roundTrip sends hr and reads the start of the answer.
func roundTrip(client *http.Client, hr *http.Request, now func() time.Time) SendResult {
	resp, err := client.Do(hr)
	if err != nil {
		return SendResult{Err: transportError(err), Transport: true}
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, responseSnippet))
	io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseDrain)) // lets the connection be reused
	return SendResult{Status: resp.StatusCode, RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), now()),
		Snippet: string(snippet), TLS: resp.TLS}
}

// headerSafe says whether s may be an HTTP header value (RFC 9110): no
// control byte but horizontal tab (CR and LF would split the header).
func headerSafe(s string) bool {
	return !strings.ContainsFunc(s, func(r rune) bool { return (r < ' ' && r != '\t') || r == 0x7f })
}

func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return t.Sub(now)
	}
	return 0
}
