package purge_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/internal/storage"
	"github.com/floe-catalog/floe/purge"
)

// memReader is an in-memory object store that reads whole objects. Like
// real storage, Read returns a copy the caller owns.
type memReader struct {
	mu   sync.Mutex
	objs map[string][]byte
}

func newMemReader() *memReader { return &memReader{objs: map[string][]byte{}} }

func (m *memReader) put(uri string, data []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objs[uri] = data
}

func (m *memReader) get(uri string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	data, ok := m.objs[uri]
	if !ok {
		return nil, fmt.Errorf("read %s: %w", uri, storage.ErrNotFound)
	}
	return data, nil
}

func (m *memReader) Read(_ context.Context, uri string) ([]byte, error) {
	data, err := m.get(uri)
	if err != nil {
		return nil, err
	}
	return bytes.Clone(data), nil
}

// memOpener is a memReader that also streams objects (purge.Opener). When
// failAfter is set, a body longer than that fails with errBroken once that
// many bytes of it were read, like a connection that drops.
type memOpener struct {
	*memReader
	failAfter int
}

var errBroken = errors.New("connection reset")

func (m memOpener) Open(_ context.Context, uri string) (io.ReadCloser, error) {
	data, err := m.get(uri)
	if err != nil {
		return nil, err
	}
	var r io.Reader = bytes.NewReader(data)
	if m.failAfter > 0 && len(data) > m.failAfter {
		r = io.MultiReader(io.LimitReader(r, int64(m.failAfter)), failing{})
	}
	return io.NopCloser(r), nil
}

type failing struct{}

func (failing) Read([]byte) (int, error) { return 0, errBroken }

var streamSchema = iceberg.NewSchema(0, iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true})

// entrySpec is one manifest entry to write.
type entrySpec struct {
	status iceberg.ManifestEntryStatus
	uri    string
	size   int64
	// stats, when > 0, gives the entry column statistics for that many
	// columns, as a writer like Spark records them for every column.
	stats int
}

// writeManifest writes a v2 manifest of the given content with entries to
// uri and returns its manifest-list entry. next yields the entries in
// order, false when there are no more, so that a large manifest is never
// held as a list by the test itself.
func writeManifest(t testing.TB, store *memReader, uri string, snapID int64, content iceberg.ManifestContent, next func() (entrySpec, bool)) iceberg.ManifestFile {
	t.Helper()
	return writeManifestVersion(t, store, uri, 2, snapID, content, next)
}

// writeManifestVersion is writeManifest in the given format version.
func writeManifestVersion(t testing.TB, store *memReader, uri string, version int, snapID int64, content iceberg.ManifestContent, next func() (entrySpec, bool)) iceberg.ManifestFile {
	t.Helper()
	var buf bytes.Buffer
	w, err := iceberg.NewManifestWriter(version, &buf, *iceberg.UnpartitionedSpec, streamSchema, snapID, iceberg.WithManifestWriterContent(content))
	require.NoError(t, err)
	entryContent := iceberg.EntryContentData
	if content == iceberg.ManifestContentDeletes {
		entryContent = iceberg.EntryContentPosDeletes
	}
	seq := int64(1)
	for {
		e, ok := next()
		if !ok {
			break
		}
		b, err := iceberg.NewDataFileBuilder(*iceberg.UnpartitionedSpec, entryContent, e.uri, iceberg.ParquetFile, nil, nil, nil, 1, e.size)
		require.NoError(t, err)
		if e.stats > 0 {
			counts := make(map[int]int64, e.stats)
			bounds := make(map[int][]byte, e.stats)
			for c := 1; c <= e.stats; c++ {
				counts[c] = int64(1000 + c)
				bounds[c] = binary.LittleEndian.AppendUint64(nil, uint64(c)*1_000_003)
			}
			b.ColumnSizes(counts).ValueCounts(counts).NullValueCounts(counts).
				LowerBoundValues(bounds).UpperBoundValues(bounds)
		}
		entry := iceberg.NewManifestEntry(e.status, &snapID, &seq, &seq, b.Build())
		switch e.status {
		case iceberg.EntryStatusADDED:
			err = w.Add(entry)
		case iceberg.EntryStatusEXISTING:
			err = w.Existing(entry)
		default:
			err = w.Delete(entry)
		}
		require.NoError(t, err)
	}
	require.NoError(t, w.Close())
	mf, err := w.ToManifestFile(uri, int64(buf.Len()))
	require.NoError(t, err)
	store.put(uri, buf.Bytes())
	return mf
}

