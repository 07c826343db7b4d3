package fsm

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	bolt "go.etcd.io/bbolt"

	"github.com/floe-catalog/floe/internal/boltopen"
)

// The cluster's identity: a random id the first leader stamps once, so that
// a node can tell a member of its own cluster from a node of another one
// before it adds it (a mistyped address must not join two clusters' logs).
//
// TypeSetClusterID is ignorable: a replica that skips it has no identity to
// compare, as binaries before it had none.
const TypeSetClusterID CommandType = 50 | IgnorableFlag

var keyClusterID = []byte("cluster_id")

// maxClusterIDLen bounds the id a SetClusterID may store.
const maxClusterIDLen = 64

// SetClusterID stores ID as the cluster's identity unless one is stored
// already (the first to apply wins; later ones change nothing and report
// Count 0). The proposer chooses the id.
type SetClusterID struct {
	ID string `json:"id"`
}

func (SetClusterID) Type() CommandType { return TypeSetClusterID }

func (c SetClusterID) check() (Result, bool) {
	if c.ID == "" || len(c.ID) > maxClusterIDLen {
		return invalid("cluster id must be 1 to %d bytes", maxClusterIDLen)
	}
	return Result{}, false
}

func init() {
	register(TypeSetClusterID, registration{1, jsonCodec[SetClusterID](1), applySetClusterID})
}

func applySetClusterID(t *txn, c Command) Result {
	cmd := c.(SetClusterID)
	b := t.tx.Bucket(bucketRaft)
	if b.Get(keyClusterID) != nil {
		return Result{}
	}
	if err := b.Put(keyClusterID, []byte(cmd.ID)); err != nil {
		panic("fsm: put cluster id: " + err.Error())
	}
	return Result{Count: 1}
}

// ClusterID is the cluster's identity, "" until a leader has stamped it.
func (r *Reader) ClusterID() string {
	return string(r.tx.Bucket(bucketRaft).Get(keyClusterID))
}

// AppliedIndexOf returns the applied index stored in the state machine
// file at path (0 for a state that reflects no entry), opening it read-only.
func AppliedIndexOf(path string) (uint64, error) {
	opts := *boltOptions()
	opts.ReadOnly = true
	// Through boltopen: the file may be a backup's state, checksummed but
	// not signed, cut short or damaged by whoever edited it.
	db, err := boltopen.Open(path, 0o600, &opts, nil)
	if err != nil {
		return 0, fmt.Errorf("fsm: open %s: %w", path, err)
	}
	defer db.Close()
	var idx uint64
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRaft)
		if b == nil {
			return errors.New("not a state machine file (it has no raft bucket)")
		}
		idx = getUint64(b, keyAppliedIndex)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("fsm: %s: %w", path, err)
	}
	return idx, nil
}

// WriteAsNewCluster gives the state machine file at path the cluster
// identity id, replacing the one it holds (if any), removes its signing
// keys (the new cluster's leader adds its own at start, so tokens one
// cluster signs are not accepted by the other: root on a restored copy
// must not mint tokens production accepts), then writes the state to w,
// compacted, and returns the identity it replaced ("" for none).
//
// Compacted, because bbolt does not clear the pages it frees: the file's
// own bytes, written as Reader.WriteTo does, would still hold the removed
// private keys, and the seeded node keeps them in its snapshot. The state
// is copied key by key into a new file beside path (path + ".compact",
// removed on return), which never held a key, and that file is written.
//
// The file must be a copy no FSM has open, such as
// a backup's state staged on its way to seeding a new cluster: a restored
// cluster is another cluster, and a node of the one the backup came from
// must be refused by it. This is not a command and no replica applies it:
// the seeded node's snapshot carries the id to every member that joins.
// On error the file may have been changed or not, and w may hold part of
// the state; the caller discards both.
func WriteAsNewCluster(path, id string, w io.Writer) (string, error) {
	if id == "" || len(id) > maxClusterIDLen {
		return "", fmt.Errorf("fsm: cluster id must be 1 to %d bytes", maxClusterIDLen)
	}
	db, err := boltopen.Open(path, 0o600, boltOptions(), nil)
	if err != nil {
		return "", fmt.Errorf("fsm: open %s: %w", path, err)
	}
	var old string
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRaft)
		if b == nil {
			return errors.New("not a state machine file (it has no raft bucket)")
		}
		old = string(b.Get(keyClusterID))
		if err := b.Put(keyClusterID, []byte(id)); err != nil {
			return err
		}
		if tx.Bucket(bucketAuthKeys) == nil {
			return nil
		}
		if err := tx.DeleteBucket(bucketAuthKeys); err != nil {
			return err
		}
		_, err := tx.CreateBucket(bucketAuthKeys)
		return err
	})
	if err == nil {
		err = writeCompacted(db, path+".compact", w)
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("fsm: %s: %w", path, err)
	}
	return old, nil
}

// writeCompacted copies the state of db into a new file at tmp (any file
// already there is replaced) and writes that file's state to w, as
// Reader.WriteTo does; tmp is removed on return.
func writeCompacted(db *bolt.DB, tmp string, w io.Writer) error {
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	defer os.Remove(tmp)
	opts := *boltOptions()
	opts.NoSync = true // read back here and removed: never needed after a crash
	dst, err := bolt.Open(tmp, 0o600, &opts)
	if err != nil {
		return err
	}
	defer dst.Close()
	// Transactions of at most 64 MiB of keys and values: one for the
	// whole state would hold all of it in memory at once.
	if err := bolt.Compact(dst, db, 64<<20); err != nil {
		return fmt.Errorf("compact: %w", err)
	}
	return dst.View(func(tx *bolt.Tx) error {
		_, err := tx.WriteTo(w)
		return err
	})
}
