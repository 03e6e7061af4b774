package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/a-h/templ"
	"github.com/gorilla/websocket"

	"geohub/app"
	"geohub/web/hijack"
)

// A live tail is pull-based: each socket keeps its own cursor and, when a
// notifier wakes it, reads the rows after the cursor from the database. A
// wake carries nothing, so a coalesced or missed one loses nothing (the
// next read gets everything), and nobody ever waits on a socket: a slow
// client only falls behind its own cursor, until a write times out and it
// is dropped. The page passes the newest row it rendered (?de=), and the
// script resumes from the last row it showed after a reconnect, so a line
// is never lost or repeated.
const (
	tailWriteWait = 10 * time.Second
	tailPongWait  = 60 * time.Second
	tailPingEvery = 50 * time.Second
	// tailRecheck is the fallback re-read for a wake that never came, and
	// how soon a socket notices that its session ended.
	tailRecheck = 5 * time.Second
	tailBatch   = 200
	// The client only answers pings: anything bigger than a close frame is
	// not the console's script.
	tailReadLimit = 512

	closeSessionEnded = 4401
	// closeRefused ends a live view the request itself cannot have (a
	// filter that is not valid): the script shows the reason and stops.
	closeRefused = 4400

	// maxTailsPerAccount bounds what one account can hold open on this
	// server, whatever its sessions: each tail is a goroutine, and an
	// append tail a database read on every commit. A page has at most one
	// tail and the incident badge's socket, so this is sixteen tabs; a
	// stuck or hostile script, or a client signing in again for more,
	// gets 4429.
	maxTailsPerAccount = 32
	closeTooManyTails  = 4429
)

// The zero CheckOrigin admits only pages of this host: another site cannot
// open a tail with the operator's cookie (SameSite=Strict already keeps the
// cookie away; this holds even for a same-site neighbour).
var upgrader = websocket.Upgrader{ReadBufferSize: 1024, WriteBufferSize: 8192}

// tailLine is one rendered row and its cursor value.
type tailLine struct {
	seq int64
	row templ.Component
}

// tailSource is what one tail reads.
type tailSource struct {
	changed *app.Notifier
	// latest is where a tail opened without ?de starts: only new lines.
	latest func(ctx context.Context) (int64, error)
	// next reads after the cursor: the lines to send, the new cursor (past
	// rows examined but filtered out) and whether more are waiting.
	next func(ctx context.Context, after int64) (lines []tailLine, cursor int64, more bool, err error)
}

// tailMessage is the wire format the console's script expects.
type tailMessage struct {
	Seq  string `json:"seq"`
	HTML string `json:"html"`
}

// tails ends every open tail when the server shuts down (hijacked
// connections are outside http.Server.Shutdown) and counts each account's.
type tails struct {
	stop hijack.Closing

	mu   sync.Mutex
	open map[string]int // by account
}

// enter takes one of the account's tail slots; false when all are taken.
func (t *tails) enter(account string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.open[account] >= maxTailsPerAccount {
		return false
	}
	if t.open == nil {
		t.open = map[string]int{}
	}
	t.open[account]++
	return true
}

func (t *tails) leave(account string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.open[account]--; t.open[account] <= 0 {
		delete(t.open, account)
	}
}

// CloseTails tells every live tail to close with "going away"; the scripts
// reconnect once the server is back. Register it with
// http.Server.RegisterOnShutdown.
func (c *Console) CloseTails() {
	c.tails.stop.Close()
}

// refuseTail answers a tail without a session: a browser cannot read the
// status of a refused handshake, so it is accepted and closed with 4401.
func (c *Console) refuseTail(w http.ResponseWriter, r *http.Request) {
	conn, err := upgrader.Upgrade(hijack.Writer{ResponseWriter: w}, r, nil)
	if err != nil {
		return // Upgrade answered with the reason (403 for a foreign origin)
	}
	defer conn.Close()
	conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(closeSessionEnded, "sessão expirada"),
		time.Now().Add(time.Second))
}

