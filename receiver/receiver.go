package receiver

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
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The request headers Geohub sends (SPEC 6.3).
const (
	HeaderEventoID           = "X-Geohub-Evento-Id"
	HeaderTimestamp          = "X-Geohub-Timestamp"
	HeaderAssinatura         = "X-Geohub-Assinatura"
	HeaderAssinaturaAnterior = "X-Geohub-Assinatura-Anterior"
	HeaderAgregado           = "X-Geohub-Agregado"
	HeaderSequencia          = "X-Geohub-Sequencia"
	HeaderEntregaID          = "X-Geohub-Entrega-Id"
	HeaderTentativa          = "X-Geohub-Tentativa"
)

// Defaults of [Config].
const (
	// DefaultTolerance is the timestamp window, on both sides of Now.
	DefaultTolerance = 5 * time.Minute
	// DefaultMaxBody is Geohub's payload limit (1 MiB) plus room for the
	// rest of the envelope.
	DefaultMaxBody = 1<<20 + 64<<10
	// DefaultMaxHeld bounds the early arrivals held per aggregate.
	DefaultMaxHeld = 1000
	// DefaultSeen is the capacity of the default in-memory [SeenStore].
	DefaultSeen = 100_000
)

// PluginIntegracao is the plugin of a command's outcome: the answer to the
// command, never its echo.
const PluginIntegracao = "integracao"

// The reasons given to [Config.OnDiscard], as in the integrator guide.
const (
	MotivoAssinaturaInvalida = "assinatura-invalida"
	MotivoForaDaJanela       = "timestamp-fora-da-janela"
	MotivoCorpoGrande        = "corpo-grande"
	MotivoEnvelopeInvalido   = "envelope-invalido"
	MotivoRepetido           = "repetido"
	MotivoEcoProprio         = "eco-proprio"
	MotivoTeste              = "teste"
	MotivoEsperaCheia        = "espera-cheia"
	MotivoSemSegredo         = "sem-segredo"
)

// Autoria is who caused the event.
type Autoria struct {
	ID   string `json:"id"`
	Tipo string `json:"tipo"` // usuario | integrador | sistema
}

// Origem is where the event came from.
type Origem struct {
	Autoria     *Autoria `json:"autoria,omitempty"`
	Plugin      string   `json:"plugin"`
	Solicitacao string   `json:"solicitacao,omitempty"` // x-solicitacao-id of the command that caused it
	Versao      string   `json:"versao"`
}

// Envelope is the webhook body.
type Envelope struct {
	ID         string          `json:"id"`
	OcorridoEm time.Time       `json:"ocorridoEm"`
	Origem     Origem          `json:"origem"`
	Payload    json.RawMessage `json:"payload"`
	Tipo       string          `json:"tipo"`
}

// Delivery is an envelope with its delivery headers.
type Delivery struct {
	Envelope
	Agregado  string // X-Geohub-Agregado
	Sequencia int64  // X-Geohub-Sequencia; 0 when missing or unreadable
	EntregaID string // X-Geohub-Entrega-Id
	Tentativa int    // X-Geohub-Tentativa; 0 when missing or unreadable
}

// Handler applies deliveries. Apply is called once per envelope, in
// sequence order and one at a time within an aggregate. An error answers
// 500 and Geohub retries the delivery.
type Handler interface {
	Apply(ctx context.Context, d Delivery) error
}

// HandlerFunc adapts a function to [Handler].
type HandlerFunc func(ctx context.Context, d Delivery) error

// Apply calls f.
func (f HandlerFunc) Apply(ctx context.Context, d Delivery) error { return f(ctx, d) }

// SeenStore remembers the envelope ids already accepted. It must be safe
// for concurrent use.
type SeenStore interface {
	Seen(id string) bool
	Mark(id string)
}

// SequenceStore keeps the next expected sequence per aggregate. Next returns
// 1 for an aggregate it does not know. It must be safe for concurrent use;
// calls for one aggregate never overlap.
type SequenceStore interface {
	Next(agregado string) int64
	SetNext(agregado string, next int64)
}

// Config configures a [Receiver]. Secrets is required; the rest has
// defaults.
type Config struct {
	// Secrets returns the signing secrets: the current one, and the previous
	// one during a rotation. A signature matching any of them passes.
	Secrets func() [][]byte
	// Self is this integrator's own id: envelopes whose origem.autoria is
	// {tipo: "integrador", id: Self} are its echo. Empty discards no echo.
	Self string
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Tolerance is the timestamp window on both sides; default 5 min.
	Tolerance time.Duration
	// MaxBody bounds the request body; default DefaultMaxBody.
	MaxBody int64
	// MaxHeld bounds the early arrivals held per aggregate; default
	// DefaultMaxHeld.
	MaxHeld int
	// Seen deduplicates by envelope id; default NewMemorySeen(DefaultSeen).
	Seen SeenStore
	// Sequences keeps the next sequence per aggregate; default in memory.
	Sequences SequenceStore
	// OnDiscard, if set, is told of every request answered without applying
	// it (with one of the Motivo constants). eventoID is the envelope id, or
	// the unsigned X-Geohub-Evento-Id header before the body is trusted.
	OnDiscard func(eventoID, motivo string)
}

