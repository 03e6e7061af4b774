package app

import (
	"cmp"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"geohub/app/callback"
)

// The receiver tester (SPEC 8b): crafted deliveries, real requests with the
// real headers and signatures, sent straight to a receiver (never through
// the outbox, never recorded as deliveries), and per obligation what holds
// and what to fix. `geohub receptor testar`, POST /api/integradores/{id}/testar
// and the console and portal buttons all run Tester.Run.

// The outcome of one check.
const (
	TesteOK     = "ok"
	TesteFalhou = "falhou"
	TesteAviso  = "aviso"
)

// TestCheck is one check of the receiver tester: its stable id, outcome,
// the status and time it saw and, unless ok, what to fix.
type TestCheck struct {
	ID        string `json:"id"`
	Resultado string `json:"resultado"`
	Status    int    `json:"status"`
	DuracaoMS int64  `json:"duracao_ms"`
	Detalhe   string `json:"detalhe"`
}

// TestReport is the tester's answer: aprovado when no check failed.
type TestReport struct {
	Aprovado     bool        `json:"aprovado"`
	Verificacoes []TestCheck `json:"verificacoes"`
}

// TestTarget is the receiver under test.
type TestTarget struct {
	URL     string
	Secret  []byte
	Allowed []string // the allowlist; empty allows the URL's own host
}

// TestEventType is the type of the tester's deliveries and of the test
// event an integrator sends itself: receivers accept and discard it.
const TestEventType = "integracao:teste"

// Tester sends the crafted deliveries.
type Tester struct {
	Client  *http.Client // NewCallbackClient's, with the same policy
	Policy  callback.Policy
	Now     func() time.Time
	Version string
	Timeout time.Duration // the dispatcher's per-attempt limit
	// Budget bounds a whole run, so its answer comes within the edge's
	// write deadline even from a receiver that answers each request late;
	// default TesterBudget.
	Budget time.Duration
}

// TesterBudget is a run's default bound: the checks left when it is spent,
// or after a request that timed out, are reported as not run.
const TesterBudget = 20 * time.Second

// NewTester returns a tester that posts as the dispatcher does: the same
// policy checked before and at dial time, the same timeout.
func NewTester(policy callback.Policy, timeout time.Duration, now func() time.Time, version string) *Tester {
	if timeout == 0 {
		timeout = DeliveryTimeout
	}
	if now == nil {
		now = time.Now
	}
	return &Tester{Client: NewCallbackClient(policy, timeout, 2), Policy: policy, Now: now, Version: version, Timeout: timeout}
}

// slowAnswer is where responde-a-tempo starts warning: an answer past it
// holds one of the integrator's concurrent deliveries that long.
const slowAnswer = time.Second

// Run runs every check against target, one request at a time.
func (t *Tester) Run(ctx context.Context, target TestTarget) TestReport {
	allowed := target.Allowed
	if u, err := url.Parse(target.URL); len(allowed) == 0 && err == nil {
		allowed = []string{u.Hostname()}
	}
	budget := t.Budget
	if budget == 0 {
		budget = TesterBudget
	}
	run := &testRun{t: t, ctx: ctx, url: target.URL, secret: target.Secret, other: []byte(NewSecret()),
		until: time.Now().Add(budget)}
	if why := t.Policy.Refusal(target.URL, allowed); why != "" {
		// Nothing is sent where the dispatcher would not send.
		run.add(TestCheck{ID: "https", Resultado: TesteFalhou,
			Detalhe: "o Geohub não envia entregas a este endereço: " + why})
		return run.report()
	}
	run.valid()
	run.refusals()
	run.tolerance()
	run.rotation()
	run.standardWebhooks()
	run.timing()
	run.https()
	return run.report()
}

// testRun is one run of the tester: its requests and what they saw.
type testRun struct {
	t      *Tester
	ctx    context.Context
	url    string
	secret []byte
	other  []byte // a secret the receiver does not hold
	checks []TestCheck
	// slowest answer seen, for responde-a-tempo; timedOut when one never came
	slowest  time.Duration
	slowID   string
	timedOut string
	tls      *SendResult
	until    time.Time // the run's budget ends
	notRun   bool      // some check's request was left unsent
	// answered: some request got an HTTP answer; unreachable: the check
	// whose request, the first, got none.
	answered    bool
	unreachable string
}

// errNotRun is a check's request left unsent: the budget was spent, or the
// receiver let one request time out already.
var errNotRun = errors.New("não executada")

func (r *testRun) add(c TestCheck) { r.checks = append(r.checks, c) }