// entries returns a next function over a fixed list.
func entries(list ...entrySpec) func() (entrySpec, bool) {
	return func() (entrySpec, bool) {
		if len(list) == 0 {
			return entrySpec{}, false
		}
		e := list[0]
		list = list[1:]
		return e, true
	}
}

// writeManifestList writes the manifest list of snapshot snapID (whose
// sequence number is snapID too) to uri, and returns its entries as read
// back: with their sequence numbers assigned, as later lists carry them.
func writeManifestList(t testing.TB, store *memReader, uri string, snapID int64, mfs ...iceberg.ManifestFile) []iceberg.ManifestFile {
	t.Helper()
	var buf bytes.Buffer
	seq := snapID
	require.NoError(t, iceberg.WriteManifestList(2, &buf, snapID, nil, &seq, 0, mfs))
	store.put(uri, buf.Bytes())
	back, err := iceberg.ReadManifestList(bytes.NewReader(buf.Bytes()))
	require.NoError(t, err)
	return back
}

// streamMetadata is a v2 table metadata file at location whose snapshots
// 1..n have the manifest lists named in lists, in order.
func streamMetadata(t testing.TB, location string, props map[string]string, lists ...string) table.Metadata {
	t.Helper()
	meta, err := table.ParseMetadataBytes([]byte(purge.FixtureMetadata{Location: location, Props: props, Lists: lists}.JSON()))
	require.NoError(t, err)
	return meta
}

// bigManifestTable writes a table of one snapshot whose one manifest lists
// n data files, the i-th named bigURI(i) with size i+1.
func bigManifestTable(t testing.TB, n int) (*memReader, table.Metadata, string) {
	return bigManifestTableStats(t, n, 0)
}

// bigManifestTableStats is bigManifestTable with column statistics for
// stats columns in every entry.
func bigManifestTableStats(t testing.TB, n, stats int) (*memReader, table.Metadata, string) {
	t.Helper()
	const loc = "s3://bucket/big"
	store := newMemReader()
	i := 0
	mf := writeManifest(t, store, loc+"/metadata/m0.avro", 1, iceberg.ManifestContentData, func() (entrySpec, bool) {
		if i == n {
			return entrySpec{}, false
		}
		e := entrySpec{status: iceberg.EntryStatusADDED, uri: bigURI(i), size: int64(i + 1), stats: stats}
		i++
		return e, true
	})
	writeManifestList(t, store, loc+"/metadata/snap-1.avro", 1, mf)
	return store, streamMetadata(t, loc, nil, loc+"/metadata/snap-1.avro"), loc + "/metadata/v1.metadata.json"
}

func bigURI(i int) string {
	return fmt.Sprintf("s3://bucket/big/data/00000-%07d-5f0c3a1e-7d2b-4c55-9a61-2b8f0e4d1c3a.parquet", i)
}

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestWalkStreamsLargeManifest walks a manifest of 200,000 data files and
// samples the live heap while the walk runs: it must stay far below what
// the manifest's decoded entries take (about 100 MiB here, measured by
// decoding them whole at the end), with the manifest streamed from the
// object's body (Opener) and read whole (Reader). Each file arrives once,
// in manifest order, with its offset and size.
func TestWalkStreamsLargeManifest(t *testing.T) {
	if testing.Short() {
		t.Skip("writes and decodes a 200,000-entry manifest")
	}
	const n = 200_000
	const bound = 16 << 20
	store, meta, metaLoc := bigManifestTable(t, n)
	readers := []struct {
		name string
		rd   purge.Reader
	}{
		{"opener", memOpener{memReader: store}},
		{"reader", store},
	}
	for _, r := range readers {
		t.Run(r.name, func(t *testing.T) {
			base := liveHeap()
			var peak uint64
			count := 0
			w := purge.Walker{Reader: r.rd}
			err := w.Walk(context.Background(), meta, metaLoc, purge.Checkpoint{}, func(f purge.File) error {
				if f.Phase != purge.PhaseData {
					return nil
				}
				if f.Offset != int64(count) || f.URI != bigURI(count) || f.Size != int64(count+1) {
					return fmt.Errorf("file %d: got %+v", count, f)
				}
				count++
				if count%10_000 == 0 {
					peak = max(peak, liveHeap())
				}
				return nil
			})
			require.NoError(t, err)
			require.Equal(t, n, count, "every data file once")
			growth := int64(peak) - int64(base)
			t.Logf("%s: live heap grew by at most %.1f MiB while walking %d entries", r.name, float64(growth)/(1<<20), n)
			assert.Less(t, growth, int64(bound), "the walk holds the manifest's entries")
		})
	}

	// What the bound is measured against: the same manifest decoded whole.
	data, err := store.Read(context.Background(), "s3://bucket/big/metadata/m0.avro")
	require.NoError(t, err)
	mfs, err := iceberg.ReadManifestList(bytes.NewReader(store.objs["s3://bucket/big/metadata/snap-1.avro"]))
	require.NoError(t, err)
	base := liveHeap()
	all, err := iceberg.ReadManifest(mfs[0], bytes.NewReader(data), false)
	require.NoError(t, err)
	whole := int64(liveHeap()) - int64(base)
	t.Logf("manifest: %.1f MiB of Avro; its %d entries decoded whole: %.1f MiB live", float64(len(data))/(1<<20), len(all), float64(whole)/(1<<20))
	assert.Greater(t, whole, int64(2*bound), "the bound is well below holding every entry")
	runtime.KeepAlive(all)
}

