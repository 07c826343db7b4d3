// Package raftlog is floe's Raft log store and stable store, kept in a single
// bbolt file.
//
// # Why this exists
//
// The usual choice, github.com/hashicorp/raft-boltdb/v2, ties the build to
// the go-metrics versions its chain imports (github.com/hashicorp/go-metrics
// v0.7.0 dropped the "compat" package it needs, and later raft releases
// require v0.7.0), and brings msgpack for its records. We implement the two
// small interfaces raft needs (raft.LogStore and raft.StableStore) directly
// on go.etcd.io/bbolt, so the raft release we build with is our choice alone.
//
// The design follows raft-boltdb: one bbolt file with a "logs" bucket keyed by
// the big-endian uint64 log index and a "conf" bucket for the stable store.
// Log records use a small hand-written binary encoding with a leading format
// version byte (see codec.go) instead of msgpack, so the on-disk format is
// explicit and does not depend on a serialisation library.
//
// This file must be separate from the state machine's bbolt file. bbolt
// allows a single writer per file, and mixing the two would make raft log
// appends and FSM applies contend for the same write lock.
//
// # Failure semantics
//
// Every write (StoreLog, StoreLogs, DeleteRange, Set, SetUint64) runs in one
// bbolt read-write transaction: it is applied completely or not at all. When
// a write returns nil it has been committed, and unless Options.NoSync is set
// it has also been fsynced to disk. When a write returns an error nothing from
// that call is visible.
//
// Reads run in bbolt read-only transactions and never see a partially applied
// write. Values returned to callers are copies; they stay valid after the
// transaction ends and callers may modify them.
//
// Two errors are returned unwrapped because raft compares them by identity or
// by message text, not with errors.Is:
//
//   - GetLog returns raft.ErrLogNotFound itself for a missing index (raft
//     checks err == raft.ErrLogNotFound while replicating).
//   - Get and GetUint64 return ErrKeyNotFound, whose message is exactly
//     "not found", for a missing key (raft checks err.Error() == "not found").
//
// All other errors are wrapped with %w and prefixed with "raftlog:".
//
// A Store is safe for concurrent use by multiple goroutines.
package raftlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"

	"github.com/floe-catalog/floe/internal/boltopen"
)

// Compile-time checks that *Store satisfies the interfaces raft needs.
var (
	_ raft.LogStore    = (*Store)(nil)
	_ raft.StableStore = (*Store)(nil)
)

var (
	bucketLogs = []byte("logs")
	bucketConf = []byte("conf")
)

// ErrKeyNotFound is returned by Get and GetUint64 when the key does not
// exist. Its message is exactly "not found": hashicorp/raft detects a missing
// key by comparing err.Error() with that string (see raft.HasExistingState,
// raft.NewRaft and the vote handling in raft.go), so it must never be wrapped.
var ErrKeyNotFound = errors.New("not found")

// DefaultOpenTimeout is used when Options.OpenTimeout is zero.
const DefaultOpenTimeout = 1 * time.Second

// fileMode is used when Open creates the file.
const fileMode = 0o600

// Options configures Open. The zero value is the safe default.
type Options struct {
	// NoSync skips the fsync after each committed write.
	//
	// false (the default): every write that returns nil is on stable
	// storage. This is what Raft's safety argument assumes: a node must not
	// forget a log entry it acknowledged to the leader, nor the term and vote
	// it recorded, or it can vote twice in one term or let a committed entry
	// be lost.
	//
	// true: writes are much faster, and they still survive a crash of the
	// process (the data is in the OS page cache), but an OS crash or power
	// loss can silently lose recent acknowledged writes, which breaks the
	// guarantees above. Only use it for tests or throwaway clusters.
	NoSync bool

	// OpenTimeout bounds how long Open waits for the exclusive file lock
	// that bbolt takes, e.g. while another process still has the file open.
	// Zero means DefaultOpenTimeout. bbolt's own "wait forever" behaviour is
	// deliberately not reachable, so a stuck lock becomes an error.
	OpenTimeout time.Duration
}

