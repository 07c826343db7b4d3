package boltopen_test

import (
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