// Receiver is the http.Handler for Geohub's webhooks. Create it with [New].
type Receiver struct {
	cfg Config
	h   Handler

	mu       sync.Mutex
	lanes    map[string]*lane    // aggregates in use or with held deliveries
	inflight map[string]struct{} // envelope ids being processed
}

// lane is the ordering state of one aggregate. mu serialises its requests;
// refs (guarded by Receiver.mu) counts who holds or waits for it.
type lane struct {
	mu   sync.Mutex
	refs int
	held map[int64]held
}

type held struct {
	d    Delivery
	skip string // why it is not applied in its turn ("": it is)
}

// New returns a Receiver that verifies, deduplicates, filters and orders
// deliveries and hands them to h. It panics if h or cfg.Secrets is nil.
func New(cfg Config, h Handler) *Receiver {
	if h == nil || cfg.Secrets == nil {
		panic("receiver: New needs a Handler and Config.Secrets")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Tolerance <= 0 {
		cfg.Tolerance = DefaultTolerance
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.MaxHeld <= 0 {
		cfg.MaxHeld = DefaultMaxHeld
	}
	if cfg.Seen == nil {
		cfg.Seen = NewMemorySeen(DefaultSeen)
	}
	if cfg.Sequences == nil {
		cfg.Sequences = &memorySequences{next: map[string]int64{}}
	}
	return &Receiver{cfg: cfg, h: h, lanes: map[string]*lane{}, inflight: map[string]struct{}{}}
}

// ServeHTTP answers 204 (applied, held, repeat or echo), 400, 401, 405, 413,
// 500 (Apply failed) or 503 (retry later).
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "use POST", http.StatusMethodNotAllowed)
		return
	}
	status := r.receive(req)
	if status == http.StatusNoContent {
		w.WriteHeader(status)
		return
	}
	http.Error(w, http.StatusText(status), status)
}

func (r *Receiver) discard(id, motivo string) {
	if r.cfg.OnDiscard != nil {
		r.cfg.OnDiscard(id, motivo)
	}
}

func (r *Receiver) receive(req *http.Request) int {
	body, err := io.ReadAll(io.LimitReader(req.Body, r.cfg.MaxBody+1))
	if err != nil {
		return http.StatusBadRequest
	}
	return r.Receive(req.Context(), req.Header, body)
}

// Receive is ServeHTTP's work for a delivery that did not come as an HTTP
// request, such as a session message ([geohub/receiver/session]): h holds
// its headers and body the raw envelope. It returns the status ServeHTTP
// would answer.
func (r *Receiver) Receive(ctx context.Context, h http.Header, body []byte) int {
	if int64(len(body)) > r.cfg.MaxBody {
		r.discard(h.Get(HeaderEventoID), MotivoCorpoGrande)
		return http.StatusRequestEntityTooLarge
	}

	// Obligation 1: over the RAW body, before any parse; verifying later
	// would prove the signature of something else. Without a secret yet
	// (deliveries start right after the integrator is registered), 503: a
	// 401 would dead-letter the delivery, a 503 is retried.
	if motivo := r.verify(h, body); motivo == MotivoSemSegredo {
		r.discard(h.Get(HeaderEventoID), motivo)
		return http.StatusServiceUnavailable
	} else if motivo != "" {
		r.discard(h.Get(HeaderEventoID), motivo)
		return http.StatusUnauthorized
	}

	// Obligation 2.
	env, ok := parseEnvelope(body)
	if !ok {
		r.discard(h.Get(HeaderEventoID), MotivoEnvelopeInvalido)
		return http.StatusBadRequest
	}
	d := Delivery{Envelope: env, Agregado: h.Get(HeaderAgregado), EntregaID: h.Get(HeaderEntregaID)}
	if n, err := strconv.ParseInt(h.Get(HeaderSequencia), 10, 64); err == nil && n > 0 {
		d.Sequencia = n
	}
	if n, err := strconv.Atoi(h.Get(HeaderTentativa)); err == nil && n > 0 {
		d.Tentativa = n
	}

	if d.Agregado == "" || d.Sequencia == 0 {
		return r.unordered(ctx, d)
	}
	return r.ordered(ctx, d)
}

