package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/floe-catalog/floe/internal/harness"
)

// Client-side bounds. A mutation whose outcome is unknown (no answer, or
// 5xx) is retried with the same Idempotency-Key on another node, at most
// mutateAttempts times and for at most mutateBudget; if no try gives a
// definite answer the operation stays unknown in the history.
const (
	readTimeout    = 4 * time.Second
	attemptTimeout = 6 * time.Second
	mutateAttempts = 6
	mutateBudget   = 25 * time.Second
)

// api sends catalog requests straight to the nodes' HTTP addresses (the
// link proxies only sit between nodes).
type api struct {
	nodes []*harness.Node
	hc    *http.Client

	requests  atomic.Int64
	noAnswer  atomic.Int64 // transport errors and timeouts
	serverErr atomic.Int64 // 5xx
	replays   atomic.Int64 // answers with Idempotent-Replayed: true
}

func newAPI(nodes []*harness.Node) *api {
	return &api{nodes: nodes, hc: harness.NewHTTPClient(16, 0)}
}

// reply is one HTTP exchange. status 0 means no answer (err says why).
type reply struct {
	status   int
	body     []byte
	replayed bool
	node     string
	err      error
}

// unknown reports whether the reply leaves a mutation's outcome unknown.
func (r reply) unknown() bool { return r.status == 0 || r.status >= 500 }

func (a *api) send(ctx context.Context, n *harness.Node, method, path string, body []byte, hdr http.Header, timeout time.Duration) reply {
	a.requests.Add(1)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, n.BaseURL()+path, rd)
	if err != nil {
		return reply{node: n.ID, err: err}
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		a.noAnswer.Add(1)
		return reply{node: n.ID, err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		// The status line arrived but not the body: for a mutation the
		// outcome is as unknown as with no answer.
		a.noAnswer.Add(1)
		return reply{node: n.ID, err: err}
	}
	r := reply{status: resp.StatusCode, body: b, node: n.ID, replayed: strings.EqualFold(resp.Header.Get("Idempotent-Replayed"), "true")}
	if r.status >= 500 {
		a.serverErr.Add(1)
	}
	if r.replayed {
		a.replays.Add(1)
	}
	return r
}

// read sends a GET to a random node.
func (a *api) read(ctx context.Context, rng *rand.Rand, path string) reply {
	return a.send(ctx, a.nodes[rng.IntN(len(a.nodes))], http.MethodGet, path, nil, nil, readTimeout)
}

// mutation is the result of one keyed mutation with its retries.
type mutation struct {
	key      string
	last     reply // the definite reply, or the last one when unknown
	definite bool
	attempts int
	nodes    []string
	tries    []string // "node: status or error", per try
	replayed bool     // some try answered from the idempotency record
}

// newKey returns a fresh Idempotency-Key (UUIDv7).
func newKey() string { return uuid.Must(uuid.NewV7()).String() }

// mutate sends a mutation with Idempotency-Key key to a random node. While the outcome is unknown it retries the byte-identical request
// with the same key on another node (the key binds the body, so any change
// would be refused with 422), backing off between tries. It stops at the
// first definite answer (2xx or 4xx), after mutateAttempts tries, after
// mutateBudget, or when ctx ends.
func (a *api) mutate(ctx context.Context, rng *rand.Rand, key, method, path string, body []byte, extra http.Header) mutation {
	return a.mutateN(ctx, rng, mutateAttempts, key, method, path, body, extra)
}

// mutateN is mutate with at most tries tries.
func (a *api) mutateN(ctx context.Context, rng *rand.Rand, tries int, key, method, path string, body []byte, extra http.Header) mutation {
	m := mutation{key: key}
	hdr := http.Header{"Idempotency-Key": {m.key}}
	for k, v := range extra {
		hdr[k] = v
	}
	deadline := time.Now().Add(mutateBudget)
	prev := -1
	for attempt := 0; attempt < tries; attempt++ {
		if attempt > 0 {
			backoff := min(100*time.Millisecond<<attempt, 1500*time.Millisecond)
			backoff = backoff/2 + time.Duration(rng.Int64N(int64(backoff/2)+1))
			if time.Now().Add(backoff).After(deadline) {
				break
			}
			select {
			case <-ctx.Done():
				return m
			case <-time.After(backoff):
			}
		}
		if ctx.Err() != nil {
			break
		}
		i := rng.IntN(len(a.nodes))
		if len(a.nodes) > 1 {
			for i == prev {
				i = rng.IntN(len(a.nodes))
			}
		}
		prev = i
		timeout := min(attemptTimeout, time.Until(deadline))
		if timeout <= 0 {
			break
		}
		r := a.send(ctx, a.nodes[i], method, path, body, hdr, timeout)
		m.attempts++
		m.nodes = append(m.nodes, r.node)
		if r.status != 0 {
			m.tries = append(m.tries, fmt.Sprintf("%s: %d", r.node, r.status))
		} else {
			m.tries = append(m.tries, fmt.Sprintf("%s: %v", r.node, r.err))
		}
		m.last = r
		m.replayed = m.replayed || r.replayed
		if !r.unknown() {
			m.definite = true
			return m
		}
	}
	return m
}
