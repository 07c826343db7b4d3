package purge_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	icecatalog "github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/catalog/rest"
	"github.com/apache/iceberg-go/table"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/catalog"
	"github.com/floe-catalog/floe/fsm"
)

// makeBigTable is makeTable for thousands of files: the placeholder data
// objects are written by a few concurrent writers, and each of the
// snapshots is one AddDataFiles commit of filesPer pre-built DataFiles
// (iceberg-go writes one manifest per commit and never reads the data
// files), so the table ends with snapshots manifests, manifest lists and
// snapshots+1 metadata files. 3000 files take a few seconds on versitygw.
func (c *cluster) makeBigTable(n *tnode, ns, name string, snapshots, filesPer int) testTable {
	t := c.t
	t.Helper()
	ctx := context.Background()
	cat, err := rest.NewCatalog(ctx, "floe", n.URL, c.clientOptions()...)
	require.NoError(t, err)
	if err := cat.CreateNamespace(ctx, table.Identifier{ns}, nil); err != nil && !errors.Is(err, icecatalog.ErrNamespaceAlreadyExists) {
		require.NoError(t, err)
	}
	tbl, err := cat.CreateTable(ctx, table.Identifier{ns, name}, rowSchema)
	require.NoError(t, err)
	var tt testTable
	for s := range snapshots {
		for i := range filesPer {
			tt.data = append(tt.data, fmt.Sprintf("%s/data/s%03d-%05d.parquet", tbl.Location(), s, i))
		}
	}
	const writers = 16
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(tt.data); i += writers {
				if err := n.objects.Write(ctx, tt.data[i], []byte("placeholder")); err != nil {
					mu.Lock()
					firstErr = errors.Join(firstErr, err)
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	require.NoError(t, firstErr)
	for s := range snapshots {
		dfs := make([]iceberg.DataFile, 0, filesPer)
		for _, uri := range tt.data[s*filesPer : (s+1)*filesPer] {
			dfs = append(dfs, dataFile(t, tbl, uri))
		}
		tx := tbl.NewTransaction()
		require.NoError(t, tx.AddDataFiles(ctx, dfs, nil))
		tbl, err = tx.Commit(ctx)
		require.NoError(t, err)
	}
	tt.tbl = tbl
	tt.files = c.list(tbl.Location())
	require.Equal(t, snapshots*filesPer+3*snapshots+1, len(tt.files), "data files, a manifest and a list per snapshot, metadata files")
	return tt
}

// TestPurgeThousandsOfFiles purges two tables of 3000 data files over 20
// snapshots (20 manifests, 20 manifest lists, 21 metadata files) each on
// versitygw, in batches of 250: asynchronously (the prefix empties) and
// synchronously (empty when the 204 arrives). A string-prefix sibling
// survives both.
func TestPurgeThousandsOfFiles(t *testing.T) {
	const snapshots, filesPer = 20, 150
	c := newCluster(t, s3Warehouse(), 3, 250)
	n := c.follower()
	start := time.Now()
	async := c.makeBigTable(n, "big", "t1", snapshots, filesPer)
	sync := c.makeBigTable(n, "big", "t2", snapshots, filesPer)
	keep := c.makeTable(n, "big", "t10", nil, 2, 3)
	t.Logf("created %d + %d files in %s", len(async.files), len(sync.files), time.Since(start).Round(time.Millisecond))

	t.Run("async", func(t *testing.T) {
		r := n.do(t, "DELETE", "/v1/namespaces/big/tables/t1?purgeRequested=true", "", catalog.AsyncPurgeHeader, "true")
		require.Equal(t, 204, r.status, r.body)
		require.Eventually(t, func() bool { return len(c.list(async.tbl.Location())) == 0 }, 60*time.Second, 100*time.Millisecond,
			"the table's prefix never emptied")
		job := c.waitJob("big", "t1", 30*time.Second, isState(fsm.JobSucceeded))
		assert.Equal(t, int64(len(async.files)), job.Progress.Deleted, "every file deleted once")
		assert.Equal(t, 0, job.Attempts)
	})
	t.Run("sync", func(t *testing.T) {
		r := n.do(t, "DELETE", "/v1/namespaces/big/tables/t2?purgeRequested=true", "")
		require.Equal(t, 204, r.status, r.body)
		assert.Empty(t, c.list(sync.tbl.Location()), "empty when the 204 arrives")
		job := c.mustJob("big", "t2")
		assert.Equal(t, fsm.JobSucceeded, job.State)
		assert.Equal(t, int64(len(sync.files)), job.Progress.Deleted)
	})
	assert.ElementsMatch(t, keep.files, c.list(keep.tbl.Location()), "the sibling t10 is untouched")
}
