// Package fsm is floe's replicated state machine: the catalog, and every
// record that must change atomically with it, stored in one bbolt file and
// changed only by applying Raft log entries.
//
// Apply is deterministic: it reads nothing but the entry and the bbolt file.
// Domain outcomes (not found, already exists, CAS lost) are decided inside
// Apply and returned as values in Result. See DESIGN.md.
package fsm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"

	"github.com/floe-catalog/floe/internal/boltopen"
)

var (
	_ raft.FSM         = (*FSM)(nil)
	_ raft.BatchingFSM = (*FSM)(nil)
)

// ErrClosed is returned by reads after Close.
var ErrClosed = errors.New("fsm: closed")

// FSM is the bbolt-backed state machine. Apply, ApplyBatch, Snapshot and
// Restore are called by Raft from one goroutine; View may be called from any.
type FSM struct {
	path   string
	logger *slog.Logger

	// mu guards db: readers hold it shared; Restore swaps the file under it
	// exclusively.
	mu     sync.RWMutex
	db     *bolt.DB
	closed bool

	// applied is the index of the last entry this state machine has applied
	// (or skipped as already applied). Linearizable reads wait on it rather
	// than on raft.AppliedIndex, which is updated before the FSM has run.
	applied  atomic.Uint64
	waitMu   sync.Mutex
	advanced chan struct{} // closed and replaced whenever applied grows

	// onSnapshot, if set, learns how long each snapshot took to persist
	// and how large it was.
	onSnapshot func(d time.Duration, bytes int64)
	// onPurgeWork, if set, is called after a batch that made a purge job
	// claimable, leased one or ended a run has committed.
	onPurgeWork atomic.Pointer[func(PurgeWork)]
}

// PurgeWork says what a batch of applied entries changed for the purge
// service, so that each of its parts is woken only for its own work: during
// a burst of asynchronous drops every batch adds claimable jobs, which
// concern the leader's scheduler alone.
type PurgeWork uint8

const (
	// PurgeClaimable: a job became claimable (an asynchronous purging
	// drop, a retried job): work for the leader's scheduler.
	PurgeClaimable PurgeWork = 1 << iota
	// PurgeLeased: a job was leased to a node: work for that node's
	// workers.
	PurgeLeased
	// PurgeRunEnded: a run recorded its outcome, so a worker slot is free:
	// work for the leader's scheduler.
	PurgeRunEnded
)

// OnPurgeWork registers fn to be called, on the applying goroutine, after
// each batch that added a claimable purge job (an asynchronous purging
// drop, a retried job), leased one to a node, or ended a run (a worker slot
// is free), with what it did. fn must not block: it is a wake-up, not work.
// It may be set at any time; nil clears it.
func (f *FSM) OnPurgeWork(fn func(PurgeWork)) {
	if fn == nil {
		f.onPurgeWork.Store(nil)
		return
	}
	f.onPurgeWork.Store(&fn)
}

// OnSnapshot registers fn to be told the duration and size of every
// snapshot persisted. Call it before Raft starts.
func (f *FSM) OnSnapshot(fn func(d time.Duration, bytes int64)) { f.onSnapshot = fn }

// Open opens (or creates) the state machine file at path.
func Open(path string, logger *slog.Logger) (*FSM, error) {
	if logger == nil {
		logger = slog.Default()
	}
	f := &FSM{path: path, logger: logger, advanced: make(chan struct{})}
	db, err := openDB(path)
	if err != nil {
		return nil, err
	}
	f.db = db
	f.applied.Store(storedIndex(db))
	return f, nil
}

// boltOptions are the state machine's bbolt settings. Sync stays on: an
// applied entry must survive a crash because on restart entries at or below
// the stored applied index are skipped, not replayed.
//
// InitialMmapSize is large because a writer that must grow the mmap waits for
// every open read transaction, and a snapshot holds one for as long as
// Persist streams it: with 1 GiB reserved up front (address space, not
// memory), Apply stalls behind a snapshot only once the file outgrows it.
func boltOptions() *bolt.Options {
	return &bolt.Options{
		Timeout:         5 * time.Second, // another process holding the file is an operator error
		FreelistType:    bolt.FreelistMapType,
		InitialMmapSize: 1 << 30,
	}
}

