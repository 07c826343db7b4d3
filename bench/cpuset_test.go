package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/internal/harness"
)

func seq(from, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = from + i
	}
	return out
}

func TestSplitCPUs(t *testing.T) {
	for _, tc := range []struct {
		cpus     []int
		perNode  int
		clients  int
		wantPins bool
	}{
		{seq(0, 2), 0, 0, false},
		{seq(0, 7), 0, 0, false},
		{seq(0, 8), 1, 5, true},
		{seq(0, 10), 2, 4, true},
		{seq(0, 16), 3, 7, true},
		{seq(0, 64), 12, 28, true},
		// A machine whose allowed CPUs are not 0..n-1.
		{append(seq(4, 4), seq(12, 6)...), 2, 4, true},
	} {
		t.Run(fmt.Sprint(len(tc.cpus), "cpus"), func(t *testing.T) {
			nodes, clients, ok := splitCPUs(tc.cpus, 3)
			require.Equal(t, tc.wantPins, ok)
			if !ok {
				return
			}
			require.Len(t, nodes, 3)
			seen := map[int]bool{}
			for _, set := range append(slices.Clone(nodes), clients) {
				for _, c := range set {
					assert.False(t, seen[c], "CPU %d in two sets", c)
					assert.Contains(t, tc.cpus, c, "CPU %d not available", c)
					seen[c] = true
				}
			}
			assert.Len(t, seen, len(tc.cpus), "every CPU used")
			for _, set := range nodes {
				assert.Len(t, set, tc.perNode)
			}
			assert.Len(t, clients, tc.clients)
			assert.GreaterOrEqual(t, len(clients), 2*tc.perNode, "the clients get at least two nodes' worth")
		})
	}
	_, _, ok := splitCPUs(seq(0, 16), 0)
	assert.False(t, ok, "no nodes")
}

func TestCPUList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		cpus []int
		out  string
	}{
		{"0-3", []int{0, 1, 2, 3}, "0-3"},
		{"0", []int{0}, "0"},
		{" 0-1,4,6-7\n", []int{0, 1, 4, 6, 7}, "0-1,4,6-7"},
		{"5,3,4,3", []int{3, 4, 5}, "3-5"},
	} {
		got, err := parseCPUList(tc.in)
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.cpus, got, tc.in)
		assert.Equal(t, tc.out, formatCPUList(got), tc.in)
	}
	for _, bad := range []string{"", "a", "3-1", "-1", "1-"} {
		_, err := parseCPUList(bad)
		assert.Error(t, err, bad)
	}
	assert.NotEmpty(t, allowedCPUs())
}

func TestPlacementCPUs(t *testing.T) {
	p := CPUPlacement{NumCPU: 16, Pinned: true, NodeCPUs: []string{"0-2", "3-5", "6-8"}}
	assert.Equal(t, 3, p.CPUs(1))
	p.Pinned = false
	assert.Equal(t, 16, p.CPUs(1))
}

// setAffinity pins every thread of a running process with taskset.
func TestSetAffinity(t *testing.T) {
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		t.Skip("no taskset")
	}
	cpus := allowedCPUs()
	cmd := exec.Command("sleep", "60")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	want := cpus[len(cpus)-1:]
	require.NoError(t, setAffinity(t.Context(), taskset, cmd.Process.Pid, want))
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		t.Skip("no /proc")
	}
	assert.Contains(t, string(b), "Cpus_allowed_list:\t"+formatCPUList(want)+"\n")
	require.Error(t, setAffinity(t.Context(), taskset, cmd.Process.Pid, []int{1 << 20}), "a CPU that does not exist")
}

// The pinning path on a real cluster: every node and the driver are pinned
// to their sets, the nodes' Go runtimes follow (GOMAXPROCS from /metrics),
// and unpinning gives everything the CPUs back. The CPU list repeats this
// machine's CPUs to have enough for a split; the sets then overlap, which
// is fine for checking the mechanics.
func TestPinOnRealCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster of processes")
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		t.Skip("no taskset")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build floe with")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "floe")
	out, err := exec.CommandContext(ctx, goBin, "build", "-o", bin, "github.com/floe-catalog/floe/cmd/node").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	c, err := startCluster(ctx, harness.ClusterConfig{Bin: bin, Dir: filepath.Join(dir, "cluster"), Size: ClusterSize}, log)
	require.NoError(t, err)
	defer c.Stop()

	real := allowedCPUs()
	var fake []int
	for len(fake) < minPinCPUs {
		fake = append(fake, real...)
	}
	nodeSets, clientSet, ok := splitCPUs(fake, ClusterSize)
	require.True(t, ok)
	p, unpin := c.pinOn(ctx, log, fake)
	require.True(t, p.Pinned, p.NotPinned)
	assert.Equal(t, formatCPUList(clientSet), p.ClientCPUs)
	assert.Equal(t, formatCPUList(clientSet), cpusAllowed(t, os.Getpid()))
	for i, n := range c.Nodes {
		assert.Equal(t, formatCPUList(nodeSets[i]), p.NodeCPUs[i])
		assert.Equal(t, formatCPUList(nodeSets[i]), cpusAllowed(t, n.Pid()), n.ID)
		assert.Equal(t, distinct(nodeSets[i]), p.GOMAXPROCS[i], "GOMAXPROCS of %s followed its CPU set", n.ID)
	}
	unpin()
	unpin() // a second call is harmless
	for _, n := range c.Nodes {
		assert.Equal(t, formatCPUList(real), cpusAllowed(t, n.Pid()), n.ID)
	}
	assert.Equal(t, formatCPUList(real), cpusAllowed(t, os.Getpid()))
}

// cpusAllowed is Cpus_allowed_list of the process (its main thread).
func cpusAllowed(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no Cpus_allowed_list for %d", pid)
	return ""
}