// TestChecks are the tester's check ids, in the order of SPEC 8b and of
// every report.
var TestChecks = []string{"aceita-valido", "recusa-assinatura", "recusa-timestamp", "recusa-corpo-invalido",
	"aceita-repetido", "aceita-fora-de-ordem", "aceita-sem-sequencia", "aceita-tipo-desconhecido",
	"aceita-corpo-grande", "responde-a-tempo", "aceita-rotacao", "standard-webhooks", "https"}

func (r *testRun) report() TestReport {
	slices.SortStableFunc(r.checks, func(a, b TestCheck) int {
		return slices.Index(TestChecks, a.ID) - slices.Index(TestChecks, b.ID)
	})
	// A run that could not send every check approves nothing.
	rep := TestReport{Aprovado: !r.notRun, Verificacoes: r.checks}
	for _, c := range r.checks {
		if c.Resultado == TesteFalhou {
			rep.Aprovado = false
		}
	}
	return rep
}

// delivery is one crafted delivery: a fresh event of the test type on a
// fresh test aggregate at sequence 1, unless the caller changes it.
type delivery struct {
	req     Request
	ts      time.Time
	sign    []byte
	other   []byte
	headers func(http.Header)
}

func (r *testRun) newDelivery(payload string) delivery {
	eventID := uuid.Must(uuid.NewV7()).String()
	now := r.t.Now().UTC()
	body, err := buildEnvelope(Event{EventID: eventID, Tipo: TestEventType, VersaoSchema: DefaultVersao,
		Origem: ServerName, Autoria: &Autoria{ID: ServerName, Tipo: ActorSistema}, Timestamp: now}, []byte(payload))
	if err != nil {
		panic(err) // the tester's own payloads are valid JSON
	}
	return delivery{req: Request{EventID: eventID, Agregado: "teste:" + uuid.Must(uuid.NewV7()).String(), Sequencia: 1,
		Corpo: body, Tentativa: 1}, ts: now, sign: r.secret}
}

const testPayload = `{"mensagem":"entrega do testador de receptores do Geohub: aceite e descarte"}`

// send posts d and notes its time for responde-a-tempo.
func (r *testRun) send(check string, d delivery) (SendResult, time.Duration) {
	if r.timedOut != "" || r.unreachable != "" || !time.Now().Before(r.until) {
		r.notRun = true
		return SendResult{Err: errNotRun}, 0
	}
	d.req.EntregaID = uuid.Must(uuid.NewV7()).String()
	hr, err := newDeliveryRequest(r.ctx, r.url, r.t.Version, Timestamp(d.ts), d.req, d.sign, d.other)
	if err != nil {
		return SendResult{Err: err}, 0
	}
	if d.headers != nil {
		d.headers(hr.Header)
	}
	start := time.Now()
	res := roundTrip(r.t.Client, hr, r.t.Now)
	took := time.Since(start)
	if res.Transport && r.timedOut == "" && took >= r.t.Timeout {
		r.timedOut = check
	}
	if res.Transport && !r.answered && r.unreachable == "" {
		// Nothing answered yet: every other check would say the same.
		r.unreachable = check
	}
	if res.Err == nil {
		r.answered = true
	}
	if res.Err == nil && took > r.slowest {
		r.slowest, r.slowID = took, check
	}
	if res.TLS != nil && r.tls == nil {
		r.tls = &res
	}
	return res, took
}

// expect runs one request and judges its status: ok when want says so.
func (r *testRun) expect(id string, d delivery, want func(status int) (result, why string)) {
	res, took := r.send(id, d)
	c := TestCheck{ID: id, Status: res.Status, DuracaoMS: took.Milliseconds()}
	if res.Err != nil {
		c.Resultado, c.Detalhe = r.noAnswer(res.Err)
	} else {
		c.Resultado, c.Detalhe = want(res.Status)
		if c.Resultado != TesteOK && res.Snippet != "" {
			c.Detalhe += fmt.Sprintf(" (o receptor respondeu: %q)", clip(strings.TrimSpace(res.Snippet), 200))
		}
	}
	r.add(c)
}

// noAnswer is the verdict of a check whose request got no answer, or was
// not sent.
func (r *testRun) noAnswer(err error) (string, string) {
	if errors.Is(err, errNotRun) {
		switch {
		case r.unreachable != "":
			return TesteAviso, "não executada: o receptor não respondeu à primeira entrega (" + r.unreachable + "); suba o receptor e teste de novo"
		case r.timedOut != "":
			return TesteAviso, "não executada: o receptor não respondeu a tempo na verificação " + r.timedOut + "; corrija responde-a-tempo e teste de novo"
		}
		return TesteAviso, "não executada: o tempo do teste acabou; corrija responde-a-tempo e teste de novo"
	}
	return TesteFalhou, "sem resposta do receptor: " + withoutDetail(err.Error())
}

