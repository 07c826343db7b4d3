package main

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A backup's temporary file is its run's alone: a second run to the same
// target while one writes is refused (they wrote through each other's
// file); one a killed run left is taken over, not left to pile up; a link
// there is replaced, never written through.
func TestBackupTempFile(t *testing.T) {
	dir := t.TempDir()
	tmp := filepath.Join(dir, "c.backup.tmp")
	require.NoError(t, os.WriteFile(tmp, []byte("left by a killed run"), 0o600))
	f, err := openBackupTemp(tmp)
	require.NoError(t, err)
	fi, err := f.Stat()
	require.NoError(t, err)
	assert.Zero(t, fi.Size(), "a leftover is truncated")

	if runtime.GOOS != "windows" {
		_, err = openBackupTemp(tmp)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "another floe backup is writing")
	}
	require.NoError(t, f.Close())

	victim := filepath.Join(dir, "victim")
	require.NoError(t, os.WriteFile(victim, []byte("keep"), 0o600))
	require.NoError(t, os.Remove(tmp))
	require.NoError(t, os.Symlink(victim, tmp))
	f, err = openBackupTemp(tmp)
	require.NoError(t, err)
	_, err = f.WriteString("backup bytes")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	kept, err := os.ReadFile(victim)
	require.NoError(t, err)
	assert.Equal(t, "keep", string(kept))
	fi, err = os.Lstat(tmp)
	require.NoError(t, err)
	assert.True(t, fi.Mode().IsRegular(), "the link was replaced by a file")
}