// TestStreamedWalkMatchesWholeManifests checks the streamed data phase
// against the walk as it was when manifests were decoded whole: for every
// distinct manifest, in snapshot then manifest-list order, every entry
// iceberg.ReadManifest returns (added, existing and deleted; data and
// delete files), in its order. Offsets, and so checkpoints written before
// the walk streamed, keep naming the same files, and a walk resumed at
// any offset yields exactly the rest.
func TestStreamedWalkMatchesWholeManifests(t *testing.T) {
	const loc = "s3://bucket/t"
	store := newMemReader()
	file := func(status iceberg.ManifestEntryStatus, name string, size int64) entrySpec {
		return entrySpec{status: status, uri: loc + "/data/" + name, size: size}
	}
	m1 := writeManifest(t, store, loc+"/metadata/m1.avro", 1, iceberg.ManifestContentData, entries(
		file(iceberg.EntryStatusADDED, "a.parquet", 10), file(iceberg.EntryStatusADDED, "b.parquet", 11)))
	m2 := writeManifest(t, store, loc+"/metadata/m2.avro", 2, iceberg.ManifestContentData, entries(
		file(iceberg.EntryStatusEXISTING, "a.parquet", 10), file(iceberg.EntryStatusDELETED, "b.parquet", 11),
		file(iceberg.EntryStatusADDED, "c.parquet", 12)))
	d2 := writeManifest(t, store, loc+"/metadata/d2.avro", 2, iceberg.ManifestContentDeletes, entries(
		file(iceberg.EntryStatusADDED, "pos-1.parquet", 5)))
	gone := writeManifest(t, store, loc+"/metadata/gone.avro", 2, iceberg.ManifestContentData, entries(
		file(iceberg.EntryStatusADDED, "never.parquet", 1)))
	delete(store.objs, loc+"/metadata/gone.avro")
	m3 := writeManifest(t, store, loc+"/metadata/m3.avro", 3, iceberg.ManifestContentData, entries(
		file(iceberg.EntryStatusADDED, "d.parquet", 13), file(iceberg.EntryStatusADDED, "e.parquet", 14)))
	s1 := writeManifestList(t, store, loc+"/metadata/snap-1.avro", 1, m1)
	s2 := writeManifestList(t, store, loc+"/metadata/snap-2.avro", 2, s1[0], m2, d2, gone)
	writeManifestList(t, store, loc+"/metadata/snap-3.avro", 3, s2[1], s2[2], m3)
	lists := []string{loc + "/metadata/snap-1.avro", loc + "/metadata/snap-2.avro", loc + "/metadata/snap-3.avro"}
	meta := streamMetadata(t, loc, nil, lists...)
	metaLoc := loc + "/metadata/v3.metadata.json"

	// The data phase as the whole-manifest walk produced it.
	var want []purge.File
	seen := map[string]bool{}
	for _, l := range lists {
		mfs, err := iceberg.ReadManifestList(bytes.NewReader(store.objs[l]))
		require.NoError(t, err)
		for _, mf := range mfs {
			data, ok := store.objs[mf.FilePath()]
			if seen[mf.FilePath()] || !ok {
				continue
			}
			seen[mf.FilePath()] = true
			all, err := iceberg.ReadManifest(mf, bytes.NewReader(data), false)
			require.NoError(t, err)
			for _, e := range all {
				want = append(want, purge.File{Phase: purge.PhaseData, Offset: int64(len(want)), URI: e.DataFile().FilePath(), Size: e.DataFile().FileSizeBytes()})
			}
		}
	}
	require.Len(t, want, 8, "2 + 3 + 1 + 2 entries; gone.avro is missing")

	for _, rd := range []purge.Reader{store, memOpener{memReader: store}} {
		walk := func(from purge.Checkpoint) (files []purge.File, missing []string) {
			w := purge.Walker{Reader: rd, OnMissing: func(uri string, _ bool) error { missing = append(missing, uri); return nil }}
			require.NoError(t, w.Walk(context.Background(), meta, metaLoc, from, func(f purge.File) error {
				if f.Phase == purge.PhaseData {
					files = append(files, f)
				}
				return nil
			}))
			return files, missing
		}
		got, missing := walk(purge.Checkpoint{})
		assert.Equal(t, want, got, "%T", rd)
		assert.Equal(t, []string{loc + "/metadata/gone.avro"}, missing, "a missing manifest is skipped and reported")
		for i := range want {
			rest, _ := walk(purge.Checkpoint{Phase: purge.PhaseData, Offset: int64(i)})
			require.Equal(t, want[i:], rest, "%T resumed at %d", rd, i)
		}
	}

	off, _ := walkData(t, purge.Walker{Reader: store}, streamMetadata(t, loc, map[string]string{"gc.enabled": "false"}, lists...), metaLoc)
	assert.Zero(t, off, "gc.enabled=false: no data files")
}