// withoutDetail is an attempt's error without Go's own text, which
// transportError keeps after the pt-BR reason as " (detalhe: …)".
func withoutDetail(msg string) string {
	if i := strings.Index(msg, " (detalhe: "); i >= 0 {
		return msg[:i]
	}
	return msg
}

// brasilia is the municipality's clock, for times written in messages
// people read; a fixed -03:00 (no daylight saving since 2019) when the
// system has no tz database.
var brasilia = func() *time.Location {
	if loc, err := time.LoadLocation("America/Sao_Paulo"); err == nil {
		return loc
	}
	return time.FixedZone("-03", -3*60*60)
}()

// brasiliaTime is a time for people: "30/11/2026 14:00 (horário de Brasília)".
func brasiliaTime(t time.Time) string {
	return t.In(brasilia).Format("02/01/2006 15:04") + " (horário de Brasília)"
}

// minutesText is a wait for people, in whole minutes rounded up past the
// current one: "1 minuto", "15 minutos".
func minutesText(wait time.Duration) string {
	if n := int(wait.Minutes()) + 1; n != 1 {
		return fmt.Sprintf("%d minutos", n)
	}
	return "1 minuto"
}

// seconds is a duration for people: "350 ms" under a second, else seconds
// with at most one decimal and a decimal comma ("5 s", "3,2 s").
func seconds(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%d ms", d.Milliseconds())
	}
	s := fmt.Sprintf("%.1f", d.Seconds())
	s = strings.TrimSuffix(s, ".0")
	return strings.Replace(s, ".", ",", 1) + " s"
}

// accepts is the verdict of a delivery the receiver must accept.
func accepts(fix string) func(int) (string, string) {
	return func(status int) (string, string) {
		switch {
		case accepted(status):
			return TesteOK, ""
		case status == http.StatusRequestEntityTooLarge:
			return TesteFalhou, "HTTP 413: o receptor limita o corpo abaixo do que o Geohub envia (envelopes de até pouco mais de 1 MiB); " + fix
		case status == http.StatusBadRequest || status == http.StatusUnauthorized:
			return TesteFalhou, fmt.Sprintf("HTTP %d, esperado 2xx: com %d o Geohub não tenta de novo e a entrega termina na situação Falhou; %s", status, status, fix)
		default:
			return TesteFalhou, fmt.Sprintf("HTTP %d, esperado 2xx: o Geohub tentaria de novo até esgotar as tentativas (e a entrega terminar na situação Falhou), segurando os eventos seguintes do agregado; %s", status, fix)
		}
	}
}

// refuses is the verdict of a delivery the receiver must refuse with want.
func refuses(want int, fix string) func(int) (string, string) {
	return func(status int) (string, string) {
		switch {
		case status == want:
			return TesteOK, ""
		case accepted(status):
			return TesteFalhou, fmt.Sprintf("HTTP %d: o receptor aceitou o que devia recusar com %d; %s", status, want, fix)
		case status >= 400 && status < 500:
			return TesteAviso, fmt.Sprintf("HTTP %d: recusou, mas o esperado é %d; %s", status, want, fix)
		default:
			return TesteFalhou, fmt.Sprintf("HTTP %d, esperado %d: um erro do receptor faz o Geohub tentar de novo o que nunca vai passar; %s", status, want, fix)
		}
	}
}

