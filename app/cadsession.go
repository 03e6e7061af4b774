package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// CAD sessions (SPEC 8d): a CAD behind NAT dials GET /api/sessao and
// receives its deliveries as websocket messages, acknowledging each. The
// dispatcher keeps every rule it keeps for callbacks (one delivery in
// flight per aggregate, the window, retries, dead letters, the breaker):
// a session is only another way to send one attempt (SessionSender), and
// an integrator whose session is not attached to this process is not
// claimed here (Dispatcher.limit), so on PostgreSQL its rows go out
// through the replica that holds its session.

// Why a session ended, as both ends are told.
const (
	SessaoSubstituida = "substituída por uma nova sessão do mesmo integrador"
	SessaoEncerrada   = "servidor encerrando"
	// SessaoSemSinal: a delivery went unanswered and the CAD did not even
	// answer a ping meanwhile. A NAT that forgot the connection looks like
	// this; the delivery waits, uncounted, for the next session.
	SessaoSemSinal = "o CAD não respondeu à entrega nem ao ping a tempo: a conexão parece morta"
)

// errSessionGone is an attempt that did not reach the CAD: no session
// here, or it ended before taking the message, or the server's shutdown
// ended it. Not the CAD's failure, so
// the row waits, uncounted and due at once, for the next session, which
// gets it before anything later of its aggregate (SPEC 8d). So is a
// session that drops after taking the message, up to uncountedDrops times
// for one delivery; after that each drop is an attempt without an answer,
// counted as a timeout is: a CAD that crashes on one delivery must not
// have it again forever, uncounted.
var errSessionGone = errors.New("sessão do integrador ausente")

// CADSessionRecord is an integrator's last CAD session as every process
// sees it: which session holds the integrator, in which process, from
// where, since when, last seen alive when, with how many deliveries then
// unanswered, and when and why it ended (zero while open).
type CADSessionRecord struct {
	Integrador  string    `json:"-"`
	Sessao      string    `json:"id"`
	Origem      string    `json:"replica"`
	Endereco    string    `json:"endereco"`
	Desde       time.Time `json:"desde"`
	VistoEm     time.Time `json:"visto_em"`
	Pendentes   int       `json:"sem_resposta"`
	EncerradaEm time.Time `json:"encerrada_em,omitzero"`
	Motivo      string    `json:"motivo,omitempty"`
}

// CADSessionStore keeps each session integrator's last session, shared by
// the replicas: one session per integrator across all of them.
type CADSessionStore interface {
	// SaveCADSession records r as the integrator's session, over whatever
	// session it had, unless that one attached later (Desde).
	SaveCADSession(ctx context.Context, r CADSessionRecord) error
	// TouchCADSession records session sessao alive at `at` with pendentes
	// deliveries unanswered; false when it is no longer the integrator's
	// open session.
	TouchCADSession(ctx context.Context, integrador, sessao string, at time.Time, pendentes int) (bool, error)
	// EndCADSession records the end of session sessao, if it is still the
	// integrator's open session.
	EndCADSession(ctx context.Context, integrador, sessao string, at time.Time, motivo string) error
	// CADSessionRecord reads the integrator's last session; false if it
	// never had one.
	CADSessionRecord(ctx context.Context, integrador string) (CADSessionRecord, bool, error)
	// CADSessionRecords reads the last session of every integrator that
	// had one.
	CADSessionRecords(ctx context.Context) ([]CADSessionRecord, error)
}

// SessionHeartbeat is how often an open session's record is written
// alive; one not written for SessionStale is taken as gone (its process
// died without ending it).
const (
	SessionHeartbeat = 10 * time.Second
	SessionStale     = 3 * SessionHeartbeat
)

// CADSessionStatus is what the console and the API show of a session
// integrator's last session.
type CADSessionStatus struct {
	// Conectada: the session is open and was seen within SessionStale.
	Conectada bool `json:"conectada"`
	CADSessionRecord
	// Janela is how many deliveries may wait unanswered at once.
	Janela int `json:"janela"`
}

// sessionStatus is r as shown: connected while open and alive, with the
// live unanswered count when the session is attached here.
func sessionStatus(r CADSessionRecord, here *CADSession, now time.Time, janela int) *CADSessionStatus {
	st := &CADSessionStatus{CADSessionRecord: r, Janela: janela,
		Conectada: r.EncerradaEm.IsZero() && now.Sub(r.VistoEm) < SessionStale}
	if here != nil && here.ID == r.Sessao {
		st.Pendentes, st.Conectada = here.unanswered(), true
	}
	return st
}

