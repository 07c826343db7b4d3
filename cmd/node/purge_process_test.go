package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	icecatalog "github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/catalog/rest"
	"github.com/apache/iceberg-go/table"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/internal/storage"
	"github.com/floe-catalog/floe/internal/testenv"

	_ "github.com/apache/iceberg-go/io/gocloud/s3" // S3 FileIO for the test client
)

// s3Cluster is three floe processes on one versitygw warehouse, with
// purges slowed down to batches of 10 on one delete thread and a 1s
// heartbeat timeout, so that a test can kill or pause a node mid-purge.
type s3Cluster struct {
	*testCluster
	objects *storage.Mux
	s3      testenv.S3Server
	root    string // the nodes' data directories are root/<id>
}

// startS3Cluster starts three nodes on an S3 warehouse (versitygw), each
// also given the flags extra (which may name further S3 servers).
func startS3Cluster(t *testing.T, extra ...string) *s3Cluster {
	t.Helper()
	s3 := testenv.S3(t)
	bin := floeBinary(t)
	root := t.TempDir()
	c := &s3Cluster{testCluster: &testCluster{bin: bin, client: &http.Client{Timeout: 10 * time.Second}}, s3: s3, root: root}
	var err error
	c.objects, err = storage.New(s3.StorageConfig())
	require.NoError(t, err)
	seen := map[string]bool{}
	addr := func() string {
		for range 20 {
			if a := freeAddr(t); !seen[a] {
				seen[a] = true
				return a
			}
		}
		t.Fatal("no distinct free port")
		return ""
	}
	for i := 1; i <= 3; i++ {
		c.procs = append(c.procs, &clusterProc{id: fmt.Sprintf("node%d", i), httpAddr: addr(), clusterAddr: addr(), out: &testenv.LogBuffer{}})
	}
	var join []string
	for _, p := range c.procs {
		join = append(join, p.clusterAddr)
	}
	for _, p := range c.procs {
		p.args = []string{
			"--node-id", p.id, "--data-dir", filepath.Join(root, p.id),
			"--http-addr", p.httpAddr, "--cluster-addr", p.clusterAddr,
			"--bootstrap-expect", "3", "--join", strings.Join(join, ","),
			"--warehouse", s3.Warehouse(), "--s3-endpoint", s3.Endpoint, "--s3-region", s3.Region,
			"--s3-access-key-id", s3.AccessKeyID, "--s3-secret-access-key", s3.SecretAccessKey, "--s3-path-style",
			"--purge-heartbeat-timeout", "1s", "--purge-delete-batch-size", "10", "--purge-delete-threads", "1",
			"--purge-max-attempts", "3",
		}
		p.args = append(p.args, extra...)
	}
	t.Cleanup(func() {
		for _, p := range c.procs {
			if p.running() {
				_ = p.cmd.Process.Signal(syscall.SIGCONT) // a paused node cannot die otherwise
				p.kill(t)
			}
		}
	})
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range c.procs {
				t.Logf("---- %s (http %s), last lines:\n%s", p.id, p.httpAddr, p.tail(40))
			}
		}
	})
	for _, p := range c.procs {
		p.start(t, bin)
	}
	c.awaitStable(t, 60*time.Second)
	return c
}

func (c *s3Cluster) request(t *testing.T, p *clusterProc, method, path string, headers ...string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+p.httpAddr+path, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}

type jobView struct {
	ID        string `json:"id"`
	State     string `json:"state"`
	Attempts  int    `json:"attempts"`
	LastError string `json:"last-error"`
	Lease     *struct {
		Node  string `json:"node"`
		Token uint64 `json:"token"`
	} `json:"lease"`
	Progress struct {
		Phase   int   `json:"phase"`
		Offset  int64 `json:"offset"`
		Deleted int64 `json:"files-deleted"`
	} `json:"progress"`
	UpdatedMs int64 `json:"updated-ms"`
}

// job reads the table's purge job through any running node; ok is false
// when none answers.
func (c *s3Cluster) job(ns, table string) (jobView, bool) {
	for _, p := range c.procs {
		if !p.running() {
			continue
		}
		code, body, err := c.do(p, http.MethodGet, "/management/v1/purge-jobs?namespace="+ns+"&table="+table, "")
		if err != nil || code != http.StatusOK {
			continue
		}
		var list struct {
			Jobs []jobView `json:"jobs"`
		}
		if json.Unmarshal(body, &list) == nil && len(list.Jobs) == 1 {
			return list.Jobs[0], true
		}
	}
	return jobView{}, false
}

func (c *s3Cluster) waitJob(t *testing.T, ns, table string, within time.Duration, cond func(jobView) bool) jobView {
	t.Helper()
	var last jobView
	require.Eventually(t, func() bool {
		j, ok := c.job(ns, table)
		if ok {
			last = j
		}
		return ok && cond(j)
	}, within, 50*time.Millisecond, "purge job of %s.%s never got there; last: %+v", ns, table, &last)
	return last
}

