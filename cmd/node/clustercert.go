package main

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// clusterCertWarn is how long before its certificate expires a node says
// so at start.
const clusterCertWarn = 14 * 24 * time.Hour

// clusterCertExpiry exports when this node's cluster certificate expires
// (floe_cluster_tls_certificate_expiry_timestamp_seconds, 0 without
// cluster TLS) and logs it at start, with a warning when it is near. The
// certificate is read once, at start: renewed on disk, it is used only
// after a restart, and until then the node keeps its open connections but
// makes no new one, so an expiry shows nowhere else until a peer restarts
// and quorum is lost.
func clusterCertExpiry(cfg config, reg prometheus.Registerer, logger *slog.Logger) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "floe_cluster_tls_certificate_expiry_timestamp_seconds",
		Help: "NotAfter of this node's cluster (Raft) TLS certificate, read at start, as a Unix time (0 without cluster TLS); a renewed certificate is used after a restart.",
	})
	reg.MustRegister(g)
	files := cfg.tls()
	if files == nil {
		return
	}
	notAfter, err := files.NotAfter()
	if err != nil {
		logger.Warn("cluster TLS certificate: cannot read its expiry", "error", err)
		return
	}
	g.Set(float64(notAfter.Unix()))
	left := time.Until(notAfter)
	if left < clusterCertWarn {
		logger.Warn("cluster TLS certificate expires soon: renew it and restart this node before then, or no new connection to or from it will succeed",
			"cert", cfg.TLSCert, "not_after", notAfter.UTC().Format(time.RFC3339), "left", left.Round(time.Minute).String())
		return
	}
	logger.Info("cluster TLS certificate", "cert", cfg.TLSCert, "not_after", notAfter.UTC().Format(time.RFC3339))
}