// CADSessions are the CAD sessions attached to this process, one per
// integrator at most.
type CADSessions struct {
	mu   sync.Mutex
	byID map[string]*CADSession
}

// CADSession is one CAD's connection. The web handler writes what Messages
// yields and hands each answer the CAD sends to Answer; the session ends
// when Done closes, with Reason.
type CADSession struct {
	ID         string // new at every attach: the store's sessao_id
	Integrador string
	Endereco   string
	Desde      time.Time

	messages chan []byte
	probes   chan struct{}
	heard    atomic.Int64 // unix nanoseconds of the last frame from the CAD
	pinged   atomic.Int64 // unix nanoseconds of the last ping to it
	done     chan struct{}
	once     sync.Once
	mu       sync.Mutex
	reason   string
	waiting  map[string]chan SessionAnswer // by X-Geohub-Entrega-Id
}

// SessionAnswer is the CAD's answer to one delivery: {"ack": id} or
// {"nack": id, "motivo": "..."}.
type SessionAnswer struct {
	Ack    string `json:"ack,omitempty"`
	Nack   string `json:"nack,omitempty"`
	Motivo string `json:"motivo,omitempty"`
}

// Attach makes s the integrator's session here, ending the one it
// replaces.
func (ss *CADSessions) Attach(integrador, endereco string, now time.Time) *CADSession {
	s := &CADSession{ID: uuid.NewString(), Integrador: integrador, Endereco: endereco, Desde: now,
		messages: make(chan []byte), probes: make(chan struct{}, 1), done: make(chan struct{}), waiting: map[string]chan SessionAnswer{}}
	ss.mu.Lock()
	if ss.byID == nil {
		ss.byID = map[string]*CADSession{}
	}
	old := ss.byID[integrador]
	ss.byID[integrador] = s
	ss.mu.Unlock()
	if old != nil {
		old.end(SessaoSubstituida)
	}
	return s
}

// Detach ends s, unless a newer session replaced it already.
func (ss *CADSessions) Detach(s *CADSession, reason string) {
	ss.mu.Lock()
	if ss.byID[s.Integrador] == s {
		delete(ss.byID, s.Integrador)
	}
	ss.mu.Unlock()
	s.end(reason)
}

// Len is how many sessions are attached here.
func (ss *CADSessions) Len() int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return len(ss.byID)
}

// Get is the integrator's session here, or nil.
func (ss *CADSessions) Get(integrador string) *CADSession {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.byID[integrador]
}

// Messages yields the deliveries to write, one text message each.
func (s *CADSession) Messages() <-chan []byte { return s.messages }

// Probes yields when a delivery went out and the CAD should be pinged,
// unless a ping to it is outstanding already (PingOutstanding): a live
// CAD's websocket answers a ping whatever its code is doing, so an answer
// that times out with nothing heard since tells a dead connection from a
// slow CAD.
func (s *CADSession) Probes() <-chan struct{} { return s.probes }

// Heard records a frame from the CAD (an answer, a pong) at `at`.
func (s *CADSession) Heard(at time.Time) { s.heard.Store(at.UnixNano()) }

// Pinged records a ping sent to the CAD at `at`.
func (s *CADSession) Pinged(at time.Time) { s.pinged.Store(at.UnixNano()) }

// PingOutstanding reports whether the last ping has had nothing from the
// CAD after it: its pong, when the CAD is alive, is still to come.
func (s *CADSession) PingOutstanding() bool { return s.pinged.Load() > s.heard.Load() }

// heardSince reports whether the CAD sent anything after t.
func (s *CADSession) heardSince(t time.Time) bool { return s.heard.Load() > t.UnixNano() }

func (s *CADSession) probe() {
	select {
	case s.probes <- struct{}{}:
	default:
	}
}

// Done closes when the session ends.
func (s *CADSession) Done() <-chan struct{} { return s.done }

// Reason is why the session ended.
func (s *CADSession) Reason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reason
}

func (s *CADSession) end(reason string) {
	s.once.Do(func() {
		s.mu.Lock()
		s.reason = reason
		s.mu.Unlock()
		close(s.done)
	})
}

// ErrLateAnswer is an answer to a delivery that no longer waits for one:
// it timed out (and counted as a timeout), or the CAD answered twice.
var ErrLateAnswer = errors.New("nenhuma entrega com esse id aguarda resposta nesta sessão")

