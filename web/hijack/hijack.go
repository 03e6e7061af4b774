// Package hijack holds what the server's websockets share: reaching the
// connection through the handlers' wrappers, and ending every socket when
// the server shuts down, since http.Server.Shutdown does not track hijacked
// connections.
package hijack

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"sync"
)

// Writer reaches the connection through wrappers that only expose Unwrap
// (request logging), as gorilla asks the writer itself to hijack.
type Writer struct{ http.ResponseWriter }

// Hijack implements http.Hijacker.
func (h Writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(h.ResponseWriter).Hijack()
}

// Closing is closed once, at shutdown; the zero value is ready. It also
// counts the sockets still running, so that shutdown can wait for them to
// finish what they record before the store closes.
type Closing struct {
	once   sync.Once
	ch     chan struct{}
	closed sync.Once
	live   sync.WaitGroup
}

// Track counts one more socket running until the returned function is
// called.
func (c *Closing) Track() (done func()) {
	c.live.Add(1)
	return c.live.Done
}

// Wait waits for every tracked socket to end, or for ctx.
func (c *Closing) Wait(ctx context.Context) error {
	ended := make(chan struct{})
	go func() { c.live.Wait(); close(ended) }()
	select {
	case <-ended:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Done is closed when Close is called.
func (c *Closing) Done() <-chan struct{} { return c.channel() }

// Close closes Done; later calls do nothing.
func (c *Closing) Close() {
	ch := c.channel()
	c.closed.Do(func() { close(ch) })
}

func (c *Closing) channel() chan struct{} {
	c.once.Do(func() { c.ch = make(chan struct{}) })
	return c.ch
}
