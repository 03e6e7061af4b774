package receiver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"geohub/receiver"
)

const self = "0199bb3e-0000-7000-8000-0000000000f1"

var (
	secret = []byte("whsec-teste")
	now    = time.Unix(1761912251, 0)
)

// recorder is the Handler under test: it records what was applied and
// checks that one aggregate never sees two Apply calls at once.
type recorder struct {
	mu      sync.Mutex
	applied []receiver.Delivery
	active  map[string]bool
	overlap bool
	fail    func(receiver.Delivery) error
}

func (rec *recorder) Apply(ctx context.Context, d receiver.Delivery) error {
	rec.mu.Lock()
	if rec.active[d.Agregado] && d.Agregado != "" {
		rec.overlap = true
	}
	rec.active[d.Agregado] = true
	fail := rec.fail
	rec.mu.Unlock()
	defer func() { rec.mu.Lock(); rec.active[d.Agregado] = false; rec.mu.Unlock() }()
	if fail != nil {
		if err := fail(d); err != nil {
			return err
		}
	}
	rec.mu.Lock()
	rec.applied = append(rec.applied, d)
	rec.mu.Unlock()
	return nil
}

func (rec *recorder) ids() []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var ids []string
	for _, d := range rec.applied {
		ids = append(ids, d.ID)
	}
	return ids
}

type fixture struct {
	t        *testing.T
	srv      *httptest.Server
	rec      *recorder
	r        *receiver.Receiver
	discards []string
	mu       sync.Mutex
}

// setup starts a real server with a Receiver; mod adjusts the Config.
func setup(t *testing.T, mod func(*receiver.Config)) *fixture {
	t.Helper()
	f := &fixture{t: t, rec: &recorder{active: map[string]bool{}}}
	cfg := receiver.Config{
		Secrets: func() [][]byte { return [][]byte{secret} },
		Self:    self,
		Now:     func() time.Time { return now },
		OnDiscard: func(id, motivo string) {
			f.mu.Lock()
			f.discards = append(f.discards, motivo)
			f.mu.Unlock()
		},
	}
	if mod != nil {
		mod(&cfg)
	}
	f.r = receiver.New(cfg, f.rec)
	f.srv = httptest.NewServer(f.r)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fixture) lastDiscard() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.discards) == 0 {
		return ""
	}
	return f.discards[len(f.discards)-1]
}