// Answer takes one answer from the CAD: ErrLateAnswer for an id that does
// not wait for one, another error for an answer that is neither.
func (s *CADSession) Answer(a SessionAnswer) error {
	id := a.Ack
	if id == "" {
		id = a.Nack
	}
	if id == "" || a.Ack != "" && a.Nack != "" {
		return fmt.Errorf(`a resposta deve ser {"ack": "<id>"} ou {"nack": "<id>", "motivo": "..."}`)
	}
	s.mu.Lock()
	ch, ok := s.waiting[id]
	delete(s.waiting, id)
	s.mu.Unlock()
	if !ok {
		return ErrLateAnswer
	}
	ch <- a
	return nil
}

// sessionMessage is one delivery as a session carries it: the headers of
// SPEC 6.3, each as one string, and the envelope's exact bytes.
func sessionMessage(h http.Header, body []byte) ([]byte, error) {
	m := make(map[string]string, len(h)+1)
	for k, v := range h {
		if k == "Content-Type" || k == "User-Agent" {
			continue
		}
		m[strings.ToLower(k)] = strings.Join(v, " ")
	}
	m["corpo"] = string(body)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// uncountedDrops is how many times a session may drop with one delivery
// unanswered before the drops count as attempts.
const uncountedDrops = 3

// SessionSender sends the attempts of session integrators over their
// sessions, and the others' through Callback.
type SessionSender struct {
	mu          sync.Mutex
	drops       map[string]int // by integrator and event: sessions that dropped it unanswered
	CADSessions *CADSessions
	Callback    *HTTPSender
	// Timeout is how long an answer may take: as a callback's, a timeout
	// is an attempt without an answer.
	Timeout time.Duration
}

// Send implements Sender.
func (s *SessionSender) Send(ctx context.Context, in Integrator, req Request) SendResult {
	if in.Entrega != EntregaSessao {
		return s.Callback.Send(ctx, in, req)
	}
	if req.Corpo == nil {
		return SendResult{Err: fmt.Errorf("%w: o corpo da entrega foi expurgado", errUnsendable)}
	}
	sess := s.CADSessions.Get(in.ID)
	if sess == nil {
		return SendResult{Err: errSessionGone, Transport: true}
	}
	current, previous, err := s.Callback.Integrators.Secrets(ctx, in.ID)
	if err != nil {
		return SendResult{Err: err}
	}
	msg, err := sessionMessage(deliveryHeaders(s.Callback.Version, Timestamp(s.Callback.Now()), req, current, previous), req.Corpo)
	if err != nil {
		return SendResult{Err: err}
	}
	answer := make(chan SessionAnswer, 1)
	sess.mu.Lock()
	sess.waiting[req.EntregaID] = answer
	sess.mu.Unlock()
	defer func() {
		sess.mu.Lock()
		delete(sess.waiting, req.EntregaID)
		sess.mu.Unlock()
	}()
	// The session writes one message at a time: the wait for its turn is
	// bounded apart, so that the answer's time starts when the message
	// goes out, not behind the window's other messages.
	handoff := time.NewTimer(s.Timeout)
	defer handoff.Stop()
	select {
	case sess.messages <- msg:
	case <-sess.done:
		return SendResult{Err: fmt.Errorf("%w: %s", errSessionGone, sess.Reason()), Transport: true}
	case <-handoff.C:
		return SendResult{Err: fmt.Errorf("a sessão não aceitou a mensagem em %s (o CAD não está lendo)", s.Timeout), Transport: true}
	case <-ctx.Done():
		return SendResult{Err: ctx.Err(), Transport: true}
	}
	sent := time.Now()
	sess.probe()
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	select {
	case a := <-answer:
		return s.answered(in.ID+" "+req.EventID, a)
	case <-sess.done:
		// An answer read before the session ended counts: select picks
		// among ready cases at random.
		select {
		case a := <-answer:
			return s.answered(in.ID+" "+req.EventID, a)
		default:
		}
		return s.drop(in.ID+" "+req.EventID, sess.Reason())
	case <-ctx.Done():
		select {
		case a := <-answer:
			return s.answered(in.ID+" "+req.EventID, a)
		default:
		}
		// The probe left a ping unanswered at or after the handoff: a
		// live CAD answered it by now, a dead connection did not. That
		// ends the session, as its missed pongs would later, and the
		// delivery is a drop, not the CAD's timeout.
		if ctx.Err() == context.DeadlineExceeded && !sess.heardSince(sent) {
			sess.end(SessaoSemSinal)
			return s.drop(in.ID+" "+req.EventID, SessaoSemSinal)
		}
		return SendResult{Err: fmt.Errorf("não respondeu a tempo (sem ack em %s)", s.Timeout), Transport: true}
	}
}

// AttachSession makes a new session of integrador the one this process
// delivers to, and claims its rows at once. The shared record names it
// the integrator's session on every replica: one elsewhere sees it was
// replaced (CheckSession) and ends.
func (d *Dispatcher) AttachSession(ctx context.Context, integrador, endereco string) (*CADSession, error) {
	d.init()
	s := d.CADSessions.Attach(integrador, endereco, d.Now())
	if err := d.SessionRecords.SaveCADSession(ctx, CADSessionRecord{Integrador: integrador, Sessao: s.ID, Origem: processName,
		Endereco: endereco, Desde: s.Desde}); err != nil {
		d.CADSessions.Detach(s, "não foi possível registrar a sessão")
		return nil, err
	}
	d.Wake()
	d.sessionChanged()
	return s, nil
}

// sessionChanged wakes the console's live integrator pages, as a recorded
// attempt does: no attempt, but the session they show changed.
func (d *Dispatcher) sessionChanged() {
	if d.OnRecorded != nil {
		d.OnRecorded()
	}
}

// DetachSession ends s: its rows wait, unclaimed here, for the next.
func (d *Dispatcher) DetachSession(s *CADSession, reason string) {
	d.init()
	d.CADSessions.Detach(s, reason)
	d.Wake() // its queued rows go back at once
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The session's first reason: a replacement or a silence ended it
	// before its handler saw why.
	if err := d.SessionRecords.EndCADSession(ctx, s.Integrador, s.ID, d.Now(), s.Reason()); err != nil {
		d.Logger.Warn("record the end of a CAD session", "integrador", s.Integrador, "err", err)
	}
	d.sessionChanged()
}

// CheckSession says whether s is still its integrator's session: false
// once a newer one attached to any replica.
func (d *Dispatcher) CheckSession(ctx context.Context, s *CADSession) (bool, error) {
	r, ok, err := d.SessionRecords.CADSessionRecord(ctx, s.Integrador)
	if err != nil {
		return true, err // a failed read is no proof that it was replaced
	}
	return ok && r.Sessao == s.ID && r.EncerradaEm.IsZero(), nil
}

// TouchSession records s alive, with its deliveries unanswered now; false
// once a newer session replaced it.
func (d *Dispatcher) TouchSession(ctx context.Context, s *CADSession) (bool, error) {
	ok, err := d.SessionRecords.TouchCADSession(ctx, s.Integrador, s.ID, d.Now(), s.unanswered())
	if err != nil {
		return true, err
	}
	return ok, nil
}

// unanswered is how many deliveries wait for the CAD's answer.
func (s *CADSession) unanswered() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiting)
}

