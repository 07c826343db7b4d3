package catalog_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/iceberg-go"
	icecatalog "github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/catalog/catalogtest"
	"github.com/apache/iceberg-go/catalog/rest"
	iceio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/fsm"
)

func forEachWarehouse(t *testing.T, fn func(t *testing.T, wh warehouse)) {
	for _, wh := range warehouses() {
		t.Run(wh.name, func(t *testing.T) { fn(t, wh) })
	}
}

func TestConformance(t *testing.T) {
	forEachWarehouse(t, func(t *testing.T, wh warehouse) {
		n := startNode(t, wh)
		catalogtest.RunCatalogTests(t, catalogtest.Config{
			NewCatalog:                  func(t *testing.T) icecatalog.Catalog { return n.catalog(t) },
			SupportsNamespaceProperties: true,
		})
	})
}

var rowSchema = iceberg.NewSchema(0,
	iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
	iceberg.NestedField{ID: 2, Name: "name", Type: iceberg.PrimitiveTypes.String, Required: false},
)

// writeParquet writes rows (id, name) as a Parquet file at uri through the
// table's own FileIO, as an engine would.
func writeParquet(t *testing.T, tbl *table.Table, uri string, ids ...int64) {
	t.Helper()
	ctx := context.Background()
	fs, err := tbl.FS(ctx)
	require.NoError(t, err)
	wfs, ok := fs.(iceio.WriteFileIO)
	require.True(t, ok)
	arrSchema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	var rows []string
	for _, id := range ids {
		rows = append(rows, fmt.Sprintf(`{"id": %d, "name": "row-%d"}`, id, id))
	}
	tab, err := array.TableFromJSON(memory.DefaultAllocator, arrSchema, []string{"[" + strings.Join(rows, ",") + "]"})
	require.NoError(t, err)
	defer tab.Release()
	out, err := wfs.Create(uri)
	require.NoError(t, err)
	// WriteTable closes out.
	require.NoError(t, pqarrow.WriteTable(tab, out, tab.NumRows(), nil, pqarrow.DefaultWriterProps()))
}

func TestDataRoundTrip(t *testing.T) {
	forEachWarehouse(t, func(t *testing.T, wh warehouse) {
		ctx := context.Background()
		n := startNode(t, wh)
		cat := n.catalog(t)
		require.NoError(t, cat.CreateNamespace(ctx, table.Identifier{"sales"}, nil))
		id := table.Identifier{"sales", "orders"}
		tbl, err := cat.CreateTable(ctx, id, rowSchema)
		require.NoError(t, err)
		assert.True(t, strings.HasPrefix(tbl.Location(), n.warehouse+"/sales/orders"), tbl.Location())

		file := tbl.Location() + "/data/part-0.parquet"
		writeParquet(t, tbl, file, 1, 2, 3)
		tx := tbl.NewTransaction()
		require.NoError(t, tx.AddFiles(ctx, []string{file}, nil, false))
		committed, err := tx.Commit(ctx)
		require.NoError(t, err)
		assert.Contains(t, committed.MetadataLocation(), "/metadata/00001-")

		reloaded, err := cat.LoadTable(ctx, id)
		require.NoError(t, err)
		require.NotNil(t, reloaded.CurrentSnapshot())
		assert.Equal(t, committed.CurrentSnapshot().SnapshotID, reloaded.CurrentSnapshot().SnapshotID)

		// The change feed's commit event names the new snapshot.
		require.NoError(t, n.raft.StaleRead(func(rd *fsm.Reader) error {
			events, _, err := rd.Events(0, 1000)
			require.NoError(t, err)
			last := events[len(events)-1]
			assert.Equal(t, fsm.EventTableCommitted, last.Type)
			require.NotNil(t, last.SnapshotID)
			assert.Equal(t, committed.CurrentSnapshot().SnapshotID, *last.SnapshotID)
			return nil
		}))
		arrTbl, err := reloaded.Scan().ToArrowTable(ctx)
		require.NoError(t, err)
		defer arrTbl.Release()
		assert.EqualValues(t, 3, arrTbl.NumRows())

		// The metadata log records the previous file.
		prev := slices.Collect(reloaded.Metadata().PreviousFiles())
		require.Len(t, prev, 1)
		assert.Equal(t, tbl.MetadataLocation(), prev[0].MetadataFile)
	})
}