// verify returns "" when the timestamp is inside the window and a signature
// header matches a configured secret, else the reason.
func (r *Receiver) verify(h http.Header, body []byte) string {
	raw := h.Get(HeaderTimestamp)
	ts, err := strconv.ParseInt(raw, 10, 64)
	// The signed string is the header as sent: only its canonical form is
	// accepted, so "+1761912251" or "01761912251" cannot pass as another.
	if err != nil || strconv.FormatInt(ts, 10) != raw {
		return MotivoForaDaJanela
	}
	if skew := r.cfg.Now().Sub(time.Unix(ts, 0)); skew > r.cfg.Tolerance || skew < -r.cfg.Tolerance {
		return MotivoForaDaJanela
	}
	var got [][]byte
	for _, name := range []string{HeaderAssinatura, HeaderAssinaturaAnterior} {
		for _, v := range h.Values(name) {
			if sum, ok := parseSignature(v); ok {
				got = append(got, sum)
			}
		}
	}
	secrets := r.cfg.Secrets()
	if !slices.ContainsFunc(secrets, func(s []byte) bool { return len(s) > 0 }) {
		return MotivoSemSegredo
	}
	for _, secret := range secrets {
		if len(secret) == 0 {
			continue
		}
		want := mac(secret, raw, body)
		for _, sum := range got {
			if hmac.Equal(sum, want) {
				return ""
			}
		}
	}
	return MotivoAssinaturaInvalida
}

func parseSignature(v string) ([]byte, bool) {
	hexSum, ok := strings.CutPrefix(v, "sha256=")
	if !ok || len(hexSum) != 2*sha256.Size {
		return nil, false
	}
	sum, err := hex.DecodeString(hexSum)
	return sum, err == nil
}

