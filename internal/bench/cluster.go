package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Bounds on waiting for the cluster. Every wait below is bounded both in time
// and in the number of attempts (see poll).
const (
	pollInterval   = 20 * time.Millisecond
	healthyTimeout = 60 * time.Second
	exitTimeout    = 15 * time.Second // SIGTERM → exit, then SIGKILL
	controlTimeout = 5 * time.Second  // one control request (readyz, cluster status)
)

// Node is one floe process of a Cluster. Its command line is fixed when the
// cluster is created; Restart runs exactly the same one again.
type Node struct {
	ID          string
	HTTPAddr    string
	ClusterAddr string
	DataDir     string
	LogPath     string // stdout and stderr of every start, appended

	bin  string
	args []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd has been reaped
	starts int
}

// BaseURL is the node's HTTP root, without a trailing slash.
func (n *Node) BaseURL() string { return "http://" + n.HTTPAddr }

// CommandLine is the node's command line, for logs and reports.
func (n *Node) CommandLine() string { return ShellJoin(append([]string{n.bin}, n.args...)) }

// Running reports whether the node's process has been started and not reaped.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

func (n *Node) start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	f, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	n.starts++
	fmt.Fprintf(f, "=== floebench: start #%d at %s: %s\n", n.starts, time.Now().UTC().Format(time.RFC3339Nano), n.CommandLine())
	cmd := exec.Command(n.bin, n.args...)
	cmd.Stdout = f
	cmd.Stderr = f
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", n.ID, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // a killed node exits with an error; that is expected
		f.Close()
		close(exited)
	}()
	n.cmd, n.exited = cmd, exited
	return nil
}

// kill sends SIGKILL and returns the time just before it was sent. It does
// not wait for the process to be reaped; awaitExit does.
func (n *Node) kill() (time.Time, error) {
	n.mu.Lock()
	cmd := n.cmd
	n.mu.Unlock()
	if cmd == nil {
		return time.Time{}, fmt.Errorf("node %s was never started", n.ID)
	}
	t := time.Now()
	if err := cmd.Process.Kill(); err != nil {
		return t, fmt.Errorf("SIGKILL %s: %w", n.ID, err)
	}
	return t, nil
}

func (n *Node) awaitExit(timeout time.Duration) error {
	n.mu.Lock()
	exited := n.exited
	n.mu.Unlock()
	if exited == nil {
		return nil
	}
	select {
	case <-exited:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("node %s did not exit within %s", n.ID, timeout)
	}
}

// stop asks the node to shut down (SIGTERM) and kills it if it has not
// exited within exitTimeout.
func (n *Node) stop() {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(exitTimeout):
		_ = cmd.Process.Kill()
		<-exited // SIGKILL cannot be ignored; Wait returns promptly
	}
}

