package raftnode

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// startLone opens a one-node cluster in dir at addr under id, waits for it
// to lead, writes n namespaces and shuts it down.
func startLone(t *testing.T, dir, addr, id string, n int) {
	t.Helper()
	cfg := testConfig(t, dir, addr)
	cfg.NodeID, cfg.Bootstrap = id, true
	node, err := Open(cfg)
	require.NoError(t, err)
	waitLeaderOf(t, node)
	require.Eventually(t, node.clusterIDRecorded.Load, 10*time.Second, 10*time.Millisecond, "cluster id stamped and recorded")
	for i := range n {
		require.NoError(t, mustPropose(t, node, createNS(string(rune('a'+i)))).Err())
	}
	require.NoError(t, node.Shutdown())
}

// A state machine file that is not this node's is refused at start, with
// nothing changed: one from another node's directory (ahead of this
// node's log, or of another cluster), or one beside a Raft log that was
// lost.
func TestOpenRefusesAStateMachineAheadOfItsLog(t *testing.T) {
	mine, other := t.TempDir(), t.TempDir()
	startLone(t, mine, freeAddr(t), "n1", 1)
	startLone(t, other, freeAddr(t), "n2", 5)
	raw, err := os.ReadFile(filepath.Join(other, fsmFile))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(mine, fsmFile), raw, 0o600))
	cfg := testConfig(t, mine, freeAddr(t))
	cfg.NodeID = "n1"
	_, err = Open(cfg)
	require.ErrorIs(t, err, ErrForeignState)
	assert.Contains(t, err.Error(), "floe restore")

	// Behind, but another cluster's: raft.db recorded this cluster's id.
	third := t.TempDir()
	startLone(t, third, freeAddr(t), "n3", 0)
	raw, err = os.ReadFile(filepath.Join(third, fsmFile))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(mine, fsmFile), raw, 0o600))
	_, err = Open(cfg)
	require.ErrorIs(t, err, ErrForeignState)
	assert.Contains(t, err.Error(), "copied from another cluster")

	// raft.db lost: without the check the node bootstrapped a new
	// cluster on top of the old state.
	require.NoError(t, os.Remove(filepath.Join(other, raftFile)))
	require.NoError(t, os.RemoveAll(filepath.Join(other, snapshotsDir)))
	cfg = testConfig(t, other, freeAddr(t))
	cfg.NodeID, cfg.Bootstrap = "n2", true
	_, err = Open(cfg)
	require.ErrorIs(t, err, ErrForeignState)
}

// A data directory is its node's: started under another --node-id it is
// refused, while one without state takes any ID.
func TestOpenRefusesAnotherNodeID(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	startLone(t, dir, addr, "n1", 1)
	cfg := testConfig(t, dir, addr)
	cfg.NodeID = "n1b"
	_, err := Open(cfg)
	require.ErrorIs(t, err, ErrNodeIDMismatch)
	assert.Contains(t, err.Error(), "--node-id n1")

	empty := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(empty, nodeIDFile), []byte("old\n"), 0o600))
	startLone(t, empty, freeAddr(t), "new", 0)
	raw, err := os.ReadFile(filepath.Join(empty, nodeIDFile))
	require.NoError(t, err)
	assert.Equal(t, "new\n", string(raw))
}

// A state machine or log file cut short is an error that names the file
// and the way out, not a crash of the process.
func TestOpenRefusesACutShortFile(t *testing.T) {
	for _, file := range []string{fsmFile, raftFile} {
		t.Run(file, func(t *testing.T) {
			dir := t.TempDir()
			addr := freeAddr(t)
			startLone(t, dir, addr, "n1", 20)
			path := filepath.Join(dir, file)
			db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
			require.NoError(t, err)
			var used int64
			require.NoError(t, db.View(func(tx *bolt.Tx) error { used = tx.Size(); return nil }))
			require.NoError(t, db.Close())
			require.Greater(t, used, int64(4*4096))
			require.NoError(t, os.Truncate(path, used/2/4096*4096))
			cfg := testConfig(t, dir, addr)
			cfg.NodeID = "n1"
			_, err = Open(cfg)
			require.ErrorIs(t, err, ErrDamaged)
			assert.Contains(t, err.Error(), path)
		})
	}
}

// The data directory holds the signing keys, and raft writes snapshots
// (whole copies of the state) with the default modes: a data directory
// others may read is made private at start, and so is the snapshots
// directory, so that no other user reads a snapshot.
func TestDataDirAndSnapshotsArePrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	require.NoError(t, os.Mkdir(dir, 0o755))
	cfg := testConfig(t, dir, freeAddr(t))
	cfg.Bootstrap = true
	n := mustOpen(t, cfg)
	waitLeaderOf(t, n)
	mustPropose(t, n, createNS("a"))
	require.NoError(t, n.raft.Snapshot().Error())

	mode := func(path string) os.FileMode {
		fi, err := os.Stat(path)
		require.NoError(t, err)
		return fi.Mode().Perm()
	}
	assert.Equal(t, os.FileMode(0o700), mode(dir))
	assert.Equal(t, os.FileMode(0o700), mode(filepath.Join(dir, snapshotsDir)))
	for _, f := range []string{"fsm.db", "raft.db"} {
		assert.Zero(t, mode(filepath.Join(dir, f))&0o077, f)
	}

	fresh := filepath.Join(t.TempDir(), "fresh")
	cfg = testConfig(t, fresh, freeAddr(t))
	cfg.Bootstrap = true
	mustOpen(t, cfg)
	assert.Equal(t, os.FileMode(0o700), mode(fresh))
	assert.Equal(t, os.FileMode(0o700), mode(filepath.Join(fresh, snapshotsDir)))
}