func mac(secret []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Sign returns the X-Geohub-Assinatura value for body sent at ts (epoch
// seconds): sha256=hex(HMAC-SHA256(secret, "<ts>.<body>")). Integrators use
// it to sign requests in their own tests.
func Sign(secret []byte, ts int64, body []byte) string {
	return "sha256=" + hex.EncodeToString(mac(secret, strconv.FormatInt(ts, 10), body))
}

// parseEnvelope reads a body that must be one JSON object with id, tipo and
// a non-null payload.
func parseEnvelope(body []byte) (Envelope, bool) {
	var env Envelope
	if err := json.Unmarshal(body, &env); err != nil {
		return Envelope{}, false
	}
	p := bytes.TrimSpace(env.Payload)
	if env.ID == "" || env.Tipo == "" || len(p) == 0 || bytes.Equal(p, []byte("null")) {
		return Envelope{}, false
	}
	return env, true
}

// skip is why env, verified and an envelope, is answered 2xx without
// being applied: the integrator's own echo, or a test or a verification,
// which carry no fact (guide 12.6); "" when it is applied.
func (r *Receiver) skip(env Envelope) string {
	switch {
	case env.Tipo == TipoTeste || env.Tipo == TipoVerificacao:
		return MotivoTeste
	case r.isEcho(env):
		return MotivoEcoProprio
	}
	return ""
}

// The types of a test delivery (the receiver tester, an evento-teste) and
// of an admin's "verificar": recognised by exact type, never by aggregate
// or origin (a producer may publish in any aggregate; only Geohub
// publishes integracao:*).
const (
	TipoTeste       = "integracao:teste"
	TipoVerificacao = "integracao:verificacao"
)

// isEcho reports whether env is a domain event this integrator caused
// (obligation 4). A command's outcome (integracao:*) is never an echo.
func (r *Receiver) isEcho(env Envelope) bool {
	a := env.Origem.Autoria
	if r.cfg.Self == "" || a == nil || a.Tipo != "integrador" || a.ID != r.cfg.Self {
		return false
	}
	return env.Origem.Plugin != PluginIntegracao && !strings.HasPrefix(env.Tipo, PluginIntegracao+":")
}

// claim marks id as in flight; false if it already is. A repeat in the
// same aggregate waits for the lane instead; claim catches the same id
// arriving at once under another aggregate header or none (the headers are
// not signed), whose 204 could otherwise hide a failing first attempt.
func (r *Receiver) claim(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, busy := r.inflight[id]; busy {
		return false
	}
	r.inflight[id] = struct{}{}
	return true
}

func (r *Receiver) unclaim(id string) {
	r.mu.Lock()
	delete(r.inflight, id)
	r.mu.Unlock()
}

// unordered handles a delivery without a usable aggregate or sequence: it
// is applied at once.
func (r *Receiver) unordered(ctx context.Context, d Delivery) int {
	if !r.claim(d.ID) {
		return http.StatusServiceUnavailable
	}
	defer r.unclaim(d.ID)
	switch {
	case r.cfg.Seen.Seen(d.ID):
		r.discard(d.ID, MotivoRepetido)
	case r.skip(d.Envelope) != "":
		r.cfg.Seen.Mark(d.ID)
		r.discard(d.ID, r.skip(d.Envelope))
	default:
		if err := r.h.Apply(ctx, d); err != nil {
			return http.StatusInternalServerError
		}
		r.cfg.Seen.Mark(d.ID)
	}
	return http.StatusNoContent
}

// ordered handles a delivery in its aggregate's sequence (obligation 5).
func (r *Receiver) ordered(ctx context.Context, d Delivery) int {
	l := r.acquire(d.Agregado)
	defer r.release(d.Agregado, l)
	if !r.claim(d.ID) {
		return http.StatusServiceUnavailable
	}
	defer r.unclaim(d.ID)
	// Whatever this delivery turns out to be, a head left held by a failed
	// Apply gets another try.
	defer r.drain(ctx, d.Agregado, l)

	next := r.cfg.Sequences.Next(d.Agregado)
	_, isHeld := l.held[d.Sequencia]
	if r.cfg.Seen.Seen(d.ID) || d.Sequencia < next || isHeld {
		r.discard(d.ID, MotivoRepetido)
		return http.StatusNoContent
	}
	skip := r.skip(d.Envelope)
	if d.Sequencia > next {
		if len(l.held) >= r.cfg.MaxHeld {
			r.discard(d.ID, MotivoEsperaCheia)
			return http.StatusServiceUnavailable
		}
		if l.held == nil {
			l.held = map[int64]held{}
		}
		// Not marked seen until applied: held only in memory, it is lost
		// with the process, and a durable Seen must not then refuse the
		// gap repair's resend as a repeat. A repeat while it is held is
		// caught by isHeld.
		l.held[d.Sequencia] = held{d: d, skip: skip}
		return http.StatusNoContent
	}
	if err := r.step(ctx, d, skip); err != nil {
		return http.StatusInternalServerError
	}
	return http.StatusNoContent
}

// step applies d, the aggregate's next, or skips it for the reason skip;
// then marks it seen and advances the sequence. The caller holds the lane.
func (r *Receiver) step(ctx context.Context, d Delivery, skip string) error {
	if skip != "" {
		r.discard(d.ID, skip)
	} else if err := r.h.Apply(ctx, d); err != nil {
		return err
	}
	r.cfg.Seen.Mark(d.ID)
	r.cfg.Sequences.SetNext(d.Agregado, d.Sequencia+1)
	return nil
}

// drain applies the held deliveries that are next, in order, stopping at a
// gap or at an Apply error. The caller holds the lane.
func (r *Receiver) drain(ctx context.Context, agregado string, l *lane) error {
	for len(l.held) > 0 {
		next := r.cfg.Sequences.Next(agregado)
		for seq := range l.held {
			if seq < next { // applied meanwhile by other means: a repeat
				delete(l.held, seq)
			}
		}
		h, ok := l.held[next]
		if !ok {
			return nil
		}
		if err := r.step(ctx, h.d, h.skip); err != nil {
			return err
		}
		delete(l.held, next)
	}
	return nil
}

// Drain retries the held deliveries whose turn has come but whose Apply
// failed when their gap filled. A CAD may call it on a timer; it returns
// the Apply errors.
func (r *Receiver) Drain(ctx context.Context) error {
	r.mu.Lock()
	keys := make([]string, 0, len(r.lanes))
	for k := range r.lanes {
		keys = append(keys, k)
	}
	r.mu.Unlock()
	var errs []error
	for _, k := range keys {
		l := r.acquire(k)
		errs = append(errs, r.drain(ctx, k, l))
		r.release(k, l)
	}
	return errors.Join(errs...)
}

// Held returns how many early arrivals are held for agregado.
func (r *Receiver) Held(agregado string) int {
	l := r.acquire(agregado)
	defer r.release(agregado, l)
	return len(l.held)
}

// acquire returns the aggregate's lane, locked.
func (r *Receiver) acquire(agregado string) *lane {
	r.mu.Lock()
	l := r.lanes[agregado]
	if l == nil {
		l = &lane{}
		r.lanes[agregado] = l
	}
	l.refs++
	r.mu.Unlock()
	l.mu.Lock()
	return l
}

// release unlocks the lane and forgets it when no one uses it and it holds
// nothing.
func (r *Receiver) release(agregado string, l *lane) {
	l.mu.Unlock()
	r.mu.Lock()
	l.refs--
	// With refs at 0 no one holds l.mu, and every writer of held released
	// through r.mu before us: reading it here is safe.
	if l.refs == 0 && len(l.held) == 0 {
		delete(r.lanes, agregado)
	}
	r.mu.Unlock()
}
