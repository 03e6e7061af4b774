package web

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/gorilla/websocket"

	"geohub/app"
	"geohub/web/hijack"
)

// GET /api/sessao (SPEC 8d): a CAD that cannot receive webhooks dials in
// with its API key and receives its deliveries as websocket text
// messages, one delivery each, answering each with {"ack": id} or
// {"nack": id, "motivo": "..."}. The protocol, with its close codes, is in
// the integrator guide.

// Close codes of a session, besides the standard ones (1001 the server
// going away, 1008 a policy violation).
const (
	closeReplaced    = 4000 // another session of the same integrator took over
	closeNotSession  = 4001 // the integrator's entrega is callback
	closeBadAnswer   = 4002 // an answer that is neither an ack nor a nack
	closeSilent      = 4003 // a delivery and a ping went unanswered: reconnect
	sessionPingEvery = 10 * time.Second
	// sessionPongWait is how long a silent peer lasts: a dead one is
	// noticed within 30 s (SPEC 8d), two pings missed.
	sessionPongWait  = 25 * time.Second
	sessionWriteWait = 10 * time.Second
	sessionRecheck   = time.Second
	// sessionReadLimit bounds one answer: an id and a reason (kept to 512
	// bytes, but a CAD may send a stack trace; the guide says 16 KiB).
	sessionReadLimit = 16 << 10
)

// A CAD is a program, not a page: no Origin check applies (the API key
// is no cookie a browser would send along).
var sessionUpgrader = websocket.Upgrader{ReadBufferSize: 1024, WriteBufferSize: 8192,
	CheckOrigin: func(*http.Request) bool { return true }}

// CloseSessions tells every CAD session to close with "going away"; the
// CADs reconnect once a server is back.
func (s *Server) CloseSessions() { s.sessions.Close() }

// WaitSessions waits, after CloseSessions, for every session to have
// recorded its end, or for ctx: the store must outlive them.
func (s *Server) WaitSessions(ctx context.Context) error { return s.sessions.Wait(ctx) }

func (s *Server) serveSession(w http.ResponseWriter, r *http.Request, in app.Integrator) {
	key := r.Header.Get("Authorization")
	if !websocket.IsWebSocketUpgrade(r) {
		s.Fail(w, r, app.Errorf(app.EMalformed,
			"GET /api/sessao é um websocket: abra com Connection: Upgrade e Upgrade: websocket (guia, seção 2.1)"))
		return
	}
	defer s.sessions.Track()()
	conn, err := sessionUpgrader.Upgrade(hijack.Writer{ResponseWriter: w}, r, nil)
	if err != nil {
		return // Upgrade answered with the reason; no session was replaced
	}
	defer conn.Close()
	// The API's write deadline is for answers, not for a session.
	conn.NetConn().SetDeadline(time.Time{})
	closeWith := func(code int, reason string) {
		conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, truncateReason(reason)), time.Now().Add(time.Second))
	}
	switch {
	case in.Entrega != app.EntregaSessao:
		closeWith(closeNotSession, "este integrador recebe por callback, não por sessão")
		return
	case !in.Ativo:
		closeWith(websocket.ClosePolicyViolation, "integrador inativo: um administrador precisa reativá-lo")
		return
	}
	sess, err := s.Dispatcher.AttachSession(r.Context(), in.ID, s.remoteAddr(r))
	if err != nil {
		s.Logger.Error("attach a CAD session", "integrador", in.ID, "err", err)
		closeWith(websocket.CloseTryAgainLater, "o servidor não conseguiu registrar a sessão: reconecte")
		return
	}
	s.Logger.Info("CAD session attached", "integrador", in.ID, "endereco", sess.Endereco)
	reason := app.SessaoEncerrada
	defer func() {
		s.Dispatcher.DetachSession(sess, reason)
		s.Logger.Info("CAD session ended", "integrador", in.ID, "motivo", sess.Reason())
	}()

	gone := make(chan struct{})
	bad := make(chan string, 1)
	go func() {
		defer close(gone)
		conn.SetReadLimit(sessionReadLimit)
		conn.SetReadDeadline(time.Now().Add(sessionPongWait))
		conn.SetPongHandler(func(string) error {
			sess.Heard(time.Now())
			return conn.SetReadDeadline(time.Now().Add(sessionPongWait))
		})
		for {
			_, msg, err := conn.ReadMessage()
			if err != nil {
				return
			}
			sess.Heard(time.Now())
			conn.SetReadDeadline(time.Now().Add(sessionPongWait))
			var a app.SessionAnswer
			if err := json.Unmarshal(msg, &a); err != nil {
				bad <- "resposta que não é JSON: " + err.Error()
				return
			}
			if err := sess.Answer(a); errors.Is(err, app.ErrLateAnswer) {
				// Late after a timeout, or twice: the attempt is settled
				// already, and a slow CAD must not lose its session for it.
				continue
			} else if err != nil {
				bad <- err.Error()
				return
			}
		}
	}()

	// The store's checks run apart from the writer: a slow database must
	// not hold the session's messages and pings, which would charge the
	// CAD with timeouts that are Geohub's.
	watched := make(chan sessionEnd, 1)
	watching, stopWatching := context.WithCancel(r.Context())
	defer stopWatching()
	go s.watchSession(watching, r, key, sess, watched)

	ping := time.NewTicker(sessionPingEvery)
	defer ping.Stop()
	pingNow := func() error {
		sess.Pinged(time.Now())
		return conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(sessionWriteWait))
	}
	stopping := s.sessions.Done()
	for {
		select {
		case msg := <-sess.Messages():
			conn.SetWriteDeadline(time.Now().Add(sessionWriteWait))
			if err := conn.WriteMessage(websocket.TextMessage, msg); err != nil {
				reason = "a conexão caiu"
				return
			}
		case <-sess.Probes():
			// A delivery went out: a ping after it, unless one is still
			// unanswered, tells a slow CAD from a dead connection if the
			// delivery's answer times out.
			if !sess.PingOutstanding() {
				if err := pingNow(); err != nil {
					reason = "a conexão caiu"
					return
				}
			}
		case <-ping.C:
			if err := pingNow(); err != nil {
				reason = "a conexão caiu"
				return
			}
		case end := <-watched:
			reason = end.reason
			closeWith(end.code, reason)
			return
		case why := <-bad:
			reason = why
			closeWith(closeBadAnswer, why)
			return
		case <-gone:
			select {
			case why := <-bad: // the reader stopped for a bad answer
				reason = why
				closeWith(closeBadAnswer, why)
			default:
				reason = "o CAD fechou a sessão ou parou de responder"
			}
			return
		case <-sess.Done():
			if sess.Reason() == app.SessaoSemSinal {
				closeWith(closeSilent, sess.Reason())
			} else {
				closeWith(closeReplaced, sess.Reason())
			}
			return
		case <-stopping:
			closeWith(websocket.CloseGoingAway, app.SessaoEncerrada)
			return
		}
	}
}

