package transport

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

const namespace = "floe"
const subsystem = "transport"

// Reasons for floe_transport_handshakes_rejected_total.
const (
	rejectTLS       = "tls_handshake"
	rejectProtocol  = "unknown_protocol"
	rejectTimeout   = "timeout"
	rejectNoHandler = "no_consumer"
)

// Outcomes for floe_transport_rpc_calls_total.
const (
	outcomeOK          = "ok"
	outcomeRemoteError = "remote_error"
	outcomeNotSent     = "not_sent"
	outcomeUnknown     = "unknown"
)

type muxMetrics struct {
	accepted *prometheus.CounterVec // by protocol
	rejected *prometheus.CounterVec // by reason
}

func newMuxMetrics(reg prometheus.Registerer) *muxMetrics {
	return &muxMetrics{
		accepted: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "connections_accepted_total",
			Help: "Inbound cluster connections that completed the handshake, by protocol (raft, rpc).",
		}, []string{"protocol"})),
		rejected: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "handshakes_rejected_total",
			Help: "Inbound cluster connections closed during the handshake, by reason.",
		}, []string{"reason"})),
	}
}

type clientMetrics struct {
	calls    *prometheus.CounterVec   // by method, outcome
	duration *prometheus.HistogramVec // by method
	pool     *prometheus.CounterVec   // by result (dial, reuse)
}

func newClientMetrics(reg prometheus.Registerer) *clientMetrics {
	return &clientMetrics{
		calls: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "rpc_calls_total",
			Help: "Client RPC calls by method and outcome (ok, remote_error, not_sent, unknown).",
		}, []string{"method", "outcome"})),
		duration: register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name:    "rpc_duration_seconds",
			Help:    "Client RPC latency by method, including dials and retries.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16), // 0.5ms .. ~16s
		}, []string{"method"})),
		pool: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "pool_connections_total",
			Help: "Connections obtained by the RPC client, by result (dial, reuse).",
		}, []string{"result"})),
	}
}

// register registers c, or returns the collector already registered under
// the same descriptor, so several Muxes or Clients in one process (tests, an
// embedded cluster) can share a registry. A nil registry registers nothing.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err) // conflicting definitions: a programming error
	}
	return c
}