// post sends body with exactly the given headers and returns the status.
func (f *fixture) post(body []byte, headers map[string]string) int {
	f.t.Helper()
	req, err := http.NewRequestWithContext(f.t.Context(), http.MethodPost, f.srv.URL, bytes.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// deliver sends body signed like Geohub does, in agregado at seq ("" to
// leave a header out).
func (f *fixture) deliver(body []byte, agregado, seq string) int {
	f.t.Helper()
	return f.post(body, headersFor(body, agregado, seq))
}

func headersFor(body []byte, agregado, seq string) map[string]string {
	h := map[string]string{
		receiver.HeaderTimestamp:  strconv.FormatInt(now.Unix(), 10),
		receiver.HeaderAssinatura: receiver.Sign(secret, now.Unix(), body),
		receiver.HeaderEntregaID:  "entrega-" + seq,
		receiver.HeaderTentativa:  "1",
	}
	if agregado != "" {
		h[receiver.HeaderAgregado] = agregado
	}
	if seq != "" {
		h[receiver.HeaderSequencia] = seq
	}
	return h
}

// envelope builds a body; autoria nil means a usuario.
func envelope(id, tipo, plugin string, autoria *receiver.Autoria) []byte {
	if autoria == nil {
		autoria = &receiver.Autoria{ID: "usuario-1", Tipo: "usuario"}
	}
	b, err := json.Marshal(receiver.Envelope{
		ID: id, OcorridoEm: now.UTC(), Tipo: tipo, Payload: json.RawMessage(`{"id":"` + id + `"}`),
		Origem: receiver.Origem{Autoria: autoria, Plugin: plugin, Versao: "1.0.0"},
	})
	if err != nil {
		panic(err)
	}
	return b
}

func ev(id string) []byte { return envelope(id, "ocorrencia:despacho-mudou-status", "ocorrencia", nil) }

type vector struct {
	Nome       string `json:"nome"`
	Segredo    string `json:"segredo"`
	Timestamp  string `json:"timestamp"`
	Corpo      string `json:"corpo"`
	Assinatura string `json:"assinatura"`
}

func vectors(t *testing.T) []vector {
	t.Helper()
	raw, err := os.ReadFile("testdata/assinatura.json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ Casos []vector }
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Casos) == 0 {
		t.Fatal("no vectors")
	}
	return v.Casos
}

func TestSignReproducesTheVectors(t *testing.T) {
	for _, v := range vectors(t) {
		t.Run(v.Nome, func(t *testing.T) {
			ts, err := strconv.ParseInt(v.Timestamp, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			if got := receiver.Sign([]byte(v.Segredo), ts, []byte(v.Corpo)); got != v.Assinatura {
				t.Fatalf("Sign = %s, want %s", got, v.Assinatura)
			}
		})
	}
}

// Obligation 1: the signature over the raw body, before any parse, in a
// ±5 min window; 401 and the handler never called.
func TestObligation1SignatureIsVerifiedOverTheRawBodyFirst(t *testing.T) {
	for _, v := range vectors(t) {
		t.Run("vector "+v.Nome+" verifies", func(t *testing.T) {
			ts, _ := strconv.ParseInt(v.Timestamp, 10, 64)
			f := setup(t, func(c *receiver.Config) {
				c.Secrets = func() [][]byte { return [][]byte{[]byte(v.Segredo)} }
				c.Now = func() time.Time { return time.Unix(ts, 0) }
			})
			got := f.post([]byte(v.Corpo), map[string]string{
				receiver.HeaderTimestamp: v.Timestamp, receiver.HeaderAssinatura: v.Assinatura,
			})
			// Past the signature, only the full example is an envelope.
			want := http.StatusBadRequest
			if strings.Contains(v.Corpo, `"id"`) {
				want = http.StatusNoContent
			}
			if got != want {
				t.Fatalf("status %d, want %d", got, want)
			}
		})
	}

	v := vectors(t)[0]
	body := []byte(v.Corpo)
	ts, _ := strconv.ParseInt(v.Timestamp, 10, 64)
	at := time.Unix(ts, 0)
	sig := v.Assinatura
	other := receiver.Sign([]byte("outro-segredo"), ts, body)
	tsStr := v.Timestamp
	tests := []struct {
		name    string
		secrets []string
		now     time.Time
		body    []byte
		headers map[string]string
		want    int
		motivo  string
	}{
		{"the example verifies", nil, at, body, map[string]string{receiver.HeaderTimestamp: tsStr, receiver.HeaderAssinatura: sig}, 204, ""},
		{"a tampered body", nil, at, bytes.Replace(body, []byte("no_local"), []byte("liberado"), 1),
			map[string]string{receiver.HeaderTimestamp: tsStr, receiver.HeaderAssinatura: sig}, 401, receiver.MotivoAssinaturaInvalida},
		{"a body with one more byte", nil, at, append(slices.Clone(body), ' '),
			map[string]string{receiver.HeaderTimestamp: tsStr, receiver.HeaderAssinatura: sig}, 401, receiver.MotivoAssinaturaInvalida},
		{"a tampered timestamp inside the window", nil, at, body,
			map[string]string{receiver.HeaderTimestamp: strconv.FormatInt(ts+1, 10), receiver.HeaderAssinatura: sig}, 401, receiver.MotivoAssinaturaInvalida},
		{"a timestamp not in canonical form", nil, at, body,
			map[string]string{receiver.HeaderTimestamp: "+" + tsStr, receiver.HeaderAssinatura: sig}, 401, receiver.MotivoForaDaJanela},
		{"a tampered signature", nil, at, body,
			map[string]string{receiver.HeaderTimestamp: tsStr, receiver.HeaderAssinatura: sig[:len(sig)-1] + "0"}, 401, receiver.MotivoAssinaturaInvalida},
		{"another secret's signature", nil, at, body,
			map[string]string{receiver.HeaderTimestamp: tsStr, receiver.HeaderAssinatura: other}, 401, receiver.MotivoAssinaturaInvalida},
		{"no signature", nil, at, body, map[string]string{receiver.HeaderTimestamp: tsStr}, 401, receiver.MotivoAssinaturaInvalida},
		{"no sha256= prefix", nil, at, body,
			map[string]string{receiver.HeaderTimestamp: tsStr, receiver.HeaderAssinatura: strings.TrimPrefix(sig, "sha256=")}, 401, receiver.MotivoAssinaturaInvalida},
		{"no timestamp", nil, at, body, map[string]string{receiver.HeaderAssinatura: sig}, 401, receiver.MotivoForaDaJanela},
		{"exactly 5 min late", nil, at.Add(5 * time.Minute), body,
			map[string]string{receiver.HeaderTimestamp: tsStr, receiver.HeaderAssinatura: sig}, 204, ""},
		{"5 min and 1 s late", nil, at.Add(5*time.Minute + time.Second), body,
			map[string]string{receiver.HeaderTimestamp: tsStr, receiver.HeaderAssinatura: sig}, 401, receiver.MotivoForaDaJanela},
		{"5 min and 1 s early", nil, at.Add(-5*time.Minute - time.Second), body,
			map[string]string{receiver.HeaderTimestamp: tsStr, receiver.HeaderAssinatura: sig}, 401, receiver.MotivoForaDaJanela},
		{"rotation: only the previous secret configured, it signs Anterior", []string{"outro-segredo"}, at, body,
			map[string]string{receiver.HeaderTimestamp: tsStr, receiver.HeaderAssinatura: sig, receiver.HeaderAssinaturaAnterior: other}, 204, ""},
		{"rotation: both secrets configured, the old one signs", []string{"outro-segredo", v.Segredo}, at, body,
			map[string]string{receiver.HeaderTimestamp: tsStr, receiver.HeaderAssinatura: sig}, 204, ""},
		{"rotation: a bad Anterior does not spoil a good signature", nil, at, body,
			map[string]string{receiver.HeaderTimestamp: tsStr, receiver.HeaderAssinatura: sig, receiver.HeaderAssinaturaAnterior: "sha256=00"}, 204, ""},
		{"no secret configured yet: 503, retried, not a dead letter", []string{}, at, body,
			map[string]string{receiver.HeaderTimestamp: tsStr, receiver.HeaderAssinatura: sig}, 503, receiver.MotivoSemSegredo},
		{"only empty secrets: the same", []string{""}, at, body,
			map[string]string{receiver.HeaderTimestamp: tsStr, receiver.HeaderAssinatura: sig}, 503, receiver.MotivoSemSegredo},
		{"not JSON and badly signed: 401, not 400 (verified before parse)", nil, at, []byte("{not json"),
			map[string]string{receiver.HeaderTimestamp: tsStr, receiver.HeaderAssinatura: sig}, 401, receiver.MotivoAssinaturaInvalida},
		{"a body over the limit", nil, at, bytes.Repeat([]byte("x"), receiver.DefaultMaxBody+1),
			map[string]string{receiver.HeaderTimestamp: tsStr, receiver.HeaderAssinatura: sig}, 413, receiver.MotivoCorpoGrande},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := setup(t, func(c *receiver.Config) {
				secrets := []string{v.Segredo}
				if tt.secrets != nil {
					secrets = tt.secrets
				}
				c.Secrets = func() [][]byte {
					var out [][]byte
					for _, s := range secrets {
						out = append(out, []byte(s))
					}
					return out
				}
				c.Now = func() time.Time { return tt.now }
			})
			if got := f.post(tt.body, tt.headers); got != tt.want {
				t.Fatalf("status %d, want %d", got, tt.want)
			}
			if got := f.lastDiscard(); got != tt.motivo {
				t.Fatalf("discard %q, want %q", got, tt.motivo)
			}
			applied := len(f.rec.ids())
			if tt.want == 204 && applied != 1 || tt.want != 204 && applied != 0 {
				t.Fatalf("applied %d times", applied)
			}
		})
	}
}

// Obligation 2: a verified body that is not an envelope gets 400.
func TestObligation2ABodyThatIsNotAnEnvelopeIs400(t *testing.T) {
	tests := []struct {
		name string
		body string
	}{
		{"not JSON", `{"id":`},
		{"a JSON array", `[1,2]`},
		{"an empty object", `{}`},
		{"no id", `{"payload":{},"tipo":"ocorrencia:registrada"}`},
		{"no tipo", `{"id":"a","payload":{}}`},
		{"no payload", `{"id":"a","tipo":"ocorrencia:registrada"}`},
		{"a null payload", `{"id":"a","payload":null,"tipo":"ocorrencia:registrada"}`},
		{"an id that is not a string", `{"id":7,"payload":{},"tipo":"ocorrencia:registrada"}`},
		{"a bad ocorridoEm", `{"id":"a","ocorridoEm":"ontem","payload":{},"tipo":"ocorrencia:registrada"}`},
		{"trailing data", `{"id":"a","payload":{},"tipo":"ocorrencia:registrada"}{}`},
		{"an empty body", ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := setup(t, nil)
			if got := f.deliver([]byte(tt.body), "ocorrencia:o1", "1"); got != http.StatusBadRequest {
				t.Fatalf("status %d, want 400", got)
			}
			if f.lastDiscard() != receiver.MotivoEnvelopeInvalido || len(f.rec.ids()) != 0 {
				t.Fatalf("discards %v, applied %v", f.discards, f.rec.ids())
			}
		})
	}
	t.Run("the minimal envelope is accepted", func(t *testing.T) {
		f := setup(t, nil)
		if got := f.deliver([]byte(`{"id":"a","payload":{},"tipo":"ocorrencia:registrada"}`), "", ""); got != 204 {
			t.Fatalf("status %d, want 204", got)
		}
	})
}

