// Package session is the Geohub integrator SDK's session client (SPEC 8d,
// integrator guide section 2.1): for a CAD without a public HTTPS address,
// behind NAT or a municipal firewall, it dials Geohub's GET /api/sessao
// with the integrator's API key and receives the same signed deliveries a
// callback would, one websocket message each. Each message goes through a
// [receiver.Receiver], which keeps the five obligations exactly as for a
// POST, and is answered with an ack when the receiver would answer 2xx,
// else with a nack carrying the status it would answer.
//
// [Run] keeps the session up: it dials again with a growing wait (1 s,
// 2 s, 4 s… up to 60 s, with some jitter so a fleet of CADs does not dial
// in step after a restart of Geohub) when the connection drops, Geohub
// restarts (1001) or goes silent; and it stops, returning why, when a
// person must act: another session of the same integrator took over
// (4000), the key no longer holds or the integrator is inactive (1008),
// the integrator receives by callback (4001), or the handshake was refused
// with 401 (a wrong key). Dialling again after 4000 would make two instances of a
// CAD throw each other out forever.
//
// Deliveries of different aggregates are applied concurrently, as over
// HTTP; the receiver orders each aggregate. An answer lost with a dropped
// connection is harmless: Geohub delivers again what it did not see
// acknowledged, and the receiver acknowledges the repeat without applying
// it twice.
package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"geohub/receiver"
)

// Defaults of [Config].
const (
	DefaultMinWait   = time.Second
	DefaultMaxWait   = time.Minute
	DefaultDeadAfter = 30 * time.Second
	// maxMessage bounds one delivery message: the receiver's largest body,
	// escaped as a JSON string (at most 6 bytes a byte for control
	// characters, far fewer in practice), and its headers.
	maxMessage = 8 << 20
	// maxApplying bounds the deliveries being applied at once; Geohub
	// never sends more than its window (16 by default) unanswered.
	maxApplying = 256
	writeWait   = 10 * time.Second
	// healthySession is how long a session stays up to count as healthy,
	// as the JavaScript client counts it.
	healthySession = 30 * time.Second
)

// Config configures [Run]. URL, APIKey and Receiver are required.
type Config struct {
	// URL is Geohub's address, as https://geohub.example.gov.br: the
	// session is dialled at its /api/sessao, over wss for https (ws for
	// http). A ws(s) URL is used as it is.
	URL string
	// APIKey is the integrator's api_key.
	APIKey string
	// Receiver verifies, deduplicates, filters and orders each delivery.
	Receiver *receiver.Receiver
	// Dialer dials the websocket; default one with a 10 s handshake and
	// the proxy of the environment (HTTPS_PROXY), as a CAD behind a
	// municipal proxy needs.
	Dialer *websocket.Dialer
	// MinWait and MaxWait bound the wait between dials; defaults 1 s and
	// 60 s.
	MinWait, MaxWait time.Duration
	// DeadAfter is how long a session lasts without a message or a ping
	// from Geohub, which pings every 10 s; default 30 s.
	DeadAfter time.Duration
	// OnState, if set, is told each time a session opens or ends, for the
	// CAD's logs and health page.
	OnState func(State)
}

// State is a change of the session.
type State struct {
	// Connected is true when a session has just opened.
	Connected bool
	// Err is why a session ended or a dial failed (a *[CloseError] when
	// Geohub closed it); nil when Connected.
	Err error
	// Retry is the wait before the next dial; 0 when Run stops.
	Retry time.Duration
}

// CloseError is the close code and reason Geohub ended a session with
// (integrator guide 2.1).
type CloseError struct {
	Code   int
	Reason string
}

func (e *CloseError) Error() string {
	return fmt.Sprintf("geohub closed the session: %d %s", e.Code, e.Reason)
}

// Close codes of Geohub's sessions, besides 1001 (going away) and 1008
// (the key no longer holds, or the integrator is inactive).
const (
	CloseReplaced   = 4000
	CloseNotSession = 4001
	CloseBadAnswer  = 4002
)

// Final reports whether a person must act before dialling again.
func (e *CloseError) Final() bool {
	switch e.Code {
	case CloseReplaced, CloseNotSession, websocket.ClosePolicyViolation:
		return true
	}
	return false
}

// RefusedError is a handshake answered with an error status. Run stops on
// a 401 (the key is wrong: a person must fix it) and dials again after
// any other, which a proxy or a deploy in progress may answer for a while.
type RefusedError struct {
	Status int
	Body   string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("geohub refused the session: HTTP %d %s", e.Status, e.Body)
}