func (c *s3Cluster) list(t *testing.T, location string) []string {
	t.Helper()
	var out []string
	require.NoError(t, c.objects.List(context.Background(), strings.TrimSuffix(location, "/")+"/", func(uri string) error {
		out = append(out, uri)
		return nil
	}))
	return out
}

// makeTable creates ns.name through p and commits snapshots appends of
// filesPer placeholder data files (written concurrently; AddDataFiles never
// reads them) and returns its location and every object under it.
func (c *s3Cluster) makeTable(t *testing.T, p *clusterProc, ns, name string, snapshots, filesPer int) (string, []string) {
	t.Helper()
	ctx := context.Background()
	// The client brings its own storage credentials: the catalog hands out none.
	cat, err := rest.NewCatalog(ctx, "floe", "http://"+p.httpAddr, rest.WithAdditionalProps(iceberg.Properties{
		"s3.access-key-id": c.s3.AccessKeyID, "s3.secret-access-key": c.s3.SecretAccessKey,
	}))
	require.NoError(t, err)
	if err := cat.CreateNamespace(ctx, table.Identifier{ns}, nil); err != nil && !errors.Is(err, icecatalog.ErrNamespaceAlreadyExists) {
		require.NoError(t, err)
	}
	schema := iceberg.NewSchema(0, iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true})
	tbl, err := cat.CreateTable(ctx, table.Identifier{ns, name}, schema)
	require.NoError(t, err)
	var uris []string
	for s := range snapshots {
		for i := range filesPer {
			uris = append(uris, fmt.Sprintf("%s/data/s%03d-%05d.parquet", tbl.Location(), s, i))
		}
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		werr error
	)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(uris); i += 16 {
				if err := c.objects.Write(ctx, uris[i], []byte("placeholder")); err != nil {
					mu.Lock()
					werr = errors.Join(werr, err)
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	require.NoError(t, werr)
	for s := range snapshots {
		var dfs []iceberg.DataFile
		for _, uri := range uris[s*filesPer : (s+1)*filesPer] {
			b, err := iceberg.NewDataFileBuilder(*iceberg.UnpartitionedSpec, iceberg.EntryContentData, uri, iceberg.ParquetFile, nil, nil, nil, 1, 11)
			require.NoError(t, err)
			dfs = append(dfs, b.Build())
		}
		tx := tbl.NewTransaction()
		require.NoError(t, tx.AddDataFiles(ctx, dfs, nil))
		tbl, err = tx.Commit(ctx)
		require.NoError(t, err)
	}
	files := c.list(t, tbl.Location())
	require.Greater(t, len(files), snapshots*filesPer)
	return tbl.Location(), files
}

func (c *s3Cluster) follower(t *testing.T) *clusterProc {
	t.Helper()
	for _, p := range c.procs {
		if !p.running() {
			continue
		}
		st, err := c.status(p)
		require.NoError(t, err)
		if st.LeaderID != p.id {
			return p
		}
	}
	t.Fatal("no running follower")
	return nil
}

// metric reads one unlabelled sample from a node's /metrics; -1 when absent.
func (c *s3Cluster) metric(p *clusterProc, name string) float64 {
	code, body, err := c.do(p, http.MethodGet, "/metrics", "")
	if err != nil || code != http.StatusOK {
		return -1
	}
	for _, line := range strings.Split(string(body), "\n") {
		var v float64
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			if _, err := fmt.Sscan(rest, &v); err == nil {
				return v
			}
		}
	}
	return -1
}