func TestMultiTableTransaction(t *testing.T) {
	ctx := context.Background()
	n := startNode(t, warehouses()[0])
	cat := n.catalog(t)
	require.NoError(t, cat.CreateNamespace(ctx, table.Identifier{"db"}, nil))
	t1, err := cat.CreateTable(ctx, table.Identifier{"db", "orders"}, rowSchema)
	require.NoError(t, err)
	t2, err := cat.CreateTable(ctx, table.Identifier{"db", "inventory"}, rowSchema)
	require.NoError(t, err)

	mtx, err := icecatalog.NewMultiTableTransaction(cat)
	require.NoError(t, err)
	tx1 := t1.NewTransaction()
	require.NoError(t, tx1.SetProperties(map[string]string{"pipeline": "v2"}))
	require.NoError(t, mtx.AddTransaction(tx1))
	tx2 := t2.NewTransaction()
	require.NoError(t, tx2.SetProperties(map[string]string{"pipeline": "v2"}))
	require.NoError(t, mtx.AddTransaction(tx2))
	require.NoError(t, mtx.Commit(ctx))

	for _, id := range []table.Identifier{{"db", "orders"}, {"db", "inventory"}} {
		tbl, err := cat.LoadTable(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, "v2", tbl.Properties()["pipeline"], id)
	}

	// A transaction whose second table's requirement fails changes neither.
	before := n.state(t)
	r := n.do(t, "POST", "/v1/floe/transactions/commit", map[string]any{
		"table-changes": []any{
			map[string]any{
				"identifier":   map[string]any{"namespace": []string{"db"}, "name": "orders"},
				"requirements": []any{},
				"updates":      []any{map[string]any{"action": "set-properties", "updates": map[string]string{"x": "1"}}},
			},
			map[string]any{
				"identifier":   map[string]any{"namespace": []string{"db"}, "name": "inventory"},
				"requirements": []any{map[string]any{"type": "assert-table-uuid", "uuid": "00000000-0000-0000-0000-000000000001"}},
				"updates":      []any{map[string]any{"action": "set-properties", "updates": map[string]string{"x": "1"}}},
			},
		},
	})
	assert.Equal(t, 409, r.status, "%s", r.body)
	assert.Equal(t, "CommitFailedException", r.errorType(t))
	assert.Equal(t, before, n.state(t))

	// A missing table is found before any table is built or its file
	// written: the 404 comes first even when an earlier table's update
	// would fail to apply.
	r = n.do(t, "POST", "/v1/floe/transactions/commit", map[string]any{
		"table-changes": []any{
			map[string]any{
				"identifier":   map[string]any{"namespace": []string{"db"}, "name": "orders"},
				"requirements": []any{},
				"updates":      []any{map[string]any{"action": "set-current-schema", "schema-id": 42}},
			},
			map[string]any{
				"identifier":   map[string]any{"namespace": []string{"db"}, "name": "missing"},
				"requirements": []any{},
				"updates":      []any{map[string]any{"action": "set-properties", "updates": map[string]string{"x": "1"}}},
			},
		},
	})
	assert.Equal(t, 404, r.status, "%s", r.body)
	assert.Equal(t, "NoSuchTableException", r.errorType(t))
	assert.Equal(t, before, n.state(t))

	// db."x.y" and db.x."y" are two tables, though their dotted names are
	// one string; the same table twice is a 400.
	require.NoError(t, cat.CreateNamespace(ctx, table.Identifier{"db", "x"}, nil))
	_, err = cat.CreateTable(ctx, table.Identifier{"db", "x.y"}, rowSchema)
	require.NoError(t, err)
	_, err = cat.CreateTable(ctx, table.Identifier{"db", "x", "y"}, rowSchema)
	require.NoError(t, err)
	change := func(ns []string, name string) map[string]any {
		return map[string]any{
			"identifier":   map[string]any{"namespace": ns, "name": name},
			"requirements": []any{},
			"updates":      []any{map[string]any{"action": "set-properties", "updates": map[string]string{"both": "1"}}},
		}
	}
	r = n.do(t, "POST", "/v1/floe/transactions/commit", map[string]any{"table-changes": []any{change([]string{"db"}, "x.y"), change([]string{"db", "x"}, "y")}})
	assert.Equal(t, 204, r.status, "%s", r.body)
	r = n.do(t, "POST", "/v1/floe/transactions/commit", map[string]any{"table-changes": []any{change([]string{"db"}, "x.y"), change([]string{"db"}, "x.y")}})
	assert.Equal(t, 400, r.status, "%s", r.body)
}

