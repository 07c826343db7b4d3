package httpserve

import (
	"net"

	"golang.org/x/sys/unix"
)

// setNotSentLowat makes c writable again as soon as less than
// notSentLowat bytes of what was written are unsent, however large the
// kernel lets the send buffer grow. Without it Linux wakes a blocked
// writer only once half of all that is queued has drained: with a buffer
// autotuned to megabytes, a client reading 32 KiB/s made one 64 KiB write
// wait over a minute, past its deadline, and was cut off while reading
// steadily. What is in flight (sent, not yet acknowledged) is not bounded,
// so throughput over long links is not either. Best effort: an error
// leaves the connection as it was.
func setNotSentLowat(c net.Conn) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, notSentLowat)
	})
}
