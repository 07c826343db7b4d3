package catalog

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countingObjects serves one metadata document at every location, and
// counts the reads; a read waits for gate to close.
type countingObjects struct {
	doc   []byte
	gate  chan struct{}
	reads atomic.Int64
}

func (o *countingObjects) Read(ctx context.Context, uri string) ([]byte, error) {
	o.reads.Add(1)
	<-o.gate
	return o.doc, nil
}
func (o *countingObjects) Write(context.Context, string, []byte) error   { return nil }
func (o *countingObjects) Delete(context.Context, []string) (int, error) { return 0, nil }
func (o *countingObjects) ClientConfig(string) map[string]string         { return nil }

// metadataDoc is a table's metadata file, with a property of pad bytes,
// gzipped when zip.
func metadataDoc(t *testing.T, pad int, zip bool) []byte {
	t.Helper()
	sc := iceberg.NewSchema(0, iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true})
	meta, err := table.NewMetadata(sc, iceberg.UnpartitionedSpec, table.UnsortedSortOrder, "file:///wh/ns/t",
		iceberg.Properties{"pad": strings.Repeat("x", pad)})
	require.NoError(t, err)
	raw, err := json.Marshal(meta)
	require.NoError(t, err)
	if !zip {
		return raw
	}
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	_, err = w.Write(raw)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	return b.Bytes()
}

// Loads of one location that miss the cache at once share one read and
// parse: each used to read and parse the document on its own, and a
// document of 128 MiB took several times its size per concurrent load.
func TestConcurrentLoadsShareOneRead(t *testing.T) {
	objs := &countingObjects{doc: metadataDoc(t, 10, false), gate: make(chan struct{})}
	s, err := New(Config{Warehouse: "file:///wh", Registerer: prometheus.NewRegistry(), MetadataCacheBytes: 1}, nil, objs)
	require.NoError(t, err)
	defer s.Close()
	loadAtOnce(t, objs, func() {
		tm, err := s.readMetadata(context.Background(), "file:///wh/ns/t/metadata/00000-a.metadata.json")
		if assert.NoError(t, err) {
			assert.Equal(t, "file:///wh/ns/t", tm.meta.Location())
		}
	})
}

// loadAtOnce runs 16 loads at once against objs, whose gate is closed
// only once every load has begun and the first read waits at it, and
// checks that they shared reads rather than each reading after it.
func loadAtOnce(t *testing.T, objs *countingObjects, load func()) {
	t.Helper()
	const loads = 16
	var (
		wg      sync.WaitGroup
		started atomic.Int64
	)
	for range loads {
		wg.Go(func() {
			started.Add(1)
			load()
		})
	}
	require.Eventually(t, func() bool { return started.Load() == loads && objs.reads.Load() >= 1 }, 5*time.Second, time.Millisecond)
	close(objs.gate)
	wg.Wait()
	assert.Less(t, objs.reads.Load(), int64(loads), "loads waiting at once share a read")
}

// A document larger than bigMetadataBytes, however small its gzip file, is
// parsed in one of the node's few slots, which are given back.
func TestLargeDocumentsTakeAndReturnASlot(t *testing.T) {
	objs := &countingObjects{doc: metadataDoc(t, bigMetadataBytes+1, true), gate: make(chan struct{})}
	close(objs.gate)
	require.Less(t, len(objs.doc), 1<<20, "a small file that inflates past the bound")
	s, err := New(Config{Warehouse: "file:///wh", Registerer: prometheus.NewRegistry()}, nil, objs)
	require.NoError(t, err)
	defer s.Close()
	for range bigMetadataSlots + 2 {
		tm, err := s.readMetadataFile(context.Background(), "file:///wh/ns/t/metadata/00000-a.gz.metadata.json")
		require.NoError(t, err)
		assert.Len(t, tm.meta.Properties()["pad"], bigMetadataBytes+1)
	}
	assert.True(t, s.bigDocs.TryAcquire(bigMetadataSlots), "every slot given back")
}

