package httpserve

import "github.com/prometheus/client_golang/prometheus"

// Reasons in floe_http_requests_rejected_total.
const reasonInFlight = "in_flight"

// Results in floe_http_tls_reloads_total.
const (
	resultSuccess = "success"
	resultFailure = "failure"
)

type metrics struct {
	inFlight   prometheus.Gauge
	rejected   *prometheus.CounterVec
	tlsReloads *prometheus.CounterVec
	tlsExpiry  prometheus.Gauge
	// stalled counts answers cut off by the write stall bound.
	stalled prometheus.Counter
	// framingClosed counts connections closed after a request that
	// carried both Content-Length and Transfer-Encoding.
	framingClosed prometheus.Counter
	// tlsHandshakeErrors counts failed TLS handshakes, logged at debug
	// only (errorLog).
	tlsHandshakeErrors prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "floe_http_requests_in_flight", Help: "HTTP requests being served that count against --http-max-in-flight.",
		}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floe_http_requests_rejected_total", Help: "HTTP requests refused before reaching a handler, by reason.",
		}, []string{"reason"}),
		tlsReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floe_http_tls_reloads_total", Help: "Reloads of the HTTP TLS certificate after its files changed, by result.",
		}, []string{"result"}),
		tlsExpiry: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "floe_http_tls_certificate_expiry_timestamp_seconds", Help: "NotAfter of the HTTP TLS certificate being served, as a Unix time (0 without TLS).",
		}),
		stalled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_http_answers_stalled_total", Help: "Answers cut off because the client read none of them for --http-write-stall-timeout.",
		}),
		framingClosed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_http_ambiguous_framing_closes_total", Help: "Connections closed after a request that carried both Content-Length and Transfer-Encoding.",
		}),
		tlsHandshakeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_http_tls_handshake_errors_total", Help: "Connections to the HTTPS port whose TLS handshake failed (a client closing at once, plain HTTP, no shared version or cipher, a certificate the client refused); each is logged at debug level only.",
		}),
	}
	// Known label values start at zero, so they show before the first event.
	for _, r := range []string{reasonInFlight, reasonMalformed, reasonHeadersTooLarge, reasonTransferEncoding, reasonProtocolVersion} {
		m.rejected.WithLabelValues(r)
	}
	m.tlsReloads.WithLabelValues(resultSuccess)
	m.tlsReloads.WithLabelValues(resultFailure)
	if reg != nil {
		reg.MustRegister(m.inFlight, m.rejected, m.tlsReloads, m.tlsExpiry, m.stalled, m.framingClosed, m.tlsHandshakeErrors)
	}
	return m
}
