package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/internal/testenv"
)

// clusterProc is one floe process of a test cluster. Its command line never
// changes, so a restart is exactly what an operator (or a supervisor) does.
type clusterProc struct {
	id                    string
	httpAddr, clusterAddr string
	args                  []string
	out                   *testenv.LogBuffer // every run's output, in order

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when the current run's Wait returned
}

func (p *clusterProc) start(t *testing.T, bin string) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.out, "==== start %s at %s\n", p.id, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(bin, p.args...)
	cmd.Env = cleanEnv()
	cmd.Stdout, cmd.Stderr = p.out, p.out
	cmd.SysProcAttr = killWithParent()
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	p.cmd, p.exited = cmd, exited
}

// killWithParent asks the kernel to SIGKILL the node if the test binary
// dies without its cleanups (a test timeout, say). Only Linux has
// Pdeathsig; elsewhere the cleanups are all there is.
func killWithParent() *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{}
	if f := reflect.ValueOf(attr).Elem().FieldByName("Pdeathsig"); f.IsValid() && f.CanSet() {
		f.Set(reflect.ValueOf(syscall.SIGKILL))
	}
	return attr
}

// running reports whether the current run has not exited.
func (p *clusterProc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL and waits (bounded) until the process is gone.
func (p *clusterProc) kill(t *testing.T) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Errorf("%s: still running 10s after SIGKILL", p.id)
	}
}

