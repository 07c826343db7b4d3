package storage_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/internal/storage"
)

// symlinkFixture is a warehouse holding table t, and a directory outside the
// warehouse holding a file victim.
type symlinkFixture struct {
	m       *storage.Mux
	table   string // <base>/wh/ns/t
	outside string // <base>/outside
	victim  string // <base>/outside/victim
}

func newSymlinkFixture(t *testing.T) symlinkFixture {
	t.Helper()
	base := t.TempDir()
	f := symlinkFixture{
		m:       newLocal(t, storage.Config{}),
		table:   base + "/wh/ns/t",
		outside: base + "/outside",
		victim:  base + "/outside/victim",
	}
	require.NoError(t, os.MkdirAll(f.table, 0o755))
	require.NoError(t, os.MkdirAll(f.outside+"/sub", 0o755))
	require.NoError(t, os.WriteFile(f.victim, []byte("outside"), 0o644))
	require.NoError(t, os.WriteFile(f.outside+"/sub/x", []byte("outside"), 0o644))
	return f
}

// assertOutsideUntouched checks that the outside directory still holds
// exactly its original files with their original content.
func (f symlinkFixture) assertOutsideUntouched(t *testing.T) {
	t.Helper()
	for _, p := range []string{f.victim, f.outside + "/sub/x"} {
		b, err := os.ReadFile(p)
		if assert.NoError(t, err, p) {
			assert.Equal(t, "outside", string(b), p)
		}
	}
	var names []string
	require.NoError(t, filepath.WalkDir(f.outside, func(p string, _ os.DirEntry, err error) error {
		names = append(names, p)
		return err
	}))
	assert.Equal(t, []string{f.outside, f.outside + "/sub", f.outside + "/sub/x", f.victim}, names)
}

func requireSymlinkErr(t *testing.T, err error, op, uri string) {
	t.Helper()
	require.ErrorIs(t, err, storage.ErrSymlink)
	assert.NotErrorIs(t, err, storage.ErrNotFound)
	var oe *storage.ObjectError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, op, oe.Op)
	assert.Equal(t, uri, oe.URI)
}

func TestLocalLinkedDirectory(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		target func(f symlinkFixture) string
	}{
		{"Absolute", func(f symlinkFixture) string { return f.outside }},
		{"Relative", func(symlinkFixture) string { return "../../../outside" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newSymlinkFixture(t)
			link := f.table + "/link"
			require.NoError(t, os.Symlink(tc.target(f), link))
			require.NoError(t, f.m.Write(ctx, f.table+"/ok", []byte("ok")))

			// Delete refuses the files below the link, deletes the others.
			uris := []string{f.table + "/ok", link + "/victim", "file://" + link + "/sub/x", link + "/missing"}
			n, err := f.m.Delete(ctx, uris)
			assert.Equal(t, 1, n)
			require.ErrorIs(t, err, storage.ErrSymlink)
			for _, u := range uris[1:] {
				assert.ErrorContains(t, err, u)
			}
			assert.NoFileExists(t, f.table+"/ok")
			n, err = f.m.Delete(ctx, []string{link + "/victim"})
			assert.Equal(t, 0, n)
			requireSymlinkErr(t, err, "delete", link+"/victim")

			// Write refuses to write through the link or to create
			// directories beyond it.
			requireSymlinkErr(t, f.m.Write(ctx, link+"/victim", []byte("x")), "write", link+"/victim")
			requireSymlinkErr(t, f.m.Write(ctx, link+"/new", []byte("x")), "write", link+"/new")
			requireSymlinkErr(t, f.m.Write(ctx, link+"/deep/er/new", []byte("x")), "write", link+"/deep/er/new")

			// Read and Exists refuse; they do not report "not found".
			_, err = f.m.Read(ctx, link+"/victim")
			requireSymlinkErr(t, err, "read", link+"/victim")
			_, err = f.m.Read(ctx, link+"/missing")
			requireSymlinkErr(t, err, "read", link+"/missing")
			ok, err := f.m.Exists(ctx, link+"/victim")
			assert.False(t, ok)
			requireSymlinkErr(t, err, "exists", link+"/victim")

			// List refuses a prefix below the link and skips the link
			// when walking the table.
			err = f.m.List(ctx, link+"/", func(string) error { return nil })
			requireSymlinkErr(t, err, "list", link+"/")
			require.NoError(t, f.m.Write(ctx, f.table+"/data/a", []byte("a")))
			assert.Equal(t, []string{f.table + "/data/a"}, listAll(t, f.m, f.table+"/"))
			assert.Equal(t, []string{f.table + "/data/a"}, listAll(t, f.m, f.table))

			f.assertOutsideUntouched(t)
			fi, err := os.Lstat(link)
			require.NoError(t, err)
			assert.NotZero(t, fi.Mode()&os.ModeSymlink, "the link itself is left in place")
		})
	}
}

