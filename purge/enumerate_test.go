package purge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/purge"
)

// TestWalkIsCompleteOrderedAndResumable walks a real table: every object
// under its location is reached exactly once, in phase order with the root
// metadata file last, and a walk resumed from any checkpoint yields exactly
// the rest of the full walk.
func TestWalkIsCompleteOrderedAndResumable(t *testing.T) {
	c := newCluster(t, fileWarehouse(), 1, 10)
	n := c.nodes[0]
	tt := c.makeTable(n, "walk", "t", nil, 3, 4)
	ctx := context.Background()
	meta, err := purge.ReadMetadata(ctx, n.objects, tt.tbl.MetadataLocation())
	require.NoError(t, err)

	walk := func(from purge.Checkpoint) (files []purge.File, phases []int) {
		w := purge.Walker{Reader: n.objects, OnPhase: func(p int) error { phases = append(phases, p); return nil }}
		require.NoError(t, w.Walk(ctx, meta, tt.tbl.MetadataLocation(), from, func(f purge.File) error {
			files = append(files, f)
			return nil
		}))
		return files, phases
	}
	all, phases := walk(purge.Checkpoint{})
	var uris []string
	for i, f := range all {
		uris = append(uris, f.URI)
		if i > 0 {
			assert.GreaterOrEqual(t, f.Phase, all[i-1].Phase, "phases in order")
		}
	}
	assert.ElementsMatch(t, tt.files, uris, "every file under the location, once")
	last := all[len(all)-1]
	assert.Equal(t, purge.PhaseRoot, last.Phase)
	assert.Equal(t, tt.tbl.MetadataLocation(), last.URI, "root metadata last")
	assert.Equal(t, []int{purge.PhaseData, purge.PhaseManifests, purge.PhaseManifestLists, purge.PhaseMetadataLog, purge.PhaseRoot}, phases,
		"OnPhase for each phase with files (no statistics here)")
	assert.Equal(t, int64(11), all[0].Size, "data file sizes come from the manifests")

	for i, f := range all {
		rest, _ := walk(purge.Checkpoint{Phase: f.Phase, Offset: f.Offset})
		require.Equal(t, all[i:], rest, "resumed at %d", i)
	}

	files, err := purge.Enumerate(ctx, n.objects, tt.tbl.MetadataLocation(), tt.tbl.Location()+"/metadata")
	require.NoError(t, err)
	assert.ElementsMatch(t, tt.data, files.Outside, "data files are outside .../metadata")
	assert.Len(t, files.Delete, len(tt.files)-len(tt.data))
}

// TestWalkReadsOnlyWhatItMay walks a table whose manifest lists the walk
// may not read (they lie outside the allowed locations, say): none is
// read, each is told to OnNotRead, and the walk reaches neither their
// manifests nor the data files those list, while still passing the
// manifest lists themselves and the metadata files.
func TestWalkReadsOnlyWhatItMay(t *testing.T) {
	n, meta, loc, lists := walkFixture(t)
	ctx := context.Background()
	require.NotEmpty(t, lists)
	var notRead []string
	w := purge.Walker{
		Reader:    n.objects,
		MayRead:   func(uri string) bool { return !lists[uri] },
		OnNotRead: func(uri string) { notRead = append(notRead, uri) },
	}
	var phases []int
	require.NoError(t, w.Walk(ctx, meta, loc, purge.Checkpoint{}, func(f purge.File) error {
		phases = append(phases, f.Phase)
		if f.Phase == purge.PhaseManifestLists {
			assert.True(t, lists[f.URI], f.URI)
		}
		return nil
	}))
	assert.NotContains(t, phases, purge.PhaseData)
	assert.NotContains(t, phases, purge.PhaseManifests)
	assert.Contains(t, phases, purge.PhaseManifestLists)
	assert.Contains(t, phases, purge.PhaseRoot)
	// Each list is refused once per phase that reads it (data, manifests).
	assert.Len(t, notRead, 2*len(lists))
	for _, u := range notRead {
		assert.True(t, lists[u], u)
	}
}

// A manifest the walk may not read is skipped with the data files it
// lists; the manifest's own path is still passed (its list was read).
func TestWalkSkipsAManifestItMayNotRead(t *testing.T) {
	n, meta, loc, lists := walkFixture(t)
	ctx := context.Background()
	var notRead []string
	w := purge.Walker{
		Reader:    n.objects,
		MayRead:   func(uri string) bool { return lists[uri] },
		OnNotRead: func(uri string) { notRead = append(notRead, uri) },
	}
	var manifests []string
	require.NoError(t, w.Walk(ctx, meta, loc, purge.Checkpoint{}, func(f purge.File) error {
		assert.NotEqual(t, purge.PhaseData, f.Phase, "no data file of an unread manifest: %s", f.URI)
		if f.Phase == purge.PhaseManifests {
			manifests = append(manifests, f.URI)
		}
		return nil
	}))
	require.NotEmpty(t, manifests)
	assert.ElementsMatch(t, manifests, notRead, "each manifest refused once, in the data phase")
}

