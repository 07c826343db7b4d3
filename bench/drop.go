package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/apache/iceberg-go"
	icecatalog "github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/catalog/rest"
	_ "github.com/apache/iceberg-go/io/gocloud/s3" // S3 FileIO for the iceberg-go client that writes the manifests
	"github.com/apache/iceberg-go/table"

	"github.com/floe-catalog/floe/internal/harness"
)

// PurgeUnavailable is what item 5 prints when the floe binary has no
// purge jobs (or ignores the async header).
const PurgeUnavailable = "purge not available in this build"

// asyncPurgeHeader is catalog.AsyncPurgeHeader, spelt out so this file
// builds against catalogs that do not have it yet.
const asyncPurgeHeader = "X-Gravitino-Async-Purge"

// Bounds of item 5.
const (
	dropTimeout     = 30 * time.Minute // one DELETE, sync purge included
	purgeWait       = 30 * time.Minute // an async job, from the drop to SUCCEEDED
	putWorkers      = 8                // concurrent PutObject while building a table
	rssSampleEvery  = 20 * time.Millisecond
	dataFileContent = "floebench data file placeholder"
)

// DropCase is one dropped table.
type DropCase struct {
	Files   int    // data files the table's manifest lists
	Objects int    // objects under the table location before the drop (data files and metadata)
	Mode    string // "async" or "sync"
	Node    string // node that took the DELETE
	// Latency is DELETE …?purgeRequested=true → 204.
	Latency time.Duration
	// Purged is DELETE → the purge job observed SUCCEEDED (sync: Latency).
	Purged       time.Duration
	JobID        string
	FilesDeleted int64 // the job's progress counter
	Left         int   // objects under the location after SUCCEEDED
}

// DropBench is item 5 and the purge half of item 7.
type DropBench struct {
	// Skipped or Unavailable explain why nothing was measured.
	Skipped     string
	Unavailable string

	Cases []DropCase
	// Raw baseline: a DeleteObjects loop (1000 keys a request, one at a
	// time) over RawFiles objects written the same way, same server.
	RawFiles  int
	RawDelete time.Duration

	// Peak RSS of the node running the largest sync purge, sampled every
	// rssSampleEvery, against its RSS just before the drop.
	PurgeRSSBefore, PurgeRSSPeak int64
	PurgeRSSNode                 string
	PurgeRSSFiles                int
	PurgeRSSSamples              int
}

// Case returns the case for files and mode.
func (d *DropBench) Case(files int, mode string) (DropCase, bool) {
	for _, c := range d.Cases {
		if c.Files == files && c.Mode == mode {
			return c, true
		}
	}
	return DropCase{}, false
}

// LargestSync returns the sync case with the most files.
func (d *DropBench) LargestSync() (DropCase, bool) {
	var best DropCase
	ok := false
	for _, c := range d.Cases {
		if c.Mode == "sync" && (!ok || c.Files > best.Files) {
			best, ok = c, true
		}
	}
	return best, ok
}

type purgeJobView struct {
	ID        string `json:"id"`
	State     string `json:"state"`
	LastError string `json:"last-error"`
	Progress  struct {
		Deleted int64 `json:"files-deleted"`
	} `json:"progress"`
}

// purgeJobs lists the jobs of ns.name; status 404 means the build has no
// purge-jobs API.
func purgeJobs(ctx context.Context, cl *http.Client, n *harness.Node, ns, name string) (int, []purgeJobView, error) {
	q := url.Values{"namespace": {ns}, "table": {name}}
	st, rb, err := doRequest(ctx, cl, http.MethodGet, n.BaseURL()+"/management/v1/purge-jobs?"+q.Encode(), nil)
	if err != nil || st != http.StatusOK {
		return st, nil, err
	}
	var out struct {
		Jobs []purgeJobView `json:"jobs"`
	}
	if err := json.Unmarshal(rb, &out); err != nil {
		return st, nil, err
	}
	return st, out.Jobs, nil
}

// rssSampler records the largest VmRSS of pid until stopped.
type rssSampler struct {
	stop    chan struct{}
	done    chan struct{}
	peak    int64
	samples int
}