// A burst of commits without requirements to one table through one node
// all succeed: they take their turn on the node instead of racing for the
// compare-and-set until their retries run out (409s for a client, such as
// iceberg-js, that does not retry them). Each client's property is there.
func TestBurstOfCommitsToOneTableThroughOneNode(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a"}}).status)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/a/tables", withName("t")).status)
	const clients = 32
	statuses := make([]int, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			r := n.do(t, "POST", "/v1/namespaces/a/tables/t", setProp(fmt.Sprint("k", i), "v"))
			statuses[i] = r.status
		})
	}
	wg.Wait()
	for i, st := range statuses {
		assert.Equal(t, 200, st, "client %d", i)
	}
	props := n.do(t, "GET", "/v1/namespaces/a/tables/t", nil).json(t)["metadata"].(map[string]any)["properties"].(map[string]any)
	for i := range clients {
		assert.Contains(t, props, fmt.Sprint("k", i))
	}
}

// TestConcurrentCommits has 8 clients append to one table at once; every
// snapshot a client saw acknowledged must be in the final table.
func TestConcurrentCommits(t *testing.T) {
	ctx := context.Background()
	n := startNode(t, warehouses()[0])
	cat := n.catalog(t)
	require.NoError(t, cat.CreateNamespace(ctx, table.Identifier{"db"}, nil))
	id := table.Identifier{"db", "events"}
	_, err := cat.CreateTable(ctx, id, rowSchema)
	require.NoError(t, err)

	const clients, perClient = 8, 3
	var (
		mu    sync.Mutex
		acked []int64
		wg    sync.WaitGroup
	)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := n.catalog(t)
			for i := range perClient {
				for attempt := 0; ; attempt++ {
					require.Less(t, attempt, 50, "client %d could not commit", c)
					tbl, err := cl.LoadTable(ctx, id)
					require.NoError(t, err)
					file := fmt.Sprintf("%s/data/c%d-%d-%d.parquet", tbl.Location(), c, i, attempt)
					writeParquet(t, tbl, file, int64(c*100+i))
					tx := tbl.NewTransaction()
					require.NoError(t, tx.AddFiles(ctx, []string{file}, nil, false))
					done, err := tx.Commit(ctx)
					if errors.Is(err, rest.ErrCommitFailed) {
						continue
					}
					require.NoError(t, err)
					mu.Lock()
					acked = append(acked, done.CurrentSnapshot().SnapshotID)
					mu.Unlock()
					break
				}
			}
		}()
	}
	wg.Wait()
	require.Len(t, acked, clients*perClient)

	final, err := cat.LoadTable(ctx, id)
	require.NoError(t, err)
	var ancestry []int64
	for snap := final.CurrentSnapshot(); snap != nil; {
		ancestry = append(ancestry, snap.SnapshotID)
		if snap.ParentSnapshotID == nil {
			break
		}
		snap = final.SnapshotByID(*snap.ParentSnapshotID)
	}
	for _, s := range acked {
		assert.Contains(t, ancestry, s, "acknowledged snapshot lost")
	}
	rows, err := final.Scan().ToArrowTable(ctx)
	require.NoError(t, err)
	defer rows.Release()
	assert.EqualValues(t, clients*perClient, rows.NumRows())

	// Every metadata file left in storage is the current one or in its log:
	// the files of attempts that lost a compare-and-set were deleted.
	referenced := map[string]bool{final.MetadataLocation(): true}
	for e := range final.Metadata().PreviousFiles() {
		referenced[e.MetadataFile] = true
	}
	var stored int
	require.NoError(t, n.objects.List(ctx, final.Location()+"/metadata/", func(uri string) error {
		if strings.HasSuffix(uri, ".metadata.json") {
			stored++
			assert.True(t, referenced[uri], "orphaned metadata file %s", uri)
		}
		return nil
	}))
	assert.Equal(t, len(referenced), stored)
}

