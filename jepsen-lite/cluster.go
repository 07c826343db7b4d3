package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Bounds on process control. Every wait is bounded in time and in attempts.
const (
	exitTimeout    = 15 * time.Second // SIGTERM → exit, then SIGKILL
	controlTimeout = 3 * time.Second  // one control request (readyz, cluster status)
	pollInterval   = 50 * time.Millisecond
)

// node is one floe process. Its command line is fixed when the cluster is
// created; every restart runs exactly the same one again, so a node comes
// back with its data directory as a crashed server would.
type node struct {
	idx         int    // 0-based
	id          string // n1, n2, ...
	httpAddr    string // 127.0.0.1:port, reached directly by the clients
	clusterAddr string // 127.0.0.(11+idx):port, bound by the node; it dials from this IP
	advertise   string // 127.0.0.1:port of the link proxy in front of clusterAddr
	dataDir     string
	logPath     string
	bin         string
	args        []string

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
	paused   bool
	expected bool // the last exit was asked for (kill or stop)
	starts   int
	crashes  []string // unexpected exits, with the log tail
}

func (n *node) baseURL() string { return "http://" + n.httpAddr }

func (n *node) commandLine() string { return shellJoin(append([]string{n.bin}, n.args...)) }

// running reports whether the process is alive (paused counts as alive).
func (n *node) running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.runningLocked()
}

func (n *node) runningLocked() bool {
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

// serving reports whether the process is alive and not stopped by SIGSTOP.
func (n *node) serving() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.runningLocked() && !n.paused
}

func (n *node) start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.runningLocked() {
		return fmt.Errorf("node %s is already running", n.id)
	}
	f, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	n.starts++
	fmt.Fprintf(f, "=== jepsen-lite: start #%d at %s: %s\n", n.starts, time.Now().UTC().Format(time.RFC3339Nano), n.commandLine())
	cmd := exec.Command(n.bin, n.args...)
	cmd.Stdout = f
	cmd.Stderr = f
	cmd.Env = nodeEnv()
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", n.id, err)
	}
	exited := make(chan struct{})
	n.cmd, n.exited, n.paused, n.expected = cmd, exited, false, false
	go func() {
		werr := cmd.Wait()
		f.Close()
		n.mu.Lock()
		if !n.expected {
			n.crashes = append(n.crashes, fmt.Sprintf("%s exited on its own (%v); log tail:\n%s", n.id, werr, logTail(n.logPath, 30)))
		}
		n.mu.Unlock()
		close(exited)
	}()
	return nil
}

// signal sends sig to the running process. expectExit marks the exit it
// causes as intended.
func (n *node) signal(sig syscall.Signal, expectExit bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.runningLocked() {
		return fmt.Errorf("node %s is not running", n.id)
	}
	if expectExit {
		n.expected = true
	}
	if err := n.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("%v %s: %w", sig, n.id, err)
	}
	switch sig {
	case syscall.SIGSTOP:
		n.paused = true
	case syscall.SIGCONT:
		n.paused = false
	}
	return nil
}

func (n *node) awaitExit(timeout time.Duration) error {
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
		return fmt.Errorf("node %s did not exit within %s", n.id, timeout)
	}
}

// kill sends SIGKILL and waits until the process is reaped.
func (n *node) kill() error {
	if err := n.signal(syscall.SIGKILL, true); err != nil {
		return err
	}
	return n.awaitExit(exitTimeout)
}

// stop resumes a paused node, asks it to shut down (SIGTERM) and kills it
// if it has not exited within exitTimeout.
func (n *node) stop() {
	if !n.running() {
		return
	}
	_ = n.signal(syscall.SIGCONT, false)
	_ = n.signal(syscall.SIGTERM, true)
	if n.awaitExit(exitTimeout) != nil {
		_ = n.signal(syscall.SIGKILL, true)
		_ = n.awaitExit(exitTimeout)
	}
}

func (n *node) takeCrashes() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := n.crashes
	n.crashes = nil
	return c
}

// logContains reports whether the node's log, from byte offset from on,
// contains s.
func (n *node) logContains(from int64, s string) bool { return n.logContainsAll(from, s) }

