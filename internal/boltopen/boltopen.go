// Package boltopen opens bbolt files so that a damaged one is an error that
// names the file, not a crash of the process.
//
// bbolt maps the file into memory and trusts its page headers: a file cut
// short faults (SIGBUS) on the first page past its end, and a damaged page
// makes bbolt panic. Both would end the process with a Go stack trace and
// exit code 2, which says nothing of the file or the way out.
package boltopen

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// ErrDamaged reports a bbolt file that cannot be read: cut short, or with a
// page bbolt refuses. Nothing was written to it.
var ErrDamaged = errors.New("damaged database file")

// Open is bolt.Open followed by init (nil: none), both in a guard that
// turns a fault or a panic while reading the file into ErrDamaged. Before
// init it checks that the pages the file's meta page counts fit in the
// file. On any error the file is closed (when it can be).
func Open(path string, mode os.FileMode, opts *bolt.Options, init func(*bolt.DB) error) (db *bolt.DB, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			closeQuietly(db)
			db, err = nil, fmt.Errorf("%w: %s: %v", ErrDamaged, path, r)
		}
	}()
	db, err = bolt.Open(path, mode, opts)
	if err != nil {
		if refusedContent(err) {
			return nil, fmt.Errorf("%w: %s: %w", ErrDamaged, path, err)
		}
		if errors.Is(err, bolterrors.ErrTimeout) {
			// The lock wait ran out: another process has the file open.
			return nil, fmt.Errorf("%s is locked by another process (is a floe node already running on this data directory?): %w", path, err)
		}
		// Not permitted, out of memory for the mapping, an I/O error: not
		// the file's content.
		return nil, err
	}
	if fi, serr := os.Stat(path); serr == nil {
		var size int64
		_ = db.View(func(tx *bolt.Tx) error {
			size = tx.Size()
			return nil
		})
		if size > fi.Size() {
			closeQuietly(db)
			return nil, fmt.Errorf("%w: %s is %d bytes, but its pages reach byte %d: the file was cut short", ErrDamaged, path, fi.Size(), size)
		}
	}
	if err := checkPages(db); err != nil {
		closeQuietly(db)
		return nil, fmt.Errorf("%w: %s: %w", ErrDamaged, path, err)
	}
	if init != nil {
		if err := init(db); err != nil {
			closeQuietly(db)
			return nil, err
		}
	}
	return db, nil
}

// closeQuietly closes db, ignoring a fault or panic while doing so.
func closeQuietly(db *bolt.DB) {
	if db == nil {
		return
	}
	defer func() { _ = recover() }()
	_ = db.Close()
}

// refusedContent reports whether bolt.Open failed on what it read: not a
// database, a checksum or version mismatch, a mapping it cannot use, a
// file too small to hold its meta pages.
func refusedContent(err error) bool {
	for _, e := range []error{bolterrors.ErrInvalid, bolterrors.ErrChecksum, bolterrors.ErrVersionMismatch, bolterrors.ErrInvalidMapping} {
		if errors.Is(err, e) {
			return true
		}
	}
	return strings.HasPrefix(err.Error(), "file size too small")
}

// checkPages walks every page of db (bbolt's Tx.Check): bbolt trusts each
// page it reads, so a damaged branch or leaf page (its header overwritten)
// otherwise passed Open and panicked on the first read that reached it, in
// a request or in the state machine's apply, long after the node started.
// It reads the whole file (twice: the walk below, then bbolt's check).
// Pages neither reachable nor free (space a crash leaked) are not damage.
// It returns the first problem found.
func checkPages(db *bolt.DB) error {
	// bbolt's check runs in a goroutine of its own, where a page id past
	// the mapping faults beyond the caller's SetPanicOnFault and ends the
	// process: first every page is reached here, through the buckets'
	// cursors, in this goroutine, where such a fault is recovered.
	if err := db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(_ []byte, b *bolt.Bucket) error { return walkBucket(b) })
	}); err != nil {
		return err
	}
	var first error
	_ = db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			if first == nil && !strings.HasSuffix(err.Error(), "unreachable unfreed") {
				first = err
			}
		}
		return nil
	})
	if first == nil {
		return nil
	}
	msg := first.Error()
	if len(msg) > 300 {
		msg = msg[:300] + "..."
	}
	return fmt.Errorf("a page fails bbolt's check: %s", msg)
}

// walkBucket visits every key of b and of the buckets nested in it, so
// that bbolt reads each of their pages.
func walkBucket(b *bolt.Bucket) error {
	return b.ForEach(func(k, v []byte) error {
		if v != nil {
			return nil
		}
		if child := b.Bucket(k); child != nil {
			return walkBucket(child)
		}
		return nil
	})
}
