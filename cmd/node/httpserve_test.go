package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/internal/httpserve"
	"github.com/floe-catalog/floe/internal/testenv"
)

func TestParseHTTPServerFlags(t *testing.T) {
	c, err := parseConfig(nil, nil, io.Discard)
	require.NoError(t, err)
	assert.Empty(t, c.HTTPTLSCert)
	assert.Empty(t, c.HTTPTLSKey)
	assert.Equal(t, 1<<20, c.HTTPMaxHeaderBytes)
	assert.Equal(t, 10*time.Second, c.HTTPReadHeaderTimeout)
	assert.Equal(t, 2*time.Minute, c.HTTPReadTimeout)
	assert.Equal(t, time.Duration(0), c.HTTPWriteTimeout, "no write timeout: a synchronous purge has no upper bound")
	assert.Equal(t, 2*time.Minute, c.HTTPIdleTimeout)
	assert.Equal(t, 1024, c.HTTPMaxInFlight)

	c, err = parseConfig([]string{"--http-max-in-flight=0", "--http-write-timeout=5m", "--http-tls-key=/flag/key.pem"},
		[]string{"FLOE_HTTP_TLS_CERT=/env/cert.pem", "FLOE_HTTP_TLS_KEY=/env/key.pem", "FLOE_HTTP_READ_TIMEOUT=30s", "FLOE_HTTP_MAX_HEADER_BYTES=65536"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "/env/cert.pem", c.HTTPTLSCert)
	assert.Equal(t, "/flag/key.pem", c.HTTPTLSKey, "flag wins over env")
	assert.Equal(t, 0, c.HTTPMaxInFlight)
	assert.Equal(t, 5*time.Minute, c.HTTPWriteTimeout)
	assert.Equal(t, 30*time.Second, c.HTTPReadTimeout)
	assert.Equal(t, 65536, c.HTTPMaxHeaderBytes)

	for _, tc := range []struct {
		args []string
		env  []string
		want string
	}{
		{args: []string{"--http-tls-cert=c.pem"}, want: "--http-tls-cert and --http-tls-key must be set together"},
		{args: []string{"--http-tls-key=k.pem"}, want: "--http-tls-cert and --http-tls-key must be set together"},
		{env: []string{"FLOE_HTTP_TLS_CERT=c.pem"}, want: "must be set together"},
		{args: []string{"--http-max-header-bytes=0"}, want: "--http-max-header-bytes"},
		{args: []string{"--http-max-header-bytes=9223372036854775807"}, want: "want at most"},
		{args: []string{"--http-addr=127.0.0.1:0"}, want: "want a port from 1 to 65535"},
		{args: []string{"--cluster-addr=127.0.0.1:99999"}, want: "want a port from 1 to 65535"},
		{args: []string{"--purge-heartbeat-timeout=1111111h"}, want: "--purge-heartbeat-timeout"},
		{args: []string{"--http-read-header-timeout=0s"}, want: "--http-read-header-timeout"},
		{args: []string{"--http-read-timeout=-1s"}, want: "must not be negative"},
		{args: []string{"--http-write-timeout=-1s"}, want: "must not be negative"},
		{args: []string{"--http-idle-timeout=-1s"}, want: "must not be negative"},
		{args: []string{"--http-max-in-flight=-1"}, want: "must not be negative"},
		{env: []string{"FLOE_HTTP_MAX_IN_FLIGHT=many"}, want: `invalid value "many" for FLOE_HTTP_MAX_IN_FLIGHT`},
	} {
		t.Run(strings.Join(append(tc.args, tc.env...), " "), func(t *testing.T) {
			_, err := parseConfig(tc.args, tc.env, io.Discard)
			var ue usageError
			require.ErrorAs(t, err, &ue)
			assert.ErrorContains(t, err, tc.want)
			assert.Equal(t, 2, exitCode(err, io.Discard))
		})
	}
}

func TestBinaryHTTPTLSNeedsCertAndKeyExits2(t *testing.T) {
	bin := floeBinary(t)
	for _, tc := range []struct {
		args []string
		env  []string
	}{
		{args: []string{"--http-tls-cert", "cert.pem"}},
		{env: []string{"FLOE_HTTP_TLS_KEY=key.pem"}},
	} {
		t.Run(strings.Join(append(tc.args, tc.env...), " "), func(t *testing.T) {
			cmd := exec.Command(bin, append(tc.args, "--data-dir", t.TempDir())...)
			cmd.Env = append(cleanEnv(), tc.env...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee)
			assert.Equal(t, 2, ee.ExitCode())
			assert.Contains(t, stderr.String(), "--http-tls-cert and --http-tls-key must be set together")
			assert.Empty(t, stdout.String())
		})
	}
}

// TestRunServesHTTPSAndReloadsCertificate runs a node with HTTPS on its
// client port, then replaces the certificate files under it: new
// connections get the new certificate without a restart.
func TestRunServesHTTPSAndReloadsCertificate(t *testing.T) {
	ca := newHTTPTestCA(t)
	tlsDir := t.TempDir()
	certFile, keyFile := filepath.Join(tlsDir, "http.pem"), filepath.Join(tlsDir, "http-key.pem")
	ca.issue(t, 1).install(t, certFile, keyFile)

	httpAddr, clusterAddr, dataDir := freeAddr(t), freeAddr(t), t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs testenv.LogBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--data-dir", dataDir, "--http-addr", httpAddr, "--cluster-addr", clusterAddr, "--log-format=json",
			"--http-tls-cert", certFile, "--http-tls-key", keyFile, "--http-max-header-bytes=4096"}, nil, io.Discard, &logs)
	}()
	defer func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(15 * time.Second):
			t.Fatal("run did not return after its context ended")
		}
		if t.Failed() {
			t.Logf("logs:\n%s", logs.String())
		}
	}()

	base := "https://" + httpAddr
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: ca.pool},
		DisableKeepAlives: true, // a new handshake for every request
	}}
	// get returns the status, body and serial number of the certificate the
	// node presented, or the error.
	get := func(path string, header ...string) (int, string, int64, error) {
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		require.NoError(t, err)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", 0, err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), resp.TLS.PeerCertificates[0].SerialNumber.Int64(), nil
	}
	require.Eventually(t, func() bool {
		code, _, _, err := get("/readyz")
		return err == nil && code == http.StatusOK
	}, 30*time.Second, 50*time.Millisecond, "not ready over HTTPS")

	code, body, serial, err := get("/v1/config")
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, code, body)
	assert.Equal(t, int64(1), serial)
	assert.Contains(t, logs.String(), `"msg":"http server listening"`)
	assert.Contains(t, logs.String(), `"tls":true`)

	// Plain HTTP on the HTTPS port is refused.
	plain, err := http.Get("http://" + httpAddr + "/healthz")
	require.NoError(t, err)
	plain.Body.Close()
	assert.Equal(t, http.StatusBadRequest, plain.StatusCode)

	// Headers beyond --http-max-header-bytes (plus net/http's 4 KiB of slack).
	code, _, _, err = get("/v1/config", "X-Big", strings.Repeat("a", 16<<10))
	require.NoError(t, err)
	assert.Equal(t, http.StatusRequestHeaderFieldsTooLarge, code)

	// Rotate: the node notices within about a second.
	ca.issue(t, 2).install(t, certFile, keyFile)
	require.Eventually(t, func() bool {
		_, _, serial, err := get("/healthz")
		return err == nil && serial == 2
	}, 15*time.Second, 50*time.Millisecond, "the new certificate was not picked up")

	code, body, _, err = get("/metrics")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	assert.NotContains(t, body, `floe_http_tls_reloads_total{result="success"} 0`)
	assert.Contains(t, body, `floe_http_requests_rejected_total{reason="in_flight"} 0`)
	assert.Contains(t, body, "floe_http_requests_in_flight ")
	assert.Contains(t, logs.String(), `"msg":"http TLS certificate reloaded"`)
}

