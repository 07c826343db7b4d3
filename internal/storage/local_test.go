package storage_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/internal/storage"
)

func newLocal(t *testing.T, cfg storage.Config) *storage.Mux {
	t.Helper()
	m, err := storage.New(cfg)
	require.NoError(t, err)
	return m
}

func TestLocalContract(t *testing.T) {
	m := newLocal(t, storage.Config{})
	t.Run("FileURIs", func(t *testing.T) { testContract(t, m, "file://"+t.TempDir()) })
	t.Run("BarePaths", func(t *testing.T) { testContract(t, m, t.TempDir()) })
	t.Run("Concurrency1", func(t *testing.T) {
		testContract(t, newLocal(t, storage.Config{LocalDeleteConcurrency: 1}), "file://"+t.TempDir())
	})
}

func TestLocalSpellings(t *testing.T) {
	ctx := context.Background()
	m := newLocal(t, storage.Config{})
	dir := t.TempDir()

	// All spellings address the same file.
	require.NoError(t, m.Write(ctx, "file:"+dir+"/a/x", []byte("1")))
	for _, u := range []string{dir + "/a/x", "file://" + dir + "/a/x", "file://localhost" + dir + "/a/x", dir + "//a///x"} {
		got, err := m.Read(ctx, u)
		require.NoError(t, err, u)
		assert.Equal(t, "1", string(got), u)
	}
	b, err := os.ReadFile(filepath.Join(dir, "a", "x"))
	require.NoError(t, err)
	assert.Equal(t, "1", string(b))

	// List reports bare paths for a bare prefix and file:/// URIs otherwise.
	assert.Equal(t, []string{dir + "/a/x"}, listAll(t, m, dir+"/a/"))
	assert.Equal(t, []string{"file://" + dir + "/a/x"}, listAll(t, m, "file://"+dir+"/a/"))
	assert.Equal(t, []string{"file://" + dir + "/a/x"}, listAll(t, m, "file:"+dir+"/a"))
	assert.Equal(t, []string{"file://" + dir + "/a/x"}, listAll(t, m, "file://localhost"+dir+"/a/"))
}

func TestLocalWriteIsAtomic(t *testing.T) {
	ctx := context.Background()
	m := newLocal(t, storage.Config{})
	dir := t.TempDir()
	uri := dir + "/meta/v1.json"
	require.NoError(t, m.Write(ctx, uri, []byte("old")))

	fi, err := os.Stat(uri)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), fi.Mode().Perm())

	// Concurrent readers see either complete version, never a mix or nothing.
	oldData, newData := []byte(strings.Repeat("o", 1<<20)), []byte(strings.Repeat("n", 1<<19))
	require.NoError(t, m.Write(ctx, uri, oldData))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			data := newData
			if i%2 == 0 {
				data = oldData
			}
			assert.NoError(t, m.Write(ctx, uri, data))
		}
	})
	for range 200 {
		got, err := m.Read(ctx, uri)
		require.NoError(t, err)
		if !assert.True(t, string(got) == string(oldData) || string(got) == string(newData), "torn read of %d bytes", len(got)) {
			break
		}
	}
	close(stop)
	wg.Wait()

	// No temporary files are left behind, and List never shows them.
	entries, err := os.ReadDir(dir + "/meta")
	require.NoError(t, err)
	require.Len(t, entries, 1)
	assert.Equal(t, "v1.json", entries[0].Name())

	require.NoError(t, os.WriteFile(dir+"/meta/.floe-tmp-v2.json-123", []byte("partial"), 0o600))
	assert.Equal(t, []string{uri}, listAll(t, m, dir+"/meta/"))
}

