//go:build !linux

package httpserve

import "net"

// setNotSentLowat is a no-op where floe does not set TCP_NOTSENT_LOWAT
// (see lowat_linux.go).
func setNotSentLowat(net.Conn) {}