func TestRunFailsOnUnusableHTTPCertificate(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.pem")
	err := run(context.Background(), []string{"--data-dir", t.TempDir(), "--http-addr", freeAddr(t), "--cluster-addr", freeAddr(t),
		"--http-tls-cert", missing, "--http-tls-key", missing}, nil, io.Discard, io.Discard)
	require.ErrorIs(t, err, os.ErrNotExist)
	assert.Contains(t, err.Error(), "missing.pem")
	assert.Equal(t, 1, exitCode(err, io.Discard), "a runtime failure, not a usage error")

	ca := newHTTPTestCA(t)
	certFile, keyFile := filepath.Join(dir, "a.pem"), filepath.Join(dir, "a-key.pem")
	ca.issue(t, 1).install(t, certFile, keyFile)
	otherKey := filepath.Join(dir, "b-key.pem")
	ca.issue(t, 2).install(t, filepath.Join(dir, "b.pem"), otherKey)
	err = run(context.Background(), []string{"--data-dir", t.TempDir(), "--http-addr", freeAddr(t), "--cluster-addr", freeAddr(t),
		"--http-tls-cert", certFile, "--http-tls-key", otherKey}, nil, io.Discard, io.Discard)
	require.True(t, errors.Is(err, httpserve.ErrInvalidKeyPair), "%v", err)
}

// httpTestCA signs server certificates for 127.0.0.1 and localhost.
type httpTestCA struct {
	key  *ecdsa.PrivateKey
	cert *x509.Certificate
	pool *x509.CertPool
}

