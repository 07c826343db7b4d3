package raftlog

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

func openTestStore(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "raft.db")
	s, err := Open(path, Options{NoSync: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s, path
}

func testLog(index uint64) *raft.Log {
	return &raft.Log{
		Index:      index,
		Term:       index/10 + 1,
		Type:       raft.LogCommand,
		Data:       fmt.Appendf(nil, "data-%d", index),
		Extensions: fmt.Appendf(nil, "ext-%d", index),
		AppendedAt: time.Unix(1_700_000_000, int64(index)).UTC(),
	}
}

func storeRange(t *testing.T, s *Store, from, to uint64) {
	t.Helper()
	logs := make([]*raft.Log, 0, to-from+1)
	for i := from; i <= to; i++ {
		logs = append(logs, testLog(i))
	}
	require.NoError(t, s.StoreLogs(logs))
}

func requireIndexes(t *testing.T, s *Store, first, last uint64) {
	t.Helper()
	got, err := s.FirstIndex()
	require.NoError(t, err)
	require.Equal(t, first, got, "FirstIndex")
	got, err = s.LastIndex()
	require.NoError(t, err)
	require.Equal(t, last, got, "LastIndex")
}

func TestInterfaces(t *testing.T) {
	s, _ := openTestStore(t)
	require.Implements(t, (*raft.LogStore)(nil), s)
	require.Implements(t, (*raft.StableStore)(nil), s)
	_, monotonic := any(s).(raft.MonotonicLogStore)
	require.False(t, monotonic, "Store must tolerate gaps, so it must not claim to be monotonic")
}

func TestEmptyStoreIndexes(t *testing.T) {
	s, _ := openTestStore(t)
	requireIndexes(t, s, 0, 0)
}

func TestStoreLogRoundTripEveryField(t *testing.T) {
	s, _ := openTestStore(t)
	in := &raft.Log{
		Index:      5,
		Term:       3,
		Type:       raft.LogBarrier,
		Data:       []byte{0, 1, 2, 0xff},
		Extensions: []byte("middleware"),
		AppendedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC),
	}
	require.NoError(t, s.StoreLog(in))

	var out raft.Log
	require.NoError(t, s.GetLog(5, &out))
	require.Equal(t, *in, out)

	// Every raft.LogType survives.
	for typ := raft.LogCommand; typ <= raft.LogConfiguration; typ++ {
		l := testLog(100 + uint64(typ))
		l.Type = typ
		require.NoError(t, s.StoreLog(l))
		var got raft.Log
		require.NoError(t, s.GetLog(l.Index, &got))
		require.Equal(t, *l, got)
	}
}

func TestGetLogDoesNotAliasDB(t *testing.T) {
	s, _ := openTestStore(t)
	require.NoError(t, s.StoreLog(testLog(1)))
	var a raft.Log
	require.NoError(t, s.GetLog(1, &a))
	a.Data[0] = 'X'
	var b raft.Log
	require.NoError(t, s.GetLog(1, &b))
	require.Equal(t, testLog(1).Data, b.Data)
}

func TestGetLogMissing(t *testing.T) {
	s, _ := openTestStore(t)
	var out raft.Log
	err := s.GetLog(1, &out)
	require.Equal(t, raft.ErrLogNotFound, err, "must be the unwrapped sentinel: raft compares with ==")

	storeRange(t, s, 1, 3)
	err = s.GetLog(4, &out)
	require.Equal(t, raft.ErrLogNotFound, err)
}

func TestStoreLogsAndIndexes(t *testing.T) {
	s, _ := openTestStore(t)
	storeRange(t, s, 1, 10)
	requireIndexes(t, s, 1, 10)

	for i := uint64(1); i <= 10; i++ {
		var out raft.Log
		require.NoError(t, s.GetLog(i, &out))
		require.Equal(t, *testLog(i), out)
	}

	// Overwriting an existing index replaces it (raft does this on conflicts).
	replacement := testLog(10)
	replacement.Term = 77
	require.NoError(t, s.StoreLog(replacement))
	var out raft.Log
	require.NoError(t, s.GetLog(10, &out))
	require.Equal(t, uint64(77), out.Term)

	// Gaps are allowed.
	require.NoError(t, s.StoreLog(testLog(20)))
	requireIndexes(t, s, 1, 20)

	// Empty batch is a no-op.
	require.NoError(t, s.StoreLogs(nil))
	requireIndexes(t, s, 1, 20)
}