func (r *testRun) valid() {
	d := r.newDelivery(testPayload)
	r.expect("aceita-valido", d, accepts("responda 2xx (204) a toda entrega com assinatura válida, também às de tipo integracao:teste, que o receptor descarta"))
	// The same delivery again: a new attempt of it, as after a lost answer.
	d.req.Tentativa = 2
	r.expect("aceita-repetido", d, accepts("deduplique pelo id do envelope (X-Geohub-Evento-Id) e responda 204 também à repetição"))

	// Sequence 3 before 2 on one aggregate: the receiver holds 3 and
	// applies it once 2 arrives; both get 2xx.
	first := r.newDelivery(testPayload)
	res, took := r.send("aceita-fora-de-ordem", first)
	c := TestCheck{ID: "aceita-fora-de-ordem", Status: res.Status, DuracaoMS: took.Milliseconds(), Resultado: TesteOK}
	for _, seq := range []int64{3, 2} {
		if res.Err != nil || !accepted(res.Status) {
			break
		}
		d := r.newDelivery(testPayload)
		d.req.Agregado, d.req.Sequencia = first.req.Agregado, seq
		res, took = r.send("aceita-fora-de-ordem", d)
		c.Status, c.DuracaoMS = res.Status, c.DuracaoMS+took.Milliseconds()
	}
	switch {
	case res.Err != nil:
		c.Resultado, c.Detalhe = r.noAnswer(res.Err)
	case !accepted(res.Status):
		c.Resultado, c.Detalhe = TesteFalhou, fmt.Sprintf("HTTP %d para as sequências 1, 3 e 2 de um agregado: guarde a que chega adiantada e responda 204; aplique-a quando a lacuna fechar", res.Status)
	}
	r.add(c)

	d = r.newDelivery(testPayload)
	d.headers = func(h http.Header) { h.Del("X-Geohub-Sequencia") }
	r.expect("aceita-sem-sequencia", d, accepts("sem X-Geohub-Sequencia legível, aplique o evento na hora e responda 2xx"))

	d = r.newDelivery(`{"campoNovo":{"aninhado":[1,2,3]},"mensagem":"um tipo e campos que o receptor não conhece"}`)
	var env map[string]any
	json.Unmarshal(d.req.Corpo, &env)
	env["tipo"], env["campoNovoDoEnvelope"] = "integracao:tipo-desconhecido-do-testador", true
	d.req.Corpo, _ = json.Marshal(env)
	r.expect("aceita-tipo-desconhecido", d, accepts("aceite (2xx) e ignore tipos e campos que não conhece: o catálogo cresce sem aviso prévio"))

	// The largest envelope Geohub sends: a payload at the publish limit.
	pad := MaxPayloadBytes - len(`{"preenchimento":""}`)
	d = r.newDelivery(`{"preenchimento":"` + strings.Repeat("x", pad) + `"}`)
	r.expect("aceita-corpo-grande", d, accepts("aceite corpos de até 2 MiB; no Express, express.raw({type: 'application/json', limit: '2mb'})"))
}

func (r *testRun) refusals() {
	d := r.newDelivery(testPayload)
	d.sign = r.other
	r.expect("recusa-assinatura", d, refuses(http.StatusUnauthorized,
		"verifique X-Geohub-Assinatura (HMAC-SHA256 com o segredo inteiro, whsec_ incluído, sobre \"<timestamp>.<corpo cru>\") antes de ler o corpo, e responda 401 quando não confere"))

	d = r.newDelivery(`{}`)
	d.req.Corpo = []byte(`{"isto":"não é um envelope"}`)
	r.expect("recusa-corpo-invalido", d, refuses(http.StatusBadRequest,
		"um corpo assinado que não é um envelope (sem id, tipo ou origem) recebe 400"))
}

func (r *testRun) tolerance() {
	d := r.newDelivery(testPayload)
	d.ts = d.ts.Add(-6 * time.Minute)
	r.expect("recusa-timestamp", d, refuses(http.StatusUnauthorized,
		"recuse com 401 uma entrega cujo X-Geohub-Timestamp esteja a mais de 5 minutos do relógio do receptor (proteção contra reenvio)"))
}

func (r *testRun) rotation() {
	// The receiver's secret signs X-Geohub-Assinatura, another the
	// previous one; then the reverse, as a receiver that still holds the
	// secret being retired gets them.
	d := r.newDelivery(testPayload)
	d.other = r.other
	first, took := r.send("aceita-rotacao", d)
	d = r.newDelivery(testPayload)
	d.sign, d.other = r.other, r.secret
	second, took2 := r.send("aceita-rotacao", d)
	c := TestCheck{ID: "aceita-rotacao", Status: second.Status, DuracaoMS: (took + took2).Milliseconds(), Resultado: TesteOK}
	switch {
	case first.Err != nil || second.Err != nil:
		c.Resultado, c.Detalhe = r.noAnswer(cmp.Or(first.Err, second.Err))
	case !accepted(first.Status):
		c.Status = first.Status
		c.Resultado, c.Detalhe = TesteFalhou, fmt.Sprintf("HTTP %d com a assinatura certa em X-Geohub-Assinatura e outra em X-Geohub-Assinatura-Anterior: durante uma rotação, aceite se qualquer das duas conferir", first.Status)
	case second.Status == http.StatusUnauthorized:
		c.Resultado, c.Detalhe = TesteAviso, "401 quando a assinatura certa vem só em X-Geohub-Assinatura-Anterior: funciona, porque o Geohub reenvia com o outro segredo, mas custa um pedido a mais por entrega durante a rotação; confira as duas"
	case !accepted(second.Status):
		c.Resultado, c.Detalhe = TesteFalhou, fmt.Sprintf("HTTP %d quando a assinatura certa vem em X-Geohub-Assinatura-Anterior: responda 2xx, ou 401 se só lê X-Geohub-Assinatura", second.Status)
	}
	r.add(c)
}