// logTail returns up to the last max lines of the node's log.
func (n *Node) logTail(max int) string {
	f, err := os.Open(n.LogPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > max {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// Cluster is a set of floe processes on loopback that formed one Raft
// cluster with --bootstrap-expect.
type Cluster struct {
	Nodes     []*Node
	Dir       string
	Warehouse string // the nodes' --warehouse

	log     *slog.Logger
	control *http.Client
}

// StartCluster starts size floe nodes from the binary bin with their data
// under dir, all sharing the warehouse dir/warehouse, and waits until the
// cluster is healthy (see WaitHealthy). On error the processes already
// started are stopped.
func StartCluster(ctx context.Context, bin, dir string, size int, log *slog.Logger) (*Cluster, error) {
	return StartClusterWith(ctx, ClusterConfig{Bin: bin, Dir: dir, Size: size}, log)
}

// ClusterConfig describes a cluster for StartClusterWith.
type ClusterConfig struct {
	Bin  string // floe binary
	Dir  string // the nodes' data and logs
	Size int    // number of nodes
	// Warehouse is the nodes' --warehouse; default file://<Dir>/warehouse.
	Warehouse string
	// Args are extra flags given to every node (S3 settings, snapshot
	// thresholds).
	Args []string
}

// StartClusterWith is StartCluster with a warehouse and extra flags.
func StartClusterWith(ctx context.Context, cc ClusterConfig, log *slog.Logger) (*Cluster, error) {
	bin, dir, size := cc.Bin, cc.Dir, cc.Size
	if size < 1 {
		return nil, fmt.Errorf("cluster size %d", size)
	}
	bin, err := filepath.Abs(bin)
	if err != nil {
		return nil, err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ports, err := freePorts(2 * size)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: dir, log: log, control: newClient(8, controlTimeout)}
	for i := range size {
		id := fmt.Sprintf("n%d", i+1)
		c.Nodes = append(c.Nodes, &Node{
			ID:          id,
			HTTPAddr:    net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2*i])),
			ClusterAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2*i+1])),
			DataDir:     filepath.Join(dir, id),
			LogPath:     filepath.Join(dir, id+".log"),
			bin:         bin,
		})
	}
	warehouse := cc.Warehouse
	if warehouse == "" {
		warehouse = "file://" + filepath.ToSlash(filepath.Join(dir, "warehouse"))
	}
	c.Warehouse = warehouse
	for _, n := range c.Nodes {
		var join []string
		for _, o := range c.Nodes {
			if o != n {
				join = append(join, o.ClusterAddr)
			}
		}
		n.args = []string{
			"--node-id", n.ID,
			"--data-dir", n.DataDir,
			"--http-addr", n.HTTPAddr,
			"--cluster-addr", n.ClusterAddr,
			"--join", strings.Join(join, ","),
			"--bootstrap-expect", strconv.Itoa(size),
			"--warehouse", warehouse,
		}
		n.args = append(n.args, cc.Args...)
	}
	for _, n := range c.Nodes {
		if err := n.start(); err != nil {
			c.Stop()
			return nil, err
		}
		log.Info("node started", "node", n.ID, "http", n.HTTPAddr, "cluster", n.ClusterAddr, "log", n.LogPath)
	}
	if err := c.WaitHealthy(ctx, healthyTimeout); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// Resume starts every stopped node again with its command line and waits
// until the cluster is healthy.
func (c *Cluster) Resume(ctx context.Context) error {
	for _, n := range c.Nodes {
		if n.Running() {
			continue
		}
		if err := n.awaitExit(exitTimeout); err != nil {
			return err
		}
		if err := n.start(); err != nil {
			return err
		}
	}
	return c.WaitHealthy(ctx, healthyTimeout)
}

// Stop stops every node (SIGTERM, then SIGKILL after exitTimeout).
func (c *Cluster) Stop() {
	var wg sync.WaitGroup
	for _, n := range c.Nodes {
		wg.Go(n.stop)
	}
	wg.Wait()
	c.control.CloseIdleConnections()
}

// LogTails returns the end of every node's log, for error reports.
func (c *Cluster) LogTails(lines int) string {
	var b strings.Builder
	for _, n := range c.Nodes {
		fmt.Fprintf(&b, "--- %s (%s), last %d lines:\n%s\n", n.ID, n.LogPath, lines, n.logTail(lines))
	}
	return b.String()
}

func (c *Cluster) node(id string) *Node {
	for _, n := range c.Nodes {
		if n.ID == id {
			return n
		}
	}
	return nil
}

// Restart starts n again with the same command line and waits until its
// /readyz answers 200 and the whole cluster is healthy.
func (c *Cluster) Restart(ctx context.Context, n *Node) error {
	if err := n.awaitExit(exitTimeout); err != nil {
		return err
	}
	if err := n.start(); err != nil {
		return err
	}
	if err := poll(ctx, healthyTimeout, pollInterval, func(ctx context.Context) (bool, error) {
		return c.ready(ctx, n)
	}); err != nil {
		return fmt.Errorf("restarted node %s not ready: %w", n.ID, err)
	}
	return c.WaitHealthy(ctx, healthyTimeout)
}

// clusterStatus is the part of GET /management/v1/cluster the driver reads.
type clusterStatus struct {
	Self     string `json:"self"`
	LeaderID string `json:"leader-id"`
	Members  []struct {
		ID        string `json:"id"`
		HTTPAddr  string `json:"http-address"`
		Leader    bool   `json:"leader"`
		Reachable bool   `json:"reachable"`
	} `json:"members"`
}

