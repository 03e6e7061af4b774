package simulator

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"geohub/receiver"
)

// Defaults of [Config].
const (
	DefaultHTTPTimeout  = 10 * time.Second
	DefaultMaxAttempts  = 5
	DefaultRetryBase    = 250 * time.Millisecond
	DefaultMaxRetryWait = 10 * time.Second
)

// Config configures a [CAD]. BaseURL and APIKey are needed to send
// commands; Secret or Secrets to receive webhooks. The rest has defaults.
type Config struct {
	// BaseURL is Geohub's address, e.g. "http://127.0.0.1:8080".
	BaseURL string
	// APIKey is the integrator's Bearer token for commands (gk_…).
	APIKey string
	// Secret is the webhook signing secret. Secrets, if set, is used
	// instead (the current and the previous secret during a rotation).
	// With neither, every delivery is refused with 401.
	Secret  []byte
	Secrets func() [][]byte
	// Self is the integrator's id: its own domain events are echoes, which
	// the receiver discards.
	Self string
	// HTTPClient sends the commands; default a client with a 10 s timeout.
	HTTPClient *http.Client
	// Logger; default discards.
	Logger *slog.Logger
	// Rand drives the scenarios of [CAD.Run] (natureza, recursos, delays),
	// for reproducible demos; default randomly seeded. Ids never come from
	// it.
	Rand *rand.Rand
	// MaxAttempts bounds the attempts of one command (transport errors, 429
	// and 5xx are retried with the same x-solicitacao-id); default 5.
	MaxAttempts int
	// RetryBase is the first backoff wait, doubling, with jitter; default
	// 250 ms.
	RetryBase time.Duration
	// MaxRetryWait caps every wait, Retry-After included; default 10 s.
	MaxRetryWait time.Duration
	// OnDiscard is passed to the receiver (see [receiver.Config]).
	OnDiscard func(eventoID, motivo string)
	// ReceiverNow is the receiver's clock (see [receiver.Config]); default
	// time.Now.
	ReceiverNow func() time.Time
}

// CAD is a simulated computer-aided dispatch system: a Geohub integrator
// that sends commands and keeps a [Projection] fed by the command responses
// and by the webhooks its [CAD.Handler] receives. Create it with [New].
type CAD struct {
	cfg    Config
	base   string
	client *http.Client
	log    *slog.Logger
	proj   *Projection
	recv   *receiver.Receiver

	rngMu sync.Mutex
	rng   *rand.Rand

	// wait sleeps d or until ctx ends; tests replace it.
	wait func(ctx context.Context, d time.Duration) error
}

// New returns a CAD.
func New(cfg Config) *CAD {
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: DefaultHTTPTimeout}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	if cfg.RetryBase <= 0 {
		cfg.RetryBase = DefaultRetryBase
	}
	if cfg.MaxRetryWait <= 0 {
		cfg.MaxRetryWait = DefaultMaxRetryWait
	}
	rng := cfg.Rand
	if rng == nil {
		var seed [16]byte
		crand.Read(seed[:])
		rng = rand.New(rand.NewPCG(binary.LittleEndian.Uint64(seed[:8]), binary.LittleEndian.Uint64(seed[8:])))
	}
	secrets := cfg.Secrets
	if secrets == nil {
		secret := bytes.Clone(cfg.Secret)
		secrets = func() [][]byte {
			if len(secret) == 0 {
				return nil
			}
			return [][]byte{secret}
		}
	}
	c := &CAD{
		cfg:    cfg,
		base:   strings.TrimRight(cfg.BaseURL, "/"),
		client: cfg.HTTPClient,
		log:    cfg.Logger,
		proj:   NewProjection(),
		rng:    rng,
		wait:   sleep,
	}
	c.recv = receiver.New(receiver.Config{
		Secrets:   secrets,
		Self:      cfg.Self,
		Now:       cfg.ReceiverNow,
		OnDiscard: cfg.OnDiscard,
	}, c.proj)
	return c
}

// Handler returns the webhook receiver to mount at the integrator's
// callback_url. It feeds [CAD.Projection]; its Drain may be called on a
// timer.
func (c *CAD) Handler() *receiver.Receiver { return c.recv }

// Projection returns the CAD's state.
func (c *CAD) Projection() *Projection { return c.proj }

