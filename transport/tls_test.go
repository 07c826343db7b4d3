package transport

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTLSFilesLoad(t *testing.T) {
	ca := newCA(t, "floe")
	good := ca.issue(t, "node-1")
	server, client, err := good.Load()
	require.NoError(t, err)
	assert.Equal(t, tls.RequireAndVerifyClientCert, server.ClientAuth)
	assert.Len(t, client.Certificates, 1)

	missing := good
	missing.CertFile = filepath.Join(t.TempDir(), "nope.pem")
	_, _, err = missing.Load()
	require.ErrorIs(t, err, os.ErrNotExist)
	assert.Contains(t, err.Error(), "nope.pem")

	other := ca.issue(t, "node-2")
	mismatched := good
	mismatched.KeyFile = other.KeyFile
	_, _, err = mismatched.Load()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "private key does not match")

	foreign := newCA(t, "evil").issue(t, "node-x")
	foreign.CAFile = good.CAFile
	_, _, err = foreign.Load()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "does not verify under CA")

	noCA := good
	noCA.CAFile = good.KeyFile // a PEM file without certificates
	_, _, err = noCA.Load()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no PEM certificates")

	_, _, err = TLSFiles{CertFile: good.CertFile}.Load()
	require.Error(t, err)

	_, err = Listen(Config{BindAddr: "127.0.0.1:0", TLS: &missing})
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = NewClient(ClientConfig{TLS: &missing})
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestTLSRejectsClientsOutsideTheCA(t *testing.T) {
	reg := prometheus.NewRegistry()
	ca := newCA(t, "floe")
	nodeFiles := ca.issue(t, "node-1")
	m := mustListen(t, Config{TLS: &nodeFiles, Registerer: reg})
	var calls atomic.Int32
	m.Serve(func(context.Context, string, []byte) ([]byte, error) { calls.Add(1); return []byte("ok"), nil })
	addr := m.Addr().String()

	// A member of the cluster gets through.
	clientFiles := ca.issue(t, "node-2")
	resp, err := mustClient(t, ClientConfig{TLS: &clientFiles}).Call(ctxTimeout(t, 5*time.Second), addr, "M", nil)
	require.NoError(t, err)
	assert.Equal(t, "ok", string(resp))

	// A client whose certificate another CA signed trusts our server but is
	// refused by it. TLS 1.3 lets its handshake finish before the server
	// verifies the certificate; the missing acknowledgement turns that into
	// a dial failure, not an unknown outcome.
	evilFiles := newCA(t, "evil").issue(t, "intruder")
	_, evilTLS, err := evilFiles.Load()
	require.NoError(t, err)
	_, trusted, err := clientFiles.Load()
	require.NoError(t, err)
	evilTLS.RootCAs = trusted.RootCAs
	evilTLS.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return &evilTLS.Certificates[0], nil // present it even though the server names another CA
	}
	evil := mustClient(t, ClientConfig{DialTimeout: 2 * time.Second})
	evil.tls = evilTLS
	_, err = evil.Call(ctxTimeout(t, 5*time.Second), addr, "M", nil)
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrOutcomeUnknown)

	// No certificate at all.
	anon := mustClient(t, ClientConfig{DialTimeout: 2 * time.Second})
	anon.tls = &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: trusted.RootCAs}
	_, err = anon.Call(ctxTimeout(t, 5*time.Second), addr, "M", nil)
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrOutcomeUnknown)

	// Plaintext against a TLS port.
	_, err = mustClient(t, ClientConfig{DialTimeout: 2 * time.Second}).Call(ctxTimeout(t, 5*time.Second), addr, "M", nil)
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrOutcomeUnknown)

	assert.Equal(t, int32(1), calls.Load(), "only the member's call reached the handler")
	assert.GreaterOrEqual(t, counter(t, reg, "floe_transport_handshakes_rejected_total", map[string]string{"reason": rejectTLS}), 3.0)
}