func sampleRSS(pid int) *rssSampler {
	s := &rssSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(rssSampleEvery)
		defer t.Stop()
		for {
			if m, err := procMemory(pid); err == nil {
				s.peak = max(s.peak, m.RSS)
				s.samples++
			}
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *rssSampler) finish() (int64, int) {
	close(s.stop)
	<-s.done
	return s.peak, s.samples
}

// buildTable creates ns.name through node n with the iceberg-go REST
// client, writes files tiny data-file objects under its location with
// write (nil: writes none, the manifest then lists files that do not
// exist) and commits one append listing them all (one manifest, one
// manifest list, a new metadata file), as an engine would. It returns the
// table's location.
func buildTable(ctx context.Context, n *harness.Node, s3 *S3Server, ns, name string, files int, write func(ctx context.Context, uris []string) error) (string, error) {
	cat, err := rest.NewCatalog(ctx, "floe", n.BaseURL(), rest.WithAdditionalProps(s3.ClientProps()))
	if err != nil {
		return "", err
	}
	if err := cat.CreateNamespace(ctx, table.Identifier{ns}, nil); err != nil && !errors.Is(err, icecatalog.ErrNamespaceAlreadyExists) {
		return "", err
	}
	schema := iceberg.NewSchema(0, iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true})
	tbl, err := cat.CreateTable(ctx, table.Identifier{ns, name}, schema)
	if err != nil {
		return "", fmt.Errorf("create %s.%s: %w", ns, name, err)
	}
	loc := strings.TrimSuffix(tbl.Location(), "/")
	uris := make([]string, files)
	for i := range uris {
		uris[i] = fmt.Sprintf("%s/data/%07d.parquet", loc, i)
	}
	if write != nil {
		if err := write(ctx, uris); err != nil {
			return "", fmt.Errorf("write data files: %w", err)
		}
	}
	dfs := make([]iceberg.DataFile, files)
	for i, uri := range uris {
		b, err := iceberg.NewDataFileBuilder(*iceberg.UnpartitionedSpec, iceberg.EntryContentData, uri, iceberg.ParquetFile,
			nil, nil, nil, 1, int64(len(dataFileContent)))
		if err != nil {
			return "", err
		}
		dfs[i] = b.Build()
	}
	tx := tbl.NewTransaction()
	if err := tx.AddDataFiles(ctx, dfs, nil); err != nil {
		return "", fmt.Errorf("append %d data files: %w", files, err)
	}
	if _, err := tx.Commit(ctx); err != nil {
		return "", fmt.Errorf("commit the append: %w", err)
	}
	return loc, nil
}

// s3Key turns s3://bucket/key into key.
func s3Key(uri string) string {
	rest := strings.TrimPrefix(uri, "s3://")
	if _, key, ok := strings.Cut(rest, "/"); ok {
		return key
	}
	return ""
}

func runDropBench(ctx context.Context, o *SuiteOptions, dir string) (*DropBench, error) {
	log := o.log()
	db := &DropBench{}
	bin := o.Versitygw
	if bin == "" {
		var err error
		if bin, err = harness.FindVersitygw(); err != nil {
			db.Skipped = err.Error() + "; install it with .ci/install-versitygw.sh"
			log.Warn("item 5 skipped", "reason", db.Skipped)
			return db, nil
		}
	}
	s3, err := StartS3(ctx, bin, filepath.Join(dir, "s3"))
	if err != nil {
		return nil, err
	}
	defer s3.Stop()
	log.Info("item 5: versitygw started", "endpoint", s3.Endpoint, "bucket", s3.Bucket)
	c, err := startCluster(ctx, harness.ClusterConfig{Bin: o.Floe, Dir: filepath.Join(dir, "floe"), Size: ClusterSize,
		Warehouse: s3.Warehouse(), Args: s3.NodeArgs()}, log)
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	leader, err := c.Leader(ctx)
	if err != nil {
		return nil, err
	}
	cl := harness.NewHTTPClient(4, 0)
	defer cl.CloseIdleConnections()
	if st, _, err := purgeJobs(ctx, cl, leader, "none", "none"); err != nil {
		return nil, err
	} else if st == http.StatusNotFound {
		db.Unavailable = "GET /management/v1/purge-jobs answered 404"
		log.Warn("item 5: "+PurgeUnavailable, "why", db.Unavailable)
		return db, nil
	} else if st != http.StatusOK {
		return nil, fmt.Errorf("GET /management/v1/purge-jobs: status %d", st)
	}

	const ns = "drops"
	largest := 0
	for _, n := range o.Sizes.DropFiles {
		largest = max(largest, n)
	}
	for _, files := range o.Sizes.DropFiles {
		for _, mode := range []string{"async", "sync"} {
			dc, err := dropCase(ctx, c, leader, s3, cl, ns, files, mode, db, files == largest)
			if err != nil {
				return db, fmt.Errorf("%s drop of a %d-file table: %w", mode, files, err)
			}
			if db.Unavailable != "" {
				return db, nil
			}
			db.Cases = append(db.Cases, dc)
			log.Info("item 5: drop", "mode", mode, "files", files, "objects", dc.Objects, "latency_ms", ms(dc.Latency),
				"purged_ms", ms(dc.Purged), "deleted", dc.FilesDeleted, "left", dc.Left)
		}
	}

	// Raw baseline on the same server: as many objects as the largest
	// table's data files, written the same way, deleted by a loop.
	objects, err := s3.Storage()
	if err != nil {
		return db, err
	}
	keys := make([]string, largest)
	for i := range keys {
		keys[i] = fmt.Sprintf("raw/data/%07d.parquet", i)
	}
	if err := parallel(ctx, largest, putWorkers, func(ctx context.Context, i int) error {
		return objects.Write(ctx, "s3://"+s3.Bucket+"/"+keys[i], []byte(dataFileContent))
	}); err != nil {
		return db, err
	}
	t0 := time.Now()
	if err := s3.deleteLoop(ctx, keys); err != nil {
		return db, err
	}
	db.RawDelete, db.RawFiles = time.Since(t0), largest
	if left, err := s3.Count(ctx, "raw/"); err != nil || left != 0 {
		return db, fmt.Errorf("raw delete loop left %d objects (%v)", left, err)
	}
	log.Info("item 5: raw DeleteObjects loop", "files", largest, "ms", ms(db.RawDelete),
		"files_per_s", fmt.Sprintf("%.0f", float64(largest)/db.RawDelete.Seconds()))
	return db, nil
}