// walkFixture makes a table of three snapshots on one node and returns the
// node, the table's metadata and its location, and its manifest lists.
func walkFixture(t *testing.T) (*tnode, table.Metadata, string, map[string]bool) {
	t.Helper()
	c := newCluster(t, fileWarehouse(), 1, 10)
	n := c.nodes[0]
	tt := c.makeTable(n, "walk", "t", nil, 3, 4)
	meta, err := purge.ReadMetadata(context.Background(), n.objects, tt.tbl.MetadataLocation())
	require.NoError(t, err)
	lists := map[string]bool{}
	for _, s := range meta.Snapshots() {
		lists[s.ManifestList] = true
	}
	return n, meta, tt.tbl.MetadataLocation(), lists
}

// TestWalkKeepsTheRootForTheRootPhase: a metadata log that names the root
// metadata file in another spelling (file:/x for file:///x) does not have
// it deleted before the root phase, where a crash would leave the job
// without the file it resumes from.
func TestWalkKeepsTheRootForTheRootPhase(t *testing.T) {
	c := newCluster(t, fileWarehouse(), 1, 10)
	n := c.nodes[0]
	tt := c.makeTable(n, "walk", "t", nil, 1, 1)
	ctx := context.Background()
	root := tt.tbl.MetadataLocation()
	require.True(t, strings.HasPrefix(root, "file:///"), root)
	respelled := "file:/" + strings.TrimPrefix(root, "file:///")

	raw, err := n.objects.Read(ctx, root)
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(raw, &doc))
	log, _ := doc["metadata-log"].([]any)
	doc["metadata-log"] = append([]any{map[string]any{"timestamp-ms": 1, "metadata-file": respelled}}, log...)
	crafted, err := json.Marshal(doc)
	require.NoError(t, err)
	meta, err := table.ParseMetadataBytes(crafted)
	require.NoError(t, err)

	var seen []purge.File
	require.NoError(t, purge.Walker{Reader: n.objects}.Walk(ctx, meta, root, purge.Checkpoint{}, func(f purge.File) error {
		seen = append(seen, f)
		return nil
	}))
	for _, f := range seen {
		if f.URI == root || f.URI == respelled {
			assert.Equal(t, purge.PhaseRoot, f.Phase, "%s", f.URI)
		}
	}
	assert.Equal(t, root, seen[len(seen)-1].URI)
}

