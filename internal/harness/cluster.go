package harness

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// HealthyTimeout bounds the waits for a cluster to be healthy, for a node
// to be ready after a restart, and for the nodes to agree on a leader.
const HealthyTimeout = 60 * time.Second

// ClusterConfig describes a cluster of floe processes on loopback.
type ClusterConfig struct {
	Bin  string // floe binary
	Dir  string // the nodes' data directories (Dir/n1, …) and logs (Dir/n1.log, …)
	Size int    // number of nodes
	// Warehouse is the nodes' --warehouse; default file://<Dir>/warehouse.
	Warehouse string
	// Args are extra flags given to every node after the harness's own
	// (S3 settings, snapshot thresholds, --log-format).
	Args []string
	// Env is every node's environment; nil: the caller's.
	// EnvWithout("FLOE_", "AWS_") keeps the caller's settings out.
	Env []string
	// Tool names the starter in the nodes' log markers (see Process.Start).
	Tool string
	// ClusterIP returns the loopback IP node i (0-based) binds its cluster
	// port on, e.g. a distinct 127.0.0.x per node so that a proxy can tell
	// the nodes' connections apart; nil: 127.0.0.1 for every node. HTTP
	// ports are always on 127.0.0.1.
	ClusterIP func(i int) string
	// Advertise, when set, has one address per node, given as the node's
	// --cluster-advertise; --join then names the other nodes' Advertise
	// addresses instead of their cluster addresses, so that every
	// connection between nodes goes through whatever listens there.
	Advertise []string
	// ControlTimeout bounds one control request to a node (Node.Ready,
	// Node.Status); default ControlTimeout.
	ControlTimeout time.Duration
}

// Cluster is a set of floe processes on loopback that form one Raft cluster
// with --bootstrap-expect and --join naming every other node.
type Cluster struct {
	Nodes     []*Node
	Dir       string
	Warehouse string // the nodes' --warehouse

	cfg     ClusterConfig // as given to NewCluster, Bin and Dir made absolute
	control *http.Client
}

