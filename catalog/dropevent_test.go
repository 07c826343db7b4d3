package catalog_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/fsm"
)

// A purging drop's table-dropped event carries its job's state only once
// every node's purge heartbeat announces fsm.PurgeFeatureDropJobEvent:
// events are stored as each replica applies the entry, so a replica on an
// older binary, which records the job's id alone, would serve another
// event under the same index.
func TestPurgingDropEventCarriesJobStateOnlyWhenEveryNodeCan(t *testing.T) {
	var skew atomic.Int64 // moves the catalog's clock past its one-second memo
	uri, scfg := warehouses()[0].uri(t)
	n := &node{t: t, dir: t.TempDir(), addr: freeAddr(t), warehouse: uri, scfg: scfg,
		now: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }}
	n.start()
	t.Cleanup(n.stop)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a"}}).status)
	schema := json.RawMessage(`{"type":"struct","schema-id":0,"fields":[{"id":1,"name":"id","type":"long","required":true}]}`)
	drop := func(name string) *fsm.PurgeJobEvent {
		t.Helper()
		require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/a/tables", map[string]any{"name": name, "schema": schema}).status)
		r := n.do(t, "DELETE", "/v1/namespaces/a/tables/"+name+"?purgeRequested=true", nil, "X-Gravitino-Async-Purge", "true")
		require.Equal(t, 204, r.status, "%s", r.body)
		var job *fsm.PurgeJobEvent
		require.NoError(t, n.raft.StaleRead(func(rd *fsm.Reader) error {
			events, _, err := rd.Events(0, 10000)
			require.NoError(t, err)
			for _, e := range events {
				if e.Type == fsm.EventTableDropped && e.Ident != nil && e.Ident.Name == name {
					job = e.PurgeJob
				}
			}
			return nil
		}))
		require.NotNil(t, job, "the drop of %s has no event with its job", name)
		return job
	}

	// No purge heartbeat yet: no node is known to have the feature.
	job := drop("t0")
	assert.Empty(t, job.State, "no heartbeat yet: the event carries the job's id alone")

	// A node on this binary heartbeats.
	_, err := n.raft.Propose(context.Background(), fsm.PurgeHeartbeat{Node: "current", Slots: 1, AtMs: time.Now().UnixMilli(),
		Features: fsm.PurgeFeaturesOfThisBinary})
	require.NoError(t, err)
	skew.Store(int64(2 * time.Second))

	job = drop("t1")
	assert.NotEmpty(t, job.State, "every node has the feature: the event carries the job's state")

	// A node on an older binary heartbeats: its features lack the bit.
	_, err = n.raft.Propose(context.Background(), fsm.PurgeHeartbeat{Node: "older", Slots: 1, AtMs: time.Now().UnixMilli(),
		Features: fsm.PurgeFeaturesOfThisBinary &^ fsm.PurgeFeatureDropJobEvent})
	require.NoError(t, err)
	skew.Store(int64(4 * time.Second))
	job = drop("t2")
	assert.NotEmpty(t, job.ID)
	assert.Empty(t, job.State, "a node lacks the feature: the event carries the job's id alone, as its binary records it")
}
