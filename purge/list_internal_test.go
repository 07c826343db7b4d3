package purge

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/avro"
	"github.com/twmb/avro/ocf"
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

// avroFile is an Avro object container file of one record {"a": 1}, its
// schema text schemaText and its header carrying meta.
func avroFile(t *testing.T, schemaText string, meta map[string][]byte) []byte {
	t.Helper()
	sc, err := avro.Parse(schemaText)
	require.NoError(t, err)
	var buf bytes.Buffer
	w, err := ocf.NewWriter(&buf, sc, ocf.WithSchema(schemaText), ocf.WithMetadata(meta))
	require.NoError(t, err)
	require.NoError(t, w.Encode(map[string]any{"a": int32(1)}))
	require.NoError(t, w.Close())
	return buf.Bytes()
}

// A file's header is read within bounds before any decoder sees it: a
// header of millions of tiny keys took 1.2 GB to open, and a padded writer
// schema stayed in iceberg-go's cache of reader schemas for good. The
// whole file is given back as it was otherwise.
func TestAvroHeaderWithinBounds(t *testing.T) {
	const rec = `{"type":"record","name":"r","fields":[{"name":"a","type":"int"}]}`
	ok := avroFile(t, rec, map[string][]byte{"schema": bytes.Repeat([]byte("x"), 1<<20)})
	r, err := checkedHeader(bytes.NewReader(ok))
	require.NoError(t, err)
	back, err := io.ReadAll(r)
	require.NoError(t, err)
	assert.Equal(t, ok, back, "the whole file, header and all")

	manyKeys := map[string][]byte{}
	for i := range maxHeaderKeys {
		manyKeys[fmt.Sprint(i)] = nil
	}
	hugeHeader := map[string][]byte{}
	for i := range maxHeaderBytes/1_000_000 + 1 {
		hugeHeader[fmt.Sprint("k", i)] = bytes.Repeat([]byte("x"), 1_000_000)
	}
	padded := rec[:len(rec)-1] + string(bytes.Repeat([]byte(" "), maxWriterSchema)) + "}"
	for name, file := range map[string][]byte{
		"many keys":     avroFile(t, rec, manyKeys),
		"padded schema": avroFile(t, padded, nil),
		"huge header":   avroFile(t, rec, hugeHeader),
		"cut short":     ok[:20],
		"not avro":      []byte("not an avro file at all"),
	} {
		_, err := checkedHeader(bytes.NewReader(file))
		assert.ErrorIs(t, err, errHeader, name)
		// Through a walk: corrupt metadata, for a list and a manifest.
		rd := mapReader{"l": file}
		err = Walker{Reader: rd}.listManifests(context.Background(), "l", func(iceberg.ManifestFile) error { return nil })
		assert.ErrorIs(t, err, ErrCorruptMetadata, name)
		mf := iceberg.NewManifestFile(2, "l", int64(len(file)), 0, 1).SequenceNum(1, 1).Build()
		err = Walker{Reader: rd}.manifestEntries(context.Background(), mf, func(string, int64) error { return nil })
		assert.ErrorIs(t, err, ErrCorruptMetadata, name)
	}
}

// A real manifest list given a header of too many keys is refused by the
// walk, where the decoders alone read it.
func TestWalkRefusesAListWithAnOversizedHeader(t *testing.T) {
	raw := listOf(t, 2, iceberg.NewManifestFile(2, "s3://b/t/metadata/m.avro", 1, 0, 1).SequenceNum(1, 1).Build())
	rd, err := ocf.NewReader(bytes.NewReader(raw))
	require.NoError(t, err)
	meta := map[string][]byte{}
	for k, v := range rd.Metadata() {
		if len(k) < 5 || k[:5] != "avro." {
			meta[k] = v
		}
	}
	var recs []any
	for {
		var v any
		if err := rd.Decode(&v); err != nil {
			require.ErrorIs(t, err, io.EOF)
			break
		}
		recs = append(recs, v)
	}
	rewrite := func(extra int) []byte {
		m := maps.Clone(meta)
		for i := range extra {
			m[fmt.Sprint("k", i)] = nil
		}
		var buf bytes.Buffer
		w, err := ocf.NewWriter(&buf, rd.Schema(), ocf.WithMetadata(m))
		require.NoError(t, err)
		for _, v := range recs {
			require.NoError(t, w.Encode(v))
		}
		require.NoError(t, w.Close())
		return buf.Bytes()
	}
	count := func(file []byte) (int, error) {
		n := 0
		err := Walker{Reader: mapReader{"l": file}}.listManifests(context.Background(), "l", func(iceberg.ManifestFile) error { n++; return nil })
		return n, err
	}
	n, err := count(rewrite(10))
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	_, err = count(rewrite(maxHeaderKeys))
	assert.ErrorIs(t, err, ErrCorruptMetadata)
	assert.Contains(t, err.Error(), "metadata keys")
}
