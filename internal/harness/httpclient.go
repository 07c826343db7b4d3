package harness

import (
	"net"
	"net/http"
	"time"
)

// NewHTTPClient returns a keep-alive HTTP client for talking to the
// processes on loopback: it never uses a proxy from the environment and
// keeps idlePerHost idle connections per host. timeout bounds each request
// whole; 0 leaves requests bounded only by their context.
func NewHTTPClient(idlePerHost int, timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        4 * idlePerHost,
			MaxIdleConnsPerHost: idlePerHost,
			IdleConnTimeout:     90 * time.Second,
		},
	}
}
