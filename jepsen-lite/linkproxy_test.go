package main

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// echoServer echoes every connection on 127.0.0.1 until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// dialFrom dials addr from node idx's loopback IP, as a floe node does.
func dialFrom(t *testing.T, idx int, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(nodeIP(idx))}, Timeout: time.Second}
	c, err := d.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes a byte and waits up to wait for it to come back.
func roundTrip(c net.Conn, wait time.Duration) (time.Duration, error) {
	start := time.Now()
	_ = c.SetDeadline(start.Add(wait))
	if _, err := c.Write([]byte{'x'}); err != nil {
		return 0, err
	}
	var b [1]byte
	_, err := io.ReadFull(c, b[:])
	return time.Since(start), err
}

func TestLinkProxyPartitionsBySourceIP(t *testing.T) {
	n := newLinkNet(3)
	t.Cleanup(n.close)
	addr, err := n.listen(0) // the proxy in front of node 0
	require.NoError(t, err)
	n.serve(0, echoServer(t))

	from1, from2 := dialFrom(t, 1, addr), dialFrom(t, 2, addr)
	_, err = roundTrip(from1, time.Second)
	require.NoError(t, err)
	_, err = roundTrip(from2, time.Second)
	require.NoError(t, err)

	// {0,2} | {1}: node 1's connection is severed, node 2's keeps working.
	n.partition([]int{0, 2}, []int{1})
	_, err = roundTrip(from1, time.Second)
	assert.Error(t, err, "connection across the cut is closed")
	_, err = roundTrip(from2, time.Second)
	assert.NoError(t, err, "link 2-0 is not cut")

	// A new connection across the cut is accepted but blackholed.
	held := dialFrom(t, 1, addr)
	_, err = roundTrip(held, 300*time.Millisecond)
	assert.Error(t, err, "nothing crosses a cut link")

	n.heal()
	_, err = roundTrip(dialFrom(t, 1, addr), time.Second)
	assert.NoError(t, err, "healed")
	assert.EqualValues(t, 1, n.held.Load())
	assert.EqualValues(t, 1, n.severed.Load())
}

func TestLinkProxyDelay(t *testing.T) {
	n := newLinkNet(2)
	t.Cleanup(n.close)
	addr, err := n.listen(0)
	require.NoError(t, err)
	n.serve(0, echoServer(t))
	c := dialFrom(t, 1, addr)
	fast, err := roundTrip(c, time.Second)
	require.NoError(t, err)

	n.slow(1, 100*time.Millisecond)
	slow, err := roundTrip(c, 2*time.Second)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, slow, 200*time.Millisecond, "both directions delayed (fast was %s)", fast)

	n.heal()
	again, err := roundTrip(c, time.Second)
	require.NoError(t, err)
	assert.Less(t, again, 100*time.Millisecond)
}

func TestParseNemesis(t *testing.T) {
	k, err := parseNemesis("all")
	require.NoError(t, err)
	assert.ElementsMatch(t, allFaults, k)
	k, err = parseNemesis("kill, partition,kill")
	require.NoError(t, err)
	assert.Equal(t, []string{"kill", "partition"}, k)
	k, err = parseNemesis("none")
	require.NoError(t, err)
	assert.Empty(t, k)
	_, err = parseNemesis("kill,meteor")
	assert.Error(t, err)
}

func TestParseFlagsCI(t *testing.T) {
	cfg, err := parseFlags([]string{"--ci"}, io.Discard)
	require.NoError(t, err)
	assert.EqualValues(t, 1, cfg.seed)
	assert.Equal(t, "mixed", cfg.workload)
	assert.ElementsMatch(t, allFaults, cfg.nemesis)
	assert.Contains(t, cfg.commandLine(), "--seed 1")

	_, err = parseFlags([]string{"--nodes", "4"}, io.Discard)
	assert.Error(t, err)
	_, err = parseFlags([]string{"--workload", "bank"}, io.Discard)
	assert.Error(t, err)
}

func TestLinkProxyThrottle(t *testing.T) {
	n := newLinkNet(2)
	t.Cleanup(n.close)
	addr, err := n.listen(0)
	require.NoError(t, err)
	n.serve(0, echoServer(t))
	c := dialFrom(t, 1, addr)
	n.throttle(1, 256<<10)
	payload := make([]byte, 128<<10)
	start := time.Now()
	go func() { _, _ = c.Write(payload) }()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, err = io.ReadFull(c, make([]byte, len(payload)))
	require.NoError(t, err)
	// 128 KiB at 256 KiB/s each way, the two ways overlapping: at least
	// ~0.5s (the first chunk is not waited for).
	assert.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
}
