package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A node exports and logs when its cluster certificate expires: read at
// start only, an expired one shows nowhere else until quorum is lost.
func TestClusterCertExpiryIsExportedAndWarned(t *testing.T) {
	gauge := func(reg *prometheus.Registry) float64 {
		t.Helper()
		fams, err := reg.Gather()
		require.NoError(t, err)
		for _, f := range fams {
			if f.GetName() == "floe_cluster_tls_certificate_expiry_timestamp_seconds" {
				return f.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("floe_cluster_tls_certificate_expiry_timestamp_seconds is not exported")
		return 0
	}

	// Without cluster TLS: 0, nothing logged.
	reg := prometheus.NewRegistry()
	var logs bytes.Buffer
	clusterCertExpiry(config{}, reg, slog.New(slog.NewTextHandler(&logs, nil)))
	assert.Zero(t, gauge(reg))
	assert.Empty(t, logs.String())

	// A certificate that expires within the hour: its NotAfter, and a
	// warning that says what to do.
	ca := newHTTPTestCA(t)
	pair := ca.issue(t, 2)
	dir := t.TempDir()
	cfg := config{TLSCert: filepath.Join(dir, "node.pem"), TLSKey: filepath.Join(dir, "node.key"), TLSCA: filepath.Join(dir, "ca.pem")}
	require.NoError(t, os.WriteFile(cfg.TLSCert, pair.cert, 0o600))
	reg = prometheus.NewRegistry()
	clusterCertExpiry(cfg, reg, slog.New(slog.NewTextHandler(&logs, nil)))
	assert.InDelta(t, float64(ca.cert.NotAfter.Unix()), gauge(reg), 120, "the node certificate's NotAfter, about the CA's")
	assert.Contains(t, logs.String(), "cluster TLS certificate expires soon")
	assert.Contains(t, logs.String(), "restart this node")
}