// Obligation 3: a repeat answers 204 and is not applied again.
func TestObligation3RepeatsAreAppliedOnce(t *testing.T) {
	tests := []struct {
		name          string
		agregado, seq string
	}{
		{"in an aggregate", "ocorrencia:o1", "1"},
		{"without a sequence", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := setup(t, nil)
			body := ev("e1")
			for i := range 3 {
				h := headersFor(body, tt.agregado, tt.seq)
				h[receiver.HeaderEntregaID], h[receiver.HeaderTentativa] = fmt.Sprint("entrega-", i), fmt.Sprint(i+1)
				if got := f.post(body, h); got != 204 {
					t.Fatalf("attempt %d: status %d", i+1, got)
				}
			}
			if got := f.rec.ids(); !slices.Equal(got, []string{"e1"}) {
				t.Fatalf("applied %v", got)
			}
			if f.lastDiscard() != receiver.MotivoRepetido {
				t.Fatalf("discards %v", f.discards)
			}
		})
	}
	t.Run("a held delivery resent is not applied twice", func(t *testing.T) {
		f := setup(t, nil)
		f.deliver(ev("e2"), "ocorrencia:o1", "2")
		f.deliver(ev("e2"), "ocorrencia:o1", "2")
		f.deliver(ev("e1"), "ocorrencia:o1", "1")
		if got := f.rec.ids(); !slices.Equal(got, []string{"e1", "e2"}) {
			t.Fatalf("applied %v", got)
		}
	})
	t.Run("a sequence already consumed is a repeat even if the id was forgotten", func(t *testing.T) {
		f := setup(t, func(c *receiver.Config) { c.Seen = receiver.NewMemorySeen(1) })
		f.deliver(ev("e1"), "ocorrencia:o1", "1")
		f.deliver(ev("e2"), "ocorrencia:o1", "2") // e1 forgotten
		if got := f.deliver(ev("e1"), "ocorrencia:o1", "1"); got != 204 {
			t.Fatalf("status %d", got)
		}
		if got := f.rec.ids(); !slices.Equal(got, []string{"e1", "e2"}) {
			t.Fatalf("applied %v", got)
		}
	})
}

