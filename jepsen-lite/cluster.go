package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/floe-catalog/floe/internal/harness"
)

// The floe processes of a run are a harness.Cluster (internal/harness
// starts, stops, kills and pauses them and reads their state); what is
// jepsen-lite's own is below: where the nodes bind, the majority view of
// the leader, and how often and how long the checks wait.

// Bounds on process control. Every wait is bounded in time and in attempts.
const (
	controlTimeout = 3 * time.Second // one control request (readyz, cluster status)
	pollInterval   = 50 * time.Millisecond
)

// nodeIP is the loopback address node idx binds its cluster port to and
// dials its peers from; the link proxies tell nodes apart by it.
func nodeIP(idx int) string { return fmt.Sprintf("127.0.0.%d", 11+idx) }

// newCluster lays out size nodes under dir. Each node binds its cluster port
// on its own loopback IP (nodeIP) and advertises the address of its link
// proxy (proxyAddrs[i]); --join names the other nodes' proxies, so every
// Raft and forwarding connection goes through a proxy the nemesis controls.
// args are the nodes' flags after the harness's own.
func newCluster(bin, dir string, size int, proxyAddrs []string, warehouse string, args []string) (*harness.Cluster, error) {
	cl, err := harness.NewCluster(harness.ClusterConfig{
		Bin:            bin,
		Dir:            dir,
		Size:           size,
		Warehouse:      warehouse,
		Args:           args,
		Env:            harness.EnvWithout("FLOE_", "AWS_"),
		Tool:           "jepsen-lite",
		ClusterIP:      nodeIP,
		Advertise:      proxyAddrs,
		ControlTimeout: controlTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("lay out the cluster (each node binds its cluster port on its own loopback IP, %s and up): %w", nodeIP(0), err)
	}
	return cl, nil
}

// leader asks every serving node who leads and returns the node a majority
// of the cluster names, or an error when there is no such majority. Unlike
// harness.Cluster.Leader it does not need every node to agree: under faults
// a minority may still follow an old leader.
func leader(ctx context.Context, cl *harness.Cluster) (*harness.Node, error) {
	votes := map[string]int{}
	for _, n := range cl.Nodes {
		if !n.Serving() {
			continue
		}
		if st, err := n.Status(ctx); err == nil && st.LeaderID != "" {
			votes[st.LeaderID]++
		}
	}
	for id, v := range votes {
		if v > len(cl.Nodes)/2 {
			if ln := cl.Node(id); ln != nil && ln.Serving() {
				return ln, nil
			}
		}
	}
	return nil, fmt.Errorf("no leader named by a majority (answers %v)", votes)
}

// waitLeader polls leader until it answers or timeout passes.
func waitLeader(ctx context.Context, cl *harness.Cluster, timeout time.Duration) (*harness.Node, error) {
	var ln *harness.Node
	err := harness.Poll(ctx, timeout, pollInterval, func(ctx context.Context) error {
		var err error
		ln, err = leader(ctx, cl)
		return err
	})
	return ln, err
}

// waitHealthy polls cl.Healthy until it returns nil or timeout passes:
// every node serving and ready, all naming the same leader, and the leader
// seeing every member reachable.
func waitHealthy(ctx context.Context, cl *harness.Cluster, timeout time.Duration) error {
	if err := harness.Poll(ctx, timeout, pollInterval, cl.Healthy); err != nil {
		return fmt.Errorf("cluster not healthy within %s: %w", timeout, err)
	}
	return nil
}

func truncate(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
