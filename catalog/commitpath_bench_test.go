package catalog_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/floe-catalog/floe/catalog"
	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/harness"
	"github.com/floe-catalog/floe/internal/raftnode"
	"github.com/floe-catalog/floe/internal/storage"
)

// The commit path benchmark: one floe node in this process (a single-voter
// raftnode and the catalog, served over loopback HTTP), a file:// warehouse
// under the benchmark's temporary directory, and closed-loop clients each
// committing one set-properties update to its own tables, as the "floe
// in-process, one node" row of bench/ does. Every table starts from a
// metadata file whose metadata log is full (commitBenchLogEntries entries),
// so each commit writes a file of the size a table in use has.
//
// Next to the commits, in the same process and on the same node and disk:
//
//   - raft-noop: fsm.Noop entries of the size of a commit's entry, proposed
//     through the same node: the replicated log and state machine alone.
//   - storage-write: new files of the size of a commit's metadata file
//     written through internal/storage into the tables' metadata
//     directories: the durable write alone.
//
// Each variant of the commit path (commitBenchVariants) is served by its
// own catalog.Server on the same node, so that before and after run in the
// same process, one after the other; storage-write runs once per storage
// configuration the variants use. Reported per sub-benchmark: ops/s,
// cpu-ms/op (the whole process: node, HTTP clients, GC; from getrusage),
// p50-ms and p99-ms.
//
// On a shared, noisy machine the rows are only comparable when measured
// close together: -commitbench.rounds=R runs every row R times, round by
// round (round=r is the last part of each name), rather than R times in a
// row as -count would, each round starting the variants at a different one.
//
//	go test -run '^$' -bench BenchmarkCommitPath -benchtime 1000x ./catalog -args -commitbench.rounds=3
func BenchmarkCommitPath(b *testing.B) {
	f := newCommitFixture(b)
	for _, clients := range []int{1, 64} {
		for round := 1; round <= *commitBenchRounds; round++ {
			name := func(row string) string { return fmt.Sprintf("%s/clients=%d/round=%d", row, clients, round) }
			b.Run(name("raft-noop"), func(b *testing.B) {
				f.run(b, clients, func(ctx context.Context, _, _ int) error {
					res, err := f.raft.Propose(ctx, fsm.Noop{Pad: f.pad})
					if err == nil {
						err = res.Err()
					}
					return err
				})
			})
			// Each round starts the variants at a different one, so that
			// none always runs first or last.
			for _, v := range rotate(f.storageVariants, round) {
				b.Run(name("storage-write-"+v.name), func(b *testing.B) {
					data := bytes.Repeat([]byte("x"), f.metadataBytes)
					f.run(b, clients, func(ctx context.Context, i, j int) error {
						uri := fmt.Sprintf("%s/%s/metadata/w-%s.metadata.json", f.nsURI, f.tableFor(clients, i, j), uuid.NewString())
						return v.objects.Write(ctx, uri, data)
					})
				})
			}
			for _, v := range rotate(f.variants, round) {
				b.Run(name("commit-"+v.name), func(b *testing.B) {
					catalog.SetReencodeMetadata(v.reencode)
					defer catalog.SetReencodeMetadata(false)
					catalog.SetSkipWriteParse(v.skipParse)
					defer catalog.SetSkipWriteParse(false)
					f.run(b, clients, func(ctx context.Context, i, j int) error {
						return f.commit(ctx, i, v.url+"/v1/namespaces/"+commitBenchNS+"/tables/"+f.tableFor(clients, i, j), j)
					})
				})
			}
		}
	}
}

// rotate returns vs starting at its (round-1)-th element.
func rotate[T any](vs []T, round int) []T {
	k := (round - 1) % len(vs)
	return append(slices.Clone(vs[k:]), vs[:k]...)
}

var commitBenchRounds = flag.Int("commitbench.rounds", 1, "BenchmarkCommitPath: rounds over every row")

const (
	commitBenchNS = "tput"
	// commitBenchTables: 2 per client at 64 clients, so that no two
	// clients race for one table's compare-and-set.
	commitBenchTables     = 128
	commitBenchLogEntries = 100 // write.metadata.previous-versions-max's default
)

type commitBenchVariant struct {
	name      string
	url       string
	objects   catalog.Objects
	reencode  bool
	skipParse bool
}

type commitFixture struct {
	raft            *raftnode.Node
	warehouse       string
	nsURI           string
	tables          []string
	variants        []commitBenchVariant
	storageVariants []commitBenchVariant
	clients         []*http.Client
	pad             []byte
	metadataBytes   int
}

