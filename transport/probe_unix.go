//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package transport

import (
	"errors"
	"net"
	"syscall"
)

// alive reports whether an idle pooled connection can still carry a
// request: nothing may be readable on it. A peek that finds EOF (the server
// idled it out or restarted), an error (reset) or stray bytes (a TLS
// close_notify) means it is dead. The socket is non-blocking, so the peek
// never waits. This catches the common stale-connection case before the
// request is written, where a failure could otherwise only be reported as
// ErrOutcomeUnknown.
func alive(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var perr error
	var buf [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, perr = syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true
	})
	if err != nil {
		return false
	}
	if errors.Is(perr, syscall.EAGAIN) || errors.Is(perr, syscall.EWOULDBLOCK) {
		return true
	}
	return false // EOF, a reset, or unexpected bytes
}