// walkData walks meta and returns how many data-phase files it passed and
// the walk's error.
func walkData(t *testing.T, w purge.Walker, meta table.Metadata, metaLoc string) (int, error) {
	t.Helper()
	n := 0
	err := w.Walk(context.Background(), meta, metaLoc, purge.Checkpoint{}, func(f purge.File) error {
		if f.Phase == purge.PhaseData {
			n++
		}
		return nil
	})
	return n, err
}

// TestWalkManifestFailures: a manifest that does not decode is corrupt
// metadata, found when the walk reaches the bad part; a streamed body that
// breaks off is a storage error (retried), not corrupt metadata; fn's
// error stops the walk unchanged.
func TestWalkManifestFailures(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a 20,000-entry manifest")
	}
	const n = 20_000
	store, meta, metaLoc := bigManifestTable(t, n)
	manifest := "s3://bucket/big/metadata/m0.avro"
	whole := store.objs[manifest]

	t.Run("truncated manifest", func(t *testing.T) {
		trunc := newMemReader()
		for k, v := range store.objs {
			trunc.objs[k] = v
		}
		trunc.objs[manifest] = whole[:len(whole)/2]
		for _, rd := range []purge.Reader{trunc, memOpener{memReader: trunc}} {
			got, err := walkData(t, purge.Walker{Reader: rd}, meta, metaLoc)
			require.ErrorIs(t, err, purge.ErrCorruptMetadata, "%T", rd)
			assert.Contains(t, err.Error(), manifest)
			assert.Greater(t, got, 0, "%T: the entries before the cut were passed on", rd)
			assert.Less(t, got, n)
		}
	})
	t.Run("not a manifest", func(t *testing.T) {
		bad := newMemReader()
		for k, v := range store.objs {
			bad.objs[k] = v
		}
		bad.objs[manifest] = []byte("not avro")
		got, err := walkData(t, purge.Walker{Reader: bad}, meta, metaLoc)
		require.ErrorIs(t, err, purge.ErrCorruptMetadata)
		assert.Zero(t, got)
	})
	t.Run("body breaks off", func(t *testing.T) {
		got, err := walkData(t, purge.Walker{Reader: memOpener{memReader: store, failAfter: len(whole) / 2}}, meta, metaLoc)
		require.ErrorIs(t, err, errBroken)
		assert.NotErrorIs(t, err, purge.ErrCorruptMetadata, "a failed transfer is retried, not failed as corrupt")
		assert.Contains(t, err.Error(), manifest)
		assert.Greater(t, got, 0)
		assert.Less(t, got, n)
	})
	t.Run("fn stops the walk", func(t *testing.T) {
		stop := errors.New("stop")
		calls := 0
		err := purge.Walker{Reader: memOpener{memReader: store}}.Walk(context.Background(), meta, metaLoc, purge.Checkpoint{}, func(purge.File) error {
			calls++
			if calls == 3 {
				return stop
			}
			return nil
		})
		require.Equal(t, stop, err)
		assert.Equal(t, 3, calls)
	})
	t.Run("canceled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		calls := 0
		err := purge.Walker{Reader: memOpener{memReader: store}}.Walk(ctx, meta, metaLoc, purge.Checkpoint{}, func(purge.File) error {
			calls++
			if calls == 3 {
				cancel()
			}
			return nil
		})
		require.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, 3, calls)
	})
}