func TestStoreLogsIsAtomic(t *testing.T) {
	s, _ := openTestStore(t)
	bad := testLog(3)
	bad.AppendedAt = time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC) // not encodable
	err := s.StoreLogs([]*raft.Log{testLog(1), testLog(2), bad})
	require.Error(t, err)
	requireIndexes(t, s, 0, 0)

	err = s.StoreLogs([]*raft.Log{testLog(1), nil})
	require.ErrorContains(t, err, "nil")
	requireIndexes(t, s, 0, 0)
}

// Compaction across many leaves, with holes already punched: every
// entry in range goes, every other stays.
func TestDeleteRangeAcrossPages(t *testing.T) {
	s, _ := openTestStore(t)
	storeRange(t, s, 1, 30_000)
	require.NoError(t, s.DeleteRange(100, 200))
	require.NoError(t, s.DeleteRange(5_000, 5_000))
	require.NoError(t, s.DeleteRange(1, 25_000))
	requireIndexes(t, s, 25_001, 30_000)
	for _, i := range []uint64{25_001, 27_500, 30_000} {
		var out raft.Log
		require.NoError(t, s.GetLog(i, &out), "index %d", i)
	}
	var out raft.Log
	require.Equal(t, raft.ErrLogNotFound, s.GetLog(25_000, &out))
}

func TestDeleteRange(t *testing.T) {
	s, _ := openTestStore(t)
	storeRange(t, s, 1, 20)

	// Compaction from the front (what raft does after a snapshot).
	require.NoError(t, s.DeleteRange(1, 5))
	requireIndexes(t, s, 6, 20)

	// Conflict truncation from the back.
	require.NoError(t, s.DeleteRange(18, 20))
	requireIndexes(t, s, 6, 17)

	// A hole in the middle: bounds are inclusive.
	require.NoError(t, s.DeleteRange(10, 12))
	for i := uint64(6); i <= 17; i++ {
		var out raft.Log
		err := s.GetLog(i, &out)
		if i >= 10 && i <= 12 {
			require.Equal(t, raft.ErrLogNotFound, err, "index %d", i)
		} else {
			require.NoError(t, err, "index %d", i)
		}
	}

	// Ranges that cover missing indexes, or nothing at all, are fine.
	require.NoError(t, s.DeleteRange(100, 200))
	require.NoError(t, s.DeleteRange(9, 8))
	requireIndexes(t, s, 6, 17)

	// Delete everything.
	require.NoError(t, s.DeleteRange(0, ^uint64(0)))
	requireIndexes(t, s, 0, 0)
}

// TestDeleteRangeManyPages makes sure the cursor-based delete does not skip
// keys when the range spans many bbolt pages.
func TestDeleteRangeManyPages(t *testing.T) {
	s, _ := openTestStore(t)
	const n = 5000
	storeRange(t, s, 1, n)
	require.NoError(t, s.DeleteRange(2, n-1))
	requireIndexes(t, s, 1, n)

	var count int
	require.NoError(t, s.db.View(func(tx *bolt.Tx) error {
		count = tx.Bucket(bucketLogs).Stats().KeyN
		return nil
	}))
	require.Equal(t, 2, count)
}

func TestStableStore(t *testing.T) {
	s, _ := openTestStore(t)

	require.NoError(t, s.Set([]byte("k"), []byte("v1")))
	v, err := s.Get([]byte("k"))
	require.NoError(t, err)
	require.Equal(t, []byte("v1"), v)

	require.NoError(t, s.Set([]byte("k"), []byte("v2")))
	v, err = s.Get([]byte("k"))
	require.NoError(t, err)
	require.Equal(t, []byte("v2"), v)

	require.NoError(t, s.SetUint64([]byte("CurrentTerm"), 42))
	n, err := s.GetUint64([]byte("CurrentTerm"))
	require.NoError(t, err)
	require.Equal(t, uint64(42), n)

	require.NoError(t, s.SetUint64([]byte("max"), ^uint64(0)))
	n, err = s.GetUint64([]byte("max"))
	require.NoError(t, err)
	require.Equal(t, ^uint64(0), n)

	// Empty values are present, not missing.
	require.NoError(t, s.Set([]byte("empty"), nil))
	v, err = s.Get([]byte("empty"))
	require.NoError(t, err)
	require.NotNil(t, v)
	require.Empty(t, v)

	// A value that is not 8 bytes is not a uint64.
	_, err = s.GetUint64([]byte("k"))
	require.ErrorContains(t, err, "want 8")

	// Empty keys are rejected by bbolt.
	require.Error(t, s.Set(nil, []byte("x")))

	// Logs and stable store do not interfere.
	requireIndexes(t, s, 0, 0)
}

