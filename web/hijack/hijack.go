// Package hijack holds what the server's websockets share: reaching the
// connection through the handlers' wrappers, and ending every socket when
// the server shuts down, since http.Server.Shutdown does not track hijacked
// connections.
package hijack

import (
	"bufio"
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

// Closing is closed once, at shutdown; the zero value is ready.
type Closing struct {
	once   sync.Once
	ch     chan struct{}
	closed sync.Once
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