func TestRestartKeepsEverything(t *testing.T) {
	ctx := context.Background()
	n := startNode(t, warehouses()[0])
	cat := n.catalog(t)
	require.NoError(t, cat.CreateNamespace(ctx, table.Identifier{"a"}, iceberg.Properties{"owner": "me"}))
	require.NoError(t, cat.CreateNamespace(ctx, table.Identifier{"a", "b"}, nil))
	_, err := cat.CreateTable(ctx, table.Identifier{"a", "b", "t"}, rowSchema)
	require.NoError(t, err)
	before := n.state(t)
	applied := n.raft.FSM().AppliedIndex()

	n.restart()
	assert.Equal(t, before, n.state(t))
	assert.GreaterOrEqual(t, n.raft.FSM().AppliedIndex(), applied)
	// And the restarted node takes writes.
	_, err = n.catalog(t).CreateTable(ctx, table.Identifier{"a", "t2"}, rowSchema)
	require.NoError(t, err)
}

// TestCreateTableOptions creates tables with a partition spec, sort order,
// properties and location, directly and through a staged create (the
// stage-create request, then a commit with assert-create).
func TestCreateTableOptions(t *testing.T) {
	ctx := context.Background()
	n := startNode(t, warehouses()[0])
	cat := n.catalog(t)
	require.NoError(t, cat.CreateNamespace(ctx, table.Identifier{"db"}, nil))
	spec := iceberg.NewPartitionSpec(iceberg.PartitionField{SourceIDs: []int{1}, FieldID: 1000, Name: "id_bucket", Transform: iceberg.BucketTransform{NumBuckets: 4}})
	order, err := table.NewSortOrder(1, []table.SortField{{SourceIDs: []int{2}, Transform: iceberg.IdentityTransform{}, Direction: table.SortASC, NullOrder: table.NullsFirst}})
	require.NoError(t, err)
	for _, staged := range []bool{false, true} {
		name := fmt.Sprintf("t_staged_%v", staged)
		opts := []icecatalog.CreateTableOpt{
			icecatalog.WithPartitionSpec(&spec),
			icecatalog.WithSortOrder(order),
			icecatalog.WithProperties(iceberg.Properties{"owner": "etl"}),
			icecatalog.WithLocation(n.warehouse + "/custom/" + name),
		}
		if staged {
			opts = append(opts, icecatalog.WithStagedUpdates(table.NewSetPropertiesUpdate(iceberg.Properties{"staged": "yes"})))
		}
		tbl, err := cat.CreateTable(ctx, table.Identifier{"db", name}, rowSchema, opts...)
		require.NoError(t, err, name)
		loaded, err := cat.LoadTable(ctx, table.Identifier{"db", name})
		require.NoError(t, err)
		assert.Equal(t, tbl.MetadataLocation(), loaded.MetadataLocation())
		assert.Equal(t, n.warehouse+"/custom/"+name, loaded.Location())
		assert.Equal(t, "etl", loaded.Properties()["owner"])
		loadedSpec := loaded.Spec()
		assert.Equal(t, 1, loadedSpec.NumFields())
		assert.Equal(t, 1, loaded.SortOrder().Len())
		if staged {
			assert.Equal(t, "yes", loaded.Properties()["staged"])
		}
	}
	// A staged create of a name that exists by commit time fails.
	_, err = cat.CreateTable(ctx, table.Identifier{"db", "t_staged_true"}, rowSchema,
		icecatalog.WithStagedUpdates(table.NewSetPropertiesUpdate(iceberg.Properties{"x": "y"})))
	assert.Error(t, err)
}

