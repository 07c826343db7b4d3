package boltopen_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/floe-catalog/floe/internal/boltopen"
)

// A file another process (here another open) holds is refused with an
// error that says so, not bbolt's bare "timeout".
func TestLockedFileSaysItIsLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fsm.db")
	db, err := boltopen.Open(path, 0o600, nil, nil)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })

	_, err = boltopen.Open(path, 0o600, &bolt.Options{Timeout: 100 * time.Millisecond}, nil)
	require.ErrorIs(t, err, bolt.ErrTimeout)
	assert.ErrorContains(t, err, "is locked by another process")
	assert.NotErrorIs(t, err, boltopen.ErrDamaged)
}

// A leaf page whose header was overwritten passed Open, and bbolt
// panicked on the first read that reached it (a request, or the state
// machine's apply, in a crash loop): it is refused at Open, naming the
// file.
func TestDamagedPageIsRefusedAtOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fsm.db")
	db, err := boltopen.Open(path, 0o600, nil, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("namespaces"))
		if err != nil {
			return err
		}
		for i := range 5000 {
			if err := b.Put(fmt.Appendf(nil, "ns_%05d", i), bytes.Repeat([]byte("v"), 100)); err != nil {
				return err
			}
		}
		return nil
	}))
	pageSize := db.Info().PageSize
	require.NoError(t, db.Close())

	db, err = boltopen.Open(path, 0o600, nil, nil)
	require.NoError(t, err, "a whole file passes the check")
	require.NoError(t, db.Close())

	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	at := bytes.Index(raw, []byte("ns_02500"))
	require.Positive(t, at)
	page := at / pageSize * pageSize
	damaged := append([]byte(nil), raw...)
	copy(damaged[page:], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}) // the page's id
	require.NoError(t, os.WriteFile(path, damaged, 0o600))
	_, err = boltopen.Open(path, 0o600, nil, nil)
	require.ErrorIs(t, err, boltopen.ErrDamaged)
	assert.ErrorContains(t, err, path)

	// A branch entry naming a page past the file's mapping: read in a
	// goroutine of bbolt's own, it faulted beyond recovery and ended the
	// process.
	damaged = append([]byte(nil), raw...)
	found := false
	for off := 2 * pageSize; off+pageSize <= len(damaged); off += pageSize {
		if binary.LittleEndian.Uint16(damaged[off+8:]) == 0x01 { // a branch page's flags
			binary.LittleEndian.PutUint64(damaged[off+16+8:], 100000) // its first element's page id
			found = true
			break
		}
	}
	require.True(t, found, "a branch page")
	require.NoError(t, os.WriteFile(path, damaged, 0o600))
	_, err = boltopen.Open(path, 0o600, nil, nil)
	require.ErrorIs(t, err, boltopen.ErrDamaged)
}