// Register sends POST /api/ocorrencias.
//
// SPEC 7 promises only {"id", "status"} in the 201; if the answer has no
// natureza, the one sent is filled in (in the result and the projection).
func (c *CAD) Register(ctx context.Context, req RegisterRequest) (Ocorrencia, error) {
	o, err := c.command(ctx, ocorrenciasPath, req)
	if err == nil && o.Natureza == "" {
		o.Natureza = req.Natureza
		c.proj.ApplySnapshot(Ocorrencia{ID: o.ID, Natureza: o.Natureza})
	}
	return o, err
}

// Dispatch sends POST /api/ocorrencias/{id}/despachos for the resource
// identificador recurso. The result's Despacho is the new despacho.
func (c *CAD) Dispatch(ctx context.Context, ocorrenciaID, recurso string) (Ocorrencia, error) {
	body := struct {
		Recurso Recurso `json:"recurso"`
	}{Recurso{Identificador: recurso}}
	return c.command(ctx, ocorrenciasPath+"/"+url.PathEscape(ocorrenciaID)+"/despachos", body)
}

// SetDispatchStatus sends POST /api/ocorrencias/{id}/despachos/{despachoId}/status.
// The result's Despacho is the despacho changed.
func (c *CAD) SetDispatchStatus(ctx context.Context, ocorrenciaID, despachoID, para string) (Ocorrencia, error) {
	return c.command(ctx, ocorrenciasPath+"/"+url.PathEscape(ocorrenciaID)+"/despachos/"+url.PathEscape(despachoID)+"/status", paraBody{para})
}

// SetStatus sends POST /api/ocorrencias/{id}/status.
func (c *CAD) SetStatus(ctx context.Context, ocorrenciaID, para string) (Ocorrencia, error) {
	return c.command(ctx, ocorrenciasPath+"/"+url.PathEscape(ocorrenciaID)+"/status", paraBody{para})
}

type paraBody struct {
	Para string `json:"para"`
}

// Get reads Geohub's projection of ocorrência id (GET, retried like a
// command). It does NOT touch the CAD's projection, so the two can be
// compared.
func (c *CAD) Get(ctx context.Context, id string) (Ocorrencia, error) {
	path := ocorrenciasPath + "/" + url.PathEscape(id)
	status, body, err := c.Do(ctx, http.MethodGet, path, "", nil)
	if err != nil {
		return Ocorrencia{}, err
	}
	if status/100 != 2 {
		return Ocorrencia{}, newAPIError(http.MethodGet, path, "", status, body)
	}
	o, err := DecodeOcorrencia(body)
	if err != nil {
		return Ocorrencia{}, fmt.Errorf("geohub GET %s: %w", path, err)
	}
	return o, nil
}

// command sends one command with a new x-solicitacao-id.
func (c *CAD) command(ctx context.Context, path string, body any) (Ocorrencia, error) {
	sol := NewSolicitacaoID()
	status, resp, err := c.Do(ctx, http.MethodPost, path, sol, body)
	if err != nil {
		return Ocorrencia{}, err
	}
	if status/100 != 2 {
		return Ocorrencia{}, newAPIError(http.MethodPost, path, sol, status, resp)
	}
	o, err := DecodeOcorrencia(resp)
	if err != nil {
		return Ocorrencia{}, fmt.Errorf("geohub POST %s: response: %w", path, err)
	}
	return o, nil
}

func newAPIError(method, path, sol string, status int, body []byte) *APIError {
	e := &APIError{Method: method, Path: path, Solicitacao: sol, Status: status, Body: body}
	_ = json.Unmarshal(body, &e.Motivo) // not an error body: Motivo stays empty
	return e
}

