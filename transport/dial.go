package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// aLongTimeAgo is a deadline in the past, used to abort blocked I/O.
var aLongTimeAgo = time.Unix(1, 0)

// dialProto dials addr, runs TLS if tlsCfg is set, writes proto and, if
// wantAck, waits for the server's acknowledgement — all bounded by ctx. It
// returns the raw TCP connection (for hard closes and liveness probes) and
// the connection to use (TLS or raw), with deadlines cleared.
//
// localIP, when set, is the source address of the connection (see
// Config.DialFromBindIP).
func dialProto(ctx context.Context, addr, localIP string, tlsCfg *tls.Config, proto byte, wantAck bool) (raw, conn net.Conn, err error) {
	var d net.Dialer
	if localIP != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(localIP)}
	}
	tcp, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, withCtx(ctx, err)
	}
	conn, err = handshakeOut(ctx, tcp, addr, tlsCfg, proto, wantAck)
	if err != nil {
		_ = tcp.Close()
		return nil, nil, err
	}
	return tcp, conn, nil
}

func handshakeOut(ctx context.Context, raw net.Conn, addr string, tlsCfg *tls.Config, proto byte, wantAck bool) (net.Conn, error) {
	stop := context.AfterFunc(ctx, func() { _ = raw.SetDeadline(aLongTimeAgo) })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(dl)
	}
	conn := raw
	if tlsCfg != nil {
		tc := tls.Client(raw, tlsConfigFor(tlsCfg, addr))
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, fmt.Errorf("transport: TLS handshake with %s: %w", addr, withCtx(ctx, err))
		}
		conn = tc
	}
	if _, err := conn.Write([]byte{proto}); err != nil {
		return nil, fmt.Errorf("transport: handshake with %s: %w", addr, withCtx(ctx, err))
	}
	if wantAck {
		var b [1]byte
		if _, err := io.ReadFull(conn, b[:]); err != nil {
			return nil, fmt.Errorf("transport: handshake with %s: no acknowledgement: %w", addr, withCtx(ctx, err))
		}
		if b[0] != ackRPC {
			return nil, fmt.Errorf("transport: handshake with %s: unexpected acknowledgement %q", addr, b[0])
		}
	}
	if !stop() {
		// ctx ended as we finished; the abort may still poison the
		// deadline, so do not hand out this connection.
		return nil, fmt.Errorf("transport: handshake with %s: %w", addr, ctx.Err())
	}
	_ = raw.SetDeadline(time.Time{})
	return conn, nil
}

// tlsConfigFor returns cfg with ServerName set to addr's host, so the
// server certificate is checked against the address we dialled.
func tlsConfigFor(cfg *tls.Config, addr string) *tls.Config {
	if cfg.ServerName != "" {
		return cfg
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	c := cfg.Clone()
	c.ServerName = host
	return c
}

// withCtx makes err match ctx's error when ctx has ended, so callers can use
// errors.Is(err, context.DeadlineExceeded) whatever the I/O error was. An I/O
// deadline set from ctx can fire a moment before ctx reports it, so a
// timeout past ctx's deadline counts as the deadline.
func withCtx(ctx context.Context, err error) error {
	cerr := ctx.Err()
	if cerr == nil && errors.Is(err, os.ErrDeadlineExceeded) {
		if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
			cerr = context.DeadlineExceeded
		}
	}
	if cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w (%w)", cerr, err)
	}
	return err
}