// TestThroughAFollower runs the conformance suite and the data round trip
// against a follower of a three-node cluster: its writes are forwarded to
// the leader and its reads are linearizable.
func TestThroughAFollower(t *testing.T) {
	forEachWarehouse(t, func(t *testing.T, wh warehouse) {
		nodes := startCluster(t, wh, 3)
		f := follower(t, nodes)
		t.Run("conformance", func(t *testing.T) {
			catalogtest.RunCatalogTests(t, catalogtest.Config{
				NewCatalog:                  func(t *testing.T) icecatalog.Catalog { return f.catalog(t) },
				SupportsNamespaceProperties: true,
			})
		})
		t.Run("round trip", func(t *testing.T) {
			ctx := context.Background()
			cat := f.catalog(t)
			require.NoError(t, cat.CreateNamespace(ctx, table.Identifier{"rt"}, nil))
			tbl, err := cat.CreateTable(ctx, table.Identifier{"rt", "t"}, rowSchema)
			require.NoError(t, err)
			file := tbl.Location() + "/data/part-0.parquet"
			writeParquet(t, tbl, file, 7, 8)
			tx := tbl.NewTransaction()
			require.NoError(t, tx.AddFiles(ctx, []string{file}, nil, false))
			_, err = tx.Commit(ctx)
			require.NoError(t, err)
			// Every node sees the commit at once: reads are linearizable.
			for _, n := range nodes {
				loaded, err := n.catalog(t).LoadTable(ctx, table.Identifier{"rt", "t"})
				require.NoError(t, err)
				rows, err := loaded.Scan().ToArrowTable(ctx)
				require.NoError(t, err)
				assert.EqualValues(t, 2, rows.NumRows())
				rows.Release()
			}
		})
	})
}