// TestWalkSkipsColumnStats walks v1 and v2 manifests whose entries carry
// column statistics through the projected reader, which skips them: every
// entry still arrives with its path and size, in order, whatever its
// status. (That the statistics are skipped, not decoded, shows in
// BenchmarkWalkManifest's time and allocations, not here.)
func TestWalkSkipsColumnStats(t *testing.T) {
	const loc = "s3://bucket/stats"
	statuses := []iceberg.ManifestEntryStatus{iceberg.EntryStatusADDED, iceberg.EntryStatusEXISTING, iceberg.EntryStatusDELETED}
	for _, version := range []int{1, 2} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			store := newMemReader()
			var want []string
			i := 0
			mf := writeManifestVersion(t, store, loc+"/metadata/m0.avro", version, 1, iceberg.ManifestContentData, func() (entrySpec, bool) {
				if i == 50 {
					return entrySpec{}, false
				}
				e := entrySpec{status: statuses[i%len(statuses)], uri: fmt.Sprintf("%s/data/f%02d.parquet", loc, i), size: int64(100 + i), stats: 1 + i%12}
				want = append(want, fmt.Sprintf("%s %d", e.uri, e.size))
				i++
				return e, true
			})
			writeManifestList(t, store, loc+"/metadata/snap-1.avro", 1, mf)
			meta := streamMetadata(t, loc, nil, loc+"/metadata/snap-1.avro")
			var got []string
			err := purge.Walker{Reader: memOpener{memReader: store}}.Walk(context.Background(), meta, loc+"/metadata/v1.metadata.json", purge.Checkpoint{}, func(f purge.File) error {
				if f.Phase == purge.PhaseData {
					got = append(got, fmt.Sprintf("%s %d", f.URI, f.Size))
				}
				return nil
			})
			require.NoError(t, err)
			assert.Equal(t, want, got)
		})
	}
}

// BenchmarkWalkManifest walks the data files of one 100,000-entry manifest,
// without column statistics (stats=0) and with statistics for 32 columns
// (stats=32, as a writer like Spark records them), streamed (opener) or
// read whole (reader). The baseline, full-decode, reads the same manifest
// with iceberg.NewManifestReader, every field of every entry decoded, in
// the same run:
//
//	go test -run '^$' -bench BenchmarkWalkManifest -benchtime 5x ./purge
func BenchmarkWalkManifest(b *testing.B) {
	const n = 100_000
	for _, stats := range []int{0, 32} {
		store, meta, metaLoc := bigManifestTableStats(b, n, stats)
		b.Run(fmt.Sprintf("stats=%d/full-decode", stats), func(b *testing.B) {
			list, err := store.Read(context.Background(), "s3://bucket/big/metadata/snap-1.avro")
			require.NoError(b, err)
			mfs, err := iceberg.ReadManifestList(bytes.NewReader(list))
			require.NoError(b, err)
			data, err := store.Read(context.Background(), mfs[0].FilePath())
			require.NoError(b, err)
			b.ReportAllocs()
			for b.Loop() {
				mr, err := iceberg.NewManifestReader(mfs[0], bytes.NewReader(data))
				if err != nil {
					b.Fatal(err)
				}
				count := 0
				for {
					if _, err := mr.ReadEntry(); err != nil {
						if !errors.Is(err, io.EOF) {
							b.Fatal(err)
						}
						break
					}
					count++
				}
				_ = mr.Close()
				if count != n {
					b.Fatalf("decoded %d entries", count)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/entry")
		})
		for _, r := range []struct {
			name string
			rd   purge.Reader
		}{{"opener", memOpener{memReader: store}}, {"reader", store}} {
			b.Run(fmt.Sprintf("stats=%d/%s", stats, r.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					count := 0
					err := purge.Walker{Reader: r.rd}.Walk(context.Background(), meta, metaLoc, purge.Checkpoint{}, func(f purge.File) error {
						if f.Phase == purge.PhaseData {
							count++
						}
						return nil
					})
					if err != nil || count != n {
						b.Fatalf("walked %d files: %v", count, err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/entry")
			})
		}
	}
}