// logContainsAll reports whether one line of the node's log, from byte
// offset from on, contains every one of subs.
func (n *node) logContainsAll(from int64, subs ...string) bool {
	f, err := os.Open(n.logPath)
	if err != nil {
		return false
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return false
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		all := true
		for _, s := range subs {
			all = all && strings.Contains(line, s)
		}
		if all {
			return true
		}
	}
	return false
}

func (n *node) logSize() int64 {
	fi, err := os.Stat(n.logPath)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// nodeEnv is the harness's environment without FLOE_* and AWS_* variables,
// so the caller's environment cannot change how the nodes run.
func nodeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "FLOE_") || strings.HasPrefix(kv, "AWS_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// cluster is the set of floe processes of one run.
type cluster struct {
	nodes   []*node
	control *http.Client
}

// nodeIP is the loopback address node idx binds its cluster port to and
// dials its peers from; the link proxies tell nodes apart by it.
func nodeIP(idx int) string { return fmt.Sprintf("127.0.0.%d", 11+idx) }

// newCluster lays out size nodes under dir. Each node binds its cluster port
// on its own loopback IP and advertises the address of its link proxy
// (proxyAddrs[i]); --join names the other nodes' proxies, so every Raft and
// forwarding connection goes through a proxy the nemesis controls.
func newCluster(bin, dir string, size int, proxyAddrs []string, extra []string) (*cluster, error) {
	c := &cluster{control: newHTTPClient(4, controlTimeout)}
	for i := range size {
		httpPort, err := freePort("127.0.0.1")
		if err != nil {
			return nil, err
		}
		clusterPort, err := freePort(nodeIP(i))
		if err != nil {
			return nil, fmt.Errorf("bind %s (the harness gives each node its own loopback IP): %w", nodeIP(i), err)
		}
		id := fmt.Sprintf("n%d", i+1)
		c.nodes = append(c.nodes, &node{
			idx:         i,
			id:          id,
			httpAddr:    net.JoinHostPort("127.0.0.1", strconv.Itoa(httpPort)),
			clusterAddr: net.JoinHostPort(nodeIP(i), strconv.Itoa(clusterPort)),
			advertise:   proxyAddrs[i],
			dataDir:     dir + "/" + id,
			logPath:     dir + "/" + id + ".log",
			bin:         bin,
		})
	}
	for _, n := range c.nodes {
		var join []string
		for _, o := range c.nodes {
			if o != n {
				join = append(join, o.advertise)
			}
		}
		n.args = append([]string{
			"--node-id", n.id,
			"--data-dir", n.dataDir,
			"--http-addr", n.httpAddr,
			"--cluster-addr", n.clusterAddr,
			"--cluster-advertise", n.advertise,
			"--join", strings.Join(join, ","),
			"--bootstrap-expect", strconv.Itoa(size),
			"--log-format", "json",
		}, extra...)
	}
	return c, nil
}

func (c *cluster) startAll() error {
	for _, n := range c.nodes {
		if err := n.start(); err != nil {
			return err
		}
	}
	return nil
}

// stopAll stops every node concurrently.
func (c *cluster) stopAll() {
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Go(n.stop)
	}
	wg.Wait()
	c.control.CloseIdleConnections()
}

func (c *cluster) byID(id string) *node {
	for _, n := range c.nodes {
		if n.id == id {
			return n
		}
	}
	return nil
}

func (c *cluster) crashes() []string {
	var out []string
	for _, n := range c.nodes {
		out = append(out, n.takeCrashes()...)
	}
	return out
}

// clusterStatus is the part of GET /management/v1/cluster the harness reads.
type clusterStatus struct {
	Self        string `json:"self"`
	LeaderID    string `json:"leader-id"`
	CommitIndex uint64 `json:"commit-index"`
	Members     []struct {
		ID        string `json:"id"`
		Leader    bool   `json:"leader"`
		Reachable bool   `json:"reachable"`
	} `json:"members"`
}

func (c *cluster) get(ctx context.Context, n *node, path string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.baseURL()+path, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := c.control.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, body, err
}

func (c *cluster) status(ctx context.Context, n *node) (clusterStatus, error) {
	var st clusterStatus
	code, body, err := c.get(ctx, n, "/management/v1/cluster")
	if err != nil {
		return st, err
	}
	if code != http.StatusOK {
		return st, fmt.Errorf("%s /management/v1/cluster: %d %s", n.id, code, truncate(string(body), 200))
	}
	return st, json.Unmarshal(body, &st)
}

