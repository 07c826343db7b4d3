package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// script writes an executable shell script and returns its path.
func script(t *testing.T, body string) string {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("needs /bin/sh")
	}
	path := filepath.Join(t.TempDir(), "child.sh")
	require.NoError(t, os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755))
	return path
}

func TestProcessLifecycle(t *testing.T) {
	bin := script(t, "echo \"child up: $1\"\nexec sleep 60\n")
	p := NewProcess(ProcessConfig{Name: "child", Bin: bin, Args: []string{"a b"}, LogPath: filepath.Join(t.TempDir(), "child.log"), Tool: "test"})
	t.Cleanup(func() { _ = p.Stop() })
	assert.False(t, p.Running())
	assert.Equal(t, 0, p.Pid())

	require.NoError(t, p.Start())
	assert.True(t, p.Running())
	assert.True(t, p.Serving())
	assert.NotZero(t, p.Pid())
	assert.ErrorContains(t, p.Start(), "already running")
	require.NoError(t, Poll(context.Background(), 10*time.Second, PollInterval, func(context.Context) error {
		if !p.LogContains(0, "child up: a b") {
			return fmt.Errorf("log: %q", p.LogTail(5))
		}
		return nil
	}))
	assert.True(t, p.LogContains(0, "=== test: start #1 at ", bin+" 'a b'"), p.LogTail(5))

	require.NoError(t, p.Pause())
	assert.True(t, p.Paused())
	assert.True(t, p.Running())
	assert.False(t, p.Serving())
	require.NoError(t, p.Continue())
	assert.False(t, p.Paused())

	// Stop: SIGTERM ends it; a stop is not a crash.
	require.NoError(t, p.Stop())
	assert.False(t, p.Running())
	assert.Empty(t, p.TakeCrashes())
	assert.ErrorContains(t, p.Signal(0), "not running")

	// The same command line again, marked as the second start; a paused
	// process is killed all the same.
	off := p.LogSize()
	require.NoError(t, p.Start())
	assert.True(t, p.LogContains(off, "start #2"))
	require.NoError(t, p.Pause())
	require.NoError(t, p.Kill())
	assert.False(t, p.Running())
	assert.Empty(t, p.TakeCrashes())
	require.NoError(t, p.Stop(), "stopping a stopped process is a no-op")
}

func TestProcessCrashIsRecorded(t *testing.T) {
	bin := script(t, "echo 'fatal: disk on fire' >&2\nexit 3\n")
	p := NewProcess(ProcessConfig{Name: "child", Bin: bin, LogPath: filepath.Join(t.TempDir(), "child.log")})
	require.NoError(t, p.Start())
	require.NoError(t, p.Wait(10*time.Second))
	crashes := p.TakeCrashes()
	require.Len(t, crashes, 1)
	assert.Contains(t, crashes[0], "child exited on its own (exit status 3)")
	assert.Contains(t, crashes[0], "fatal: disk on fire")
	assert.Contains(t, crashes[0], "=== harness: start #1")
	assert.Empty(t, p.TakeCrashes(), "taken once")
}

func TestWaitHTTPGivesUpWhenTheProcessExits(t *testing.T) {
	bin := script(t, "exit 4\n")
	p := NewProcess(ProcessConfig{Name: "child", Bin: bin, LogPath: filepath.Join(t.TempDir(), "child.log")})
	require.NoError(t, p.Start())
	addr, err := FreeAddr("127.0.0.1")
	require.NoError(t, err)
	t0 := time.Now()
	err = p.WaitHTTP(context.Background(), NewHTTPClient(1, time.Second), "http://"+addr+"/", 30*time.Second)
	assert.ErrorContains(t, err, "child exited before serving: exit status 4")
	assert.Less(t, time.Since(t0), 10*time.Second)
}