// Do sends one request to Geohub: method and path (from "/api/…") with
// the API key, solicitacaoID as x-solicitacao-id (omitted if empty) and
// body (nil: none; []byte or json.RawMessage: sent as is; else JSON).
//
// Transport errors, 429 and 5xx are retried, up to Config.MaxAttempts,
// with the SAME x-solicitacao-id and the same bytes: waiting Retry-After
// when given, else a doubling backoff with jitter, each capped at
// Config.MaxRetryWait. Other statuses are final. Do returns the last
// status and body; err only when no response came (or ctx ended).
//
// When a POST with a solicitacaoID gets a final answer it is recorded as
// the command's [Outcome], and a 2xx response on /api/ocorrencias is
// merged into the projection, as the typed commands do; so a test can
// repeat a command with the same id through Do. GET answers are never
// merged.
func (c *CAD) Do(ctx context.Context, method, path, solicitacaoID string, body any) (int, []byte, error) {
	var payload []byte
	switch b := body.(type) {
	case nil:
	case []byte:
		payload = b
	case json.RawMessage:
		payload = b
	default:
		var err error
		if payload, err = json.Marshal(b); err != nil {
			return 0, nil, fmt.Errorf("geohub %s %s: encode body: %w", method, path, err)
		}
	}
	log := c.log.With("method", method, "path", path, "solicitacao", solicitacaoID)
	for attempt := 1; ; attempt++ {
		status, resp, header, err := c.once(ctx, method, path, solicitacaoID, payload, body != nil)
		if err != nil && ctx.Err() != nil {
			return 0, nil, ctx.Err()
		}
		retry := err != nil || status == http.StatusTooManyRequests || status >= 500
		if !retry || attempt >= c.cfg.MaxAttempts {
			if err != nil {
				return 0, nil, fmt.Errorf("geohub %s %s: %w", method, path, err)
			}
			if retry {
				log.Warn("giving up", "status", status, "attempts", attempt)
			}
			if !retry {
				c.afterFinal(method, path, solicitacaoID, status, resp)
			}
			return status, resp, nil
		}
		wait, hinted := retryAfter(header, time.Now())
		if !hinted {
			wait = c.backoff(attempt)
		}
		wait = min(wait, c.cfg.MaxRetryWait)
		if err != nil {
			log.Warn("retrying", "attempt", attempt, "error", err, "wait", wait)
		} else {
			log.Warn("retrying", "attempt", attempt, "status", status, "wait", wait)
		}
		if err := c.wait(ctx, wait); err != nil {
			return 0, nil, err
		}
	}
}

// once sends one attempt.
func (c *CAD) once(ctx context.Context, method, path, sol string, payload []byte, hasBody bool) (int, []byte, http.Header, error) {
	var rd io.Reader
	if hasBody {
		rd = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, nil, nil, err
	}
	if c.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.APIKey)
	}
	if sol != "" {
		req.Header.Set(HeaderSolicitacao, sol)
	}
	if hasBody {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "geohub-cad-simulator")
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody))
	if err != nil {
		return 0, nil, nil, err
	}
	return resp.StatusCode, b, resp.Header, nil
}

// afterFinal records a command's final answer in the projection.
func (c *CAD) afterFinal(method, path, sol string, status int, resp []byte) {
	if method != http.MethodPost || sol == "" {
		return
	}
	o := Outcome{Solicitacao: sol, Status: status, Concluded: status/100 == 2,
		Metodo: method, Rota: path, FromResponse: true}
	if o.Concluded {
		if isOcorrenciaRoute(path) {
			if snap, err := DecodeOcorrencia(resp); err == nil && snap.ID != "" {
				o.OcorrenciaID = snap.ID
				c.proj.ApplySnapshot(snap)
			}
		}
	} else {
		var m Motivo
		if json.Unmarshal(resp, &m) == nil && m.Erro != "" {
			o.Motivo = &m
		}
	}
	c.proj.recordResponse(o)
}

// retryAfter reads Retry-After (seconds or an HTTP date).
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		if n > int64(time.Hour/time.Second) {
			n = int64(time.Hour / time.Second) // capped later anyway; avoid overflow
		}
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// backoff is RetryBase·2^(attempt-1), ×[0.5, 1.5) jitter.
func (c *CAD) backoff(attempt int) time.Duration {
	d := c.cfg.RetryBase << min(attempt-1, 20)
	if d <= 0 || d > c.cfg.MaxRetryWait {
		d = c.cfg.MaxRetryWait
	}
	return time.Duration(float64(d) * (0.5 + c.float64()))
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// The scenario randomness, serialised: *rand.Rand is not safe for
// concurrent use.

func (c *CAD) float64() float64 {
	c.rngMu.Lock()
	defer c.rngMu.Unlock()
	return c.rng.Float64()
}

func (c *CAD) intN(n int) int {
	c.rngMu.Lock()
	defer c.rngMu.Unlock()
	return c.rng.IntN(n)
}

// NewSolicitacaoID returns a random UUID (version 4) for x-solicitacao-id.
func NewSolicitacaoID() string {
	var b [16]byte
	if _, err := crand.Read(b[:]); err != nil {
		panic(errors.Join(errors.New("simulator: crypto/rand"), err)) // never, since Go 1.24
	}
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 9562 variant
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}