func TestLocalWriteFailures(t *testing.T) {
	ctx := context.Background()
	m := newLocal(t, storage.Config{})
	dir := t.TempDir()
	require.NoError(t, m.Write(ctx, dir+"/file", []byte("x")))

	// Parent is a file.
	err := m.Write(ctx, dir+"/file/child", []byte("x"))
	require.Error(t, err)
	assert.ErrorContains(t, err, dir+"/file/child")
	// Target is a directory.
	require.NoError(t, os.Mkdir(dir+"/d", 0o755))
	require.Error(t, m.Write(ctx, dir+"/d", []byte("x")))
	require.Error(t, m.Write(ctx, "/", []byte("x")))

	// Nothing but the original files remains.
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.Equal(t, []string{"d", "file"}, names)

	// Reading below a file is "not found"; reading a directory is not.
	_, err = m.Read(ctx, dir+"/file/child")
	assert.ErrorIs(t, err, storage.ErrNotFound)
	_, err = m.Read(ctx, dir+"/d")
	require.Error(t, err)
	assert.NotErrorIs(t, err, storage.ErrNotFound)

	// Directories are not objects.
	ok, err := m.Exists(ctx, dir+"/d")
	require.NoError(t, err)
	assert.False(t, ok)
	ok, err = m.Exists(ctx, dir+"/file/child")
	require.NoError(t, err)
	assert.False(t, ok)
}

func TestLocalDeleteRefusesDirectories(t *testing.T) {
	ctx := context.Background()
	m := newLocal(t, storage.Config{})
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(dir+"/empty", 0o755))
	require.NoError(t, m.Write(ctx, dir+"/full/x", []byte("x")))

	n, err := m.Delete(ctx, []string{dir + "/empty", dir + "/full", dir + "/full/x"})
	assert.Equal(t, 1, n)
	require.Error(t, err)
	assert.ErrorContains(t, err, dir+"/empty")
	assert.ErrorContains(t, err, dir+"/full:")
	assert.DirExists(t, dir+"/empty")
	assert.DirExists(t, dir+"/full")
	assert.NoFileExists(t, dir+"/full/x")
	assert.ErrorIs(t, err, storage.ErrIsDirectory, "no retry deletes a directory")

	// A name longer than the file system allows names no file that can
	// exist: deleted, as a missing file is.
	long := dir + "/" + strings.Repeat("y", 300) + ".parquet"
	n, err = m.Delete(ctx, []string{long, dir + "/" + strings.Repeat("z", 300) + "/f"})
	require.NoError(t, err)
	assert.Equal(t, 2, n)
}

func TestLocalDeletePermissionError(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root ignores directory permissions")
	}
	ctx := context.Background()
	m := newLocal(t, storage.Config{})
	dir := t.TempDir()
	require.NoError(t, m.Write(ctx, dir+"/ro/x", []byte("x")))
	require.NoError(t, m.Write(ctx, dir+"/rw/y", []byte("y")))
	require.NoError(t, os.Chmod(dir+"/ro", 0o555))
	t.Cleanup(func() { _ = os.Chmod(dir+"/ro", 0o755) })

	n, err := m.Delete(ctx, []string{dir + "/ro/x", dir + "/rw/y"})
	assert.Equal(t, 1, n)
	assert.ErrorContains(t, err, dir+"/ro/x")
	assert.FileExists(t, dir+"/ro/x")
}

func TestLocalListSkipsNonRegularFiles(t *testing.T) {
	m := newLocal(t, storage.Config{})
	dir := t.TempDir()
	require.NoError(t, m.Write(context.Background(), dir+"/x", []byte("x")))
	require.NoError(t, os.Symlink(dir+"/x", dir+"/link"))
	require.NoError(t, os.MkdirAll(dir+"/emptydir/sub", 0o755))
	assert.Equal(t, []string{dir + "/x"}, listAll(t, m, dir+"/"))
}

