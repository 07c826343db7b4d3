package auth

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Reasons for floe_auth_rejected_total.
const (
	reasonNoCredentials = "no_credentials"
	reasonInvalid       = "invalid"
	reasonExpired       = "expired"
	reasonUnavailable   = "unavailable"
)

// reasonOf maps an Authenticate error to its metric label.
func reasonOf(err error) string {
	switch {
	case errors.Is(err, ErrNoCredentials):
		return reasonNoCredentials
	case errors.Is(err, ErrExpiredToken):
		return reasonExpired
	case errors.Is(err, ErrUnavailable):
		return reasonUnavailable
	default:
		return reasonInvalid
	}
}

type authMetrics struct {
	authenticated *prometheus.CounterVec // by via
	rejected      *prometheus.CounterVec // by reason
}

func newAuthMetrics(reg prometheus.Registerer) *authMetrics {
	return &authMetrics{
		authenticated: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floe_auth_authenticated_total",
			Help: "Requests authenticated, by mechanism (root, static-token, jwt, oidc).",
		}, []string{"via"})),
		rejected: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floe_auth_rejected_total",
			Help: "Requests whose credentials were refused, by reason (no_credentials, invalid, expired, unavailable).",
		}, []string{"reason"})),
	}
}

type tokenMetrics struct {
	issued *prometheus.CounterVec // by grant
	failed *prometheus.CounterVec // by reason
}

func newTokenMetrics(reg prometheus.Registerer) *tokenMetrics {
	return &tokenMetrics{
		issued: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floe_auth_tokens_issued_total",
			Help: "Access tokens issued by the OAuth token endpoint, by grant (client_credentials, token_exchange).",
		}, []string{"grant"})),
		failed: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floe_auth_token_requests_failed_total",
			Help: "OAuth token requests refused, by reason (the OAuth error code, busy, unavailable or internal).",
		}, []string{"reason"})),
	}
}

// register registers c, or returns the collector already registered under
// the same descriptor, so that several instances in one process (tests, an
// embedded cluster) can share a registry. A nil registry registers nothing.
// Conflicting definitions are a programming error and panic.
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
		panic(err)
	}
	return c
}
