package raftnode

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/fsm"
)

// copyState returns a consistent copy of n's state machine, taken after a
// linearizable read barrier, and the applied index it reflects.
func copyState(t *testing.T, n *Node) ([]byte, uint64) {
	t.Helper()
	var buf bytes.Buffer
	var index uint64
	require.NoError(t, n.Read(ctxTimeout(t, 10*time.Second), func(r *fsm.Reader) error {
		index = r.AppliedIndex()
		size, err := r.WriteTo(&buf)
		if err == nil && size != r.Size() {
			err = fmt.Errorf("wrote %d bytes, Size says %d", size, r.Size())
		}
		return err
	}))
	return buf.Bytes(), index
}

// TestSeededNodeStartsClusterWithState seeds a data directory from a copy
// of a running cluster's state: a node started on it under another ID is
// refused, under the seeded ID it leads a cluster of one with the state
// and an identity of its own, takes writes, lets a new node join, refuses
// a node of the cluster the state came from, and restarts normally.
func TestSeededNodeStartsClusterWithState(t *testing.T) {
	srcCfg := testConfig(t, t.TempDir(), freeAddr(t))
	srcCfg.Bootstrap = true
	src := mustOpen(t, srcCfg)
	waitLeaderOf(t, src)
	for i := range 5 {
		require.NoError(t, mustPropose(t, src, createNS(fmt.Sprintf("old%d", i))).Err())
	}
	require.Eventually(t, func() bool { return src.ClusterID() != "" }, 10*time.Second, 10*time.Millisecond)
	srcID := src.ClusterID()
	state, index := copyState(t, src)
	require.NoError(t, src.Shutdown())

	// An index other than the one the state was applied up to (an edited
	// backup header) is refused, and leaves nothing behind.
	for _, wrong := range []uint64{index + 1, index - 1, ^uint64(0)} {
		bad := filepath.Join(t.TempDir(), "bad")
		err := Seed(SeedConfig{DataDir: bad, NodeID: "r1", Address: freeAddr(t), Index: wrong, ClusterID: "x", Logger: testLogger(t)}, bytes.NewReader(state))
		require.Error(t, err, "index %d", wrong)
		assert.Contains(t, err.Error(), fmt.Sprintf("applied up to log index %d", index))
		_, statErr := os.Stat(bad)
		assert.True(t, errors.Is(statErr, fs.ErrNotExist), "nothing left behind")
	}

	// What a Seed killed while it wrote the snapshot leaves (the staged
	// copy, raft's unfinished snapshot directory) is not state: a second
	// Seed goes ahead and removes it.
	dir := filepath.Join(t.TempDir(), "seeded")
	unfinished := filepath.Join(dir, snapshotsDir, "1-9-1700000000000"+unfinishedSnapshotSuffix)
	require.NoError(t, os.MkdirAll(unfinished, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(unfinished, snapshotStateFile), state[:100], 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, seedStateFile), state[:100], 0o644))
	require.NoError(t, CheckNoState(dir))
	addr := freeAddr(t)
	const newID = "restored-cluster"
	require.NoError(t, Seed(SeedConfig{DataDir: dir, NodeID: "r1", Address: addr, Index: index, ClusterID: newID, Logger: testLogger(t)}, bytes.NewReader(state)))
	_, err := os.Stat(filepath.Join(dir, seedStateFile))
	assert.True(t, errors.Is(err, fs.ErrNotExist), "staged state left behind")
	assert.NoDirExists(t, unfinished)
	for _, d := range []string{dir, filepath.Join(dir, snapshotsDir)} {
		fi, err := os.Stat(d)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "%s: it holds the state", d)
	}
	err = Seed(SeedConfig{DataDir: dir, NodeID: "r1", Address: addr, Index: index}, bytes.NewReader(state))
	assert.ErrorIs(t, err, ErrHasState, "a second seed")

	// Another ID: refused.
	cfg := testConfig(t, dir, addr)
	cfg.NodeID = "r2"
	_, err = Open(cfg)
	require.ErrorIs(t, err, ErrSeedMismatch)

	cfg.NodeID = "r1"
	cfg.Bootstrap = true // ignored: the node has state
	// What a Seed killed while staging would leave: removed on start.
	require.NoError(t, os.WriteFile(filepath.Join(dir, seedStateFile), []byte("partial"), 0o600))
	n := mustOpen(t, cfg)
	_, err = os.Stat(filepath.Join(dir, seedStateFile))
	assert.True(t, errors.Is(err, fs.ErrNotExist), "a staged state left by a killed seed")
	waitLeaderOf(t, n)
	require.Eventually(t, func() bool { return n.Ready() == nil }, 10*time.Second, 10*time.Millisecond)
	_, err = os.Stat(filepath.Join(dir, seedFile))
	assert.True(t, errors.Is(err, fs.ErrNotExist), "seed record left after the first start")
	ids, err := n.MemberIDs()
	require.NoError(t, err)
	assert.Equal(t, []string{"r1"}, ids)
	for i := range 5 {
		assert.True(t, hasNamespace(t, linearRead(t, n), fmt.Sprintf("old%d", i)))
	}
	require.NoError(t, mustPropose(t, n, createNS("new")).Err())
	assert.Greater(t, n.FSM().AppliedIndex(), index, "the new log goes on after the seeded index")
	assert.Equal(t, newID, n.ClusterID(), "the seeded cluster's identity replaces the source's")

	// A node of the source cluster is refused: its log is not this one's.
	src = mustOpen(t, srcCfg)
	waitLeaderOf(t, src)
	require.Equal(t, srcID, src.ClusterID())
	err = n.AddVoter(ctxTimeout(t, 10*time.Second), src.Addr(), src.Addr()) // its id is its address
	require.ErrorIs(t, err, ErrInvalidMember)
	assert.Contains(t, err.Error(), "belongs to another cluster")
	require.NoError(t, src.Shutdown())

	// A new node joins with an empty data directory and gets everything.
	jcfg := testConfig(t, t.TempDir(), freeAddr(t))
	jcfg.NodeID = "r2"
	jcfg.Join = []string{addr}
	joiner := mustOpen(t, jcfg)
	require.Eventually(t, func() bool { return joiner.Ready() == nil }, 20*time.Second, 20*time.Millisecond)
	assert.True(t, hasNamespace(t, linearRead(t, joiner), "old0"))
	assert.True(t, hasNamespace(t, linearRead(t, joiner), "new"))
	assert.Equal(t, newID, joiner.ClusterID())

	// Both restart with their state.
	require.NoError(t, joiner.Shutdown())
	require.NoError(t, n.Shutdown())
	n = mustOpen(t, cfg)
	joiner = mustOpen(t, jcfg)
	waitOneLeader(t, []*Node{n, joiner})
	assert.True(t, hasNamespace(t, linearRead(t, joiner), "old4"))
	require.NoError(t, mustPropose(t, joiner, createNS("after-restart")).Err())
}