func TestStableStoreMissingKey(t *testing.T) {
	s, _ := openTestStore(t)
	require.NoError(t, s.Set([]byte("a"), []byte("1")))
	require.NoError(t, s.Set([]byte("c"), []byte("3")))

	// raft detects a missing key via err.Error() == "not found".
	v, err := s.Get([]byte("b"))
	require.Nil(t, v, "raft checks the returned slice against nil")
	require.Equal(t, ErrKeyNotFound, err)
	require.Equal(t, "not found", err.Error())

	n, err := s.GetUint64([]byte("CurrentTerm"))
	require.Equal(t, uint64(0), n)
	require.Equal(t, ErrKeyNotFound, err)
	require.Equal(t, "not found", err.Error())

	// A fresh store has no existing state as far as raft is concerned.
	has, err := raft.HasExistingState(s, s, raft.NewInmemSnapshotStore())
	require.NoError(t, err)
	require.False(t, has)
}

func TestReopenKeepsData(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raft.db")
	s, err := Open(path, Options{}) // default: fsync on
	require.NoError(t, err)
	require.Equal(t, path, s.Path())
	storeRange(t, s, 1, 50)
	require.NoError(t, s.DeleteRange(1, 9))
	require.NoError(t, s.Set([]byte("LastVoteCand"), []byte("node-1")))
	require.NoError(t, s.SetUint64([]byte("CurrentTerm"), 7))
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "double Close is safe")

	// Methods after Close fail.
	_, err = s.LastIndex()
	require.Error(t, err)
	require.Error(t, s.StoreLog(testLog(51)))

	s2, err := Open(path, Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, s2.Close()) }()

	requireIndexes(t, s2, 10, 50)
	var out raft.Log
	require.NoError(t, s2.GetLog(33, &out))
	require.Equal(t, *testLog(33), out)
	v, err := s2.Get([]byte("LastVoteCand"))
	require.NoError(t, err)
	require.Equal(t, []byte("node-1"), v)
	n, err := s2.GetUint64([]byte("CurrentTerm"))
	require.NoError(t, err)
	require.Equal(t, uint64(7), n)
}

func TestOpenTimesOutWhenLocked(t *testing.T) {
	_, path := openTestStore(t) // holds the file lock
	start := time.Now()
	_, err := Open(path, Options{OpenTimeout: 100 * time.Millisecond})
	require.Error(t, err)
	require.ErrorIs(t, err, bolterrors.ErrTimeout)
	require.Less(t, time.Since(start), 2*time.Second)
}

func TestOpenRejectsNonBoltFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "garbage.db")
	require.NoError(t, os.WriteFile(path, []byte("this is not a bbolt database, not even close...................."), 0o600))
	_, err := Open(path, Options{})
	require.Error(t, err)
}

// A byte of an entry changed in the file on disk (same length, so bbolt
// reads the page as valid) is refused when the entry is read, not handed
// to raft, which would apply it and send it to followers.
func TestChangedEntryOnDiskIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raft.db")
	s, err := Open(path, Options{})
	require.NoError(t, err)
	target := &raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: []byte(`{"namespace":["rlog_target"]}`)}
	require.NoError(t, s.StoreLogs([]*raft.Log{target, {Index: 2, Term: 1, Type: raft.LogCommand, Data: []byte("other")}}))
	require.NoError(t, s.Close())

	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, 1, bytes.Count(raw, []byte("rlog_target")))
	require.NoError(t, os.WriteFile(path, bytes.Replace(raw, []byte("rlog_target"), []byte("rlog_tXrget"), 1), 0o600))

	s, err = Open(path, Options{})
	require.NoError(t, err)
	defer s.Close()
	var out raft.Log
	require.ErrorIs(t, s.GetLog(1, &out), ErrCorruptRecord)
	require.NoError(t, s.GetLog(2, &out), "the other entries read as before")
	require.Equal(t, []byte("other"), out.Data)
}