// Obligation 4: the own echo is discarded with 204, never integracao:*.
func TestObligation4OwnEchoIsDiscardedButNeverIntegracao(t *testing.T) {
	integrador := func(id string) *receiver.Autoria { return &receiver.Autoria{ID: id, Tipo: "integrador"} }
	tests := []struct {
		name    string
		body    []byte
		applied bool
	}{
		{"own domain event is the echo", envelope("e", "ocorrencia:despachada", "ocorrencia", integrador(self)), false},
		{"command outcome with own autoria is the answer", envelope("e", "integracao:comando-concluido", "integracao", integrador(self)), true},
		{"command refusal with own autoria is the answer", envelope("e", "integracao:comando-recusado", "integracao", integrador(self)), true},
		{"integracao:* from another plugin is still not an echo", envelope("e", "integracao:comando-concluido", "geohub", integrador(self)), true},
		{"another integrator's event", envelope("e", "ocorrencia:despachada", "ocorrencia", integrador("outro")), true},
		{"a usuario whose id equals Self", envelope("e", "ocorrencia:despachada", "ocorrencia", &receiver.Autoria{ID: self, Tipo: "usuario"}), true},
		{"a sistema event", envelope("e", "jornada:iniciada", "jornada", &receiver.Autoria{ID: "geohub", Tipo: "sistema"}), true},
	}
	for _, tt := range tests {
		for _, mode := range []struct{ agregado, seq string }{{"ocorrencia:o1", "1"}, {"", ""}} {
			t.Run(fmt.Sprintf("%s (sequence %q)", tt.name, mode.seq), func(t *testing.T) {
				f := setup(t, nil)
				if got := f.deliver(tt.body, mode.agregado, mode.seq); got != 204 {
					t.Fatalf("status %d, want 204", got)
				}
				if got := len(f.rec.ids()) == 1; got != tt.applied {
					t.Fatalf("applied %v, want %v", got, tt.applied)
				}
				if !tt.applied && f.lastDiscard() != receiver.MotivoEcoProprio {
					t.Fatalf("discards %v", f.discards)
				}
			})
		}
	}
	t.Run("the echo consumes its sequence, in its turn", func(t *testing.T) {
		f := setup(t, nil)
		f.deliver(ev("e3"), "ocorrencia:o1", "3")
		f.deliver(envelope("e2", "ocorrencia:despachada", "ocorrencia", integrador(self)), "ocorrencia:o1", "2")
		f.deliver(envelope("e1", "ocorrencia:registrada", "ocorrencia", integrador(self)), "ocorrencia:o1", "1")
		f.deliver(ev("e4"), "ocorrencia:o1", "4")
		if got := f.rec.ids(); !slices.Equal(got, []string{"e3", "e4"}) {
			t.Fatalf("applied %v", got)
		}
		if n := f.r.Held("ocorrencia:o1"); n != 0 {
			t.Fatalf("%d still held", n)
		}
	})
}