// commitBenchVariants are the commit paths the benchmark compares, each a
// catalog on its own storage.Mux:
//
//   - before: metadata encoded with json.Marshal and the answer re-encoded
//     by writeJSON (catalog.SetReencodeMetadata), each file synced on its
//     own (storage.Config.LocalSyncEachWrite): the path as it was.
//   - encode: metadata serialised once, its bytes answered as they are;
//     files synced on their own.
//   - group: encode, and the files of concurrent commits synced together
//     (storage's group commit, the default).
//   - group-noparse: group without the parse of each new version before
//     its write (catalog.SetSkipWriteParse): what that check costs.
var commitBenchVariants = []struct {
	name      string
	storage   storage.Config
	reencode  bool
	skipParse bool
	storageID string
}{
	{name: "before", storage: storage.Config{LocalSyncEachWrite: true}, reencode: true, storageID: "sync-each"},
	{name: "encode", storage: storage.Config{LocalSyncEachWrite: true}, storageID: "sync-each"},
	{name: "group", storage: storage.Config{}, storageID: "group"},
	{name: "group-noparse", storage: storage.Config{}, skipParse: true, storageID: "group"},
}

func newCommitFixture(b *testing.B) *commitFixture {
	b.Helper()
	dir := b.TempDir()
	rn, err := raftnode.Open(raftnode.Config{
		DataDir: filepath.Join(dir, "data"), ClusterAddr: "127.0.0.1:0", Bootstrap: true, Logger: quietLogger(),
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = rn.Shutdown() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := rn.WaitLeader(ctx); err != nil {
		b.Fatal(err)
	}
	f := &commitFixture{raft: rn, warehouse: "file://" + filepath.Join(dir, "warehouse")}
	f.nsURI = f.warehouse + "/" + commitBenchNS
	for _, v := range commitBenchVariants {
		objects, err := storage.New(v.storage)
		if err != nil {
			b.Fatal(err)
		}
		srv, err := catalog.New(catalog.Config{
			Warehouse: f.warehouse, Registerer: prometheus.NewRegistry(), Logger: quietLogger(),
		}, rn, objects)
		if err != nil {
			b.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = hs.Serve(ln) }()
		b.Cleanup(func() { _ = hs.Close(); srv.Close() })
		f.variants = append(f.variants, commitBenchVariant{name: v.name, url: "http://" + ln.Addr().String(), objects: objects, reencode: v.reencode, skipParse: v.skipParse})
		if !slices.ContainsFunc(f.storageVariants, func(s commitBenchVariant) bool { return s.name == v.storageID }) {
			f.storageVariants = append(f.storageVariants, commitBenchVariant{name: v.storageID, objects: objects})
		}
	}
	for range 64 {
		cl := harness.NewHTTPClient(4, 0)
		f.clients = append(f.clients, cl)
		b.Cleanup(cl.CloseIdleConnections)
	}
	f.seed(b, ctx)
	return f
}

// seed creates the namespace and the tables, each registered from a
// metadata file whose metadata log is full, and sizes the no-op entry like
// a commit's.
func (f *commitFixture) seed(b *testing.B, ctx context.Context) {
	b.Helper()
	base := f.variants[0].url
	cl := f.clients[0]
	post := func(path string, body any) []byte {
		raw, err := json.Marshal(body)
		if err != nil {
			b.Fatal(err)
		}
		resp, err := cl.Post(base+path, "application/json", bytes.NewReader(raw))
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		rb, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("POST %s: %d %s", path, resp.StatusCode, rb)
		}
		return rb
	}
	post("/v1/namespaces", map[string]any{"namespace": []string{commitBenchNS}})
	created := post("/v1/namespaces/"+commitBenchNS+"/tables", map[string]any{
		"name": "template",
		"schema": map[string]any{"type": "struct", "schema-id": 0, "fields": []any{
			map[string]any{"id": 1, "name": "id", "type": "long", "required": true},
			map[string]any{"id": 2, "name": "data", "type": "string", "required": false},
		}},
	})
	var template struct {
		Metadata map[string]any `json:"metadata"`
	}
	if err := json.Unmarshal(created, &template); err != nil {
		b.Fatal(err)
	}
	objects := f.variants[0].objects
	now := time.Now().UnixMilli()
	for i := range commitBenchTables {
		name := fmt.Sprintf("t%05d", i)
		f.tables = append(f.tables, name)
		loc := f.nsURI + "/" + name
		m := map[string]any{}
		for k, v := range template.Metadata {
			m[k] = v
		}
		m["location"] = loc
		m["table-uuid"] = uuid.NewString()
		m["last-updated-ms"] = now
		var log []any
		for v := range commitBenchLogEntries {
			log = append(log, map[string]any{
				"metadata-file": fmt.Sprintf("%s/metadata/%05d-%s.metadata.json", loc, v, uuid.Must(uuid.NewV7())),
				"timestamp-ms":  now - int64(commitBenchLogEntries-v)*1000,
			})
		}
		m["metadata-log"] = log
		raw, err := json.Marshal(m)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := table.ParseMetadataBytes(raw); err != nil {
			b.Fatal(err)
		}
		mloc := fmt.Sprintf("%s/metadata/%05d-%s.metadata.json", loc, commitBenchLogEntries, uuid.Must(uuid.NewV7()))
		if err := objects.Write(ctx, mloc, raw); err != nil {
			b.Fatal(err)
		}
		post("/v1/namespaces/"+commitBenchNS+"/register", map[string]any{"name": name, "metadata-location": mloc})
	}
	// Every variant's catalog starts with the tables' metadata cached, as a
	// node in use has it.
	for _, v := range f.variants {
		for _, name := range f.tables {
			resp, err := cl.Get(v.url + "/v1/namespaces/" + commitBenchNS + "/tables/" + name)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("load %s: %d", name, resp.StatusCode)
			}
		}
	}
	// One commit sizes the metadata file a commit writes and its log entry.
	rb := post("/v1/namespaces/"+commitBenchNS+"/tables/"+f.tables[0], commitBody(0))
	var res struct {
		MetadataLocation string          `json:"metadata-location"`
		Metadata         json.RawMessage `json:"metadata"`
	}
	if err := json.Unmarshal(rb, &res); err != nil {
		b.Fatal(err)
	}
	f.metadataBytes = len(res.Metadata)
	entry, err := fsm.Encode(fsm.CommitTables{
		Changes: []fsm.TableChange{{
			Kind: fsm.ChangeUpdate, Ident: fsm.Ident{Namespace: []string{commitBenchNS}, Name: f.tables[0]},
			ExpectedMetadataLocation: res.MetadataLocation, ExpectedUUID: uuid.NewString(),
			MetadataLocation: res.MetadataLocation, Location: f.nsURI + "/" + f.tables[0], UUID: uuid.NewString(),
		}},
		AtMs: now,
	})
	if err != nil {
		b.Fatal(err)
	}
	for pad := 0; ; pad++ {
		e, err := fsm.Encode(fsm.Noop{Pad: make([]byte, pad)})
		if err != nil {
			b.Fatal(err)
		}
		if len(e) >= len(entry) {
			f.pad = make([]byte, pad)
			break
		}
	}
	b.Logf("metadata file %d bytes, commit entry %d bytes, %d tables", f.metadataBytes, len(entry), len(f.tables))
}