// TestPurgeProcesses runs real floe processes on versitygw and interferes
// with the one running a purge job: SIGKILL (another node finishes the
// job, a live string-prefix sibling is untouched), then SIGSTOP until the
// lease is reassigned and the job finished elsewhere, then SIGCONT (the
// woken worker is fenced off: the job record does not change).
func TestPurgeProcesses(t *testing.T) {
	c := startS3Cluster(t)
	via := c.follower(t)
	const ns = "procs"
	t1Loc, _ := c.makeTable(t, via, ns, "t1", 8, 400)
	t10Loc, t10Files := c.makeTable(t, via, ns, "t10", 2, 5)
	require.True(t, strings.HasPrefix(t10Loc, t1Loc), "string-prefix siblings")
	t2Loc, _ := c.makeTable(t, via, ns, "t2", 8, 400)

	t.Run("SIGKILL the node running the job", func(t *testing.T) {
		code, body := c.request(t, via, http.MethodDelete, "/v1/namespaces/"+ns+"/tables/t1?purgeRequested=true", "X-Gravitino-Async-Purge", "true")
		require.Equal(t, http.StatusNoContent, code, string(body))
		job := c.waitJob(t, ns, "t1", 30*time.Second, func(j jobView) bool {
			return j.State == "RUNNING" && j.Lease != nil && j.Progress.Deleted > 0
		})
		owner := c.byID(job.Lease.Node)
		require.NotNil(t, owner)
		owner.kill(t)
		left := len(c.list(t, t1Loc))
		t.Logf("killed %s (token %d) at %d files deleted; %d objects left", owner.id, job.Lease.Token, job.Progress.Deleted, left)
		require.Positive(t, left, "killed midway, not after the purge")

		done := c.waitJob(t, ns, "t1", 60*time.Second, func(j jobView) bool { return j.State == "SUCCEEDED" })
		assert.Empty(t, c.list(t, t1Loc), "the table's prefix is empty")
		assert.ElementsMatch(t, t10Files, c.list(t, t10Loc), "every file of the live sibling t10 survives")
		assert.Equal(t, 0, done.Attempts, "a reassignment is not a failed attempt")
		assert.Empty(t, done.LastError)

		// The killed process left its run marked; the job went on
		// elsewhere, so the mark counts nothing and is removed.
		marks := filepath.Join(c.root, owner.id, "purge-runs")
		entries, err := os.ReadDir(marks)
		require.NoError(t, err)
		assert.Len(t, entries, 1, "the run SIGKILL ended is marked")
		owner.start(t, c.bin) // back for the next scenario
		c.awaitStable(t, 60*time.Second)
		require.Eventually(t, func() bool {
			entries, err := os.ReadDir(marks)
			return err == nil && len(entries) == 0
		}, 30*time.Second, 50*time.Millisecond, "the mark of a lease that moved on is removed")
		after, ok := c.job(ns, "t1")
		require.True(t, ok)
		assert.Equal(t, done, after, "and counts nothing")
	})

	t.Run("SIGSTOP the node running the job until it is fenced off", func(t *testing.T) {
		via := c.follower(t)
		code, body := c.request(t, via, http.MethodDelete, "/v1/namespaces/"+ns+"/tables/t2?purgeRequested=true", "X-Gravitino-Async-Purge", "true")
		require.Equal(t, http.StatusNoContent, code, string(body))
		job := c.waitJob(t, ns, "t2", 30*time.Second, func(j jobView) bool {
			return j.State == "RUNNING" && j.Lease != nil && j.Progress.Deleted > 0
		})
		paused := c.byID(job.Lease.Node)
		require.NotNil(t, paused)
		staleBefore := c.metric(paused, "floe_purge_stale_leases_total")
		require.GreaterOrEqual(t, staleBefore, float64(0), "the stale-lease counter is exported")
		require.NoError(t, paused.cmd.Process.Signal(syscall.SIGSTOP))
		stopped := true
		defer func() {
			if stopped {
				_ = paused.cmd.Process.Signal(syscall.SIGCONT)
			}
		}()
		t.Logf("paused %s (token %d) at %d files deleted", paused.id, job.Lease.Token, job.Progress.Deleted)

		// The leader sees the silence and reassigns; the new owner finishes.
		done := c.waitJob(t, ns, "t2", 60*time.Second, func(j jobView) bool { return j.State == "SUCCEEDED" })
		assert.Empty(t, c.list(t, t2Loc))
		assert.Equal(t, 0, done.Attempts)

		require.NoError(t, paused.cmd.Process.Signal(syscall.SIGCONT))
		stopped = false
		// The woken worker finds its token stale (its progress report or
		// outcome is refused, or its poll sees the lease gone) and stops.
		require.Eventually(t, func() bool {
			return c.metric(paused, "floe_purge_stale_leases_total") > staleBefore
		}, 30*time.Second, 50*time.Millisecond, "the woken worker never noticed it was fenced off")
		c.awaitStable(t, 60*time.Second)
		after, ok := c.job(ns, "t2")
		require.True(t, ok)
		assert.Equal(t, done, after, "nothing the fenced-off worker sent changed the job")
		assert.Contains(t, paused.out.String(), "purge lease lost")
		assert.Empty(t, c.list(t, t2Loc))
		assert.ElementsMatch(t, t10Files, c.list(t, t10Loc), "every file of the live sibling t10 survives")
	})

	// Every node has the S3 secret in its configuration; none hands it out
	// (vending is off), logs it or stores it in the replicated state.
	t.Run("no secret leaves a node", func(t *testing.T) {
		secret := c.s3.SecretAccessKey
		for _, p := range c.procs {
			for _, path := range []string{
				"/v1/config", "/v1/namespaces/" + ns + "/tables/t10", "/v1/namespaces/" + ns + "/tables/t10/credentials",
				"/management/v1/cluster", "/management/v1/purge-jobs", "/metrics",
			} {
				code, body := c.request(t, p, http.MethodGet, path, "X-Iceberg-Access-Delegation", "vended-credentials")
				require.Equal(t, http.StatusOK, code, "%s %s: %s", p.id, path, body)
				assert.NotContains(t, string(body), secret, "%s %s", p.id, path)
				assert.NotContains(t, string(body), c.s3.AccessKeyID, "%s %s", p.id, path)
			}
			assert.NotContains(t, p.out.String(), secret, "%s's log", p.id)
		}
		files := 0
		require.NoError(t, filepath.WalkDir(c.root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			files++
			assert.NotContains(t, string(b), secret, "%s holds the storage secret", path)
			return nil
		}))
		assert.Positive(t, files)
	})
}
