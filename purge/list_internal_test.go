package purge

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mapReader serves objects from a map.
type mapReader map[string][]byte

func (m mapReader) Read(_ context.Context, uri string) ([]byte, error) {
	if b, ok := m[uri]; ok {
		return b, nil
	}
	return nil, fmt.Errorf("read %s: not found", uri)
}

func (m mapReader) Open(ctx context.Context, uri string) (io.ReadCloser, error) {
	b, err := m.Read(ctx, uri)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// readOnly is a Reader that is not an Opener.
type readOnly struct{ m mapReader }

func (r readOnly) Read(ctx context.Context, uri string) ([]byte, error) { return r.m.Read(ctx, uri) }

// listOf writes a manifest list of the given format version naming files.
func listOf(t *testing.T, version int, files ...iceberg.ManifestFile) []byte {
	t.Helper()
	var buf bytes.Buffer
	seq := int64(1)
	require.NoError(t, iceberg.WriteManifestList(version, &buf, 1, nil, &seq, 0, files))
	return buf.Bytes()
}

// A streamed manifest list yields what iceberg-go's whole-list reader
// does (path, length, content), for every format version, in order.
func TestListManifestsReadsEveryFormatVersion(t *testing.T) {
	for _, version := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			var files []iceberg.ManifestFile
			for i := range 5 {
				b := iceberg.NewManifestFile(version, fmt.Sprintf("s3://b/t/metadata/m%d.avro", i), int64(100+i), 0, 1)
				if version > 1 {
					b = b.SequenceNum(1, 1)
					if i%2 == 1 {
						b = b.Content(iceberg.ManifestContentDeletes)
					}
				}
				files = append(files, b.Build())
			}
			raw := listOf(t, version, files...)
			want, err := iceberg.ReadManifestList(bytes.NewReader(raw))
			require.NoError(t, err)
			// Streamed (an Opener), and read whole.
			for _, rd := range []Reader{mapReader{"l": raw}, readOnly{mapReader{"l": raw}}} {
				var got []iceberg.ManifestFile
				require.NoError(t, Walker{Reader: rd}.listManifests(context.Background(), "l", func(mf iceberg.ManifestFile) error {
					got = append(got, mf)
					return nil
				}))
				require.Len(t, got, len(want))
				for i := range want {
					assert.Equal(t, want[i].FilePath(), got[i].FilePath())
					assert.Equal(t, want[i].Length(), got[i].Length())
					assert.Equal(t, want[i].ManifestContent(), got[i].ManifestContent())
				}
			}
		})
	}
}

// A list with more entries than a walk takes, or a table with more
// distinct manifests, is corrupt metadata: a crafted list of a few
// megabytes of repeated entries ran a node out of memory when every entry
// was decoded into one slice.
func TestListLimitsAreCorruptMetadata(t *testing.T) {
	entries, manifests := maxListEntries, maxWalkManifests
	t.Cleanup(func() { maxListEntries, maxWalkManifests = entries, manifests })
	maxListEntries, maxWalkManifests = 8, 3

	same := iceberg.NewManifestFile(2, "s3://b/t/metadata/m.avro", 1, 0, 1).SequenceNum(1, 1).Build()
	var repeated []iceberg.ManifestFile
	for range 9 {
		repeated = append(repeated, same)
	}
	var distinct []iceberg.ManifestFile
	for i := range 4 {
		distinct = append(distinct, iceberg.NewManifestFile(2, fmt.Sprintf("s3://b/t/metadata/m%d.avro", i), 1, 0, 1).SequenceNum(1, 1).Build())
	}
	rd := mapReader{"s3://b/t/metadata/snap-1.avro": listOf(t, 2, repeated...), "s3://b/t/metadata/snap-2.avro": listOf(t, 2, distinct...)}

	err := Walker{Reader: rd}.listManifests(context.Background(), "s3://b/t/metadata/snap-1.avro", func(iceberg.ManifestFile) error { return nil })
	require.ErrorIs(t, err, ErrCorruptMetadata)
	assert.Contains(t, err.Error(), "more than 8 entries")

	var seen []string
	meta := walkMeta(t, "s3://b/t", "s3://b/t/metadata/snap-2.avro")
	err = Walker{Reader: rd}.manifests(context.Background(), meta, func(mf iceberg.ManifestFile) error {
		seen = append(seen, mf.FilePath())
		return nil
	})
	require.ErrorIs(t, err, ErrCorruptMetadata)
	assert.Contains(t, err.Error(), "more than 3 distinct manifests")
	assert.Len(t, seen, 3)
}

// walkMeta is table metadata at loc whose snapshots have lists.
func walkMeta(t *testing.T, loc string, lists ...string) table.Metadata {
	t.Helper()
	meta, err := table.ParseMetadataBytes([]byte(FixtureMetadata{Location: loc, Lists: lists}.JSON()))
	require.NoError(t, err)
	return meta
}