func TestLocalLinkToAnotherTable(t *testing.T) {
	ctx := context.Background()
	f := newSymlinkFixture(t)
	other := filepath.Dir(f.table) + "/other"
	require.NoError(t, f.m.Write(ctx, other+"/data/f1.parquet", []byte("other")))
	require.NoError(t, os.Symlink(other+"/data", f.table+"/data"))

	n, err := f.m.Delete(ctx, []string{f.table + "/data/f1.parquet"})
	assert.Equal(t, 0, n)
	requireSymlinkErr(t, err, "delete", f.table+"/data/f1.parquet")
	requireSymlinkErr(t, f.m.Write(ctx, f.table+"/data/f1.parquet", []byte("t")), "write", f.table+"/data/f1.parquet")

	got, err := f.m.Read(ctx, other+"/data/f1.parquet")
	require.NoError(t, err)
	assert.Equal(t, "other", string(got))
}

// A link anywhere in the path counts, also above the table's location.
func TestLocalLinkedAncestor(t *testing.T) {
	ctx := context.Background()
	f := newSymlinkFixture(t)
	require.NoError(t, f.m.Write(ctx, f.table+"/x", []byte("x")))
	wh := filepath.Dir(filepath.Dir(f.table))
	alias := filepath.Dir(wh) + "/alias"
	require.NoError(t, os.Symlink(wh, alias))

	_, err := f.m.Read(ctx, alias+"/ns/t/x")
	requireSymlinkErr(t, err, "read", alias+"/ns/t/x")
	requireSymlinkErr(t, f.m.Write(ctx, alias+"/ns/t/y", []byte("y")), "write", alias+"/ns/t/y")
	n, err := f.m.Delete(ctx, []string{alias + "/ns/t/x"})
	assert.Equal(t, 0, n)
	requireSymlinkErr(t, err, "delete", alias+"/ns/t/x")
	assert.FileExists(t, f.table+"/x")
	assert.NoFileExists(t, f.table+"/y")
}

func TestLocalLinkedFile(t *testing.T) {
	ctx := context.Background()
	f := newSymlinkFixture(t)
	link := f.table + "/f.parquet"
	require.NoError(t, os.Symlink(f.victim, link))

	// Read and Exists refuse the link.
	_, err := f.m.Read(ctx, link)
	requireSymlinkErr(t, err, "read", link)
	_, err = f.m.Exists(ctx, link)
	requireSymlinkErr(t, err, "exists", link)

	// Delete removes the link only.
	n, err := f.m.Delete(ctx, []string{link})
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	_, err = os.Lstat(link)
	assert.ErrorIs(t, err, os.ErrNotExist)
	f.assertOutsideUntouched(t)

	// Write replaces a link with a regular file instead of writing through
	// it.
	require.NoError(t, os.Symlink(f.victim, link))
	require.NoError(t, f.m.Write(ctx, link, []byte("new")))
	fi, err := os.Lstat(link)
	require.NoError(t, err)
	assert.True(t, fi.Mode().IsRegular())
	got, err := f.m.Read(ctx, link)
	require.NoError(t, err)
	assert.Equal(t, "new", string(got))
	f.assertOutsideUntouched(t)

	// A dangling link is deleted like any other link.
	require.NoError(t, os.Symlink(f.outside+"/nothing", f.table+"/dangling"))
	n, err = f.m.Delete(ctx, []string{f.table + "/dangling"})
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	_, err = os.Lstat(f.table + "/dangling")
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.NoFileExists(t, f.outside+"/nothing")
}