// A loaded table's answer is the body writeJSON writes, for a document
// another writer left indented and with characters encoding/json escapes,
// staged (no location) or not, with and without credentials; the document
// is held once in that form and written as it is, not copied per answer.
func TestLoadAnswerIsWhatTheEncoderWrites(t *testing.T) {
	var doc map[string]any
	require.NoError(t, json.Unmarshal(metadataDoc(t, 3, false), &doc))
	doc["properties"] = map[string]any{"html": "<b>&amp;</b>", "sep": "a\u2028b\u2029c", "metadata": `"metadata":null`}
	pretty, err := json.MarshalIndent(doc, "", "  ")
	require.NoError(t, err)
	objs := &countingObjects{doc: pretty, gate: make(chan struct{})}
	close(objs.gate)
	s, err := New(Config{Warehouse: "file:///wh", Registerer: prometheus.NewRegistry()}, nil, objs)
	require.NoError(t, err)
	defer s.Close()
	tm, err := s.readMetadataFile(context.Background(), "file:///wh/ns/t/metadata/00001-a.metadata.json")
	require.NoError(t, err)
	assert.NotContains(t, string(tm.raw), "\n")
	assert.NotContains(t, string(tm.raw), "<")

	loc := `file:///wh/ns/t/metadata/00001-"<a>".metadata.json`
	for name, res := range map[string]loadTableResult{
		"staged":      {Metadata: tm.raw, Config: map[string]string{"k": "v"}},
		"loaded":      {MetadataLocation: &loc, Metadata: tm.raw},
		"credentials": {MetadataLocation: &loc, Metadata: tm.raw, Config: map[string]string{"z": "1", "a": "2"}, StorageCredentials: []storageCredential{{Prefix: "s3://b/", Config: map[string]string{"s3.access-key-id": "k"}}}},
	} {
		direct := httptest.NewRecorder()
		writeLoadTableResult(direct, res)
		viaEncoder := httptest.NewRecorder()
		writeJSON(viaEncoder, http.StatusOK, res)
		require.Equal(t, viaEncoder.Body.String(), direct.Body.String(), name)
		assert.Equal(t, http.StatusOK, direct.Code)
		assert.Equal(t, "application/json", direct.Header().Get("Content-Type"))
		assert.Equal(t, strconv.Itoa(direct.Body.Len()), direct.Header().Get("Content-Length"))
		// And as the encoder wrote the document held as read, before.
		res.Metadata = withEmptyCollections(withRequiredFields(pretty))
		viaEncoder = httptest.NewRecorder()
		writeJSON(viaEncoder, http.StatusOK, res)
		assert.Equal(t, viaEncoder.Body.String(), direct.Body.String(), name)
	}
}

// discardWriter is a ResponseWriter that keeps nothing of the body.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) WriteHeader(int)             {}

// Writing a large table's answer allocates next to nothing beside the
// document: each concurrent answer used to hold a whole copy of it until
// its client had read it (a dozen slow readers of a 120 MB table, 1.7 GB).
func TestLoadAnswerDoesNotCopyTheDocument(t *testing.T) {
	doc, err := encodedJSON(metadataDoc(t, 8<<20, false))
	require.NoError(t, err)
	loc := "file:///wh/ns/t/metadata/00001-a.metadata.json"
	res := loadTableResult{MetadataLocation: &loc, Metadata: doc, Config: map[string]string{"k": "v"}}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	writeLoadTableResult(&discardWriter{h: http.Header{}}, res)
	runtime.ReadMemStats(&after)
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(len(doc)/8), "bytes allocated to answer with a %d-byte document", len(doc))
}

// A view's metadata file is read once and then served from the cache, as
// a table's; loads that miss it at once share one read. Each load used to
// read and parse the file.
func TestViewLoadsShareReadsAndTheCache(t *testing.T) {
	doc := []byte(`{"view-uuid":"fa6506c3-7681-40c8-86dc-e36561f83385","format-version":1,"location":"file:///wh/ns/v",` +
		`"current-version-id":1,"properties":{},"schemas":[{"type":"struct","schema-id":0,"fields":[{"id":1,"name":"x","type":"long","required":false}]}],` +
		`"versions":[{"version-id":1,"timestamp-ms":1,"schema-id":0,"summary":{},"default-namespace":["ns"],` +
		`"representations":[{"type":"sql","sql":"select 1","dialect":"spark"}]}],"version-log":[{"version-id":1,"timestamp-ms":1}]}`)
	objs := &countingObjects{doc: doc, gate: make(chan struct{})}
	s, err := New(Config{Warehouse: "file:///wh", Registerer: prometheus.NewRegistry()}, nil, objs)
	require.NoError(t, err)
	defer s.Close()
	loc := "file:///wh/ns/v/metadata/00000-a.metadata.json"
	loadAtOnce(t, objs, func() {
		vm, err := s.readViewMetadata(context.Background(), loc)
		if assert.NoError(t, err) {
			assert.Equal(t, "file:///wh/ns/v", vm.meta.Location())
		}
	})
	before := objs.reads.Load()
	for range 10 {
		_, err := s.readViewMetadata(context.Background(), loc)
		require.NoError(t, err)
	}
	assert.Equal(t, before, objs.reads.Load(), "later loads are served from the cache")
	_, ok := s.cache.get(loc)
	assert.False(t, ok, "a view's file is not a table's")

	// A discarded file leaves the cache.
	s.discard(context.Background(), loc)
	_, err = s.readViewMetadata(context.Background(), loc)
	require.NoError(t, err)
	assert.Equal(t, before+1, objs.reads.Load())
}