// Store is a raft.LogStore and raft.StableStore backed by one bbolt file.
// Create it with Open and release it with Close.
type Store struct {
	db   *bolt.DB
	path string
}

// Open opens the bbolt file at path, creating the file and its buckets if
// needed. The file must not be shared with any other bbolt user (in
// particular not with the state machine).
//
// Open fails if the file lock is not obtained within the open timeout, if the
// file is not a valid bbolt database, or if the buckets cannot be created. On
// failure nothing is left open.
func Open(path string, opts Options) (*Store, error) {
	timeout := opts.OpenTimeout
	if timeout <= 0 {
		timeout = DefaultOpenTimeout
	}
	db, err := boltopen.Open(path, fileMode, &bolt.Options{
		Timeout: timeout,
		NoSync:  opts.NoSync,
	}, func(db *bolt.DB) error {
		err := db.Update(func(tx *bolt.Tx) error {
			for _, name := range [][]byte{bucketLogs, bucketConf} {
				if _, err := tx.CreateBucketIfNotExists(name); err != nil {
					return fmt.Errorf("create bucket %q: %w", name, err)
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("initialise: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("raftlog: open %s: %w", path, err)
	}
	return &Store{db: db, path: path}, nil
}

// Close closes the underlying bbolt file. It waits for in-flight transactions
// to finish. Every method called after Close returns an error. Calling Close
// more than once is safe.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("raftlog: close %s: %w", s.path, err)
	}
	return nil
}

// Path returns the file path the store was opened with.
func (s *Store) Path() string {
	return s.path
}

// FirstIndex returns the lowest stored log index, or 0 if the log is empty.
func (s *Store) FirstIndex() (uint64, error) {
	var first uint64
	err := s.db.View(func(tx *bolt.Tx) error {
		k, _ := tx.Bucket(bucketLogs).Cursor().First()
		if k != nil {
			first = keyToIndex(k)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("raftlog: first index: %w", err)
	}
	return first, nil
}

// LastIndex returns the highest stored log index, or 0 if the log is empty.
func (s *Store) LastIndex() (uint64, error) {
	var last uint64
	err := s.db.View(func(tx *bolt.Tx) error {
		k, _ := tx.Bucket(bucketLogs).Cursor().Last()
		if k != nil {
			last = keyToIndex(k)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("raftlog: last index: %w", err)
	}
	return last, nil
}

// GetLog reads the entry at index into log, overwriting all of its fields.
//
// It returns raft.ErrLogNotFound, unwrapped, if there is no entry at index.
// It returns an error wrapping ErrUnknownFormat or ErrCorruptRecord if the
// stored record cannot be decoded, including when the index stored inside the
// record does not match its key. On any error log is left unchanged.
func (s *Store) GetLog(index uint64, log *raft.Log) error {
	var found bool
	err := s.db.View(func(tx *bolt.Tx) error {
		val := tx.Bucket(bucketLogs).Get(indexToKey(index))
		if val == nil {
			return nil
		}
		found = true
		var decoded raft.Log
		if err := decodeLog(val, &decoded); err != nil {
			return err
		}
		if decoded.Index != index {
			return fmt.Errorf("%w: record stored under index %d says index %d", ErrCorruptRecord, index, decoded.Index)
		}
		*log = decoded
		return nil
	})
	if err != nil {
		return fmt.Errorf("raftlog: get log %d: %w", index, err)
	}
	if !found {
		return raft.ErrLogNotFound
	}
	return nil
}

// StoreLog stores a single entry. It is StoreLogs with one element.
func (s *Store) StoreLog(log *raft.Log) error {
	return s.StoreLogs([]*raft.Log{log})
}

// StoreLogs stores all entries in one transaction: either all of them are
// written or, on error, none are. An entry with an index that is already
// stored replaces it. Entries need not be contiguous with what is stored
// (raft relies on that after restoring a snapshot), so Store deliberately
// does not implement raft.MonotonicLogStore.
//
// It fails without writing anything if any entry is nil or has an AppendedAt
// that cannot be encoded (see encodeLog).
func (s *Store) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	keys := make([][]byte, len(logs))
	vals := make([][]byte, len(logs))
	for i, l := range logs {
		if l == nil {
			return fmt.Errorf("raftlog: store logs: entry %d of %d is nil", i, len(logs))
		}
		val, err := encodeLog(l)
		if err != nil {
			return fmt.Errorf("raftlog: store logs: %w", err)
		}
		keys[i] = indexToKey(l.Index)
		vals[i] = val
	}

	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketLogs)
		for i := range keys {
			if err := b.Put(keys[i], vals[i]); err != nil {
				return fmt.Errorf("put log %d: %w", logs[i].Index, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("raftlog: store %d logs [%d..%d]: %w", len(logs), logs[0].Index, logs[len(logs)-1].Index, err)
	}
	return nil
}

// DeleteRange deletes every stored entry with min <= index <= max in one
// transaction. Indexes in the range that are not stored are ignored, and
// min > max deletes nothing. On error nothing is deleted.
func (s *Store) DeleteRange(min, max uint64) error {
	if min > max {
		return nil
	}
	minKey := indexToKey(min)
	err := s.db.Update(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketLogs).Cursor()
		// Re-seek after every delete instead of calling Next: a bbolt cursor
		// can skip an element when Next follows Delete on a leaf that was
		// already modified in the same transaction. Each seek starts just
		// past the key deleted, never at min: bbolt merges emptied leaves
		// only at commit, so a seek from min would walk every leaf emptied
		// so far, and compacting n entries would cost O(n²) (tens of
		// seconds at 50K entries, with the log store locked).
		for k, _ := c.Seek(minKey); k != nil && keyToIndex(k) <= max; {
			idx := keyToIndex(k)
			if err := c.Delete(); err != nil {
				return fmt.Errorf("delete log %d: %w", idx, err)
			}
			if idx == max {
				break
			}
			k, _ = c.Seek(indexToKey(idx + 1))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("raftlog: delete range [%d..%d]: %w", min, max, err)
	}
	return nil
}

// Set stores val under key in the stable store, replacing any previous value.
// key must not be empty. An empty or nil val is stored as an empty value;
// Get then returns a non-nil empty slice, not ErrKeyNotFound.
func (s *Store) Set(key []byte, val []byte) error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketConf).Put(key, val)
	})
	if err != nil {
		return fmt.Errorf("raftlog: set %q: %w", key, err)
	}
	return nil
}

// Get returns a copy of the value stored under key.
//
// If key does not exist it returns (nil, ErrKeyNotFound), unwrapped, whose
// message is exactly "not found". That is what raft checks for, even though
// the raft.StableStore comment suggests returning an empty slice instead.
func (s *Store) Get(key []byte) ([]byte, error) {
	var val []byte
	var found bool
	err := s.db.View(func(tx *bolt.Tx) error {
		// A cursor rather than Bucket.Get, so that a key stored with an
		// empty value is reported as present.
		k, v := tx.Bucket(bucketConf).Cursor().Seek(key)
		if k == nil || !bytes.Equal(k, key) {
			return nil
		}
		found = true
		val = append([]byte{}, v...)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("raftlog: get %q: %w", key, err)
	}
	if !found {
		return nil, ErrKeyNotFound
	}
	return val, nil
}

// SetUint64 stores val under key as 8 big-endian bytes.
func (s *Store) SetUint64(key []byte, val uint64) error {
	return s.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

// GetUint64 returns the value stored under key by SetUint64.
//
// If key does not exist it returns (0, ErrKeyNotFound), unwrapped, like
// raft-boltdb; raft treats that as "no value yet". It returns an error if the
// stored value is not exactly 8 bytes long.
func (s *Store) GetUint64(key []byte) (uint64, error) {
	val, err := s.Get(key)
	if err != nil {
		return 0, err
	}
	if len(val) != 8 {
		return 0, fmt.Errorf("raftlog: get uint64 %q: stored value is %d bytes, want 8", key, len(val))
	}
	return binary.BigEndian.Uint64(val), nil
}

func indexToKey(index uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, index)
}

func keyToIndex(key []byte) uint64 {
	return binary.BigEndian.Uint64(key)
}