func TestLocalNestedPathsWithoutLinks(t *testing.T) {
	ctx := context.Background()
	f := newSymlinkFixture(t)
	uris := []string{
		f.table + "/metadata/00001.metadata.json",
		f.table + "/data/a=1/b=2/f1.parquet",
		f.table + "/data/a=1/b=2/f2.parquet",
		f.table + "/data/a=1/f3.parquet",
	}
	writeAll(t, f.m, uris)
	for _, u := range uris {
		got, err := f.m.Read(ctx, u)
		require.NoError(t, err)
		assert.Equal(t, u, string(got))
	}
	assert.Equal(t, []string{uris[1], uris[2], uris[3], uris[0]}, listAll(t, f.m, f.table+"/"))
	n, err := f.m.Delete(ctx, uris)
	require.NoError(t, err)
	assert.Equal(t, len(uris), n)
	assert.Empty(t, listAll(t, f.m, f.table+"/"))
}

// A directory that turns into a link while operations run never lets them
// reach the link's target, whether the link leaves the table or points to a
// sibling directory.
func TestLocalDirectoryTurningIntoLink(t *testing.T) {
	t.Run("Outside", func(t *testing.T) {
		f := newSymlinkFixture(t)
		testDirectoryTurningIntoLink(t, f.m, f.table+"/d", f.outside, f.outside)
		f.assertOutsideUntouched(t)
	})
	t.Run("Sibling", func(t *testing.T) {
		f := newSymlinkFixture(t)
		sibling := f.table + "/e"
		require.NoError(t, f.m.Write(context.Background(), sibling+"/victim", []byte("outside")))
		require.NoError(t, f.m.Write(context.Background(), sibling+"/sub/x", []byte("outside")))
		testDirectoryTurningIntoLink(t, f.m, f.table+"/d", sibling, "e")
		for _, p := range []string{sibling + "/victim", sibling + "/sub/x"} {
			b, err := os.ReadFile(p)
			require.NoError(t, err)
			assert.Equal(t, "outside", string(b))
		}
		assert.NoFileExists(t, sibling+"/written")
	})
}

// testDirectoryTurningIntoLink turns d back and forth between a directory and
// a link to target (a path holding victim and sub/x) while deleting, writing,
// reading and listing below d.
func testDirectoryTurningIntoLink(t *testing.T, m *storage.Mux, d, targetDir, target string) {
	ctx := context.Background()
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for !stop.Load() {
			_ = os.RemoveAll(d) // removes a link, not its target
			if err := os.Mkdir(d, 0o755); err == nil {
				_ = os.WriteFile(d+"/victim", []byte("inside"), 0o644)
				_ = os.RemoveAll(d)
			}
			_ = os.Symlink(target, d)
		}
	})
	for range 150 {
		_, _ = m.Delete(ctx, []string{d + "/victim", d + "/sub/x"})
		_ = m.Write(ctx, d+"/written", []byte("x"))
		if got, err := m.Read(ctx, d+"/victim"); err == nil {
			// Empty or partial while the swapper writes it.
			assert.NotEqual(t, "outside", string(got))
		}
		_ = m.List(ctx, d+"/", func(uri string) error {
			assert.NotEqual(t, d+"/sub/x", uri)
			return nil
		})
	}
	stop.Store(true)
	wg.Wait()
	assert.NoFileExists(t, targetDir+"/written")
}