// parseDe reads the cursor a tail resumes from; absent means "from now".
func parseDe(r *http.Request) (int64, bool, bool) {
	v := r.URL.Query().Get("de")
	if v == "" {
		return 0, false, true
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n, true, err == nil && n >= 0
}

// serveTail runs one socket: upgrade, then read-and-send whenever woken.
func (c *Console) serveTail(w http.ResponseWriter, r *http.Request, src tailSource) {
	after, resume, ok := parseDe(r)
	if !ok {
		http.Error(w, "parâmetro de inválido: deve ser um número de sequência", http.StatusBadRequest)
		return
	}
	conn, err := upgrader.Upgrade(hijack.Writer{ResponseWriter: w}, r, nil)
	if err != nil {
		return
	}
	defer conn.Close()
	if s := sessionOf(r); s != nil {
		if !c.tails.enter(s.op.ID) {
			conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(closeTooManyTails,
				"muitas conexões ao vivo nesta conta"), time.Now().Add(time.Second))
			return
		}
		defer c.tails.leave(s.op.ID)
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stopping := c.tails.stop.Done()
	// Subscribe before the first read: whatever commits after that read
	// wakes the loop, whatever committed before it is in the read.
	wake, unsubscribe := src.changed.Subscribe()
	defer unsubscribe()
	if !resume {
		if after, err = src.latest(ctx); err != nil {
			c.closeTail(conn, websocket.CloseInternalServerErr, "erro interno", err)
			return
		}
	}

	gone := make(chan struct{})
	go func() {
		// The client sends nothing but pongs and the close; reading is what
		// runs the pong handler and notices a vanished peer.
		defer close(gone)
		conn.SetReadLimit(tailReadLimit)
		conn.SetReadDeadline(time.Now().Add(tailPongWait))
		conn.SetPongHandler(func(string) error { return conn.SetReadDeadline(time.Now().Add(tailPongWait)) })
		for {
			if _, _, err := conn.NextReader(); err != nil {
				return
			}
		}
	}()

	ping := time.NewTicker(tailPingEvery)
	defer ping.Stop()
	recheck := time.NewTicker(tailRecheck)
	defer recheck.Stop()
	var buf bytes.Buffer
	for {
		for more := true; more; {
			var lines []tailLine
			lines, after, more, err = src.next(ctx, after)
			if err != nil {
				if ctx.Err() == nil {
					c.closeTail(conn, websocket.CloseInternalServerErr, "erro interno", err)
				}
				return
			}
			for _, l := range lines {
				buf.Reset()
				if err := l.row.Render(ctx, &buf); err != nil {
					c.closeTail(conn, websocket.CloseInternalServerErr, "erro interno", err)
					return
				}
				msg, _ := json.Marshal(tailMessage{Seq: strconv.FormatInt(l.seq, 10), HTML: buf.String()})
				conn.SetWriteDeadline(time.Now().Add(tailWriteWait))
				if err := conn.WriteMessage(websocket.TextMessage, msg); err != nil {
					return // gone or too slow: it resumes from its last line when it comes back
				}
			}
			select {
			case <-gone:
				return
			case <-stopping:
				c.closeTail(conn, websocket.CloseGoingAway, "servidor reiniciando", nil)
				return
			default:
			}
		}
		select {
		case <-wake:
		case <-recheck.C:
			if s := sessionOf(r); s != nil {
				if _, err := c.Sessions.Check(ctx, s.secret); app.ErrorCode(err) == app.EUnauthorized {
					c.closeTail(conn, closeSessionEnded, "sessão expirada", nil)
					return
				}
			}
		case <-ping.C:
			if err := conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(tailWriteWait)); err != nil {
				return
			}
		case <-gone:
			return
		case <-stopping:
			c.closeTail(conn, websocket.CloseGoingAway, "servidor reiniciando", nil)
			return
		}
	}
}

func (c *Console) closeTail(conn *websocket.Conn, code int, reason string, err error) {
	var e *app.Error
	switch {
	case code == websocket.CloseInternalServerErr && errors.As(err, &e) && e.Code.HTTPStatus() < 500:
		// The request's own fault (a filter the page was given): said to
		// it, with its words, as a 4xx close; nothing failed here (issue
		// 26, I6). A close frame's reason has room for 123 bytes.
		code, reason = closeRefused, strings.ToValidUTF8(e.Message[:min(len(e.Message), 120)], "")
	case err != nil:
		c.Logger.Error("live tail failed", "err", err)
	}
	conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(time.Second))
}