func commitBody(j int) map[string]any {
	return map[string]any{
		"requirements": []any{},
		"updates":      []any{map[string]any{"action": "set-properties", "updates": map[string]string{"bench": fmt.Sprint(j)}}},
	}
}

// tableFor is the table client i of clients commits to in its j-th
// operation: its own tables i, i+clients, …
func (f *commitFixture) tableFor(clients, i, j int) string {
	per := max(1, len(f.tables)/clients)
	return f.tables[(i+(j%per)*clients)%len(f.tables)]
}

func (f *commitFixture) commit(ctx context.Context, i int, url string, j int) error {
	raw, err := json.Marshal(commitBody(j))
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := f.clients[i].Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("commit %s: %d %s", url, resp.StatusCode, rb)
	}
	return nil
}

// run spreads b.N operations over clients closed-loop goroutines and
// reports throughput, CPU per operation and latency percentiles.
func (f *commitFixture) run(b *testing.B, clients int, op func(ctx context.Context, i, j int) error) {
	ctx := context.Background()
	var next atomic.Int64
	lat := make([][]time.Duration, clients)
	errs := make([]error, clients)
	var wg sync.WaitGroup
	cpu0 := processCPU()
	b.ResetTimer()
	t0 := time.Now()
	for i := range clients {
		wg.Go(func() {
			for j := 0; ; j++ {
				if next.Add(1) > int64(b.N) {
					return
				}
				s := time.Now()
				if err := op(ctx, i, j); err != nil {
					errs[i] = err
					return
				}
				lat[i] = append(lat[i], time.Since(s))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(t0)
	b.StopTimer()
	cpu := processCPU() - cpu0
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	all := slices.Concat(lat...)
	sort.Slice(all, func(x, y int) bool { return all[x] < all[y] })
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
	b.ReportMetric(float64(cpu)/float64(b.N)/1e6, "cpu-ms/op")
	if len(all) > 0 {
		b.ReportMetric(float64(all[len(all)/2])/1e6, "p50-ms")
		b.ReportMetric(float64(all[len(all)*99/100])/1e6, "p99-ms")
	}
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