func TestStaleReadOptIn(t *testing.T) {
	nodes := startCluster(t, warehouses()[0], 3)
	f := follower(t, nodes)
	require.Equal(t, 200, f.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"s"}}).status)
	require.Equal(t, 200, f.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"p q"}}).status)
	require.Equal(t, 200, f.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"p q", "kid"}}).status)
	require.Equal(t, 200, f.do(t, "POST", "/v1/namespaces/p%20q/tables", withName("x y")).status)
	assert.Equal(t, 200, f.do(t, "GET", "/v1/namespaces/s", nil, "X-Floe-Read-Consistency", "linearizable").status)
	assert.Equal(t, 400, f.do(t, "GET", "/v1/namespaces/s", nil, "X-Floe-Read-Consistency", "eventually").errorStatus(t))
	// Given twice, which one was meant is unknown: refused, not the first.
	twice, err := http.NewRequest("GET", f.URL+"/v1/namespaces/s", nil)
	require.NoError(t, err)
	twice.Header.Add("X-Floe-Read-Consistency", "stale")
	twice.Header.Add("X-Floe-Read-Consistency", "linearizable")
	resp, err := http.DefaultClient.Do(twice)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, 400, resp.StatusCode, string(b))
	assert.Contains(t, string(b), "given 2 times")
	// Cut off from the cluster, the follower still answers a stale read
	// from its replica, but not a linearizable one.
	f.net.Isolate(true)
	defer f.net.Isolate(false)
	assert.Equal(t, 200, f.do(t, "GET", "/v1/namespaces/s", nil, "X-Floe-Read-Consistency", "stale").status)
	r := f.do(t, "GET", "/v1/namespaces/s", nil)
	assert.Equal(t, 503, r.status)
	assert.Equal(t, "1", r.header.Get("Retry-After"))
	// Names written as Java writes a space ("+") are read from the replica
	// too, never a false 404.
	for _, path := range []string{"/v1/namespaces/p+q", "/v1/namespaces/p+q/tables", "/v1/namespaces/p+q/tables/x+y", "/v1/namespaces?parent=p+q"} {
		r := f.do(t, "GET", path, nil, "X-Floe-Read-Consistency", "stale")
		assert.Equal(t, 200, r.status, "%s: %s", path, r.body)
		if !strings.HasSuffix(path, "/tables") && !strings.Contains(path, "?") {
			assert.Equal(t, 204, f.do(t, "HEAD", path, nil, "X-Floe-Read-Consistency", "stale").status, path)
		}
		r = f.do(t, "GET", path, nil)
		assert.Equal(t, 503, r.status, "%s without a leader, linearizable: %s", path, r.body)
	}
	// A route that reads nothing answers as it would for the name with
	// "%20": a metrics report is taken, an unsupported route refused.
	report := map[string]any{"report-type": "scan-report", "table-name": "p q.x y", "snapshot-id": 1, "filter": true,
		"schema-id": 0, "projected-field-ids": []int{1}, "projected-field-names": []string{"id"}, "metrics": map[string]any{}}
	for _, spelling := range []string{"p%20q/tables/x%20y", "p+q/tables/x+y"} {
		r := f.do(t, "POST", "/v1/namespaces/"+spelling+"/metrics", report)
		assert.Equal(t, 204, r.status, "%s: %s", spelling, r.body)
	}
}

// A pointer read a moment before names a file a concurrent purge or a
// commit's cleanup deleted: the table is read again, and the answer is
// its newer file, or 404 once it is gone, never the storage error (a 500
// that Java clients take for a commit in an unknown state).
func TestMetadataFileGoneUnderTheReader(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"a"}}).status)
	r := n.do(t, "POST", "/v1/namespaces/a/tables", withName("t"))
	require.Equal(t, 200, r.status, string(r.body))
	first := r.json(t)["metadata-location"].(string)
	r = n.do(t, "POST", "/v1/namespaces/a/tables/t", setProp("k", "v"))
	require.Equal(t, 200, r.status, string(r.body))
	second := r.json(t)["metadata-location"].(string)
	require.NoError(t, os.Remove(strings.TrimPrefix(first, "file://")))
	n.srv.ForgetMetadata(first)

	ctx := context.Background()
	got, err := n.srv.ReadTableMetadata(ctx, []string{"a"}, "t", first)
	require.NoError(t, err)
	assert.Equal(t, second, got, "the table's file now")

	require.Equal(t, 204, n.do(t, "DELETE", "/v1/namespaces/a/tables/t", nil).status)
	_, err = n.srv.ReadTableMetadata(ctx, []string{"a"}, "t", first)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "table does not exist")

	// The file a live table names is missing: the storage error stands.
	r = n.do(t, "POST", "/v1/namespaces/a/tables", withName("u"))
	require.Equal(t, 200, r.status, string(r.body))
	cur := r.json(t)["metadata-location"].(string)
	require.NoError(t, os.Remove(strings.TrimPrefix(cur, "file://")))
	n.srv.ForgetMetadata(cur)
	_, err = n.srv.ReadTableMetadata(ctx, []string{"a"}, "u", cur)
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "table does not exist")
}