// A manifest that names, as data files, a manifest list and a manifest of
// the table (a writer's mistake, or a hostile one) does not have them
// deleted before the walk has read them: passed in the data phase, the
// list was gone when the manifests phase read it again, and the files it
// leads to were left while the job succeeded.
func TestWalkPassesWhatItReadsOnlyInItsPhase(t *testing.T) {
	const loc = "s3://bucket/odd"
	store := newMemReader()
	entries := func(uris ...string) func() (entrySpec, bool) {
		return func() (entrySpec, bool) {
			if len(uris) == 0 {
				return entrySpec{}, false
			}
			e := entrySpec{status: iceberg.EntryStatusADDED, uri: uris[0], size: 1}
			uris = uris[1:]
			return e, true
		}
	}
	list1, list2, m2uri := loc+"/metadata/snap-1.avro", loc+"/metadata/snap-2.avro", loc+"/metadata/m2.avro"
	// The first snapshot's manifest names the second's list (respelled)
	// and manifest as data files (and an object whose key is the list's
	// with a slash after it, which is another object).
	m1 := writeManifest(t, store, loc+"/metadata/m1.avro", 1, iceberg.ManifestContentData,
		entries(strings.Replace(list2, "s3://", "s3a://", 1), m2uri, loc+"/data/a.parquet", list2+"/"))
	writeManifestList(t, store, list1, 1, m1)
	m2 := writeManifest(t, store, m2uri, 2, iceberg.ManifestContentData, entries(loc+"/data/b.parquet"))
	writeManifestList(t, store, list2, 2, m2)
	store.put(loc+"/data/a.parquet", []byte("a"))
	store.put(loc+"/data/b.parquet", []byte("b"))
	store.put(list2+"/", []byte("another object")) // a key of its own
	meta := streamMetadata(t, loc, nil, list1, list2)

	phaseOf := map[string]int{}
	err := purge.Walker{Reader: store}.Walk(context.Background(), meta, loc+"/metadata/v1.metadata.json", purge.Checkpoint{}, func(f purge.File) error {
		uri := strings.Replace(f.URI, "s3a://", "s3://", 1)
		if _, ok := phaseOf[uri]; !ok {
			phaseOf[uri] = f.Phase
		}
		// Deleted as it is passed, as a purge does.
		store.mu.Lock()
		delete(store.objs, uri)
		store.mu.Unlock()
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, purge.PhaseManifestLists, phaseOf[list2], "a manifest list passed before the lists' phase")
	assert.Equal(t, purge.PhaseManifests, phaseOf[m2uri], "a manifest passed before the manifests' phase")
	store.mu.Lock()
	defer store.mu.Unlock()
	assert.Empty(t, store.objs, "files left")
}

// A format version 1 snapshot without a manifest list names its manifests
// itself ("manifests"): the walk passes those manifests and their data
// files, as Java's dropTableData deletes them. They were left behind while
// the job succeeded.
func TestWalkReadsTheManifestsAV1SnapshotEmbeds(t *testing.T) {
	const loc = "s3://bucket/v1"
	store := newMemReader()
	one := func(uri string) func() (entrySpec, bool) {
		done := false
		return func() (entrySpec, bool) {
			if done {
				return entrySpec{}, false
			}
			done = true
			return entrySpec{status: iceberg.EntryStatusADDED, uri: uri, size: 1}, true
		}
	}
	m1, m2 := loc+"/metadata/embedded-1.avro", loc+"/metadata/embedded-2.avro"
	writeManifestVersion(t, store, m1, 1, 1, iceberg.ManifestContentData, one(loc+"/data/a.parquet"))
	writeManifestVersion(t, store, m2, 1, 1, iceberg.ManifestContentData, one(loc+"/data/b.parquet"))
	meta, err := table.ParseMetadataBytes(fmt.Appendf(nil, `{
		"format-version": 1, "table-uuid": "9c12d441-03fe-4693-9a96-a0705ddf69c1", "location": %q,
		"last-updated-ms": 1700000000000, "last-column-id": 1,
		"schema": {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "required": true, "type": "long"}]},
		"partition-spec": [], "properties": {}, "current-snapshot-id": 1,
		"snapshots": [{"snapshot-id": 1, "timestamp-ms": 1700000000000, "manifests": [%q, %q], "summary": {"operation": "append"}}]
	}`, loc, m1, m2))
	require.NoError(t, err)

	phaseOf := map[string]int{}
	require.NoError(t, purge.Walker{Reader: store}.Walk(context.Background(), meta, loc+"/metadata/v1.metadata.json", purge.Checkpoint{}, func(f purge.File) error {
		phaseOf[f.URI] = f.Phase
		return nil
	}))
	assert.Equal(t, map[string]int{
		loc + "/data/a.parquet":            purge.PhaseData,
		loc + "/data/b.parquet":            purge.PhaseData,
		m1:                                 purge.PhaseManifests,
		m2:                                 purge.PhaseManifests,
		loc + "/metadata/v1.metadata.json": purge.PhaseRoot,
	}, phaseOf)
}

// A data file entry whose local-file-system spelling (its %-escapes
// decoded) names the table's manifest list or root metadata file does not
// have that spelling passed before the file's own phase: the list was gone
// when the manifests phase read it, and its manifests were left.
func TestWalkHoldsBackTheDecodedSpellingOfWhatItReadsLater(t *testing.T) {
	dir := t.TempDir()
	loc := "file://" + dir
	store := newMemReader()
	list := loc + "/metadata/snap-1.avro"
	root := loc + "/metadata/v1.metadata.json"
	escapedList := loc + "/metadata/snap%2D1.avro"
	escapedRoot := loc + "/metadata/v1%2Emetadata.json"
	plain := loc + "/data/x%2Fy/a.parquet"
	uris := []string{escapedList, escapedRoot, plain}
	m := writeManifest(t, store, loc+"/metadata/m1.avro", 1, iceberg.ManifestContentData, func() (entrySpec, bool) {
		if len(uris) == 0 {
			return entrySpec{}, false
		}
		e := entrySpec{status: iceberg.EntryStatusADDED, uri: uris[0], size: 1}
		uris = uris[1:]
		return e, true
	})
	writeManifestList(t, store, list, 1, m)
	meta := streamMetadata(t, loc, nil, list)

	var data []purge.File
	require.NoError(t, purge.Walker{Reader: store}.Walk(context.Background(), meta, root, purge.Checkpoint{}, func(f purge.File) error {
		if f.Phase == purge.PhaseData {
			data = append(data, f)
		}
		return nil
	}))
	require.Len(t, data, 3)
	assert.Equal(t, escapedList, data[0].URI)
	assert.Empty(t, data[0].Decoded, "the manifest list's spelling passed in the data phase")
	assert.Equal(t, escapedRoot, data[1].URI)
	assert.Empty(t, data[1].Decoded, "the root metadata file's spelling passed in the data phase")
	assert.Equal(t, plain, data[2].URI)
	assert.Equal(t, loc+"/data/x/y/a.parquet", data[2].Decoded)
}