func openDB(path string) (*bolt.DB, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("fsm: create dir: %w", err)
	}
	db, err := boltopen.Open(path, 0o600, boltOptions(), func(db *bolt.DB) error {
		if err := initBuckets(db); err != nil {
			return fmt.Errorf("fsm: init buckets: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("fsm: open %s: %w", path, err)
	}
	return db, nil
}

// initBuckets creates what a file written by an earlier release lacks. A
// file that lacks nothing is not written to (an offline backup reads a
// stopped node's file through Open, and must leave it as it was).
func initBuckets(db *bolt.DB) error {
	complete := true
	_ = db.View(func(tx *bolt.Tx) error {
		for _, b := range append([][]byte{bucketTableLocs, bucketEvents}, allBuckets...) {
			complete = complete && tx.Bucket(b) != nil
		}
		return nil
	})
	if complete {
		return nil
	}
	return db.Update(func(tx *bolt.Tx) error {
		// Before the buckets are created: a missing location index means
		// a file written before the index existed.
		if err := buildLocationIndex(tx); err != nil {
			return err
		}
		// Likewise: missing feed buckets mean a file written before the
		// feed existed, whose horizon starts at its applied index.
		if err := initEvents(tx); err != nil {
			return err
		}
		for _, b := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
}

func storedIndex(db *bolt.DB) uint64 {
	var idx uint64
	_ = db.View(func(tx *bolt.Tx) error {
		idx = getUint64(tx.Bucket(bucketRaft), keyAppliedIndex)
		return nil
	})
	return idx
}

// Close closes the bbolt file. Pending View calls finish first.
func (f *FSM) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	return f.db.Close()
}

// AppliedIndex is the index of the last log entry the state machine has applied.
func (f *FSM) AppliedIndex() uint64 { return f.applied.Load() }

// WaitApplied blocks until the state machine has applied index, or ctx ends.
func (f *FSM) WaitApplied(ctx context.Context, index uint64) error {
	for {
		f.waitMu.Lock()
		ch := f.advanced
		f.waitMu.Unlock()
		if f.applied.Load() >= index {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("fsm: waiting for index %d (applied %d): %w", index, f.applied.Load(), ctx.Err())
		}
	}
}

// Advanced returns a channel that is closed the next time the applied
// index changes (a batch applied, a snapshot restored). Take it before
// reading the state: a change after the read then closes the channel held,
// so no change is missed between reading and waiting.
func (f *FSM) Advanced() <-chan struct{} {
	f.waitMu.Lock()
	defer f.waitMu.Unlock()
	return f.advanced
}

func (f *FSM) setApplied(index uint64) {
	f.applied.Store(index)
	f.waitMu.Lock()
	close(f.advanced)
	f.advanced = make(chan struct{})
	f.waitMu.Unlock()
}

// Apply applies one entry. See ApplyBatch.
func (f *FSM) Apply(l *raft.Log) any {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch applies committed entries in one bbolt transaction that also
// records the last entry's index and term. Entries at or below the stored
// applied index were applied before a restart and are skipped (their result
// is nil). A command entry that cannot be decoded, or whose type is unknown
// and not flagged ignorable, means the log and this binary disagree: it
// panics rather than diverge from the other replicas. A bbolt failure panics
// too: the entry is committed and cannot be refused.
func (f *FSM) ApplyBatch(logs []*raft.Log) []any {
	results := make([]any, len(logs))
	if len(logs) == 0 {
		return results
	}
	cmds := make([]Command, len(logs))
	for i, l := range logs {
		if l.Type != raft.LogCommand {
			continue
		}
		c, err := Decode(l.Data)
		if err != nil {
			if errors.Is(err, ErrUnknownCommand) && len(l.Data) > 0 && CommandType(l.Data[0])&IgnorableFlag != 0 {
				f.logger.Warn("skipping unknown ignorable command", "index", l.Index, "type", l.Data[0])
				continue
			}
			panic(fmt.Sprintf("fsm: entry %d: %v", l.Index, err))
		}
		cmds[i] = c
	}

	f.mu.RLock()
	defer f.mu.RUnlock()
	last := logs[len(logs)-1]
	var purgeWork PurgeWork
	err := f.db.Update(func(tx *bolt.Tx) error {
		rb := tx.Bucket(bucketRaft)
		stored := getUint64(rb, keyAppliedIndex)
		t := &txn{tx: tx}
		defer func() { purgeWork = t.purgeWork }()
		for i, l := range logs {
			if l.Index <= stored || cmds[i] == nil {
				continue
			}
			t.index = l.Index
			results[i] = registry[cmds[i].Type()].apply(t, cmds[i])
		}
		if last.Index <= stored {
			return nil
		}
		if err := putUint64(rb, keyAppliedIndex, last.Index); err != nil {
			return err
		}
		return putUint64(rb, keyAppliedTerm, last.Term)
	})
	if err != nil {
		panic(fmt.Sprintf("fsm: apply entries %d..%d: %v", logs[0].Index, last.Index, err))
	}
	if last.Index > f.applied.Load() {
		f.setApplied(last.Index)
	}
	if fn := f.onPurgeWork.Load(); purgeWork != 0 && fn != nil {
		(*fn)(purgeWork)
	}
	return results
}

// View runs fn in one bbolt read transaction: a consistent point-in-time view
// of the whole state machine.
func (f *FSM) View(fn func(r *Reader) error) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.closed {
		return ErrClosed
	}
	return f.db.View(func(tx *bolt.Tx) error {
		return fn(&Reader{tx: tx})
	})
}

// Snapshot opens a read transaction; Persist writes exactly that view, so the
// snapshot is point-in-time and carries the applied index it covers.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	tx, err := f.db.Begin(false)
	if err != nil {
		return nil, fmt.Errorf("fsm: snapshot: %w", err)
	}
	return &snapshot{tx: tx, index: getUint64(tx.Bucket(bucketRaft), keyAppliedIndex), logger: f.logger, observe: f.onSnapshot}, nil
}

type snapshot struct {
	tx      *bolt.Tx
	index   uint64
	logger  *slog.Logger
	observe func(time.Duration, int64)
}

func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	start := time.Now()
	n, err := s.tx.WriteTo(sink)
	if err != nil {
		sink.Cancel()
		return fmt.Errorf("fsm: persist snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("fsm: close snapshot sink: %w", err)
	}
	d := time.Since(start)
	if s.observe != nil {
		s.observe(d, n)
	}
	s.logger.Info("snapshot persisted", "applied_index", s.index, "bytes", n, "duration", d)
	return nil
}

func (s *snapshot) Release() { _ = s.tx.Rollback() }

// Restore replaces the state with a snapshot: the stream goes to a temp file
// that is fsynced, checked to open as a state machine file, and renamed over
// the live file, which is then reopened. A failure before the rename leaves
// the current state untouched.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	start := time.Now()
	tmp := f.path + ".restore"
	if err := writeFileSync(tmp, rc); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("fsm: restore: %w", err)
	}
	check, err := openDB(tmp)
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("fsm: restore: snapshot is not a state machine file: %w", err)
	}
	check.Close()

	f.mu.Lock()
	defer f.mu.Unlock()
	// Rename over the live file while it is still open: bbolt locks and
	// maps the open inode, not the name, so a failed rename leaves the
	// current state open and usable, and nothing has been closed yet.
	if err := renameFile(tmp, f.path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("fsm: restore: rename: %w", err)
	}
	if err := syncDir(filepath.Dir(f.path)); err != nil {
		f.logger.Warn("restore: syncing the data directory failed; the restored file may not survive a crash", "error", err)
	}
	db, err := openDB(f.path)
	if err != nil {
		// The file was checked above, so this is a disk failure. The old
		// state's file is gone from the directory: applying to it would
		// write to a ghost, so close it; the next apply panics and stops
		// the node.
		_ = f.db.Close()
		f.closed = true
		return fmt.Errorf("fsm: restore: reopen: %w", err)
	}
	if err := f.db.Close(); err != nil {
		f.logger.Warn("restore: closing the replaced state file failed", "error", err)
	}
	f.db = db
	idx := storedIndex(db)
	f.setApplied(idx)
	f.logger.Info("snapshot restored", "applied_index", idx, "duration", time.Since(start))
	return nil
}

// renameFile is os.Rename; tests replace it to make a restore fail at the
// rename.
var renameFile = os.Rename

func writeFileSync(path string, r io.Reader) error {
	out, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, r); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