// tail returns the last n lines of the process's output.
func (p *clusterProc) tail(n int) string {
	lines := strings.Split(p.out.String(), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// testCluster is three floe processes on loopback that form a cluster with
// --bootstrap-expect 3 and --join naming all three, sharing one file://
// warehouse.
type testCluster struct {
	bin    string
	procs  []*clusterProc
	client *http.Client
}

func startTestCluster(t *testing.T) *testCluster {
	t.Helper()
	return startTestClusterWith(t)
}

// startTestClusterWith starts three nodes with extra flags each.
func startTestClusterWith(t *testing.T, extra ...func(p *clusterProc) []string) *testCluster {
	t.Helper()
	bin := floeBinary(t)
	root := t.TempDir()
	warehouse := "file://" + filepath.ToSlash(filepath.Join(root, "warehouse"))

	// Six distinct free ports.
	seen := map[string]bool{}
	addr := func() string {
		for range 20 {
			if a := freeAddr(t); !seen[a] {
				seen[a] = true
				return a
			}
		}
		t.Fatal("no distinct free port")
		return ""
	}
	c := &testCluster{bin: bin, client: &http.Client{Timeout: 5 * time.Second}}
	for i := 1; i <= 3; i++ {
		c.procs = append(c.procs, &clusterProc{id: fmt.Sprintf("node%d", i), httpAddr: addr(), clusterAddr: addr(), out: &testenv.LogBuffer{}})
	}
	var join []string
	for _, p := range c.procs {
		join = append(join, p.clusterAddr)
	}
	for _, p := range c.procs {
		p.args = []string{
			"--node-id", p.id,
			"--data-dir", filepath.Join(root, p.id),
			"--http-addr", p.httpAddr,
			"--cluster-addr", p.clusterAddr,
			"--warehouse", warehouse,
			"--bootstrap-expect", "3",
			"--join", strings.Join(join, ","),
		}
		for _, e := range extra {
			p.args = append(p.args, e(p)...)
		}
	}
	t.Cleanup(func() {
		for _, p := range c.procs {
			if p.running() {
				p.kill(t)
			}
		}
	})
	t.Cleanup(func() {
		// Runs first (cleanups are LIFO): the logs, while they are complete.
		if t.Failed() {
			for _, p := range c.procs {
				t.Logf("---- %s (http %s, cluster %s), last lines:\n%s", p.id, p.httpAddr, p.clusterAddr, p.tail(60))
			}
		}
	})
	for _, p := range c.procs {
		p.start(t, bin)
	}
	return c
}

// do sends one request to a node and returns the status and body; status 0
// means no answer (connection error or timeout).
func (c *testCluster) do(p *clusterProc, method, path, body string) (int, []byte, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://"+p.httpAddr+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

type clusterStatus struct {
	Self       string `json:"self"`
	LeaderID   string `json:"leader-id"`
	LeaderAddr string `json:"leader-address"`
	ClusterID  string `json:"cluster-id"`
	Members    []struct {
		ID          string `json:"id"`
		ClusterAddr string `json:"cluster-address"`
		HTTPAddr    string `json:"http-address"`
		Suffrage    string `json:"suffrage"`
		Leader      bool   `json:"leader"`
		Reachable   bool   `json:"reachable"`
		State       string `json:"state"`
		ClusterID   string `json:"cluster-id"`
		Error       string `json:"error"`
	} `json:"members"`
}

func (c *testCluster) status(p *clusterProc) (clusterStatus, error) {
	var st clusterStatus
	code, body, err := c.do(p, http.MethodGet, "/management/v1/cluster", "")
	if err != nil {
		return st, err
	}
	if code != http.StatusOK {
		return st, fmt.Errorf("GET /management/v1/cluster on %s: %d %s", p.id, code, body)
	}
	return st, json.Unmarshal(body, &st)
}

func (c *testCluster) ready(p *clusterProc) bool {
	code, _, err := c.do(p, http.MethodGet, "/readyz", "")
	return err == nil && code == http.StatusOK
}

func (c *testCluster) byID(id string) *clusterProc {
	for _, p := range c.procs {
		if p.id == id {
			return p
		}
	}
	return nil
}

// awaitStable waits until every running node is ready and all of them name
// the same leader, a running member, and returns it.
func (c *testCluster) awaitStable(t *testing.T, within time.Duration) *clusterProc {
	t.Helper()
	var leader *clusterProc
	var last string
	require.Eventually(t, func() bool {
		leader = nil
		for _, p := range c.procs {
			if !p.running() {
				last = p.id + " is not running"
				return false
			}
			if !c.ready(p) {
				last = p.id + " is not ready"
				return false
			}
			st, err := c.status(p)
			if err != nil {
				last = err.Error()
				return false
			}
			l := c.byID(st.LeaderID)
			if l == nil || (leader != nil && l != leader) {
				last = fmt.Sprintf("%s names leader %q", p.id, st.LeaderID)
				return false
			}
			leader = l
		}
		return true
	}, within, 50*time.Millisecond, "cluster not stable: %s", &last)
	return leader
}

// writeLoad creates namespaces with unique names through the given nodes
// only, from several concurrent clients. A request without an answer or
// with a 5xx is retried with the same name on the next node: its first
// attempt may have been applied, so 409 on a retry also acknowledges it.
type writeLoad struct {
	acked     atomic.Int64
	mu        sync.Mutex
	ackedSet  map[string]bool
	attempted map[string]bool
	failures  []string       // requests answered in a way no retry explains
	retries   map[string]int // retried answers by kind, for the log
}

func (w *writeLoad) run(c *testCluster, client int, targets []*clusterProc, stop <-chan struct{}) {
	for seq := 0; ; seq++ {
		select {
		case <-stop:
			return
		default:
		}
		name := fmt.Sprintf("c%d_%05d", client, seq)
		w.mu.Lock()
		w.attempted[name] = true
		w.mu.Unlock()
		body := fmt.Sprintf(`{"namespace":[%q]}`, name)
		ok := false
	attempts:
		for attempt := 0; attempt < 40; attempt++ {
			if attempt > 0 {
				select {
				case <-stop:
					return // the name's outcome stays unknown: not checked
				case <-time.After(50 * time.Millisecond):
				}
			}
			p := targets[(client+seq+attempt)%len(targets)]
			code, resp, err := c.do(p, http.MethodPost, "/v1/namespaces", body)
			switch {
			case err != nil || code >= 500:
				kind := fmt.Sprintf("%d %s", code, errorKind(resp))
				if err != nil {
					kind = "no answer"
				}
				w.mu.Lock()
				w.retries[kind]++
				w.mu.Unlock()
				continue
			case code == http.StatusOK:
				ok = true
			case code == http.StatusConflict && attempt > 0:
				ok = true
				w.mu.Lock()
				w.retries["409 on a retry (acknowledged)"]++
				w.mu.Unlock()
			default:
				w.mu.Lock()
				w.failures = append(w.failures, fmt.Sprintf("%s via %s (attempt %d): %d %s", name, p.id, attempt, code, resp))
				w.mu.Unlock()
			}
			break attempts
		}
		if ok {
			w.mu.Lock()
			w.ackedSet[name] = true
			w.mu.Unlock()
			w.acked.Add(1)
		}
	}
}

// listNamespaces reads every top-level namespace from one node, page by
// page, with linearizable reads.
func (c *testCluster) listNamespaces(t *testing.T, p *clusterProc) []string {
	t.Helper()
	var names []string
	token := ""
	for page := 0; page < 1000; page++ {
		path := "/v1/namespaces?pageSize=100"
		if token != "" {
			path += "&pageToken=" + url.QueryEscape(token)
		}
		code, body, err := c.do(p, http.MethodGet, path, "")
		require.NoError(t, err, "list on %s", p.id)
		require.Equal(t, http.StatusOK, code, "list on %s: %s", p.id, body)
		var resp struct {
			NextPageToken *string    `json:"next-page-token"`
			Namespaces    [][]string `json:"namespaces"`
		}
		require.NoError(t, json.Unmarshal(body, &resp))
		for _, ns := range resp.Namespaces {
			require.Len(t, ns, 1)
			names = append(names, ns[0])
		}
		if resp.NextPageToken == nil || *resp.NextPageToken == "" {
			return names
		}
		token = *resp.NextPageToken
	}
	t.Fatalf("listing on %s did not end after 1000 pages", p.id)
	return nil
}

// TestClusterSurvivesLeaderKill runs three real floe processes, writes
// through the followers from four clients, SIGKILLs the leader mid-load,
// checks that writes resume, restarts the killed node with its unchanged
// command line, and then checks on every node that every acknowledged write
// is there.
func TestClusterSurvivesLeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three processes")
	}
	floeBinary(t) // build outside the timings below
	start := time.Now()
	c := startTestCluster(t)
	leader := c.awaitStable(t, 20*time.Second)
	t.Logf("cluster formed in %s; leader %s", time.Since(start).Round(time.Millisecond), leader.id)

	var followers []*clusterProc
	for _, p := range c.procs {
		if p != leader {
			followers = append(followers, p)
		}
	}
	require.Len(t, followers, 2)

	load := &writeLoad{ackedSet: map[string]bool{}, attempted: map[string]bool{}, retries: map[string]int{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for client := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			load.run(c, client, followers, stop)
		}()
	}
	stopped := false
	stopLoad := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer stopLoad()

	// Some writes before the kill.
	require.Eventually(t, func() bool { return load.acked.Load() >= 20 }, 10*time.Second, 10*time.Millisecond,
		"writes through the followers did not start")

	atKill := load.acked.Load()
	killedAt := time.Now()
	leader.kill(t)
	t.Logf("SIGKILLed leader %s after %d acknowledged writes", leader.id, atKill)

	// Writes resume through the two survivors, one of which now leads.
	require.Eventually(t, func() bool { return load.acked.Load() >= atKill+20 }, 15*time.Second, 10*time.Millisecond,
		"writes did not resume after the leader was killed (acknowledged: %d at the kill)", atKill)
	t.Logf("writes resumed: 20 more acknowledged %s after the kill", time.Since(killedAt).Round(time.Millisecond))

	// Restart the killed node with the same command line, under load.
	leader.start(t, c.bin)
	newLeader := c.awaitStable(t, 20*time.Second)
	t.Logf("%s rejoined; leader %s", leader.id, newLeader.id)
	atRestart := load.acked.Load()
	require.Eventually(t, func() bool { return load.acked.Load() >= atRestart+10 }, 10*time.Second, 10*time.Millisecond,
		"writes stalled after the restart")
	stopLoad()

	load.mu.Lock()
	acked := make([]string, 0, len(load.ackedSet))
	for name := range load.ackedSet {
		acked = append(acked, name)
	}
	failures := load.failures
	attempted := load.attempted
	load.mu.Unlock()
	slices.Sort(acked)
	assert.Empty(t, failures, "writes answered with an unexpected status")
	t.Logf("%d writes acknowledged, %d attempted; retried answers: %v", len(acked), len(attempted), load.retries)

	// Every node, with linearizable reads, has every acknowledged write, no
	// name nobody wrote, and the same list as the others.
	var first []string
	for _, p := range c.procs {
		names := c.listNamespaces(t, p)
		assert.True(t, slices.IsSorted(names), "%s lists namespaces out of order", p.id)
		present := map[string]bool{}
		var twice, unknown, missing []string
		for _, n := range names {
			if present[n] {
				twice = append(twice, n)
			}
			present[n] = true
			if !attempted[n] {
				unknown = append(unknown, n)
			}
		}
		assert.Empty(t, twice, "%s lists namespaces twice", p.id)
		assert.Empty(t, unknown, "%s lists namespaces no client created", p.id)
		for _, n := range acked {
			if !present[n] {
				missing = append(missing, n)
			}
		}
		assert.Empty(t, missing, "%s lacks acknowledged namespaces", p.id)
		if first == nil {
			first = names
		} else {
			assert.Equal(t, first, names, "%s lists other namespaces than %s", p.id, c.procs[0].id)
		}
		// Direct reads of the newest acknowledged names, the likeliest to
		// be missed by a node that lags.
		for _, n := range newest(acked, 5) {
			code, err := c.headNamespace(p, n)
			if assert.NoError(t, err) {
				assert.Equal(t, http.StatusNoContent, code, "HEAD %s on %s", n, p.id)
			}
		}
	}

	// Every node sees three reachable voters at their addresses and one
	// leader, the same one. (Retried briefly: a member's self-report is one
	// RPC that may time out.)
	var problems []string
	for deadline := time.Now().Add(5 * time.Second); ; {
		problems = c.statusProblems()
		if len(problems) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	assert.Empty(t, problems, "GET /management/v1/cluster")
	t.Logf("done in %s", time.Since(start).Round(time.Millisecond))
}

// statusProblems checks GET /management/v1/cluster on every node: three
// reachable voters with the addresses they were started with, exactly one
// of them leader and named as leader-id, the same leader on every node.
func (c *testCluster) statusProblems() []string {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	leaders := map[string]bool{}
	for _, p := range c.procs {
		st, err := c.status(p)
		if err != nil {
			bad("%s: %v", p.id, err)
			continue
		}
		if st.Self != p.id {
			bad("%s: self is %q", p.id, st.Self)
		}
		if len(st.Members) != 3 {
			bad("%s: %d members, want 3", p.id, len(st.Members))
		}
		var flagged []string
		for _, m := range st.Members {
			want := c.byID(m.ID)
			switch {
			case want == nil:
				bad("%s: unknown member %q", p.id, m.ID)
				continue
			case m.ClusterAddr != want.clusterAddr || m.HTTPAddr != want.httpAddr:
				bad("%s: member %s at cluster %q, http %q; want %q, %q", p.id, m.ID, m.ClusterAddr, m.HTTPAddr, want.clusterAddr, want.httpAddr)
			case m.Suffrage != "Voter":
				bad("%s: member %s is a %s", p.id, m.ID, m.Suffrage)
			case !m.Reachable:
				bad("%s: member %s unreachable: %s", p.id, m.ID, m.Error)
			}
			if m.Leader {
				flagged = append(flagged, m.ID)
				if m.State != "leader" {
					bad("%s: member %s flagged leader reports state %q", p.id, m.ID, m.State)
				}
			}
		}
		if len(flagged) != 1 || flagged[0] != st.LeaderID {
			bad("%s: leader-id %q, members flagged leader %v", p.id, st.LeaderID, flagged)
		}
		leaders[st.LeaderID] = true
	}
	if len(leaders) != 1 {
		bad("nodes name different leaders: %v", leaders)
	}
	return problems
}

// headNamespace reports the status of HEAD /v1/namespaces/{name} on a node.
func (c *testCluster) headNamespace(p *clusterProc, name string) (int, error) {
	code, _, err := c.do(p, http.MethodHead, "/v1/namespaces/"+url.PathEscape(name), "")
	return code, err
}

// errorKind is the type and the start of the message (up to the first
// colon) of an Iceberg error response.
func errorKind(body []byte) string {
	var e struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal(body, &e)
	msg, _, _ := strings.Cut(e.Error.Message, ":")
	return e.Error.Type + " (" + msg + ")"
}

// newest returns the last n names of each client ("c<client>_<seq>", names
// sorted).
func newest(sorted []string, n int) []string {
	byClient := map[string][]string{}
	for _, name := range sorted {
		client, _, _ := strings.Cut(name, "_")
		byClient[client] = append(byClient[client], name)
	}
	var out []string
	for _, names := range byClient {
		out = append(out, names[max(0, len(names)-n):]...)
	}
	slices.Sort(out)
	return out
}
