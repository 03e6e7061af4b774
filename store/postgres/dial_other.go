//go:build !linux

package postgres

import (
	"net"
	"time"
)

// dialer dials the database with keepalives; TCP_USER_TIMEOUT is Linux's.
func dialer(timeout time.Duration) *net.Dialer {
	return &net.Dialer{
		Timeout: timeout,
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: keepAliveIdle, Interval: keepAliveInterval,
			Count: keepAliveCount},
	}
}