// Guide 12.6: a test delivery and an admin's verification carry no fact.
// They are answered 2xx and not applied, recognised by exact type after
// the signature and the envelope, and they take their turn in their
// aggregate's sequence as the echo does; a type that only looks like one
// is applied.
func TestTestAndVerificationDeliveriesAreAnsweredButNotApplied(t *testing.T) {
	for _, tipo := range []string{receiver.TipoTeste, receiver.TipoVerificacao} {
		for _, mode := range []struct{ agregado, seq string }{{"teste:x", "1"}, {"", ""}} {
			t.Run(fmt.Sprintf("%s (sequence %q)", tipo, mode.seq), func(t *testing.T) {
				f := setup(t, nil)
				if got := f.deliver(envelope("t", tipo, "geohub", nil), mode.agregado, mode.seq); got != 204 {
					t.Fatalf("status %d, want 204", got)
				}
				if got := f.rec.ids(); len(got) != 0 || f.lastDiscard() != receiver.MotivoTeste {
					t.Fatalf("applied %v, discards %v", got, f.discards)
				}
			})
		}
	}
	t.Run("it takes its turn in the sequence", func(t *testing.T) {
		f := setup(t, nil)
		f.deliver(ev("e2"), "ocorrencia:o1", "2")
		f.deliver(envelope("t1", receiver.TipoTeste, "geohub", nil), "ocorrencia:o1", "1")
		if got := f.rec.ids(); !slices.Equal(got, []string{"e2"}) {
			t.Fatalf("applied %v", got)
		}
	})
	t.Run("only the exact type", func(t *testing.T) {
		f := setup(t, nil)
		f.deliver(envelope("x", "integracao:teste-de-carga", "geohub", nil), "", "")
		if got := f.rec.ids(); !slices.Equal(got, []string{"x"}) {
			t.Fatalf("applied %v", got)
		}
	})
}