// dropCase builds one table and drops it with purge, async or sync, through
// the leader, then waits for its job to succeed. It sets db.Unavailable
// (and returns a zero case) when the drop shows purge is not there.
func dropCase(ctx context.Context, c *Cluster, via *harness.Node, s3 *S3Server, cl *http.Client, ns string, files int, mode string, db *DropBench, largest bool) (DropCase, error) {
	dc := DropCase{Files: files, Mode: mode, Node: via.ID}
	name := fmt.Sprintf("t%d_%s", files, mode)
	loc, err := buildTable(ctx, via, s3, ns, name, files, s3.putObjects)
	if err != nil {
		return dc, err
	}
	prefix := s3Key(loc) + "/"
	if dc.Objects, err = s3.Count(ctx, prefix); err != nil {
		return dc, err
	}
	var sampler *rssSampler
	var rssBefore int64
	pid := via.Pid()
	if mode == "sync" && largest && pid > 0 {
		if m, err := procMemory(pid); err == nil {
			rssBefore = m.RSS
			sampler = sampleRSS(pid)
		}
	}
	var headers []string
	if mode == "async" {
		headers = []string{asyncPurgeHeader, "true"}
	}
	dctx, cancel := context.WithTimeout(ctx, dropTimeout)
	t0 := time.Now()
	st, rb, err := doRequestTimeout(dctx, cl, dropTimeout, http.MethodDelete, via.BaseURL()+tablePath(ns, name)+"?purgeRequested=true", nil, headers...)
	dc.Latency = time.Since(t0)
	cancel()
	if sampler != nil {
		peak, n := sampler.finish()
		db.PurgeRSSBefore, db.PurgeRSSPeak, db.PurgeRSSNode, db.PurgeRSSFiles, db.PurgeRSSSamples = rssBefore, peak, via.ID, files, n
	}
	if err := expect("DELETE "+ns+"."+name+"?purgeRequested=true", http.StatusNoContent, st, rb, err); err != nil {
		return dc, err
	}
	// The job, polled until it ends.
	var job purgeJobView
	first := true
	err = harness.Poll(ctx, purgeWait, 20*time.Millisecond, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, harness.ControlTimeout)
		defer cancel()
		st, jobs, err := purgeJobs(ctx, cl, via, ns, name)
		if err != nil {
			return err
		}
		if st == http.StatusNotFound {
			db.Unavailable = "GET /management/v1/purge-jobs answered 404 after the drop"
			return nil
		}
		if len(jobs) == 0 {
			db.Unavailable = "the drop with purgeRequested=true created no purge job"
			return nil
		}
		job = jobs[len(jobs)-1]
		if first && mode == "async" && largest && files >= 10_000 && job.State == "SUCCEEDED" {
			db.Unavailable = fmt.Sprintf("the %s header had no effect: the %d-file purge had finished when the async drop answered", asyncPurgeHeader, files)
			return nil
		}
		first = false
		switch job.State {
		case "SUCCEEDED":
			dc.Purged = time.Since(t0)
			if mode == "sync" {
				dc.Purged = dc.Latency
			}
			return nil
		case "FAILED":
			return fmt.Errorf("purge job %s FAILED: %s", job.ID, job.LastError)
		}
		return fmt.Errorf("purge job %s is %s", job.ID, job.State)
	})
	if err != nil || db.Unavailable != "" {
		return DropCase{}, err
	}
	dc.JobID, dc.FilesDeleted = job.ID, job.Progress.Deleted
	if dc.Left, err = s3.Count(ctx, prefix); err != nil {
		return dc, err
	}
	if dc.Left > 0 && dc.FilesDeleted == 0 {
		db.Unavailable = fmt.Sprintf("the purge job succeeded but deleted nothing (%d objects left)", dc.Left)
		return DropCase{}, nil
	}
	return dc, nil
}