// A data directory of another cluster, started under --join naming this
// one's nodes, is refused: before, the node led its own cluster of one and
// served (and took writes to) a state the cluster never had.
func TestOpenRefusesAnotherClustersStateUnderJoin(t *testing.T) {
	foreign, foreignAddr := t.TempDir(), freeAddr(t)
	startLone(t, foreign, foreignAddr, "n3", 1)

	cfg := testConfig(t, t.TempDir(), freeAddr(t))
	cfg.NodeID, cfg.Bootstrap = "n1", true
	live := mustOpen(t, cfg)
	waitLeaderOf(t, live)
	require.Eventually(t, live.clusterIDRecorded.Load, 10*time.Second, 10*time.Millisecond)

	cfg = testConfig(t, foreign, foreignAddr)
	cfg.NodeID = "n3"
	cfg.Join = []string{live.cfg.ClusterAddr, foreignAddr}
	_, err := Open(cfg)
	require.ErrorIs(t, err, ErrOtherCluster)
	assert.Contains(t, err.Error(), live.ClusterID())
	assert.Contains(t, err.Error(), "empty data directory")
	assert.Contains(t, err.Error(), "check --join")

	// One node of another cluster among join nodes that do not answer
	// (the others restarting with it, or down) is not a majority: it may
	// be the stray one, a member that lost its data and was started alone.
	cfg.Join = []string{live.cfg.ClusterAddr, freeAddr(t)}
	n, err := Open(cfg)
	require.NoError(t, err)
	require.NoError(t, n.Shutdown())

	// Without --join it is its own cluster's.
	cfg.Join = nil
	n = mustOpen(t, cfg)
	waitLeaderOf(t, n)
}

// A damaged newest snapshot: Raft sends only the newest to a follower
// that needs one, so a node that started on it answered ready while every
// catch-up it led failed on the CRC. When fsm.db holds its state the node
// starts and replaces it with a new snapshot; when fsm.db is behind it
// (the snapshot's state is nowhere else) the node refuses to start,
// naming it. And a log record changed on disk is ErrDamaged with the way
// out, not Raft's bare message.
func TestOpenHandlesADamagedSnapshotOrLogRecord(t *testing.T) {
	damagedDir := func(t *testing.T) (dir, addr, id string) {
		dir, addr = t.TempDir(), freeAddr(t)
		cfg := testConfig(t, dir, addr)
		cfg.NodeID, cfg.Bootstrap = "n1", true
		node, err := Open(cfg)
		require.NoError(t, err)
		waitLeaderOf(t, node)
		for i := range 20 {
			require.NoError(t, mustPropose(t, node, createNS(fmt.Sprintf("ns%d", i))).Err())
		}
		require.NoError(t, node.raft.Snapshot().Error())
		require.NoError(t, node.Shutdown())
		states, err := filepath.Glob(filepath.Join(dir, snapshotsDir, "*", "state.bin"))
		require.NoError(t, err)
		require.Len(t, states, 1)
		f, err := os.OpenFile(states[0], os.O_RDWR, 0)
		require.NoError(t, err)
		fi, err := f.Stat()
		require.NoError(t, err)
		_, err = f.WriteAt(make([]byte, 64), fi.Size()/2)
		require.NoError(t, err)
		require.NoError(t, f.Close())
		return dir, addr, filepath.Base(filepath.Dir(states[0]))
	}
	t.Run("snapshot, fsm.db current", func(t *testing.T) {
		dir, addr, damaged := damagedDir(t)
		cfg := testConfig(t, dir, addr)
		cfg.NodeID = "n1"
		node := mustOpen(t, cfg)
		waitLeaderOf(t, node)
		require.NoError(t, mustPropose(t, node, createNS("after")).Err())
		require.Eventually(t, func() bool {
			metas, err := node.snaps.List()
			if err != nil || len(metas) == 0 || metas[0].ID == damaged {
				return false
			}
			_, rc, err := node.snaps.Open(metas[0].ID)
			if err != nil {
				return false
			}
			return rc.Close() == nil
		}, 20*time.Second, 50*time.Millisecond, "a readable snapshot replaces the damaged one as the newest")
	})
	t.Run("snapshot, fsm.db lost", func(t *testing.T) {
		dir, addr, damaged := damagedDir(t)
		require.NoError(t, os.Remove(filepath.Join(dir, fsmFile)))
		cfg := testConfig(t, dir, addr)
		cfg.NodeID = "n1"
		_, err := Open(cfg)
		require.ErrorIs(t, err, ErrDamaged)
		assert.Contains(t, err.Error(), damaged+"/state.bin")
		assert.Contains(t, err.Error(), "floe members remove")
	})
	t.Run("log record", func(t *testing.T) {
		dir, addr := t.TempDir(), freeAddr(t)
		startLone(t, dir, addr, "n1", 5)
		db, err := bolt.Open(filepath.Join(dir, raftFile), 0o600, nil)
		require.NoError(t, err)
		require.NoError(t, db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte("logs"))
			k, v := b.Cursor().Last()
			changed := append([]byte{}, v...)
			changed[len(changed)/2] ^= 0xff
			return b.Put(k, changed)
		}))
		require.NoError(t, db.Close())
		cfg := testConfig(t, dir, addr)
		cfg.NodeID = "n1"
		_, err = Open(cfg)
		require.ErrorIs(t, err, ErrDamaged)
		assert.Contains(t, err.Error(), "raft.db")
		assert.Contains(t, err.Error(), "floe members remove")
	})
}