// Obligation 5: in sequence order within each aggregate.
func TestObligation5AppliesInSequenceOrderPerAggregate(t *testing.T) {
	type arrival struct{ id, agregado, seq string }
	a := func(id, seq string) arrival { return arrival{id, "ocorrencia:o1", seq} }
	b := func(id, seq string) arrival { return arrival{id, "ocorrencia:o2", seq} }
	tests := []struct {
		name     string
		arrivals []arrival
		want     []string // applied, in order, after all arrivals
		held     int      // left held in ocorrencia:o1
	}{
		{"in order", []arrival{a("1", "1"), a("2", "2"), a("3", "3")}, []string{"1", "2", "3"}, 0},
		{"reversed", []arrival{a("3", "3"), a("2", "2"), a("1", "1")}, []string{"1", "2", "3"}, 0},
		{"a gap in the middle", []arrival{a("1", "1"), a("3", "3"), a("4", "4"), a("2", "2")}, []string{"1", "2", "3", "4"}, 0},
		{"a gap never filled holds what is behind it", []arrival{a("1", "1"), a("3", "3"), a("4", "4")}, []string{"1"}, 2},
		{"the first sequence is 1", []arrival{a("2", "2")}, nil, 1},
		{"aggregates are independent", []arrival{b("b2", "2"), a("a1", "1"), b("b1", "1"), a("a2", "2")}, []string{"a1", "b1", "b2", "a2"}, 0},
		{"a missing sequence is applied at once, even with a gap pending", []arrival{a("2", "2"), a("x", ""), a("1", "1")}, []string{"x", "1", "2"}, 0},
		{"an unreadable sequence is applied at once", []arrival{a("2", "2"), a("x", "dois"), a("y", "0"), a("z", "-3")}, []string{"x", "y", "z"}, 1},
		{"a missing aggregate is applied at once", []arrival{{"x", "", "5"}}, []string{"x"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := setup(t, nil)
			for _, ar := range tt.arrivals {
				if got := f.deliver(ev(ar.id), ar.agregado, ar.seq); got != 204 {
					t.Fatalf("arrival %v: status %d", ar, got)
				}
			}
			if got := f.rec.ids(); !slices.Equal(got, tt.want) {
				t.Fatalf("applied %v, want %v", got, tt.want)
			}
			if got := f.r.Held("ocorrencia:o1"); got != tt.held {
				t.Fatalf("held %d, want %d", got, tt.held)
			}
		})
	}
	t.Run("the delivery headers reach Apply", func(t *testing.T) {
		f := setup(t, nil)
		f.deliver(ev("e1"), "ocorrencia:o1", "1")
		d := f.rec.applied[0]
		if d.Agregado != "ocorrencia:o1" || d.Sequencia != 1 || d.EntregaID != "entrega-1" || d.Tentativa != 1 ||
			d.Tipo != "ocorrencia:despacho-mudou-status" || !d.OcorridoEm.Equal(now) || d.Origem.Versao != "1.0.0" {
			t.Fatalf("delivery %+v", d)
		}
	})
	t.Run("beyond MaxHeld the answer is 503 and the delivery is not kept", func(t *testing.T) {
		f := setup(t, func(c *receiver.Config) { c.MaxHeld = 2 })
		for _, seq := range []string{"2", "3"} {
			if got := f.deliver(ev(seq), "ocorrencia:o1", seq); got != 204 {
				t.Fatalf("seq %s: status %d", seq, got)
			}
		}
		if got := f.deliver(ev("4"), "ocorrencia:o1", "4"); got != http.StatusServiceUnavailable {
			t.Fatalf("status %d, want 503", got)
		}
		f.deliver(ev("1"), "ocorrencia:o1", "1")
		f.deliver(ev("4"), "ocorrencia:o1", "4") // Geohub's retry
		if got := f.rec.ids(); !slices.Equal(got, []string{"1", "2", "3", "4"}) {
			t.Fatalf("applied %v", got)
		}
	})
}

