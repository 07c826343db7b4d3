package bench

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/floe-catalog/floe/internal/harness"
)

// minPinCPUs is the fewest CPUs on which the read measurement pins the
// nodes and the clients to disjoint CPU sets: with fewer, at least one set
// would be a single CPU shared by nothing else while the rest starve, and
// the ratio is reported as not judged instead.
const minPinCPUs = 8

// CPUPlacement records where the read measurement ran its processes.
type CPUPlacement struct {
	// Available is the CPU list the driver was allowed to use at start
	// (taskset syntax, e.g. "0-15").
	Available string
	NumCPU    int
	// Pinned reports that every node and the driver (the load clients) ran
	// on disjoint CPU sets during the read measurement.
	Pinned bool
	// NotPinned says why they were not, when not.
	NotPinned string
	// NodeIDs and NodeCPUs give each node's CPU list, in cluster order;
	// ClientCPUs the driver's.
	NodeIDs    []string
	NodeCPUs   []string
	ClientCPUs string
	// GOMAXPROCS is each node's GOMAXPROCS once pinned, as its /metrics
	// reported it (the Go runtime follows a changed affinity within about
	// a second); 0 when it could not be read. DriverGOMAXPROCS likewise.
	GOMAXPROCS       []int
	DriverGOMAXPROCS int
}

// CPUs returns how many CPUs node i (by cluster order) could use: its set
// when pinned, else every CPU.
func (p CPUPlacement) CPUs(i int) int {
	if p.Pinned && i < len(p.NodeCPUs) {
		if cpus, err := parseCPUList(p.NodeCPUs[i]); err == nil {
			return len(cpus)
		}
	}
	return p.NumCPU
}

// splitCPUs divides cpus into one set per node and one for the load
// clients, disjoint, each node getting the same number. Each node gets a
// fifth of the CPUs (at least one) and the clients the rest, at least two
// nodes' worth: an HTTP client spends CPU per request of the same order as
// a node serving a warm loadTable, and the clients must outrun the leader
// alone with room to spare to show what the followers add. ok is false with
// fewer than minPinCPUs CPUs or fewer than one per node plus two for the
// clients.
func splitCPUs(cpus []int, nodes int) (nodeSets [][]int, clients []int, ok bool) {
	if nodes < 1 || len(cpus) < minPinCPUs || len(cpus) < nodes+2 {
		return nil, nil, false
	}
	per := max(1, len(cpus)/5)
	for per > 1 && len(cpus)-nodes*per < 2*per {
		per--
	}
	for i := range nodes {
		nodeSets = append(nodeSets, slices.Clone(cpus[i*per:(i+1)*per]))
	}
	return nodeSets, slices.Clone(cpus[nodes*per:]), true
}

