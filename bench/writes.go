package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"syscall"
	"time"

	"github.com/floe-catalog/floe/internal/harness"
)

// retryPause is the pause between two write attempts while waiting for a
// new leader. Short enough to add little to the measured failover time,
// long enough not to flood the two surviving nodes (which share the
// machine with the election they are running).
const retryPause = 5 * time.Millisecond

// writeTimeout bounds one write request. A write that has not been answered
// by then counts as a rejected attempt and the loop sends a new one.
const writeTimeout = 5 * time.Second

// createNamespace sends POST /v1/namespaces {"namespace":[name]} to n and
// returns the HTTP status and the start of the response body.
func createNamespace(ctx context.Context, cl *http.Client, n *harness.Node, name string) (int, string, error) {
	body, err := json.Marshal(map[string]any{"namespace": []string{name}})
	if err != nil {
		return 0, "", err
	}
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.BaseURL()+"/v1/namespaces", bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := cl.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return resp.StatusCode, "", err
	}
	return resp.StatusCode, truncate(string(rb), 300), nil
}

// HealthyWrites measures n acknowledged writes (create namespace) on a
// healthy cluster, one at a time, sent round-robin over all nodes, so that
// like a write during failover about two in three are forwarded by a
// follower. A few writes per node first warm up the connections and are not
// counted. Any write not answered 200 is an error.
func (c *Cluster) HealthyWrites(ctx context.Context, cl *http.Client, runID string, n int) ([]time.Duration, error) {
	const warmupPerNode = 3
	for i := range warmupPerNode * len(c.Nodes) {
		node := c.Nodes[i%len(c.Nodes)]
		name := fmt.Sprintf("warm_%s_%d", runID, i)
		if st, body, err := createNamespace(ctx, cl, node, name); err != nil || st != http.StatusOK {
			return nil, fmt.Errorf("warm-up write %q via %s: status %d, body %s, error %v", name, node.ID, st, body, err)
		}
	}
	lat := make([]time.Duration, 0, n)
	for i := range n {
		node := c.Nodes[i%len(c.Nodes)]
		name := fmt.Sprintf("healthy_%s_%d", runID, i)
		t0 := time.Now()
		st, body, err := createNamespace(ctx, cl, node, name)
		d := time.Since(t0)
		if err != nil || st != http.StatusOK {
			return nil, fmt.Errorf("healthy write %q via %s: status %d, body %s, error %v", name, node.ID, st, body, err)
		}
		lat = append(lat, d)
	}
	return lat, nil
}

// FailoverRound is one kill of the leader.
type FailoverRound struct {
	Round     int
	Killed    string // the leader killed
	Via       string // the surviving node the writes went through
	NewLeader string // the leader after the first acknowledged write
	// KillToAck is the time from just before SIGKILL was sent to the
	// arrival of the first 200 answer to a write.
	KillToAck time.Duration
	// Attempts counts the writes sent, the acknowledged one included.
	Attempts int
	// Rejected counts the attempts that were not acknowledged, by HTTP
	// status or by error class (refused, timeout, eof, error).
	Rejected map[string]int
	// Rejoin is the time from restarting the killed node to a healthy
	// cluster (restarted node ready, leader agreed, every member reachable).
	Rejoin time.Duration
}

// Failover kills the leader with SIGKILL, writes through a surviving node in
// a bounded retry loop until a write is acknowledged, then restarts the
// killed node with the same command line and waits until the cluster is
// healthy again. The retry loop stops after ackTimeout or maxAttempts.
func (c *Cluster) Failover(ctx context.Context, cl *http.Client, runID string, round int, ackTimeout time.Duration) (FailoverRound, error) {
	r := FailoverRound{Round: round, Rejected: map[string]int{}}
	leader, err := c.Leader(ctx)
	if err != nil {
		return r, err
	}
	var survivors []*harness.Node
	for _, n := range c.Nodes {
		if n != leader {
			survivors = append(survivors, n)
		}
	}
	if len(survivors) == 0 {
		return r, errors.New("failover needs at least two nodes")
	}
	via := survivors[round%len(survivors)]
	r.Killed, r.Via = leader.ID, via.ID

	// Open a connection to the surviving node before the kill so that the
	// first attempt does not pay for the dial.
	if _, err := via.Status(ctx); err != nil {
		return r, err
	}

	// The clock starts just before the signal; the killed process is
	// reaped later, by Restart.
	t0 := time.Now()
	if err := leader.Signal(syscall.SIGKILL); err != nil {
		return r, err
	}
	maxAttempts := int(ackTimeout/retryPause) + 1
	deadline := t0.Add(ackTimeout)
	var lastRejection string
	acked := false
	for attempt := 0; attempt < maxAttempts && time.Now().Before(deadline); attempt++ {
		if err := ctx.Err(); err != nil {
			return r, err
		}
		r.Attempts++
		name := fmt.Sprintf("failover_%s_r%d_a%d", runID, round, attempt)
		st, body, err := createNamespace(ctx, cl, via, name)
		if err == nil && st == http.StatusOK {
			r.KillToAck = time.Since(t0)
			acked = true
			break
		}
		class := strconv.Itoa(st)
		if err != nil {
			class = errorClass(err)
			lastRejection = err.Error()
		} else {
			lastRejection = fmt.Sprintf("%d %s", st, body)
		}
		r.Rejected[class]++
		time.Sleep(retryPause)
	}
	if !acked {
		return r, fmt.Errorf("round %d: no write acknowledged by %s within %s (%d attempts) after SIGKILL of leader %s; rejections %v; last: %s",
			round, via.ID, ackTimeout, r.Attempts, leader.ID, r.Rejected, lastRejection)
	}
	if st, err := via.Status(ctx); err == nil {
		r.NewLeader = st.LeaderID
	}

	t1 := time.Now()
	if err := c.Restart(ctx, leader); err != nil {
		return r, fmt.Errorf("round %d: restart %s: %w", round, leader.ID, err)
	}
	r.Rejoin = time.Since(t1)
	return r, nil
}

// errorClass names a transport error for the rejection counts.
func errorClass(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "reset"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "eof"
	default:
		return "error"
	}
}

// formatRejected renders rejection counts in a stable order: "503:41,refused:2".
func formatRejected(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s:%d", k, m[k])
	}
	return b.String()
}