// An Apply error answers 500: not seen, the sequence does not advance, and
// Geohub's retry applies it.
func TestApplyErrorAnswers500AndTheRetryApplies(t *testing.T) {
	boom := errors.New("banco fora")
	t.Run("the delivery itself", func(t *testing.T) {
		for _, mode := range []struct{ agregado, seq string }{{"ocorrencia:o1", "1"}, {"", ""}} {
			f := setup(t, nil)
			failing := true
			f.rec.fail = func(d receiver.Delivery) error {
				if d.ID == "e1" && failing {
					return boom
				}
				return nil
			}
			if got := f.deliver(ev("e1"), mode.agregado, mode.seq); got != http.StatusInternalServerError {
				t.Fatalf("status %d, want 500", got)
			}
			if mode.seq != "" {
				f.deliver(ev("e2"), "ocorrencia:o1", "2") // held behind the failure
				if got := f.rec.ids(); len(got) != 0 {
					t.Fatalf("applied %v past a failed delivery", got)
				}
			}
			f.rec.mu.Lock()
			failing = false
			f.rec.mu.Unlock()
			if got := f.deliver(ev("e1"), mode.agregado, mode.seq); got != 204 {
				t.Fatalf("retry: status %d", got)
			}
			want := []string{"e1"}
			if mode.seq != "" {
				want = append(want, "e2")
			}
			if got := f.rec.ids(); !slices.Equal(got, want) {
				t.Fatalf("applied %v, want %v", got, want)
			}
		}
	})
	t.Run("a held delivery stays at the head until Drain or the next arrival", func(t *testing.T) {
		for _, retry := range []string{"Drain", "a repeat", "a later arrival"} {
			t.Run(retry, func(t *testing.T) {
				f := setup(t, nil)
				failing := true
				f.rec.fail = func(d receiver.Delivery) error {
					if d.ID == "e2" && failing {
						return boom
					}
					return nil
				}
				f.deliver(ev("e2"), "ocorrencia:o1", "2")
				f.deliver(ev("e3"), "ocorrencia:o1", "3")
				if got := f.deliver(ev("e1"), "ocorrencia:o1", "1"); got != 204 {
					t.Fatalf("status %d: the gap filler itself was applied", got)
				}
				if got := f.rec.ids(); !slices.Equal(got, []string{"e1"}) {
					t.Fatalf("applied %v", got)
				}
				if err := f.r.Drain(t.Context()); !errors.Is(err, boom) {
					t.Fatalf("Drain = %v, want %v", err, boom)
				}
				f.rec.mu.Lock()
				failing = false
				f.rec.mu.Unlock()
				switch retry {
				case "Drain":
					if err := f.r.Drain(t.Context()); err != nil {
						t.Fatal(err)
					}
				case "a repeat":
					f.deliver(ev("e1"), "ocorrencia:o1", "1")
				case "a later arrival":
					f.deliver(ev("e5"), "ocorrencia:o1", "5")
				}
				if got := f.rec.ids(); !slices.Equal(got, []string{"e1", "e2", "e3"}) {
					t.Fatalf("applied %v", got)
				}
			})
		}
	})
}