// parseCPUList parses a Linux CPU list such as "0-3,8,10-11".
func parseCPUList(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(strings.TrimSpace(s), ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("cpu list %q: bad entry %q", s, part)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("cpu list %q: bad range %q", s, part)
			}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("cpu list %q: empty", s)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// distinct is the number of different CPUs in cpus.
func distinct(cpus []int) int {
	s := slices.Clone(cpus)
	slices.Sort(s)
	return len(slices.Compact(s))
}

// formatCPUList is the inverse of parseCPUList: sorted, with runs as ranges.
func formatCPUList(cpus []int) string {
	s := slices.Clone(cpus)
	slices.Sort(s)
	s = slices.Compact(s)
	var parts []string
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(s[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", s[i], s[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// allowedCPUs returns the CPUs this process may run on, from
// /proc/self/status (Cpus_allowed_list); elsewhere 0..NumCPU-1.
func allowedCPUs() []int {
	if f, err := os.Open("/proc/self/status"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "Cpus_allowed_list:"); ok {
				if cpus, err := parseCPUList(v); err == nil {
					return cpus
				}
			}
		}
	}
	cpus := make([]int, runtime.NumCPU())
	for i := range cpus {
		cpus[i] = i
	}
	return cpus
}

// setAffinity sets the CPU affinity of every thread of process pid (0:
// this process) with taskset. A Go process's later threads inherit it.
func setAffinity(ctx context.Context, taskset string, pid int, cpus []int) error {
	if pid == 0 {
		pid = os.Getpid()
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, taskset, "-a", "-p", "-c", formatCPUList(cpus), strconv.Itoa(pid)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("taskset -a -p -c %s %d: %w: %s", formatCPUList(cpus), pid, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// pinForReads places the cluster's nodes and this process (the load
// clients) on disjoint CPU sets when the machine has at least minPinCPUs
// CPUs and taskset is installed, and waits (up to a few seconds) until
// their Go runtimes have followed. It returns the placement and a function
// that gives every process all available CPUs again; the latter is safe to
// call more than once. A pinning failure is not an error: the placement
// says the processes were not pinned and why, and the aim is then not
// judged.
func (c *Cluster) pinForReads(ctx context.Context, log *slog.Logger) (CPUPlacement, func()) {
	return c.pinOn(ctx, log, allowedCPUs())
}

// pinOn is pinForReads over the CPU list avail.
func (c *Cluster) pinOn(ctx context.Context, log *slog.Logger, avail []int) (CPUPlacement, func()) {
	p := CPUPlacement{Available: formatCPUList(avail), NumCPU: len(avail)}
	noop := func() {}
	nodeSets, clientSet, ok := splitCPUs(avail, len(c.Nodes))
	if !ok {
		p.NotPinned = fmt.Sprintf("%d CPUs, fewer than the %d needed to give each node and the clients their own", len(avail), minPinCPUs)
		return p, noop
	}
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		p.NotPinned = "taskset not found (util-linux); install it to pin the nodes and the clients"
		return p, noop
	}
	undone := false
	unpin := func() {
		if undone {
			return
		}
		undone = true
		for _, n := range c.Nodes {
			if pid := n.Pid(); pid > 0 {
				if err := setAffinity(context.Background(), taskset, pid, avail); err != nil {
					log.Warn("could not unpin a node", "node", n.ID, "error", err)
				}
			}
		}
		if err := setAffinity(context.Background(), taskset, 0, avail); err != nil {
			log.Warn("could not unpin the driver", "error", err)
		}
	}
	for i, n := range c.Nodes {
		pid := n.Pid()
		if pid <= 0 {
			err = fmt.Errorf("node %s is not running", n.ID)
		} else {
			err = setAffinity(ctx, taskset, pid, nodeSets[i])
		}
		if err != nil {
			unpin()
			p.NotPinned = "pinning failed: " + err.Error()
			return p, noop
		}
		p.NodeIDs = append(p.NodeIDs, n.ID)
		p.NodeCPUs = append(p.NodeCPUs, formatCPUList(nodeSets[i]))
	}
	if err := setAffinity(ctx, taskset, 0, clientSet); err != nil {
		unpin()
		p.NotPinned = "pinning failed: " + err.Error()
		return p, noop
	}
	p.Pinned, p.ClientCPUs = true, formatCPUList(clientSet)

	// The Go runtime re-reads its affinity about once a second and resizes
	// GOMAXPROCS to it.
	cl := harness.NewHTTPClient(2, 0)
	defer cl.CloseIdleConnections()
	p.GOMAXPROCS = make([]int, len(c.Nodes))
	deadline := time.Now().Add(5 * time.Second)
	for {
		settled := runtime.GOMAXPROCS(0) == distinct(clientSet)
		for i, n := range c.Nodes {
			p.GOMAXPROCS[i] = gomaxprocsOf(ctx, cl, n)
			settled = settled && p.GOMAXPROCS[i] == distinct(nodeSets[i])
		}
		if settled || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	p.DriverGOMAXPROCS = runtime.GOMAXPROCS(0)
	log.Info("reads: nodes and clients pinned", "nodes", strings.Join(p.NodeCPUs, " | "), "clients", p.ClientCPUs,
		"gomaxprocs", fmt.Sprint(p.GOMAXPROCS), "driver_gomaxprocs", p.DriverGOMAXPROCS)
	return p, unpin
}

// gomaxprocsOf reads go_sched_gomaxprocs_threads from the node's /metrics,
// 0 when it cannot.
func gomaxprocsOf(ctx context.Context, cl *http.Client, n *harness.Node) int {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	v, err := metricValue(ctx, cl, n, "go_sched_gomaxprocs_threads")
	if err != nil {
		return 0
	}
	return int(v)
}