func (r *testRun) standardWebhooks() {
	// X-Geohub-Assinatura right, webhook-signature wrong: a receiver that
	// checks the Standard Webhooks signature refuses it.
	d := r.newDelivery(testPayload)
	d.headers = func(h http.Header) {
		h.Set("webhook-signature", SignStandard(StandardKey(r.other), d.req.EventID, Timestamp(d.ts), d.req.Corpo))
	}
	res, took := r.send("standard-webhooks", d)
	c := TestCheck{ID: "standard-webhooks", Status: res.Status, DuracaoMS: took.Milliseconds()}
	switch {
	case res.Err != nil:
		_, c.Detalhe = r.noAnswer(res.Err)
		c.Resultado = TesteAviso
	case res.Status == http.StatusUnauthorized:
		c.Resultado, c.Detalhe = TesteOK, "o receptor confere webhook-signature"
	case accepted(res.Status):
		c.Resultado, c.Detalhe = TesteAviso, "o receptor ignora webhook-signature: tudo bem enquanto confere X-Geohub-Assinatura; uma biblioteca Standard Webhooks (npm standardwebhooks, Go standard-webhooks) confere as duas formas com o mesmo segredo"
	default:
		c.Resultado, c.Detalhe = TesteAviso, fmt.Sprintf("HTTP %d para uma entrega com X-Geohub-Assinatura certa e webhook-signature errada: esperado 401 (confere) ou 2xx (ignora)", res.Status)
	}
	r.add(c)
}

func (r *testRun) timing() {
	c := TestCheck{ID: "responde-a-tempo", DuracaoMS: r.slowest.Milliseconds(), Resultado: TesteOK}
	switch {
	case !r.answered && r.timedOut == "":
		c.Resultado, c.Detalhe = r.noAnswer(errNotRun)
	case r.timedOut != "":
		c.Resultado, c.Detalhe = TesteFalhou, fmt.Sprintf("sem resposta em %s (na verificação %s): o Geohub conta isso como falha e tenta de novo; responda antes de processar o que for demorado", seconds(r.t.Timeout), r.timedOut)
	case r.slowest > slowAnswer:
		c.Resultado, c.Detalhe = TesteAviso, fmt.Sprintf("a resposta mais lenta levou %s (na verificação %s); o limite é %s: responda logo e processe depois", seconds(r.slowest), r.slowID, seconds(r.t.Timeout))
	}
	r.add(c)
}

func (r *testRun) https() {
	c := TestCheck{ID: "https", Resultado: TesteOK}
	switch {
	case strings.HasPrefix(strings.ToLower(r.url), "http:"):
		// Only the policy's Insecure lets an http URL this far.
		c.Resultado, c.Detalhe = TesteAviso, "http só vale em teste local (--insecure-callbacks): em produção o Geohub exige https"
	case r.tls == nil || r.tls.TLS == nil:
		c.Resultado, c.Detalhe = TesteAviso, "nenhuma resposta por https para ver o certificado"
	default:
		if certs := r.tls.TLS.PeerCertificates; len(certs) > 0 {
			c.Detalhe = certificateAdvice(certs[0], r.t.Now())
			if c.Detalhe != "" {
				c.Resultado = TesteAviso
			}
		}
	}
	r.add(c)
}

func certificateAdvice(cert *x509.Certificate, now time.Time) string {
	left := cert.NotAfter.Sub(now)
	if left < 30*24*time.Hour {
		date := cert.NotAfter.UTC().Format("02/01/2006")
		switch days := int(left.Hours() / 24); {
		case left <= 0:
			return fmt.Sprintf("o certificado venceu em %s: renove-o já, ou as entregas falham", date)
		case days <= 0:
			return fmt.Sprintf("o certificado vence hoje (%s): renove-o já, ou as entregas falham", date)
		case days == 1:
			return fmt.Sprintf("o certificado vence em %s (1 dia): renove-o antes, ou as entregas falham", date)
		default:
			return fmt.Sprintf("o certificado vence em %s (%d dias): renove-o antes, ou as entregas falham", date, days)
		}
	}
	return ""
}
