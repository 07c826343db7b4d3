package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/floe-catalog/floe/internal/harness"
)

// CommitResult is the latency of table commits, with and without an
// Idempotency-Key, measured interleaved in one run.
type CommitResult struct {
	Plain []time.Duration
	Keyed []time.Duration
}

// commit sends one table commit (set a property) through n, with an
// Idempotency-Key when key is not empty.
func commit(ctx context.Context, cl *http.Client, n *harness.Node, path, key string, i int) (int, string, error) {
	return commitURL(ctx, cl, n.BaseURL()+path, key, i)
}

// commitURL sends one table commit (set a property) to the table at url,
// with an Idempotency-Key when key is not empty.
func commitURL(ctx context.Context, cl *http.Client, url, key string, i int) (int, string, error) {
	body, err := json.Marshal(map[string]any{
		"requirements": []any{},
		"updates":      []any{map[string]any{"action": "set-properties", "updates": map[string]string{"bench": fmt.Sprint(i)}}},
	})
	if err != nil {
		return 0, "", err
	}
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := cl.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return resp.StatusCode, "", err
	}
	return resp.StatusCode, truncate(string(rb), 300), nil
}

// Commits times n commits without and n with an Idempotency-Key on one
// table, alternating the two kinds so that both see the same machine noise,
// sent round-robin over the nodes. Any commit not answered 200 is an error.
func (c *Cluster) Commits(ctx context.Context, cl *http.Client, path string, n int) (CommitResult, error) {
	var res CommitResult
	for i := range 2 * n {
		node := c.Nodes[(i/2)%len(c.Nodes)]
		key := ""
		if i%2 == 1 {
			key = uuid.Must(uuid.NewV7()).String()
		}
		t0 := time.Now()
		st, body, err := commit(ctx, cl, node, path, key, i)
		d := time.Since(t0)
		if err != nil || st != http.StatusOK {
			return res, fmt.Errorf("commit %d via %s: status %d, body %s, error %v", i, node.ID, st, body, err)
		}
		if key == "" {
			res.Plain = append(res.Plain, d)
		} else {
			res.Keyed = append(res.Keyed, d)
		}
	}
	return res, nil
}
