package httpserve

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/internal/testenv"
)

func TestServesHTTPSAndPicksUpReplacedFiles(t *testing.T) {
	ca := newTestCA(t)
	first := ca.issue(t, 100)
	certFile, keyFile := first.install(t, t.TempDir())
	clock := newFakeClock()
	reg := prometheus.NewRegistry()
	s, err := New(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }),
		Config{CertFile: certFile, KeyFile: keyFile, Logger: discardLogger(), Registerer: reg, now: clock.now})
	require.NoError(t, err)
	require.True(t, s.TLS())
	url := "https://" + serve(t, s) + "/healthz"
	client := tlsClient(ca.pool)

	assert.Equal(t, int64(100), servedSerial(t, client, url))
	assert.Equal(t, float64(first.notAfter.Unix()), value(s.m.tlsExpiry))

	second := ca.issue(t, 200)
	writeFileAtomic(t, certFile, second.cert)
	writeFileAtomic(t, keyFile, second.key)
	assert.Equal(t, int64(100), servedSerial(t, client, url), "files are not checked again within the interval")

	clock.advance(DefaultCertCheckInterval)
	assert.Equal(t, int64(200), servedSerial(t, client, url), "a new connection sees the new certificate")
	assert.Equal(t, float64(1), value(s.m.tlsReloads.WithLabelValues(resultSuccess)))
	assert.Equal(t, float64(0), value(s.m.tlsReloads.WithLabelValues(resultFailure)))
	assert.Equal(t, float64(second.notAfter.Unix()), value(s.m.tlsExpiry))

	// Files rewritten in place (the same files, a new modification time)
	// are seen too. The times are set explicitly: two writes within one
	// tick of the file system's clock may share a modification time.
	third := ca.issue(t, 300)
	require.NoError(t, os.WriteFile(keyFile, third.key, 0o600))
	require.NoError(t, os.WriteFile(certFile, third.cert, 0o600))
	later := time.Now().Add(time.Minute)
	require.NoError(t, os.Chtimes(keyFile, later, later))
	require.NoError(t, os.Chtimes(certFile, later, later))
	clock.advance(DefaultCertCheckInterval)
	assert.Equal(t, int64(300), servedSerial(t, client, url))
}

func TestFailedReloadKeepsServingTheLastGoodCertificate(t *testing.T) {
	ca := newTestCA(t)
	good := ca.issue(t, 1)
	certFile, keyFile := good.install(t, t.TempDir())
	clock := newFakeClock()
	var logs testenv.LogBuffer
	r, err := newCertReloader(certFile, keyFile, time.Second, clock.now, slog.New(slog.NewTextHandler(&logs, nil)), newMetrics(nil))
	require.NoError(t, err)
	serial := func() int64 {
		c, err := r.getCertificate(nil)
		require.NoError(t, err)
		return c.Leaf.SerialNumber.Int64()
	}
	failures := func() float64 { return value(r.m.tlsReloads.WithLabelValues(resultFailure)) }

	// Half a rotation: the new certificate with the old key.
	next := ca.issue(t, 2)
	writeFileAtomic(t, certFile, next.cert)
	clock.advance(time.Second)
	assert.Equal(t, int64(1), serial())
	assert.Equal(t, float64(1), failures())
	assert.Contains(t, logs.String(), "http TLS certificate reload failed")

	// Unchanged broken files are not retried, nor reported again.
	clock.advance(time.Second)
	assert.Equal(t, int64(1), serial())
	assert.Equal(t, float64(1), failures())

	// The rotation completes.
	writeFileAtomic(t, keyFile, next.key)
	clock.advance(time.Second)
	assert.Equal(t, int64(2), serial())
	assert.Equal(t, float64(1), value(r.m.tlsReloads.WithLabelValues(resultSuccess)))

	// A deleted key file is a failure too; the certificate stays.
	require.NoError(t, os.Remove(keyFile))
	clock.advance(time.Second)
	assert.Equal(t, int64(2), serial())
	assert.Equal(t, float64(2), failures())
	assert.Equal(t, 1, strings.Count(logs.String(), "no such file"), logs.String())
}

func TestNewRejectsUnusableTLSFiles(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	certFile, keyFile := ca.issue(t, 1).install(t, dir)

	_, err := New(http.NotFoundHandler(), Config{CertFile: filepath.Join(dir, "nope.pem"), KeyFile: keyFile, Logger: discardLogger()})
	require.ErrorIs(t, err, os.ErrNotExist)
	assert.Contains(t, err.Error(), "nope.pem")

	other := t.TempDir()
	_, otherKey := ca.issue(t, 2).install(t, other)
	_, err = New(http.NotFoundHandler(), Config{CertFile: certFile, KeyFile: otherKey, Logger: discardLogger()})
	require.ErrorIs(t, err, ErrInvalidKeyPair)
	assert.Contains(t, err.Error(), "private key does not match")

	_, err = New(http.NotFoundHandler(), Config{CertFile: keyFile, KeyFile: keyFile, Logger: discardLogger()})
	require.ErrorIs(t, err, ErrInvalidKeyPair)
}

func TestPlainHTTPWithoutTLS(t *testing.T) {
	s, err := New(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }), Config{Logger: discardLogger()})
	require.NoError(t, err)
	assert.False(t, s.TLS())
	resp, err := http.Get("http://" + serve(t, s) + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Nil(t, resp.TLS)
	assert.Equal(t, float64(0), value(s.m.tlsExpiry))
}

// A failed TLS handshake, which anyone can cause once per connection, is
// counted and logged at debug only: connecting and closing in a loop wrote
// a warning per connection.
func TestFailedHandshakesAreCountedNotWarned(t *testing.T) {
	ca := newTestCA(t)
	certFile, keyFile := ca.issue(t, 100).install(t, t.TempDir())
	var logged bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logged}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := New(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }),
		Config{CertFile: certFile, KeyFile: keyFile, Logger: logger, Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	addr := serve(t, s)
	for range 20 {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		_, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")) // plain HTTP to the HTTPS port
		_, _ = io.ReadAll(c)
		require.NoError(t, c.Close())
	}
	require.Eventually(t, func() bool { return value(s.m.tlsHandshakeErrors) == 20 }, 5*time.Second, 10*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	assert.Empty(t, logged.String())
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