// Concurrent, shuffled, repeated deliveries: each applied exactly once, in
// order, one Apply at a time per aggregate.
func TestConcurrentShuffledDeliveriesApplyOnceInOrder(t *testing.T) {
	const n, aggregates = 200, 3
	f := setup(t, nil)
	type job struct {
		agregado string
		seq      int
	}
	var jobs []job
	for g := range aggregates {
		for s := 1; s <= n; s++ {
			j := job{fmt.Sprintf("ocorrencia:o%d", g), s}
			jobs = append(jobs, j, j) // every delivery twice
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(jobs), func(i, k int) { jobs[i], jobs[k] = jobs[k], jobs[i] })

	var wg sync.WaitGroup
	statuses := make(chan int, len(jobs))
	sem := make(chan struct{}, 16) // Geohub bounds the requests in flight
	for _, j := range jobs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			id := fmt.Sprintf("%s/%d", j.agregado, j.seq)
			statuses <- f.deliver(ev(id), j.agregado, strconv.Itoa(j.seq))
		})
	}
	wg.Wait()
	close(statuses)
	for s := range statuses {
		// 503 only for the same id in flight twice, which needs two lanes;
		// here every repeat shares its lane.
		if s != 204 {
			t.Fatalf("status %d", s)
		}
	}
	perAggregate := map[string][]string{}
	for _, d := range f.rec.applied {
		perAggregate[d.Agregado] = append(perAggregate[d.Agregado], d.ID)
	}
	for g := range aggregates {
		agg := fmt.Sprintf("ocorrencia:o%d", g)
		var want []string
		for s := 1; s <= n; s++ {
			want = append(want, fmt.Sprintf("%s/%d", agg, s))
		}
		if got := perAggregate[agg]; !slices.Equal(got, want) {
			t.Fatalf("%s applied %d: %v", agg, len(got), got)
		}
		if h := f.r.Held(agg); h != 0 {
			t.Fatalf("%s: %d held", agg, h)
		}
	}
	if f.rec.overlap {
		t.Fatal("two Apply calls at once for one aggregate")
	}
}

// The same envelope id in flight twice at once answers 503 to the second,
// so a failure of the first is not hidden behind a 204.
func TestTheSameIDInFlightTwiceAnswers503(t *testing.T) {
	f := setup(t, nil)
	entered, release := make(chan struct{}), make(chan struct{})
	f.rec.fail = func(d receiver.Delivery) error {
		close(entered)
		<-release
		return nil
	}
	first := make(chan int)
	go func() { first <- f.deliver(ev("e1"), "ocorrencia:o1", "1") }()
	<-entered
	if got := f.deliver(ev("e1"), "", ""); got != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", got)
	}
	close(release)
	if got := <-first; got != 204 {
		t.Fatalf("first: status %d", got)
	}
	if got := f.rec.ids(); !slices.Equal(got, []string{"e1"}) {
		t.Fatalf("applied %v", got)
	}
}

func TestOnlyPOST(t *testing.T) {
	f := setup(t, nil)
	resp, err := f.srv.Client().Get(f.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

func TestMemorySeenForgetsTheOldest(t *testing.T) {
	s := receiver.NewMemorySeen(2)
	s.Mark("a")
	s.Mark("b")
	s.Mark("b")
	s.Mark("c")
	if s.Seen("a") || !s.Seen("b") || !s.Seen("c") {
		t.Fatalf("a=%v b=%v c=%v", s.Seen("a"), s.Seen("b"), s.Seen("c"))
	}
}

// durableSequences is a SequenceStore that outlives a Receiver, as a CAD's
// database does.
type durableSequences struct {
	mu   sync.Mutex
	next map[string]int64
}

func (d *durableSequences) Next(agregado string) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if n, ok := d.next[agregado]; ok {
		return n
	}
	return 1
}

func (d *durableSequences) SetNext(agregado string, next int64) {
	d.mu.Lock()
	d.next[agregado] = next
	d.mu.Unlock()
}

// An early arrival is held in memory only, so it is not marked seen until
// applied: after a crash with it held, the gap repair's resend of it must
// be applied, not refused as a repeat by a durable Seen.
func TestAHeldDeliveryLostInACrashIsAppliedWhenResent(t *testing.T) {
	seen, seqs := receiver.NewMemorySeen(100), &durableSequences{next: map[string]int64{}}
	durable := func(c *receiver.Config) { c.Seen, c.Sequences = seen, seqs }
	before := setup(t, durable)
	before.deliver(ev("e2"), "ocorrencia:o1", "2") // held: 1 is still being retried
	if seen.Seen("e2") {
		t.Fatal("a held delivery was marked seen before it was applied")
	}
	before.srv.Close() // the CAD crashes with e2 held

	after := setup(t, durable)
	after.deliver(ev("e1"), "ocorrencia:o1", "1")
	after.deliver(ev("e2"), "ocorrencia:o1", "2") // the gap repair's resend
	if got := after.rec.ids(); !slices.Equal(got, []string{"e1", "e2"}) {
		t.Fatalf("applied after the restart %v, discards %v", got, after.discards)
	}
}
