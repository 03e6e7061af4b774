package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"sync"
	"time"

	"github.com/a-h/templ"
	"github.com/gorilla/websocket"

	"geohub/app"
	"geohub/web/hijack"
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

// serveSnapshot runs one live snapshot socket. Sockets with the same key
// show the same view and share one feed: one read and render per change for
// all of them (a view that carries the session's CSRF token keys by the
// session). render reads the current state and returns the page's parts by
// name; vista names the view in the metrics.
func (c *Console) serveSnapshot(w http.ResponseWriter, r *http.Request, vista, key string, changed *app.Notifier,
	render func(ctx context.Context) (map[string]templ.Component, error)) {
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
	feed, leave := c.feeds.join(vista+" "+key, func(ctx context.Context) (map[string]string, error) {
		c.Metrics.LiveRendered(vista)
		parts, err := render(ctx)
		if err != nil {
			return nil, err
		}
		html := make(map[string]string, len(parts))
		var buf bytes.Buffer
		for name, comp := range parts {
			buf.Reset()
			if err := comp.Render(ctx, &buf); err != nil {
				return nil, err
			}
			html[name] = buf.String()
		}
		return html, nil
	}, changed)
	defer leave()

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

	ping := time.NewTicker(tailPingEvery)
	defer ping.Stop()
	recheck := time.NewTicker(tailRecheck)
	defer recheck.Stop()
	var last map[string]string
	for {
		snap, next := feed.current()
		switch {
		case snap.err != nil:
			c.closeTail(conn, websocket.CloseInternalServerErr, "erro interno", snap.err)
			return
		case snap.parts != nil && !maps.Equal(snap.parts, last):
			msg, _ := json.Marshal(snapshotMessage{Partes: snap.parts})
			conn.SetWriteDeadline(time.Now().Add(tailWriteWait))
			if err := conn.WriteMessage(websocket.TextMessage, msg); err != nil {
				return // gone or too slow: its next connection gets the state anew
			}
			last = snap.parts
		}
		select {
		case <-next:
		case <-recheck.C:
			// Only the session: the data is re-read when a wake says so.
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

// feeds are the live views being shown, by key: each reads and renders once
// per change, however many sockets show it, and stops with its last socket.
type feeds struct {
	mu sync.Mutex
	m  map[string]*feed
}

// feed is one live view's latest rendering.
type feed struct {
	subscribers int // under feeds.mu
	stop        context.CancelFunc

	mu   sync.Mutex
	snap snapshot
	next chan struct{} // closed when snap is replaced
}

type snapshot struct {
	parts map[string]string // nil before the first render
	err   error
}

// join adds a socket to the feed of key, starting it when it is the first;
// leave removes it, stopping the feed with its last socket.
func (fs *feeds) join(key string, render func(context.Context) (map[string]string, error), changed *app.Notifier) (f *feed, leave func()) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f = fs.m[key]
	if f == nil {
		ctx, stop := context.WithCancel(context.Background())
		f = &feed{stop: stop, next: make(chan struct{})}
		if fs.m == nil {
			fs.m = map[string]*feed{}
		}
		fs.m[key] = f
		// Subscribed before the first render: a change committed after
		// its read wakes the loop.
		wake, unsubscribe := changed.Subscribe()
		go func() {
			defer unsubscribe()
			f.run(ctx, wake, render)
		}()
	}
	f.subscribers++
	return f, func() {
		fs.mu.Lock()
		defer fs.mu.Unlock()
		if f.subscribers--; f.subscribers == 0 {
			f.stop()
			delete(fs.m, key)
		}
	}
}

// run renders at once, then on every wake, at most once per snapshotGap:
// wakes during the wait stay pending and only repeat a render that finds
// nothing new.
func (f *feed) run(ctx context.Context, wake <-chan struct{}, render func(context.Context) (map[string]string, error)) {
	for {
		rendered := time.Now()
		parts, err := safeRender(ctx, render)
		if ctx.Err() != nil {
			return
		}
		f.publish(snapshot{parts: parts, err: err})
		select {
		case <-wake:
		case <-ctx.Done():
			return
		}
		if wait := time.Until(rendered.Add(snapshotGap)); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return
			}
		}
	}
}

// safeRender is render with a panic turned into its error: a feed runs
// outside any request, where net/http would have recovered it, and must
// not take the server down for a template's fault.
func safeRender(ctx context.Context, render func(context.Context) (map[string]string, error)) (parts map[string]string, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("render of a live view panicked: %v", p)
		}
	}()
	return render(ctx)
}

func (f *feed) publish(s snapshot) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s.err == nil && f.snap.err == nil && f.snap.parts != nil && maps.Equal(s.parts, f.snap.parts) {
		return // a change elsewhere: nothing this view shows
	}
	f.snap = s
	close(f.next)
	f.next = make(chan struct{})
}

// current is the latest rendering and a channel closed when it is replaced.
func (f *feed) current() (snapshot, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.snap, f.next
}

// incidentsLive keeps a page's incident badge and title current: the CADs
// not receiving are re-read (from memory) whenever an attempt is recorded
// or a circuit is adopted from another replica, and sent when they changed.
func (c *Console) incidentsLive(w http.ResponseWriter, r *http.Request) {
	c.serveSnapshot(w, r, "alertas", "", c.AttemptsChanged, func(context.Context) (map[string]templ.Component, error) {
		incs := c.Integrators.Incidents()
		return map[string]templ.Component{"alertas": incidentBadge(incs), "titulo": templ.Raw(templ.EscapeString(incidentTitle(incs)))}, nil
	})
}
