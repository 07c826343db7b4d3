package main

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A leader asked, with an Idempotency-Key, to remove itself records the
// outcome through the members it left: it knows no leader once removed.
// The same request retried on another node is a replay, not a wait for
// the claim to expire and then a 404 for a member already gone.
func TestKeyedRemovalOfTheLeaderThroughItselfReplays(t *testing.T) {
	testKeyedRemovalOfTheLeader(t, startTestCluster(t))
}

// The same with Raft timeouts long enough that waiting for a leader would
// outlast the time the outcome's record is given: the node that left asks
// its former members at once.
func TestKeyedRemovalOfTheLeaderWithLongRaftTimeouts(t *testing.T) {
	testKeyedRemovalOfTheLeader(t, startTestClusterWith(t, func(*clusterProc) []string {
		return []string{"--raft-heartbeat-timeout", "1500ms"}
	}))
}

func testKeyedRemovalOfTheLeader(t *testing.T, c *testCluster) {
	leader := c.awaitStable(t, 60*time.Second)
	const key = "0190b2c4-8d3e-7a1b-9c2d-3e4f5a6b7c8e"
	remove := func(p *clusterProc) (int, string) {
		req, err := http.NewRequest(http.MethodDelete, "http://"+p.httpAddr+"/management/v1/cluster/members/"+leader.id, nil)
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", key)
		resp, err := c.client.Do(req)
		if err != nil {
			return 0, ""
		}
		defer resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Idempotent-Replayed")
	}
	code, _ := remove(leader)
	require.Equal(t, http.StatusNoContent, code)

	var other *clusterProc
	for _, p := range c.procs {
		if p != leader {
			other = p
			break
		}
	}
	// Once the others have elected a leader; the client gives each try 5 s,
	// far less than a claim's lifetime.
	var replayed string
	require.Eventually(t, func() bool {
		code, replayed = remove(other)
		return code != http.StatusServiceUnavailable && code != 0
	}, 30*time.Second, 200*time.Millisecond)
	assert.Equal(t, http.StatusNoContent, code)
	assert.Equal(t, "true", replayed)
	st, err := c.status(other)
	require.NoError(t, err)
	assert.Len(t, st.Members, 2)
}