func (c *Cluster) status(ctx context.Context, n *Node) (clusterStatus, error) {
	var st clusterStatus
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.BaseURL()+"/management/v1/cluster", nil)
	if err != nil {
		return st, err
	}
	resp, err := c.control.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return st, err
	}
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("GET %s/management/v1/cluster: %d %s", n.BaseURL(), resp.StatusCode, truncate(string(body), 300))
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return st, fmt.Errorf("GET %s/management/v1/cluster: %w", n.BaseURL(), err)
	}
	return st, nil
}

func (c *Cluster) ready(ctx context.Context, n *Node) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.BaseURL()+"/readyz", nil)
	if err != nil {
		return false, err
	}
	resp, err := c.control.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("%s /readyz: %d %s", n.ID, resp.StatusCode, truncate(string(body), 300))
	}
	return true, nil
}

// leaderOnce asks every running node who leads; it succeeds only when they
// all name the same leader, which is one of ours, running, and marks itself
// leader in its member list.
func (c *Cluster) leaderOnce(ctx context.Context) (*Node, clusterStatus, error) {
	var leader string
	var lst clusterStatus
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		st, err := c.status(ctx, n)
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
	ln := c.node(leader)
	if ln == nil || !ln.Running() {
		return nil, lst, fmt.Errorf("leader %q is not a running node of this cluster", leader)
	}
	for _, m := range lst.Members {
		if m.ID == leader && !m.Leader {
			return nil, lst, fmt.Errorf("%s is named leader but does not mark itself leader", leader)
		}
	}
	return ln, lst, nil
}

// Leader returns the node every running node names as leader, waiting up to
// healthyTimeout for them to agree.
func (c *Cluster) Leader(ctx context.Context) (*Node, error) {
	var leader *Node
	err := poll(ctx, healthyTimeout, pollInterval, func(ctx context.Context) (bool, error) {
		n, _, err := c.leaderOnce(ctx)
		leader = n
		return err == nil, err
	})
	if err != nil {
		return nil, fmt.Errorf("find leader: %w", err)
	}
	return leader, nil
}

// WaitHealthy waits until every node runs and answers /readyz with 200, all
// agree on one leader, and the leader sees every member reachable.
func (c *Cluster) WaitHealthy(ctx context.Context, timeout time.Duration) error {
	err := poll(ctx, timeout, pollInterval, func(ctx context.Context) (bool, error) {
		for _, n := range c.Nodes {
			if !n.Running() {
				return false, fmt.Errorf("node %s is not running (see %s)", n.ID, n.LogPath)
			}
			if ok, err := c.ready(ctx, n); !ok {
				return false, err
			}
		}
		_, st, err := c.leaderOnce(ctx)
		if err != nil {
			return false, err
		}
		if len(st.Members) != len(c.Nodes) {
			return false, fmt.Errorf("leader lists %d members, want %d", len(st.Members), len(c.Nodes))
		}
		for _, m := range st.Members {
			if !m.Reachable {
				return false, fmt.Errorf("leader sees %s unreachable", m.ID)
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("cluster not healthy: %w", err)
	}
	return nil
}

// poll calls f until it reports done. It gives up after timeout or after
// timeout/interval+1 calls, whichever comes first, returning f's last error.
func poll(ctx context.Context, timeout, interval time.Duration, f func(context.Context) (bool, error)) error {
	deadline := time.Now().Add(timeout)
	maxCalls := int(timeout/interval) + 1
	var last error
	for range maxCalls {
		if err := ctx.Err(); err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, controlTimeout)
		done, err := f(cctx)
		cancel()
		if done {
			return nil
		}
		last = err
		if time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
	if last == nil {
		last = errors.New("condition not met")
	}
	return fmt.Errorf("gave up after %s: %w", timeout, last)
}

// freePorts returns n distinct free TCP ports on 127.0.0.1. They are free
// when returned; a rare collision with another process makes a node fail to
// start, which the caller reports with the node's log.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// newClient returns a keep-alive HTTP client that never uses a proxy.
// timeout 0 means requests are bounded only by their context.
func newClient(idlePerHost int, timeout time.Duration) *http.Client {
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

func truncate(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// ShellJoin quotes args for a POSIX shell where needed.
func ShellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,@+%", r))
		}) < 0 {
			q[i] = a
			continue
		}
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}