// failingReader yields some bytes, then an error, as a backup reader does
// when the file turns out corrupt at its end.
type failingReader struct{ n int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, errors.New("checksum mismatch")
	}
	k := min(len(p), r.n)
	r.n -= k
	return k, nil
}

func TestSeedFailureLeavesDirectoryAsItWas(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "data")
	err := Seed(SeedConfig{DataDir: missing, NodeID: "a", Address: "127.0.0.1:1", Index: 3, Logger: testLogger(t)}, &failingReader{n: 10000})
	require.ErrorContains(t, err, "checksum mismatch")
	_, err = os.Stat(missing)
	assert.True(t, errors.Is(err, fs.ErrNotExist))

	existing := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(existing, "warehouse"), 0o755))
	for _, id := range []string{"", "new-cluster"} { // with an identity, the state is staged first
		err = Seed(SeedConfig{DataDir: existing, NodeID: "a", Address: "127.0.0.1:1", Index: 3, ClusterID: id, Logger: testLogger(t)}, &failingReader{n: 10000})
		require.Error(t, err)
		entries, err := os.ReadDir(existing)
		require.NoError(t, err)
		require.Len(t, entries, 1, "cluster id %q", id)
		assert.Equal(t, "warehouse", entries[0].Name())
		assert.NoError(t, CheckNoState(existing))
	}
}

// TestSeedRefusesDamagedStagedState: a backup's state is checksummed, not
// signed, so one cut short with its checksums recomputed reaches the
// staged file. Reading it is refused as damaged, with the directory left
// as it was, not a fault that ends the process.
func TestSeedRefusesDamagedStagedState(t *testing.T) {
	src := filepath.Join(t.TempDir(), "fsm.db")
	f, err := fsm.Open(src, nil)
	require.NoError(t, err)
	var state bytes.Buffer
	require.NoError(t, f.View(func(r *fsm.Reader) error {
		_, err := r.WriteTo(&state)
		return err
	}))
	require.NoError(t, f.Close())
	const pageSize = 4096
	require.Greater(t, state.Len(), 4*pageSize, "the state spans more pages than are kept")
	cut := state.Bytes()[:3*pageSize] // the meta pages count pages past the cut

	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "warehouse"), 0o755))
	err = Seed(SeedConfig{DataDir: dir, NodeID: "a", Address: "127.0.0.1:1", Index: 1, ClusterID: "new-cluster", Logger: testLogger(t)},
		bytes.NewReader(cut))
	require.Error(t, err)
	assert.ErrorContains(t, err, "damaged")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	assert.Equal(t, "warehouse", entries[0].Name())
}
