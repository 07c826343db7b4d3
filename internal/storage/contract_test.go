package storage_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/internal/storage"
)

// testContract checks the Storage contract under base, a URI without a
// trailing slash under which nothing exists yet. Every backend runs it.
func testContract(t *testing.T, s storage.Storage, base string) {
	ctx := context.Background()

	if o, ok := s.(interface {
		Open(ctx context.Context, uri string) (io.ReadCloser, error)
	}); ok {
		t.Run("Open", func(t *testing.T) {
			_, err := o.Open(ctx, base+"/open/missing")
			require.ErrorIs(t, err, storage.ErrNotFound, "a missing object is reported by Open itself")
			uri := base + "/open/x.avro"
			want := bytes.Repeat([]byte("manifest entry "), 10000)
			require.NoError(t, s.Write(ctx, uri, want))
			rc, err := o.Open(ctx, uri)
			require.NoError(t, err)
			got, err := io.ReadAll(rc)
			require.NoError(t, err)
			require.NoError(t, rc.Close())
			assert.Equal(t, want, got)
		})
	}

	t.Run("ReadMissing", func(t *testing.T) {
		uri := base + "/missing/x.json"
		_, err := s.Read(ctx, uri)
		require.ErrorIs(t, err, storage.ErrNotFound)
		var oe *storage.ObjectError
		require.ErrorAs(t, err, &oe)
		assert.Equal(t, "read", oe.Op)
		assert.Equal(t, uri, oe.URI)
		assert.ErrorContains(t, err, uri)

		ok, err := s.Exists(ctx, uri)
		require.NoError(t, err)
		assert.False(t, ok)
	})

	t.Run("WriteReadOverwrite", func(t *testing.T) {
		uri := base + "/rw/deep/er/00001-abc.metadata.json"
		require.NoError(t, s.Write(ctx, uri, []byte("one")))
		got, err := s.Read(ctx, uri)
		require.NoError(t, err)
		assert.Equal(t, "one", string(got))
		ok, err := s.Exists(ctx, uri)
		require.NoError(t, err)
		assert.True(t, ok)

		require.NoError(t, s.Write(ctx, uri, []byte("two, longer")))
		got, err = s.Read(ctx, uri)
		require.NoError(t, err)
		assert.Equal(t, "two, longer", string(got))

		require.NoError(t, s.Write(ctx, uri, []byte("3")))
		got, err = s.Read(ctx, uri)
		require.NoError(t, err)
		assert.Equal(t, "3", string(got))
	})

	t.Run("EmptyAndBinary", func(t *testing.T) {
		require.NoError(t, s.Write(ctx, base+"/bin/empty", nil))
		got, err := s.Read(ctx, base+"/bin/empty")
		require.NoError(t, err)
		assert.Empty(t, got)

		data := make([]byte, 3<<20)
		for i := range data {
			data[i] = byte(i * 7)
		}
		require.NoError(t, s.Write(ctx, base+"/bin/big", data))
		got, err = s.Read(ctx, base+"/bin/big")
		require.NoError(t, err)
		assert.Equal(t, data, got)
	})

	t.Run("ListOrder", func(t *testing.T) {
		// Lexical order of full URIs: '-' (0x2d) < '.' < '/' (0x2f) < '0',
		// so a-c and a.d/x come before a/b although directory walks
		// visit "a" before "a-c".
		names := []string{"b", "a/b", "a-c", "a.d/x", "a0", "ab/c/d", "a/a/a", "a/a0", "Z", "a/b0/1"}
		var want []string
		for _, n := range names {
			want = append(want, base+"/list/"+n)
		}
		writeAll(t, s, want)
		sort.Strings(want)
		assert.Equal(t, want, listAll(t, s, base+"/list/"))
		assert.Equal(t, want, listAll(t, s, base+"/list"))
		assert.Equal(t, want, listAll(t, s, base+"/lis"))

		assert.Equal(t, []string{
			base + "/list/a-c", base + "/list/a.d/x", base + "/list/a/a/a", base + "/list/a/a0",
			base + "/list/a/b", base + "/list/a/b0/1", base + "/list/a0", base + "/list/ab/c/d",
		}, listAll(t, s, base+"/list/a"))
		assert.Equal(t, []string{
			base + "/list/a/a/a", base + "/list/a/a0", base + "/list/a/b", base + "/list/a/b0/1",
		}, listAll(t, s, base+"/list/a/"))
		assert.Equal(t, []string{base + "/list/a/b", base + "/list/a/b0/1"}, listAll(t, s, base+"/list/a/b"))
		assert.Empty(t, listAll(t, s, base+"/list/a/b/"))
		assert.Empty(t, listAll(t, s, base+"/list/nothing"))
		assert.Empty(t, listAll(t, s, base+"/nothing/at/all/"))
	})

	t.Run("ListCallbackError", func(t *testing.T) {
		writeAll(t, s, []string{base + "/cb/1", base + "/cb/2", base + "/cb/3"})
		stop := errors.New("stop")
		var seen []string
		err := s.List(ctx, base+"/cb/", func(uri string) error {
			seen = append(seen, uri)
			if len(seen) == 2 {
				return stop
			}
			return nil
		})
		assert.Same(t, stop, err, "fn's error is returned unchanged")
		assert.Equal(t, []string{base + "/cb/1", base + "/cb/2"}, seen)
	})

	t.Run("Delete", func(t *testing.T) {
		uris := []string{base + "/del/1", base + "/del/2", base + "/del/sub/3"}
		writeAll(t, s, uris)
		n, err := s.Delete(ctx, nil)
		require.NoError(t, err)
		assert.Equal(t, 0, n)

		// Existing, missing and duplicate URIs all count as deleted.
		req := append(slices.Clone(uris), base+"/del/missing", base+"/nowhere/x", uris[0])
		n, err = s.Delete(ctx, req)
		require.NoError(t, err)
		assert.Equal(t, len(req), n)
		assert.Empty(t, listAll(t, s, base+"/del/"))
		for _, u := range uris {
			ok, err := s.Exists(ctx, u)
			require.NoError(t, err)
			assert.False(t, ok, u)
		}

		// Deleting again is fine.
		n, err = s.Delete(ctx, uris)
		require.NoError(t, err)
		assert.Equal(t, len(uris), n)
	})

	t.Run("DeleteBadURIs", func(t *testing.T) {
		good := base + "/delbad/ok"
		writeAll(t, s, []string{good})
		bad := []string{"relative/x", "gs://bucket/x", base + "/delbad/../ok"}
		n, err := s.Delete(ctx, append([]string{bad[0], good}, bad[1:]...))
		assert.Equal(t, 1, n)
		require.Error(t, err)
		assert.ErrorIs(t, err, storage.ErrInvalidURI)
		assert.ErrorIs(t, err, storage.ErrUnsupportedScheme)
		for _, u := range bad {
			assert.ErrorContains(t, err, u)
		}
		assert.NotContains(t, err.Error(), good+":")
		joined, ok := err.(interface{ Unwrap() []error })
		require.True(t, ok, "joined error")
		assert.Len(t, joined.Unwrap(), len(bad))
		ok, err = s.Exists(ctx, good)
		require.NoError(t, err)
		assert.False(t, ok)
	})

	t.Run("BadURIs", func(t *testing.T) {
		for _, uri := range []string{"relative", base + "/a/../b", "gs://b/k"} {
			assert.Error(t, s.Write(ctx, uri, []byte("x")), uri)
			_, err := s.Read(ctx, uri)
			assert.Error(t, err, uri)
			assert.NotErrorIs(t, err, storage.ErrNotFound, uri)
			_, err = s.Exists(ctx, uri)
			assert.Error(t, err, uri)
			assert.Error(t, s.List(ctx, uri, func(string) error { return nil }), uri)
		}
	})

	t.Run("Canceled", func(t *testing.T) {
		uri := base + "/canceled/x"
		writeAll(t, s, []string{uri})
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		assert.ErrorIs(t, s.Write(cctx, base+"/canceled/y", []byte("x")), context.Canceled)
		_, err := s.Read(cctx, uri)
		assert.ErrorIs(t, err, context.Canceled)
		_, err = s.Exists(cctx, uri)
		assert.ErrorIs(t, err, context.Canceled)
		assert.ErrorIs(t, s.List(cctx, base+"/canceled/", func(string) error { return nil }), context.Canceled)
		n, err := s.Delete(cctx, []string{uri})
		assert.Equal(t, 0, n)
		assert.ErrorIs(t, err, context.Canceled)
		assert.ErrorContains(t, err, uri)

		ok, err := s.Exists(ctx, uri)
		require.NoError(t, err)
		assert.True(t, ok, "nothing deleted with a canceled context")
		ok, err = s.Exists(ctx, base+"/canceled/y")
		require.NoError(t, err)
		assert.False(t, ok, "nothing written with a canceled context")
	})

	t.Run("ManyDeletes", func(t *testing.T) {
		var uris []string
		for i := range 150 {
			uris = append(uris, fmt.Sprintf("%s/many/%d/%03d", base, i%4, i))
		}
		writeAll(t, s, uris)
		assert.Len(t, listAll(t, s, base+"/many/"), len(uris))
		n, err := s.Delete(ctx, uris)
		require.NoError(t, err)
		assert.Equal(t, len(uris), n)
		assert.Empty(t, listAll(t, s, base+"/many/"))
	})
}
