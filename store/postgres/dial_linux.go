package postgres

import (
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// dialer dials the database with keepalives and, on Linux, a TCP user
// timeout: data the server has not acknowledged within userTimeout breaks
// the connection, so a write to a silent peer fails instead of waiting
// for the kernel's retransmissions (some 15 minutes).
func dialer(timeout time.Duration) *net.Dialer {
	return &net.Dialer{
		Timeout: timeout,
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: keepAliveIdle, Interval: keepAliveInterval,
			Count: keepAliveCount},
		Control: func(network, _ string, c syscall.RawConn) error {
			if network != "tcp" && network != "tcp4" && network != "tcp6" {
				return nil
			}
			var serr error
			err := c.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(userTimeout.Milliseconds()))
			})
			if err != nil {
				return err
			}
			return serr
		},
	}
}