func TestPoll(t *testing.T) {
	calls := 0
	err := Poll(context.Background(), 100*time.Millisecond, 10*time.Millisecond, func(context.Context) error {
		calls++
		return fmt.Errorf("not yet %d", calls)
	})
	assert.ErrorContains(t, err, "gave up after 100ms: not yet")
	assert.LessOrEqual(t, calls, 11)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, Poll(ctx, time.Second, 10*time.Millisecond, func(context.Context) error { return nil }), context.Canceled)
}

func TestFreePorts(t *testing.T) {
	ports, err := FreePorts("127.0.0.1", 20)
	require.NoError(t, err)
	seen := map[int]bool{}
	for _, p := range ports {
		assert.False(t, seen[p], "port %d twice", p)
		seen[p] = true
	}
	addr, err := FreeAddr("127.0.0.1")
	require.NoError(t, err)
	l, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	l.Close()

	// Below the ephemeral range, where no outgoing connection takes them.
	if lo, hi, ok := fixedPortRange(); ok {
		for _, p := range ports {
			assert.True(t, p >= lo && p <= hi, "port %d outside %d-%d", p, lo, hi)
		}
	}
}

func TestNewClusterLayout(t *testing.T) {
	ip := func(i int) string { return fmt.Sprintf("127.0.0.%d", 11+i) }
	if l, err := net.Listen("tcp", ip(2)+":0"); err != nil {
		t.Skipf("cannot bind %s: %v (only Linux routes all of 127/8 to loopback)", ip(2), err)
	} else {
		l.Close()
	}
	dir := t.TempDir()
	advertise := []string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"}
	c, err := NewCluster(ClusterConfig{
		Bin: "/opt/floe", Dir: dir, Size: 3, Args: []string{"--log-format", "json"},
		ClusterIP: ip, Advertise: advertise, Tool: "test",
	})
	require.NoError(t, err)
	require.Len(t, c.Nodes, 3)
	assert.Equal(t, "file://"+filepath.ToSlash(filepath.Join(dir, "warehouse")), c.Warehouse)
	for i, n := range c.Nodes {
		assert.Equal(t, fmt.Sprintf("n%d", i+1), n.ID)
		assert.Equal(t, i, n.Index)
		assert.True(t, strings.HasPrefix(n.HTTPAddr, "127.0.0.1:"), n.HTTPAddr)
		assert.True(t, strings.HasPrefix(n.ClusterAddr, ip(i)+":"), n.ClusterAddr)
		assert.Equal(t, advertise[i], n.Advertise)
		assert.Equal(t, filepath.Join(dir, n.ID), n.DataDir)
		assert.Equal(t, filepath.Join(dir, n.ID+".log"), n.LogPath())
		assert.Equal(t, "http://"+n.HTTPAddr, n.BaseURL())
		assert.False(t, n.Running())
	}
	assert.Same(t, c.Nodes[1], c.Node("n2"))
	assert.Nil(t, c.Node("n9"))
	want := "/opt/floe --node-id n2 --data-dir " + c.Nodes[1].DataDir +
		" --http-addr " + c.Nodes[1].HTTPAddr + " --cluster-addr " + c.Nodes[1].ClusterAddr +
		" --cluster-advertise 127.0.0.1:7002 --join 127.0.0.1:7001,127.0.0.1:7003 --bootstrap-expect 3" +
		" --warehouse " + c.Warehouse + " --log-format json"
	assert.Equal(t, want, c.Nodes[1].CommandLine())
	assert.Equal(t, ControlTimeout, c.control.Timeout)

	c, err = NewCluster(ClusterConfig{Bin: "/opt/floe", Dir: dir, Size: 1, ControlTimeout: 3 * time.Second})
	require.NoError(t, err)
	assert.Equal(t, 3*time.Second, c.control.Timeout)

	_, err = NewCluster(ClusterConfig{Bin: "/opt/floe", Dir: dir, Size: 2, Advertise: advertise})
	assert.ErrorContains(t, err, "3 advertise addresses for 2 nodes")
	_, err = NewCluster(ClusterConfig{Bin: "/opt/floe", Dir: dir, Size: 0})
	assert.Error(t, err)
}
