package httpserve

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// Every accepted connection wakes a blocked writer once less than
// notSentLowat bytes are unsent (see setNotSentLowat).
func TestAcceptedConnectionsSetNotSentLowat(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := lowatListener{ln}
	defer l.Close()
	go func() {
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			defer c.Close()
			_, _ = c.Read(make([]byte, 1))
		}
	}()
	c, err := l.Accept()
	require.NoError(t, err)
	defer c.Close()
	rc, err := c.(*net.TCPConn).SyscallConn()
	require.NoError(t, err)
	var got int
	var gerr error
	require.NoError(t, rc.Control(func(fd uintptr) {
		got, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT)
	}))
	require.NoError(t, gerr)
	assert.Equal(t, notSentLowat, got)
}