// NewCluster lays out cc.Size nodes: free ports, data directories, log
// files and command lines (--node-id, --data-dir, --http-addr,
// --cluster-addr, --cluster-advertise when set, --join when there are other
// nodes, --bootstrap-expect, --warehouse, then cc.Args). It creates cc.Dir
// and starts nothing.
func NewCluster(cc ClusterConfig) (*Cluster, error) {
	size := cc.Size
	if size < 1 {
		return nil, fmt.Errorf("cluster size %d", size)
	}
	if cc.Advertise != nil && len(cc.Advertise) != size {
		return nil, fmt.Errorf("%d advertise addresses for %d nodes", len(cc.Advertise), size)
	}
	bin, err := filepath.Abs(cc.Bin)
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(cc.Dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ips := make([]string, 0, 2*size) // HTTP, then cluster, per node
	for i := range size {
		clusterIP := "127.0.0.1"
		if cc.ClusterIP != nil {
			clusterIP = cc.ClusterIP(i)
		}
		ips = append(ips, "127.0.0.1", clusterIP)
	}
	addrs, err := freeAddrs(ips)
	if err != nil {
		return nil, err
	}
	warehouse := cc.Warehouse
	if warehouse == "" {
		warehouse = "file://" + filepath.ToSlash(filepath.Join(dir, "warehouse"))
	}
	controlTimeout := cc.ControlTimeout
	if controlTimeout <= 0 {
		controlTimeout = ControlTimeout
	}
	cfg := cc
	cfg.Bin, cfg.Dir = bin, dir
	c := &Cluster{Dir: dir, Warehouse: warehouse, cfg: cfg, control: NewHTTPClient(8, controlTimeout)}
	for i := range size {
		n := &Node{
			ID:          fmt.Sprintf("n%d", i+1),
			Index:       i,
			HTTPAddr:    addrs[2*i].String(),
			ClusterAddr: addrs[2*i+1].String(),
			control:     c.control,
		}
		if cc.Advertise != nil {
			n.Advertise = cc.Advertise[i]
		}
		n.DataDir = filepath.Join(dir, n.ID)
		c.Nodes = append(c.Nodes, n)
	}
	for _, n := range c.Nodes {
		var join []string
		for _, o := range c.Nodes {
			if o == n {
				continue
			}
			if o.Advertise != "" {
				join = append(join, o.Advertise)
			} else {
				join = append(join, o.ClusterAddr)
			}
		}
		args := []string{
			"--node-id", n.ID,
			"--data-dir", n.DataDir,
			"--http-addr", n.HTTPAddr,
			"--cluster-addr", n.ClusterAddr,
		}
		if n.Advertise != "" {
			args = append(args, "--cluster-advertise", n.Advertise)
		}
		if len(join) > 0 {
			args = append(args, "--join", strings.Join(join, ","))
		}
		args = append(args, "--bootstrap-expect", strconv.Itoa(size), "--warehouse", warehouse)
		n.Process = NewProcess(ProcessConfig{
			Name:    n.ID,
			Bin:     bin,
			Args:    append(args, cc.Args...),
			Env:     cc.Env,
			LogPath: filepath.Join(dir, n.ID+".log"),
			Tool:    cc.Tool,
		})
	}
	return c, nil
}

// StartCluster lays out a cluster (NewCluster), starts every node and
// waits, at most HealthyTimeout, until the cluster is healthy (see
// Healthy). It logs each node's addresses and log file to log (nil: no
// logging). On error every process already started is stopped.
func StartCluster(ctx context.Context, cc ClusterConfig, log *slog.Logger) (*Cluster, error) {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c, err := NewCluster(cc)
	if err != nil {
		return nil, err
	}
	if err := c.Start(); err != nil {
		c.Stop()
		return nil, err
	}
	for _, n := range c.Nodes {
		attrs := []any{"node", n.ID, "http", n.HTTPAddr, "cluster", n.ClusterAddr}
		if n.Advertise != "" {
			attrs = append(attrs, "advertise", n.Advertise)
		}
		log.Info("node started", append(attrs, "log", n.LogPath())...)
	}
	if err := c.WaitHealthy(ctx, HealthyTimeout); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// Start starts every node that is not running, each with its fixed command
// line; a node killed a moment ago is first waited for (ExitTimeout) so
// that its data directory is free. It does not wait for health. On error
// the nodes started so far keep running; Stop stops them.
func (c *Cluster) Start() error {
	for _, n := range c.Nodes {
		if n.Running() {
			continue
		}
		if err := n.Wait(ExitTimeout); err != nil {
			return err
		}
		if err := n.Process.Start(); err != nil {
			return err
		}
	}
	return nil
}

// Stop stops every node concurrently (Process.Stop: the stop signal, then
// SIGKILL after ExitTimeout). When it returns no node runs.
func (c *Cluster) Stop() {
	var wg sync.WaitGroup
	for _, n := range c.Nodes {
		wg.Go(func() { _ = n.Stop() })
	}
	wg.Wait()
	c.control.CloseIdleConnections()
}

// Restart starts n again with its command line, once it has exited, and
// waits until it answers /readyz with 200 and the whole cluster is healthy,
// each wait at most HealthyTimeout.
func (c *Cluster) Restart(ctx context.Context, n *Node) error {
	if err := n.Wait(ExitTimeout); err != nil {
		return err
	}
	if err := n.Process.Start(); err != nil {
		return err
	}
	if err := n.WaitReady(ctx, HealthyTimeout); err != nil {
		return fmt.Errorf("restarted node %s not ready: %w", n.ID, err)
	}
	return c.WaitHealthy(ctx, HealthyTimeout)
}

// Joiner lays out one more node, id, that joins the running cluster when
// started: --join names every node's cluster address (or advertise
// address), without --bootstrap-expect, with the cluster's --warehouse
// and ClusterConfig.Args, its data directory Dir/<id> and its log
// Dir/<id>.log, on free 127.0.0.1 ports. It is not added to c.Nodes, and
// nothing is started: the caller starts, stops and (through the operator
// API) removes it.
func (c *Cluster) Joiner(id string) (*Node, error) {
	addrs, err := freeAddrs([]string{"127.0.0.1", "127.0.0.1"})
	if err != nil {
		return nil, err
	}
	n := &Node{ID: id, Index: len(c.Nodes), HTTPAddr: addrs[0].String(), ClusterAddr: addrs[1].String(),
		DataDir: filepath.Join(c.Dir, id), control: c.control}
	var join []string
	for _, o := range c.Nodes {
		if o.Advertise != "" {
			join = append(join, o.Advertise)
		} else {
			join = append(join, o.ClusterAddr)
		}
	}
	args := []string{
		"--node-id", n.ID, "--data-dir", n.DataDir, "--http-addr", n.HTTPAddr, "--cluster-addr", n.ClusterAddr,
		"--join", strings.Join(join, ","), "--warehouse", c.Warehouse,
	}
	n.Process = NewProcess(ProcessConfig{
		Name: n.ID, Bin: c.cfg.Bin, Args: append(args, c.cfg.Args...), Env: c.cfg.Env,
		LogPath: filepath.Join(c.Dir, n.ID+".log"), Tool: c.cfg.Tool,
	})
	return n, nil
}

// Node returns the node with the given ID, nil if there is none.
func (c *Cluster) Node(id string) *Node {
	for _, n := range c.Nodes {
		if n.ID == id {
			return n
		}
	}
	return nil
}

// leaderOnce asks every serving node who leads; it succeeds only when they
// all name the same leader, which is one of ours, serving, and marks itself
// leader in its member list. It returns the leader's status.
func (c *Cluster) leaderOnce(ctx context.Context) (*Node, ClusterStatus, error) {
	var leader string
	var lst ClusterStatus
	for _, n := range c.Nodes {
		if !n.Serving() {
			continue
		}
		st, err := n.Status(ctx)
		if err != nil {
			return nil, lst, err
		}
		if st.LeaderID == "" {
			return nil, lst, fmt.Errorf("%s knows no leader", n.ID)
		}
		if leader != "" && st.LeaderID != leader {
			return nil, lst, fmt.Errorf("nodes disagree on the leader: %s and %s", leader, st.LeaderID)
		}
		leader = st.LeaderID
		if n.ID == leader {
			lst = st
		}
	}
	ln := c.Node(leader)
	if ln == nil || !ln.Serving() {
		return nil, lst, fmt.Errorf("leader %q is not a serving node of this cluster", leader)
	}
	for _, m := range lst.Members {
		if m.ID == leader && !m.Leader {
			return nil, lst, fmt.Errorf("%s is named leader but does not mark itself leader", leader)
		}
	}
	return ln, lst, nil
}

// Leader returns the node every serving node names as leader, waiting up to
// HealthyTimeout for them to agree.
func (c *Cluster) Leader(ctx context.Context) (*Node, error) {
	var leader *Node
	err := Poll(ctx, HealthyTimeout, PollInterval, func(ctx context.Context) error {
		n, _, err := c.leaderOnce(ctx)
		leader = n
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("find leader: %w", err)
	}
	return leader, nil
}

// Healthy returns nil when every node is serving (running, not paused) and
// answers /readyz with 200, all name one leader that marks itself leader,
// and the leader lists every node as a reachable member; otherwise an error
// saying the first thing found wrong.
func (c *Cluster) Healthy(ctx context.Context) error {
	for _, n := range c.Nodes {
		if !n.Serving() {
			return fmt.Errorf("node %s is not serving (see %s)", n.ID, n.LogPath())
		}
		if err := n.Ready(ctx); err != nil {
			return err
		}
	}
	_, st, err := c.leaderOnce(ctx)
	if err != nil {
		return err
	}
	if len(st.Members) != len(c.Nodes) {
		return fmt.Errorf("leader lists %d members, want %d", len(st.Members), len(c.Nodes))
	}
	for _, m := range st.Members {
		if !m.Reachable {
			return fmt.Errorf("leader sees %s unreachable", m.ID)
		}
	}
	return nil
}

// WaitHealthy waits, at most timeout, until Healthy returns nil.
func (c *Cluster) WaitHealthy(ctx context.Context, timeout time.Duration) error {
	if err := Poll(ctx, timeout, PollInterval, c.Healthy); err != nil {
		return fmt.Errorf("cluster not healthy: %w", err)
	}
	return nil
}

// TakeCrashes returns every node's exits nobody asked for since the last
// call (Process.TakeCrashes).
func (c *Cluster) TakeCrashes() []string {
	var out []string
	for _, n := range c.Nodes {
		out = append(out, n.TakeCrashes()...)
	}
	return out
}

// LogTails returns the last lines of every node's log, for error reports.
func (c *Cluster) LogTails(lines int) string {
	var b strings.Builder
	for _, n := range c.Nodes {
		fmt.Fprintf(&b, "--- %s (%s), last %d lines:\n%s\n", n.ID, n.LogPath(), lines, n.LogTail(lines))
	}
	return b.String()
}