// processName names this process in the session records: the host and
// the pid, what an operator finds a replica by.
var processName = func() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s:%d", host, os.Getpid())
}()

// answered is the attempt's result from the CAD's answer to the delivery
// key, whose drops it forgets.
func (s *SessionSender) answered(key string, a SessionAnswer) SendResult {
	s.mu.Lock()
	delete(s.drops, key)
	s.mu.Unlock()
	if a.Ack != "" {
		return SendResult{Status: http.StatusNoContent}
	}
	// A nack means what a 5xx does: the CAD could not apply it now. Its
	// reason is kept as a body would be, as long.
	motivo := a.Motivo
	if len(motivo) > responseSnippet {
		motivo = strings.ToValidUTF8(motivo[:responseSnippet], "")
	}
	return SendResult{Status: http.StatusServiceUnavailable, Snippet: motivo, Nack: true}
}

// maxDropsKept bounds the drop counts kept: a delivery dropped and then
// answered on another replica, or dead-lettered, is never forgotten by an
// answer here. Past the bound the counts start over, which only gives the
// deliveries dropped meanwhile their uncounted drops again.
const maxDropsKept = 10_000

// drop is the attempt's result when its session ended, for why, with the
// delivery key unanswered: uncounted up to uncountedDrops times, then an
// attempt without an answer. A replacement counts as a drop: a CAD that
// crashes and dials again at once may replace its dead session before its
// end is seen. A shutdown is the server's, and does not.
func (s *SessionSender) drop(key, why string) SendResult {
	if why == SessaoEncerrada {
		return SendResult{Err: fmt.Errorf("%w: %s", errSessionGone, why), Transport: true}
	}
	s.mu.Lock()
	if s.drops == nil || len(s.drops) >= maxDropsKept {
		s.drops = map[string]int{}
	}
	s.drops[key]++
	n := s.drops[key]
	s.mu.Unlock()
	if n <= uncountedDrops {
		return SendResult{Err: fmt.Errorf("%w: %s", errSessionGone, why), Transport: true}
	}
	return SendResult{Err: fmt.Errorf("a sessão caiu %d vezes sem responder a esta entrega: %s", n, why), Transport: true}
}