// Run keeps a session open until ctx ends, returning ctx's error, or until
// one ends in a way that dialling again cannot fix, returning a
// *[CloseError] that is Final or a *[RefusedError] with status 401.
func Run(ctx context.Context, cfg Config) error {
	target, err := sessionURL(cfg.URL)
	if err != nil {
		return err
	}
	if cfg.APIKey == "" || cfg.Receiver == nil {
		return errors.New("session: Config needs APIKey and Receiver")
	}
	if cfg.Dialer == nil {
		cfg.Dialer = &websocket.Dialer{Proxy: http.ProxyFromEnvironment, HandshakeTimeout: 10 * time.Second}
	}
	if cfg.MinWait <= 0 {
		cfg.MinWait = DefaultMinWait
	}
	if cfg.MaxWait < cfg.MinWait {
		cfg.MaxWait = max(DefaultMaxWait, cfg.MinWait)
	}
	if cfg.DeadAfter <= 0 {
		cfg.DeadAfter = DefaultDeadAfter
	}
	state := func(s State) {
		if cfg.OnState != nil {
			cfg.OnState(s)
		}
	}
	wait := cfg.MinWait
	for {
		began := time.Now()
		received, err := session(ctx, cfg, target, state)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var closed *CloseError
		var refused *RefusedError
		if errors.As(err, &closed) && closed.Final() || errors.As(err, &refused) && refused.Status == http.StatusUnauthorized {
			state(State{Err: err})
			return err
		}
		// A session that delivered something, or stayed up a while, was
		// healthy: what ended it (a restart of Geohub, say) starts the
		// waits over, so an idle CAD is not left out for a minute.
		if received || time.Since(began) >= healthySession {
			wait = cfg.MinWait
		}
		retry := jitter(wait)
		state(State{Err: err, Retry: retry})
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(retry):
		}
		wait = min(wait*2, cfg.MaxWait)
	}
}

// jitter spreads d over ±20%.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration((rand.Float64()*0.4-0.2)*float64(d))
}

func sessionURL(base string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("session: URL %q is not Geohub's address (https://host)", base)
	}
	switch u.Scheme {
	case "https":
		u.Scheme = "wss"
	case "http":
		u.Scheme = "ws"
	case "ws", "wss":
		return u.String(), nil
	default:
		return "", fmt.Errorf("session: URL %q: the scheme must be https (or http on a test machine)", base)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/api/sessao"
	return u.String(), nil
}

// answer is a session's answer to one delivery.
type answer struct {
	Ack    string `json:"ack,omitempty"`
	Nack   string `json:"nack,omitempty"`
	Motivo string `json:"motivo,omitempty"`
}

// session runs one session until it ends, reporting whether any delivery
// came through it.
func session(ctx context.Context, cfg Config, target string, state func(State)) (received bool, err error) {
	conn, res, err := cfg.Dialer.DialContext(ctx, target, http.Header{"Authorization": {"Bearer " + cfg.APIKey}})
	if err != nil {
		if res != nil && res.StatusCode != http.StatusSwitchingProtocols {
			var problem struct {
				Erro string `json:"erro"`
			}
			if res.Body != nil {
				json.NewDecoder(http.MaxBytesReader(nil, res.Body, 4<<10)).Decode(&problem)
			}
			return false, &RefusedError{Status: res.StatusCode, Body: problem.Erro}
		}
		return false, err
	}
	defer conn.Close()
	state(State{Connected: true})

	// Closing the connection is what stops the read below, on ctx's end
	// as on a dead session.
	ended := make(chan struct{})
	defer close(ended)
	go func() {
		select {
		case <-ctx.Done():
			conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
			conn.Close()
		case <-ended:
		}
	}()

	alive := func() { conn.SetReadDeadline(time.Now().Add(cfg.DeadAfter)) }
	alive()
	conn.SetReadLimit(maxMessage)
	conn.SetPingHandler(func(data string) error {
		alive()
		err := conn.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(writeWait))
		if errors.Is(err, websocket.ErrCloseSent) {
			return nil
		}
		return err
	})

	var writing sync.Mutex
	answerWith := func(a answer) {
		writing.Lock()
		defer writing.Unlock()
		conn.SetWriteDeadline(time.Now().Add(writeWait))
		// A failed write ends the session through the read below.
		if err := conn.WriteJSON(a); err != nil {
			conn.Close()
		}
	}
	applying := make(chan struct{}, maxApplying)
	for {
		_, msg, err := conn.ReadMessage()
		if err != nil {
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				return received, &CloseError{Code: ce.Code, Reason: ce.Text}
			}
			return received, err
		}
		alive()
		var fields map[string]string
		if err := json.Unmarshal(msg, &fields); err != nil || fields["x-geohub-entrega-id"] == "" {
			// Not a delivery this client understands, and nothing to
			// answer it by: Geohub times it out and delivers it again.
			continue
		}
		received = true
		h := http.Header{}
		for k, v := range fields {
			if k != "corpo" {
				h.Set(k, v)
			}
		}
		id, body := fields["x-geohub-entrega-id"], []byte(fields["corpo"])
		applying <- struct{}{}
		go func() {
			defer func() { <-applying }()
			// ctx, not the session's: an Apply under way finishes even if
			// the connection drops, and its repeat is then acknowledged
			// without applying it again.
			status := cfg.Receiver.Receive(ctx, h, body)
			if status >= 200 && status < 300 {
				answerWith(answer{Ack: id})
			} else {
				answerWith(answer{Nack: id, Motivo: fmt.Sprintf("%d %s", status, http.StatusText(status))})
			}
		}()
	}
}
