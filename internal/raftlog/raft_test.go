package raftlog

import (
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

// listFSM records every command it is given, in order.
type listFSM struct {
	mu   sync.Mutex
	cmds []string
}

func (f *listFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cmds = append(f.cmds, string(l.Data))
	return len(f.cmds)
}

func (f *listFSM) Snapshot() (raft.FSMSnapshot, error) {
	return nil, fmt.Errorf("listFSM: snapshots are not expected in this test")
}

func (f *listFSM) Restore(rc io.ReadCloser) error {
	_ = rc.Close()
	return fmt.Errorf("listFSM: restore is not expected in this test")
}

func (f *listFSM) commands() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.cmds...)
}

func fastRaftConfig() *raft.Config {
	conf := raft.DefaultConfig()
	conf.LocalID = "node-1"
	conf.HeartbeatTimeout = 50 * time.Millisecond
	conf.ElectionTimeout = 50 * time.Millisecond
	conf.LeaderLeaseTimeout = 50 * time.Millisecond
	conf.CommitTimeout = 5 * time.Millisecond
	// No snapshots: the restarted node must rebuild state from the log alone.
	conf.SnapshotThreshold = 1 << 30
	conf.SnapshotInterval = time.Hour
	conf.LogOutput = io.Discard
	return conf
}

func startRaft(t *testing.T, store *Store, fsm raft.FSM) *raft.Raft {
	t.Helper()
	_, trans := raft.NewInmemTransport(raft.ServerAddress("node-1"))
	r, err := raft.NewRaft(fastRaftConfig(), fsm, store, store, raft.NewInmemSnapshotStore(), trans)
	require.NoError(t, err)
	return r
}

func waitLeader(t *testing.T, r *raft.Raft) {
	t.Helper()
	require.Eventually(t, func() bool { return r.State() == raft.Leader }, 3*time.Second, 5*time.Millisecond, "node never became leader")
}

// TestRaftSingleNodeRestart runs a real single-node hashicorp/raft on top of
// Store (as both LogStore and StableStore), applies commands, restarts on the
// same file with a fresh FSM and checks that the log is replayed.
func TestRaftSingleNodeRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raft.db")
	const n = 100
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprintf("cmd-%03d", i)
	}

	// First life: bootstrap, apply, shut down.
	store, err := Open(path, Options{})
	require.NoError(t, err)
	fsm1 := &listFSM{}
	r := startRaft(t, store, fsm1)
	boot := raft.Configuration{Servers: []raft.Server{{ID: "node-1", Address: "node-1", Suffrage: raft.Voter}}}
	require.NoError(t, r.BootstrapCluster(boot).Error())
	waitLeader(t, r)

	futures := make([]raft.ApplyFuture, 0, n)
	for _, cmd := range want {
		futures = append(futures, r.Apply([]byte(cmd), time.Second))
	}
	for i, f := range futures {
		require.NoError(t, f.Error(), "apply %d", i)
	}
	require.Equal(t, want, fsm1.commands())
	require.NoError(t, r.Shutdown().Error())

	term1, err := store.GetUint64([]byte("CurrentTerm"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, term1, uint64(1))
	last1, err := store.LastIndex()
	require.NoError(t, err)
	// Bootstrap configuration + leader no-op + n commands, at least.
	require.GreaterOrEqual(t, last1, uint64(n+2))
	require.NoError(t, store.Close())

	// Second life: same file, fresh FSM, fresh (empty) snapshot store.
	store2, err := Open(path, Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, store2.Close()) }()

	has, err := raft.HasExistingState(store2, store2, raft.NewInmemSnapshotStore())
	require.NoError(t, err)
	require.True(t, has)

	fsm2 := &listFSM{}
	r2 := startRaft(t, store2, fsm2)
	defer func() { require.NoError(t, r2.Shutdown().Error()) }()

	require.ErrorIs(t, r2.BootstrapCluster(boot).Error(), raft.ErrCantBootstrap)
	waitLeader(t, r2)
	// Once the new leader commits its no-op, all earlier entries are applied.
	require.NoError(t, r2.Barrier(2*time.Second).Error())
	require.Equal(t, want, fsm2.commands())

	term2, err := store2.GetUint64([]byte("CurrentTerm"))
	require.NoError(t, err)
	require.Greater(t, term2, term1, "the restarted node must have run a new election from the persisted term")

	// And it keeps working.
	require.NoError(t, r2.Apply([]byte("after-restart"), time.Second).Error())
	require.Equal(t, append(want, "after-restart"), fsm2.commands())
}
