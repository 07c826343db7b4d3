package storage_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/internal/storage"
	"github.com/floe-catalog/floe/internal/testenv"
)

// newVersitygw starts a versitygw server and returns a Mux configured for it.
func newVersitygw(t *testing.T, batch int) (*storage.Mux, testenv.S3Server) {
	t.Helper()
	srv := testenv.S3(t)
	m, err := storage.New(storage.Config{
		S3Endpoint:        srv.Endpoint,
		S3Region:          srv.Region,
		S3AccessKeyID:     srv.AccessKeyID,
		S3SecretAccessKey: srv.SecretAccessKey,
		S3PathStyle:       true,
		DeleteBatchSize:   batch,
	})
	require.NoError(t, err)
	return m, srv
}

func TestVersitygw(t *testing.T) {
	ctx := context.Background()
	m, srv := newVersitygw(t, 0)
	wh := srv.Warehouse()

	t.Run("Contract", func(t *testing.T) { testContract(t, m, wh+"/contract") })

	t.Run("WriteReadExists", func(t *testing.T) {
		uri := wh + "/db/t/metadata/00000-a.metadata.json"
		ok, err := m.Exists(ctx, uri)
		require.NoError(t, err)
		assert.False(t, ok)

		_, err = m.Read(ctx, uri)
		require.ErrorIs(t, err, storage.ErrNotFound)

		require.NoError(t, m.Write(ctx, uri, []byte(`{"v":1}`)))
		got, err := m.Read(ctx, uri)
		require.NoError(t, err)
		assert.Equal(t, `{"v":1}`, string(got))

		ok, err = m.Exists(ctx, uri)
		require.NoError(t, err)
		assert.True(t, ok)

		// Overwrite, and read through the s3a spelling.
		require.NoError(t, m.Write(ctx, uri, []byte(`{"v":2}`)))
		got, err = m.Read(ctx, strings.Replace(uri, "s3://", "s3a://", 1))
		require.NoError(t, err)
		assert.Equal(t, `{"v":2}`, string(got))

		// Empty objects.
		require.NoError(t, m.Write(ctx, wh+"/empty", nil))
		got, err = m.Read(ctx, wh+"/empty")
		require.NoError(t, err)
		assert.Empty(t, got)
		n, err := m.Delete(ctx, []string{wh + "/empty"})
		require.NoError(t, err)
		assert.Equal(t, 1, n)
	})

	// A key ending in '/' is an object to S3: a delete of it is sent, and
	// removes nothing else, whatever lies under that prefix.
	t.Run("DeleteDirectoryMarkerKey", func(t *testing.T) {
		under := wh + "/marker/t/data/f.parquet"
		require.NoError(t, m.Write(ctx, under, []byte("x")))
		_, err := m.Delete(ctx, []string{wh + "/marker/t/data/", wh + "/marker/t/"})
		if err != nil {
			assert.NotErrorIs(t, err, storage.ErrInvalidURI, "sent, not refused")
		}
		ok, err := m.Exists(ctx, under)
		require.NoError(t, err)
		assert.True(t, ok, "what lies under a marker key is not deleted with it")
	})

	t.Run("MissingBucket", func(t *testing.T) {
		uri := "s3://no-such-bucket-floe/x"
		_, err := m.Read(ctx, uri)
		require.Error(t, err)
		assert.NotErrorIs(t, err, storage.ErrNotFound)

		n, err := m.Delete(ctx, []string{uri})
		require.Error(t, err)
		assert.Equal(t, 0, n)
		assert.ErrorContains(t, err, uri)
	})

	t.Run("ListAndBatchedDelete", func(t *testing.T) {
		base := wh + "/big/"
		var want []string
		for i := range 2500 {
			uri := fmt.Sprintf("%sdata/%02d/f-%04d.parquet", base, i%7, i)
			want = append(want, uri)
		}
		writeAll(t, m, want)
		// Neighbours that must not be listed under base. (versitygw's posix
		// backend cannot store an object "big" next to "big/...": a key
		// cannot be both a file and a directory.)
		require.NoError(t, m.Write(ctx, wh+"/big-other/x", []byte("x")))
		require.NoError(t, m.Write(ctx, wh+"/big.json", []byte("x")))
		sort.Strings(want)

		var got []string
		require.NoError(t, m.List(ctx, base, func(uri string) error {
			got = append(got, uri)
			return nil
		}))
		assert.Equal(t, want, got)

		// A plain string prefix matches across "directories".
		got = nil
		require.NoError(t, m.List(ctx, wh+"/big", func(uri string) error {
			got = append(got, uri)
			return nil
		}))
		assert.Len(t, got, 2502)
		assert.True(t, sort.StringsAreSorted(got))

		// The s3a spelling is kept.
		got = nil
		require.NoError(t, m.List(ctx, strings.Replace(base, "s3://", "s3a://", 1)+"data/00/", func(uri string) error {
			got = append(got, uri)
			return nil
		}))
		require.NotEmpty(t, got)
		assert.True(t, strings.HasPrefix(got[0], "s3a://"+srv.Bucket+"/warehouse/big/data/00/"), got[0])

		// Delete everything plus missing keys and duplicates: 3 batches.
		del := append([]string{}, want...)
		del = append(del, base+"missing-1", base+"missing-2", want[0])
		n, err := m.Delete(ctx, del)
		require.NoError(t, err)
		assert.Equal(t, len(del), n)

		got = nil
		require.NoError(t, m.List(ctx, base, func(uri string) error {
			got = append(got, uri)
			return nil
		}))
		assert.Empty(t, got)
		ok, err := m.Exists(ctx, wh+"/big-other/x")
		require.NoError(t, err)
		assert.True(t, ok)

		// Deleting only missing keys succeeds.
		n, err = m.Delete(ctx, []string{base + "gone-1", base + "gone-2"})
		require.NoError(t, err)
		assert.Equal(t, 2, n)
	})

	t.Run("ListEmpty", func(t *testing.T) {
		called := false
		require.NoError(t, m.List(ctx, wh+"/nothing-here/", func(string) error {
			called = true
			return nil
		}))
		assert.False(t, called)
	})

	t.Run("SpecialKeys", func(t *testing.T) {
		uris := []string{
			wh + "/special/a b+c%20d.json",
			wh + "/special/ü-ñ/x=1/y?z#w.parquet",
			wh + "/special/&<>'\".txt",
		}
		for _, u := range uris {
			require.NoError(t, m.Write(ctx, u, []byte(u)))
			got, err := m.Read(ctx, u)
			require.NoError(t, err, u)
			assert.Equal(t, u, string(got))
		}
		var listed []string
		require.NoError(t, m.List(ctx, wh+"/special/", func(uri string) error {
			listed = append(listed, uri)
			return nil
		}))
		assert.ElementsMatch(t, uris, listed)
		n, err := m.Delete(ctx, uris)
		require.NoError(t, err)
		assert.Equal(t, len(uris), n)
		for _, u := range uris {
			ok, err := m.Exists(ctx, u)
			require.NoError(t, err)
			assert.False(t, ok, u)
		}
	})

	// A key XML cannot carry (U+FFFF, U+FFFE, a control character) must
	// not reach the server as U+FFFD in a DeleteObjects body, which names
	// another object: here a live table's file.
	t.Run("KeysXMLCannotCarry", func(t *testing.T) {
		victim := wh + "/xml/v\uFFFD/data/a.parquet"
		drop := []string{
			wh + "/xml/v\uFFFF/data/a.parquet",
			wh + "/xml/v\uFFFE/data/a.parquet",
			wh + "/xml/v\x01/data/a.parquet",
		}
		writeAll(t, m, append([]string{victim, wh + "/xml/ok.parquet"}, drop...))
		// A listing gets them back with U+FFFD in place: refused, not
		// passed on as the victim's key.
		err := m.List(ctx, wh+"/xml/", func(string) error { return nil })
		require.ErrorContains(t, err, "replaced by U+FFFD")
		n, err := m.Delete(ctx, append([]string{wh + "/xml/ok.parquet"}, drop...))
		require.NoError(t, err)
		assert.Equal(t, len(drop)+1, n)
		for _, u := range append([]string{wh + "/xml/ok.parquet"}, drop...) {
			ok, err := m.Exists(ctx, u)
			require.NoError(t, err)
			assert.False(t, ok, "%q was not deleted", u)
		}
		ok, err := m.Exists(ctx, victim)
		require.NoError(t, err)
		assert.True(t, ok, "deleting keys XML cannot carry deleted %q", victim)
	})
}

// TestVersitygwSmallBatches checks that per-batch results map back to the
// right URIs when a delete spans many requests.
func TestVersitygwSmallBatches(t *testing.T) {
	ctx := context.Background()
	m, srv := newVersitygw(t, 7)
	var uris []string
	for i := range 30 {
		uris = append(uris, fmt.Sprintf("%s/small/%03d", srv.Warehouse(), i))
	}
	writeAll(t, m, uris[:20]) // the last 10 never exist
	n, err := m.Delete(ctx, uris)
	require.NoError(t, err)
	assert.Equal(t, 30, n)
	for _, u := range uris {
		ok, err := m.Exists(ctx, u)
		require.NoError(t, err)
		assert.False(t, ok, u)
	}
}