func newHTTPTestCA(t *testing.T) *httpTestCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "floe HTTP test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &httpTestCA{key: key, cert: cert, pool: pool}
}

// httpTestPair is a PEM server certificate and key.
type httpTestPair struct{ cert, key []byte }

func (ca *httpTestCA) issue(t *testing.T, serial int64) httpTestPair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "floe node"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	return httpTestPair{
		cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}
}

// install replaces certFile and keyFile, each by renaming a new file onto
// it, as certificate tooling does.
func (p httpTestPair) install(t *testing.T, certFile, keyFile string) {
	t.Helper()
	for path, data := range map[string][]byte{certFile: p.cert, keyFile: p.key} {
		require.NoError(t, os.WriteFile(path+".tmp", data, 0o600))
		require.NoError(t, os.Rename(path+".tmp", path))
	}
}

// TestEveryAnswerNamesItsRequest: an X-Request-Id is on every answer,
// the refusals made before the catalog sees a request included: the
// in-flight cap's 503, a dot segment's 400, net/http's own errors.
func TestEveryAnswerNamesItsRequest(t *testing.T) {
	n := runInProcess(t, "--http-max-in-flight=1")
	host := strings.TrimPrefix(n.base, "http://")
	// A create whose declared body never comes holds the only slot.
	hold, err := net.Dial("tcp", host)
	require.NoError(t, err)
	defer hold.Close()
	_, err = io.WriteString(hold, "POST /v1/namespaces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
	require.NoError(t, err)
	var busy *http.Response
	require.Eventually(t, func() bool {
		resp, err := http.Get(n.base + "/v1/namespaces")
		if err != nil {
			return false
		}
		resp.Body.Close()
		busy = resp
		return resp.StatusCode == http.StatusServiceUnavailable
	}, 10*time.Second, 10*time.Millisecond, "the slot is held")
	assert.NotEmpty(t, busy.Header.Get("X-Request-Id"), "the in-flight cap's 503")
	hold.Close()

	for _, raw := range []string{
		"GET /v1/namespaces/a/./tables HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", // dot segment
		"GET /v1/config HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",                       // net/http's 400
	} {
		var head string
		require.Eventually(t, func() bool {
			conn, err := net.Dial("tcp", host)
			if err != nil {
				return false
			}
			defer conn.Close()
			_, _ = io.WriteString(conn, raw)
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			b, _ := io.ReadAll(conn)
			head, _, _ = strings.Cut(string(b), "\r\n\r\n")
			return !strings.HasPrefix(head, "HTTP/1.1 503")
		}, 15*time.Second, 50*time.Millisecond)
		assert.True(t, strings.HasPrefix(head, "HTTP/1.1 400 "), head)
		assert.Contains(t, head, "\r\nX-Request-Id: ", head)
	}
}

// TestNodeRefusesAmbiguousFraming: through the node's whole handler
// chain, a request a proxy could frame otherwise hides no second request,
// and a target no route serves answers in the error model with a request
// id.
func TestNodeRefusesAmbiguousFraming(t *testing.T) {
	n := runInProcess(t)
	host := strings.TrimPrefix(n.base, "http://")
	exchange := func(raw string) string {
		t.Helper()
		conn, err := net.Dial("tcp", host)
		require.NoError(t, err)
		defer conn.Close()
		_, err = io.WriteString(conn, raw)
		require.NoError(t, err)
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, _ := io.ReadAll(conn)
		return string(b)
	}
	hidden := "POST /v1/namespaces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 24\r\n\r\n{\"namespace\":[\"hidden\"]}"
	body := `{"namespace":["shown"]}`
	got := exchange("POST /v1/namespaces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n" +
		fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body) + hidden)
	assert.Equal(t, 1, strings.Count(got, "HTTP/1.1 "), "one answer, then the connection closes: %s", got)
	assert.Contains(t, got, "HTTP/1.1 200 ")
	got = exchange("POST /v1/namespaces HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nContent-Type: application/json\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"88\r\n" + hidden + "\r\n0\r\n\r\n")
	assert.Equal(t, 1, strings.Count(got, "\r\nDate: "), "one answer: %s", got)
	assert.Contains(t, got, " 400 Bad Request")
	assert.Contains(t, got, "Transfer-Encoding")
	resp, err := http.Get(n.base + "/v1/namespaces/hidden")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "the hidden request never ran")

	got = exchange("GET * HTTP/1.1\r\nHost: x\r\n\r\n")
	assert.Contains(t, got, "HTTP/1.1 400 ")
	assert.Contains(t, got, "\r\nX-Request-Id: ")
	assert.Contains(t, got, `"type":"BadRequestException"`)
}