// sessionEnd is why a session must close, with its close code.
type sessionEnd struct {
	code   int
	reason string
}

// watchSession checks what the store says of sess until ctx ends: every
// second that its API key still holds, its integrator is active and no
// newer session of the integrator attached to any replica (SPEC 8d: one
// session per integrator); every SessionHeartbeat it records sess alive,
// for every replica's console. A reason to close goes to end.
func (s *Server) watchSession(ctx context.Context, r *http.Request, key string, sess *app.CADSession, end chan<- sessionEnd) {
	recheck := time.NewTicker(sessionRecheck)
	defer recheck.Stop()
	heartbeat := time.NewTicker(app.SessionHeartbeat)
	defer heartbeat.Stop()
	check := func(fn func(context.Context) (bool, error)) (bool, error) {
		ctx, cancel := context.WithTimeout(ctx, sessionRecheck*5)
		defer cancel()
		return fn(ctx)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-heartbeat.C:
			held, err := check(func(ctx context.Context) (bool, error) { return s.Dispatcher.TouchSession(ctx, sess) })
			if err != nil {
				s.Logger.Warn("record a CAD session alive", "integrador", sess.Integrador, "err", err)
			} else if !held {
				end <- sessionEnd{closeReplaced, app.SessaoSubstituida}
				return
			}
		case <-recheck.C:
			// A failed read proves nothing: the session goes on.
			if held, err := check(func(ctx context.Context) (bool, error) { return s.Dispatcher.CheckSession(ctx, sess) }); err == nil && !held {
				end <- sessionEnd{closeReplaced, app.SessaoSubstituida}
				return
			}
			// As a console tail checks its login: a rotated key, or an
			// integrator disabled, on any replica, ends the session
			// within about a second (the key cache's life).
			r.Header.Set("Authorization", key)
			now, err := s.integratorKey(r.WithContext(ctx), false)
			switch {
			case app.ErrorCode(err) == app.EUnauthorized:
				end <- sessionEnd{websocket.ClosePolicyViolation, "a chave de API deixou de valer (rotacionada ou revogada)"}
				return
			case err == nil && !now.Ativo:
				end <- sessionEnd{websocket.ClosePolicyViolation, "integrador inativo: um administrador precisa reativá-lo"}
				return
			}
		}
	}
}

// truncateReason keeps a close reason within the 123 bytes a close frame
// allows, on a rune boundary.
func truncateReason(s string) string {
	if len(s) <= 123 {
		return s
	}
	b := []byte(s[:123])
	for len(b) > 0 && b[len(b)-1]&0xC0 == 0x80 {
		b = b[:len(b)-1]
	}
	if len(b) > 0 && b[len(b)-1] >= 0xC0 {
		b = b[:len(b)-1]
	}
	return string(b)
}