func (c *cluster) ready(ctx context.Context, n *node) error {
	code, body, err := c.get(ctx, n, "/readyz")
	if err != nil {
		return fmt.Errorf("%s /readyz: %w", n.id, err)
	}
	if code != http.StatusOK {
		return fmt.Errorf("%s /readyz: %d %s", n.id, code, truncate(string(body), 200))
	}
	return nil
}

// leader asks every serving node who leads and returns the node a majority
// of the cluster names, or an error when there is no such majority.
func (c *cluster) leader(ctx context.Context) (*node, error) {
	votes := map[string]int{}
	for _, n := range c.nodes {
		if !n.serving() {
			continue
		}
		if st, err := c.status(ctx, n); err == nil && st.LeaderID != "" {
			votes[st.LeaderID]++
		}
	}
	for id, v := range votes {
		if v > len(c.nodes)/2 {
			if ln := c.byID(id); ln != nil && ln.serving() {
				return ln, nil
			}
		}
	}
	return nil, fmt.Errorf("no leader named by a majority (answers %v)", votes)
}

// waitLeader polls leader until it answers or timeout passes.
func (c *cluster) waitLeader(ctx context.Context, timeout time.Duration) (*node, error) {
	var ln *node
	err := poll(ctx, timeout, func(ctx context.Context) error {
		var err error
		ln, err = c.leader(ctx)
		return err
	})
	return ln, err
}

// healthy reports nil when every node runs, answers /readyz, all name the
// same leader, and the leader sees every member reachable.
func (c *cluster) healthy(ctx context.Context) error {
	leader := ""
	for _, n := range c.nodes {
		if !n.serving() {
			return fmt.Errorf("%s is not serving", n.id)
		}
		if err := c.ready(ctx, n); err != nil {
			return err
		}
		st, err := c.status(ctx, n)
		if err != nil {
			return err
		}
		if st.LeaderID == "" || (leader != "" && st.LeaderID != leader) {
			return fmt.Errorf("nodes disagree on the leader (%q, %q)", leader, st.LeaderID)
		}
		leader = st.LeaderID
	}
	ln := c.byID(leader)
	if ln == nil {
		return fmt.Errorf("leader %q is not one of ours", leader)
	}
	st, err := c.status(ctx, ln)
	if err != nil {
		return err
	}
	if len(st.Members) != len(c.nodes) {
		return fmt.Errorf("leader lists %d members, want %d", len(st.Members), len(c.nodes))
	}
	for _, m := range st.Members {
		if !m.Reachable {
			return fmt.Errorf("leader sees %s unreachable", m.ID)
		}
	}
	return nil
}

func (c *cluster) waitHealthy(ctx context.Context, timeout time.Duration) error {
	if err := poll(ctx, timeout, c.healthy); err != nil {
		return fmt.Errorf("cluster not healthy within %s: %w", timeout, err)
	}
	return nil
}

// waitReady waits until n answers /readyz with 200.
func (c *cluster) waitReady(ctx context.Context, n *node, timeout time.Duration) error {
	return poll(ctx, timeout, func(ctx context.Context) error { return c.ready(ctx, n) })
}

// poll calls f until it returns nil, at most timeout/pollInterval+1 times and
// for at most timeout, returning f's last error.
func poll(ctx context.Context, timeout time.Duration, f func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for range int(timeout/pollInterval) + 1 {
		if err := ctx.Err(); err != nil {
			return err
		}
		if last = f(ctx); last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollInterval):
		}
	}
	if last == nil {
		last = errors.New("condition not met")
	}
	return fmt.Errorf("gave up after %s: %w", timeout, last)
}

// freePort returns a TCP port free on ip when asked.
func freePort(ip string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// newHTTPClient returns a keep-alive client that never uses a proxy from
// the environment. timeout 0: bounded by the request context only.
func newHTTPClient(idlePerHost int, timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        8 * idlePerHost,
			MaxIdleConnsPerHost: idlePerHost,
			IdleConnTimeout:     30 * time.Second,
		},
	}
}

// logTail returns up to the last max lines of the file at path.
func logTail(path string, max int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > 256<<10 {
		_, _ = f.Seek(fi.Size()-256<<10, io.SeekStart)
	}
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > max {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

func truncate(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// shellJoin quotes args for a POSIX shell where needed.
func shellJoin(args []string) string {
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