// Read refuses an object larger than MaxReadBytes without reading it, so
// a register naming a huge file cannot have a node load it whole.
func TestReadRefusesAnObjectTooLargeToHoldWhole(t *testing.T) {
	m := newLocal(t, storage.Config{})
	dir := t.TempDir()
	big := filepath.Join(dir, "big.metadata.json")
	require.NoError(t, os.WriteFile(big, nil, 0o644))
	require.NoError(t, os.Truncate(big, storage.MaxReadBytes+1)) // sparse
	_, err := m.Read(context.Background(), "file://"+big)
	require.ErrorIs(t, err, storage.ErrTooLarge)

	fits := filepath.Join(dir, "fits.metadata.json")
	require.NoError(t, os.WriteFile(fits, []byte(`{}`), 0o644))
	data, err := m.Read(context.Background(), "file://"+fits)
	require.NoError(t, err)
	assert.Equal(t, `{}`, string(data))
}

// TestLocalRemoveEmptyDirs: the empty directories at and under a location
// go, deepest first; a directory holding a file, a link or a temporary
// file stays with the directories above it; a link's target is never
// entered; a missing location and an s3 URI are no error.
func TestLocalRemoveEmptyDirs(t *testing.T) {
	ctx := context.Background()
	m := newLocal(t, storage.Config{})
	base := t.TempDir()
	mkdirs := func(paths ...string) {
		for _, p := range paths {
			require.NoError(t, os.MkdirAll(filepath.Join(base, p), 0o755))
		}
	}
	exists := func(p string) bool {
		_, err := os.Lstat(filepath.Join(base, p))
		return err == nil
	}

	t.Run("PartlyEmpty", func(t *testing.T) {
		mkdirs("t1/metadata", "t1/data/a/b", "t1/data/keep", "t1/data/tmp", "outside/empty")
		require.NoError(t, os.WriteFile(filepath.Join(base, "t1/data/keep/f.parquet"), []byte("x"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(base, "t1/data/tmp/.floe-tmp-x"), []byte("x"), 0o644))
		require.NoError(t, os.Symlink(filepath.Join(base, "outside"), filepath.Join(base, "t1/link")))
		n, err := m.RemoveEmptyDirs(ctx, "file://"+base+"/t1")
		require.NoError(t, err)
		assert.Equal(t, 3, n, "metadata, data/a/b and data/a")
		for _, gone := range []string{"t1/metadata", "t1/data/a"} {
			assert.False(t, exists(gone), gone)
		}
		for _, kept := range []string{"t1", "t1/data", "t1/data/keep/f.parquet", "t1/data/tmp/.floe-tmp-x", "t1/link", "outside/empty"} {
			assert.True(t, exists(kept), kept)
		}
	})
	t.Run("AllEmpty", func(t *testing.T) {
		mkdirs("ns/t2/metadata", "ns/t2/data/x=1/y=2", "ns/sibling")
		n, err := m.RemoveEmptyDirs(ctx, "file://"+base+"/ns/t2/")
		require.NoError(t, err)
		assert.Equal(t, 5, n)
		assert.False(t, exists("ns/t2"))
		assert.True(t, exists("ns/sibling"), "outside the location")
		assert.True(t, exists("ns"), "the location's parent")
	})
	t.Run("LocationIsALink", func(t *testing.T) {
		mkdirs("real/empty")
		require.NoError(t, os.Symlink(filepath.Join(base, "real"), filepath.Join(base, "t3")))
		n, err := m.RemoveEmptyDirs(ctx, "file://"+base+"/t3")
		require.NoError(t, err)
		assert.Zero(t, n)
		assert.True(t, exists("real/empty"))
	})
	t.Run("Missing", func(t *testing.T) {
		n, err := m.RemoveEmptyDirs(ctx, "file://"+base+"/nothing/here")
		require.NoError(t, err)
		assert.Zero(t, n)
	})
	t.Run("ObjectStore", func(t *testing.T) {
		n, err := m.RemoveEmptyDirs(ctx, "s3://bucket/w/t")
		require.NoError(t, err)
		assert.Zero(t, n)
	})
}
