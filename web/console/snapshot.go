package console

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"time"

	"github.com/a-h/templ"
	"github.com/gorilla/websocket"

	"geohub/app"
)

// A live snapshot is the other kind of live view: where the rows a page
// shows change in place (an ocorrência's status, its despachos) rather than
// being appended, a cursor of "lines sent" means nothing. The socket
// re-renders the page's parts instead whenever the notifier says the data
// behind them changed, and sends them when they differ from what it sent
// last. Each message is the whole current state, so a missed or coalesced
// wake, a dropped socket or a reconnect loses nothing: the first message
// after any of them is the state as it is now.

// snapshotGap is the least time between two renders of one socket: a burst
// of commits (a CAD registering many ocorrências) costs one read per gap,
// not one per event, and still shows the change well within a second.
const snapshotGap = 200 * time.Millisecond

// snapshotMessage is the wire format the console's script (class Vivo)
// expects: the HTML of each part, by its data-vivo-parte name.
type snapshotMessage struct {
	Partes map[string]string `json:"partes"`
}

// serveSnapshot runs one live snapshot socket. render reads the current
// state and returns the page's parts by name.
func (c *Console) serveSnapshot(w http.ResponseWriter, r *http.Request, changed *app.Notifier,
	render func(ctx context.Context) (map[string]templ.Component, error)) {
	conn, err := upgrader.Upgrade(hijackable{w}, r, nil)
	if err != nil {
		return
	}
	defer conn.Close()
	if s := sessionOf(r); s != nil {
		if !c.tails.enter(s.secret) {
			conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(closeTooManyTails,
				"muitas conexões ao vivo nesta sessão"), time.Now().Add(time.Second))
			return
		}
		defer c.tails.leave(s.secret)
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stopping := c.tails.done()
	// Subscribe before the first render: a change committed after that
	// render's read wakes the loop.
	wake, unsubscribe := changed.Subscribe()
	defer unsubscribe()

	gone := make(chan struct{})
	go func() {
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

	var last map[string]string
	var rendered time.Time
	send := func() bool {
		rendered = time.Now()
		parts, err := render(ctx)
		if err != nil {
			if ctx.Err() == nil {
				c.closeTail(conn, websocket.CloseInternalServerErr, "erro interno", err)
			}
			return false
		}
		html := make(map[string]string, len(parts))
		var buf bytes.Buffer
		for name, comp := range parts {
			buf.Reset()
			if err := comp.Render(ctx, &buf); err != nil {
				c.closeTail(conn, websocket.CloseInternalServerErr, "erro interno", err)
				return false
			}
			html[name] = buf.String()
		}
		if maps.Equal(html, last) {
			return true // a change elsewhere: nothing this page shows
		}
		msg, _ := json.Marshal(snapshotMessage{Partes: html})
		conn.SetWriteDeadline(time.Now().Add(tailWriteWait))
		if err := conn.WriteMessage(websocket.TextMessage, msg); err != nil {
			return false // gone or too slow: its next connection gets the state anew
		}
		last = html
		return true
	}
	if !send() {
		return
	}

	ping := time.NewTicker(tailPingEvery)
	defer ping.Stop()
	recheck := time.NewTicker(tailRecheck)
	defer recheck.Stop()
	for {
		select {
		case <-wake:
			if wait := time.Until(rendered.Add(snapshotGap)); wait > 0 {
				// Wakes during the wait stay pending and only repeat a
				// render that finds nothing new.
				select {
				case <-time.After(wait):
				case <-gone:
					return
				case <-stopping:
					c.closeTail(conn, websocket.CloseGoingAway, "servidor reiniciando", nil)
					return
				}
			}
			if !send() {
				return
			}
		case <-recheck.C:
			// Only the session: the data is re-read when a wake says so.
			if s := sessionOf(r); s != nil {
				if _, err := c.Sessions.Resolve(ctx, s.secret); app.ErrorCode(err) == app.EUnauthorized {
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

// incidentsLive keeps a page's incident badge and title current: the CADs
// not receiving are re-read (from memory) whenever an attempt is recorded
// or a circuit is adopted from another replica, and sent when they changed.
func (c *Console) incidentsLive(w http.ResponseWriter, r *http.Request) {
	c.serveSnapshot(w, r, c.AttemptsChanged, func(context.Context) (map[string]templ.Component, error) {
		incs := c.Integrators.Incidents()
		return map[string]templ.Component{"alertas": incidentBadge(incs), "titulo": templ.Raw(templ.EscapeString(incidentTitle(incs)))}, nil
	})
}
