package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/harness"
	"github.com/floe-catalog/floe/internal/storage"
)

// Bounds and fixed settings of item 9.
const (
	dropsStartWarmWait = 90 * time.Second // the first async purge: the scheduler must have seen every node heartbeat
	dropsJobWait       = 60 * time.Second // one small purge job, drop → SUCCEEDED
	dropsRegisterers   = 8                // concurrent register calls while making the copies
	dropsCreators      = 16               // concurrent create calls for the throughput tables
	dropsBgTables      = 4                // tables per background committer
)

// Floe's purge counters item 9 reads from every node's /metrics.
const (
	metricPurgeBatches = "floe_purge_delete_batches_total"
	metricPurgeFiles   = "floe_purge_files_deleted_total"
	metricPurgeWakes   = "floe_purge_scheduler_wakes_total"
)

// PurgeRun is one purging drop of item 9 whose purge was followed to its
// end on an otherwise idle cluster.
type PurgeRun struct {
	Mode    string // "async" or "sync"
	Files   int    // data files the manifest lists (all written as objects)
	Objects int    // objects under the location before the drop
	// Drop is DELETE …?purgeRequested=true → 204.
	Drop time.Duration
	// Running is DELETE → the job's RUNNING event received on the change
	// feed (async; for sync the drop entry itself leases the job).
	Running time.Duration
	// Done is DELETE → the job's SUCCEEDED event received (sync: Drop, the
	// answer waits for it).
	Done  time.Duration
	Node  string // the node that ran the job
	JobID string
	// Started is DELETE → the "purge job started" line in the log of the
	// node that ran it (that node's clock, the same machine's); 0 when the
	// line was not found.
	Started time.Duration
	// S3 counts the nodes' S3 requests from the DELETE to SUCCEEDED, at
	// the counting proxy.
	S3 S3Requests
	// FloeBatches and FloeFiles are the increase of floe's own counters
	// (floe_purge_delete_batches_total, floe_purge_files_deleted_total)
	// summed over the nodes over the same window.
	FloeBatches, FloeFiles float64
	Left                   int // objects under the location after SUCCEEDED
}

// DropLatencySize is the drop-latency distribution at one table size.
type DropLatencySize struct {
	Files int
	Drops []time.Duration // DELETE → 204, async with purge, one per copy
}

// DropsBench is item 9: when an async purge starts, drop latency as a
// distribution under load, drop throughput, S3 requests per file and the
// purging node's memory.
type DropsBench struct {
	Skipped     string
	Unavailable string

	// Purge start on an idle purge queue: Rounds async and Rounds sync
	// drops of StartFiles-file tables, alternating.
	StartFiles int
	Start      []PurgeRun
	// Wakes is the increase of floe_purge_scheduler_wakes_total over them.
	Wakes float64

	// The largest table size, purged async with the RSS of every node
	// sampled every rssSampleEvery.
	Large           PurgeRun
	LargeRSSBefore  int64 // the purging node, just before the drop
	LargeRSSPeak    int64
	LargeRSSSamples int

	// Drop latency under load: for each size, LatN copies registered from
	// one source table, dropped async with purge one at a time, the sizes
	// interleaved, while LoadClients commit to other tables.
	LatN          int
	Lat           []DropLatencySize
	LoadClients   int
	LoadQuiet     LoadResult // the committers alone, just before
	LoadDuring    LoadResult // the committers while the drops ran
	LatWindow     time.Duration
	LatJobsDone   int // copies' purge jobs SUCCEEDED by the end of the window
	LatJobsQueued int // copies' purge jobs created in the window

	// Drop throughput: TputClients clients each dropping its own
	// TputPerClient empty tables with purge (async), on a fresh cluster.
	TputClients   int
	TputPerClient int
	Tput          LoadResult
	// Raw is the baseline: raw Raft no-op entries of EntryBytes (the
	// encoded DropTable with its job) at TputClients clients.
	Raw        LoadResult
	EntryBytes int
	// TputDrained is the number of those purge jobs SUCCEEDED within
	// TputDrainWait after the last drop (TputDrainTime when all were).
	TputDrained   int
	TputDrainWait time.Duration
	TputDrainTime time.Duration
	// TputDrainSpan is from the first drop to when TputDrained was counted.
	TputDrainSpan time.Duration
	// TputEntries is how far the leader's commit index moved from just
	// before the drops to when TputDrained was counted: the drops, and
	// every lease, progress record, finish and heartbeat meanwhile.
	TputEntries uint64
}

// EntriesPerPurge is the log entries each purge cost after its drop's own
// entry, from TputEntries: (entries − drops) ÷ purges SUCCEEDED. Jobs
// leased but not finished and heartbeats make it an upper bound. 0 when
// nothing drained.
func (d *DropsBench) EntriesPerPurge() float64 {
	drops := uint64(d.Tput.OK)
	if d.TputDrained == 0 || d.TputEntries < drops {
		return 0
	}
	return float64(d.TputEntries-drops) / float64(d.TputDrained)
}

// LatSize returns the latency distribution at files.
func (d *DropsBench) LatSize(files int) (DropLatencySize, bool) {
	for _, l := range d.Lat {
		if l.Files == files {
			return l, true
		}
	}
	return DropLatencySize{}, false
}

// StartRuns returns the runs of mode.
func (d *DropsBench) StartRuns(mode string) []PurgeRun {
	var out []PurgeRun
	for _, r := range d.Start {
		if r.Mode == mode {
			out = append(out, r)
		}
	}
	return out
}

// durations extracts one duration of each run.
func durations(runs []PurgeRun, f func(PurgeRun) time.Duration) []time.Duration {
	out := make([]time.Duration, len(runs))
	for i, r := range runs {
		out[i] = f(r)
	}
	return out
}

// StartS3 sums the S3 requests and floe counters of every start run.
func (d *DropsBench) StartS3() (req S3Requests, objects int, batches, files float64) {
	for _, r := range d.Start {
		req = req.Add(r.S3)
		objects += r.Objects
		batches += r.FloeBatches
		files += r.FloeFiles
	}
	return
}

// metricSums returns, for each name, the sum over nodes of every series
// of that metric (any labels).
func metricSums(ctx context.Context, cl *http.Client, nodes []*harness.Node, names ...string) (map[string]float64, error) {
	out := make(map[string]float64, len(names))
	for _, n := range nodes {
		st, rb, err := doRequest(ctx, cl, http.MethodGet, n.BaseURL()+"/metrics", nil)
		if err := expect("GET /metrics on "+n.ID, http.StatusOK, st, rb, err); err != nil {
			return nil, err
		}
		for _, line := range strings.Split(string(rb), "\n") {
			if line == "" || line[0] == '#' {
				continue
			}
			for _, name := range names {
				rest, ok := strings.CutPrefix(line, name)
				if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
					continue
				}
				if i := strings.LastIndexByte(rest, ' '); i >= 0 {
					if v, err := strconv.ParseFloat(rest[i+1:], 64); err == nil {
						out[name] += v
					}
				}
			}
		}
	}
	return out, nil
}

// dropEntryBytes is the size of the log entry of an async purging drop of
// ns.name as a node in this cluster encodes it: the DropTable command with
// its job spec (id, warehouse, the FileIO properties without secrets, the
// principal).
func dropEntryBytes(s3 *S3Server, endpoint, ns, name string) (int, error) {
	objects, err := storage.New(storage.Config{
		S3Endpoint: endpoint, S3Region: s3.Region, S3AccessKeyID: s3.AccessKeyID,
		S3SecretAccessKey: s3.SecretAccessKey, S3PathStyle: true,
	})
	if err != nil {
		return 0, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return 0, err
	}
	b, err := fsm.Encode(fsm.DropTable{
		Ident: fsm.Ident{Namespace: []string{ns}, Name: name}, Purge: true, AtMs: time.Now().UnixMilli(),
		Job: &fsm.PurgeJobSpec{ID: id.String(), Warehouse: s3.Warehouse(),
			FileIO: storage.WithoutSecrets(objects.ClientConfig(s3.Warehouse())), DroppedBy: "anonymous"},
	})
	return len(b), err
}

// dropURL is the purging drop of ns.name through n.
func dropURL(n *harness.Node, ns, name string) string {
	return n.BaseURL() + tablePath(ns, name) + "?purgeRequested=true"
}

var asyncHeaders = []string{asyncPurgeHeader, "true"}

func runDropsBench(ctx context.Context, o *SuiteOptions, dir string) (*DropsBench, error) {
	log := o.log()
	sz := o.Sizes
	db := &DropsBench{StartFiles: sz.StartFiles, LatN: sz.DropLatN, LoadClients: sz.DropLatClients,
		TputClients: sz.DropTputClients, TputPerClient: sz.DropTputPerClient, TputDrainWait: sz.DropDrainWait}
	bin := o.Versitygw
	if bin == "" {
		var err error
		if bin, err = harness.FindVersitygw(); err != nil {
			db.Skipped = err.Error() + "; install it with .ci/install-versitygw.sh"
			log.Warn("item 9 skipped", "reason", db.Skipped)
			return db, nil
		}
	}
	s3, err := StartS3(ctx, bin, filepath.Join(dir, "s3"))
	if err != nil {
		return nil, err
	}
	defer s3.Stop()
	proxy, err := startS3CountingProxy(s3.Endpoint)
	if err != nil {
		return nil, err
	}
	defer proxy.Stop()
	log.Info("item 9: versitygw started behind a counting proxy", "endpoint", s3.Endpoint, "proxy", proxy.Endpoint)

	// The raw Raft baseline first, with nothing else running.
	const tputNS = "dtput"
	if db.EntryBytes, err = dropEntryBytes(s3, proxy.Endpoint, tputNS, "t00000"); err != nil {
		return nil, err
	}
	entry, err := NoopOfSize(db.EntryBytes)
	if err != nil {
		return nil, err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if db.Raw, err = rawThroughput(ctx, filepath.Join(dir, "raw"), RawDiscard, entry, sz.DropTputClients, sz.DropTputRawDuration, quiet); err != nil {
		return nil, fmt.Errorf("raw raft baseline: %w", err)
	}
	log.Info("item 9: raw Raft no-ops", "clients", sz.DropTputClients, "entry_bytes", db.EntryBytes, "per_s", fmt.Sprintf("%.0f", db.Raw.PerSecond()))

	cc := harness.ClusterConfig{Bin: o.Floe, Size: ClusterSize, Warehouse: s3.Warehouse(), Args: s3.NodeArgsVia(proxy.Endpoint)}
	cc.Dir = filepath.Join(dir, "floe")
	c, err := startCluster(ctx, cc, log)
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	leader, err := c.Leader(ctx)
	if err != nil {
		return nil, err
	}
	cl := harness.NewHTTPClient(8, 0)
	defer cl.CloseIdleConnections()
	if st, _, err := purgeJobs(ctx, cl, leader, "none", "none"); err != nil {
		return nil, err
	} else if st == http.StatusNotFound {
		db.Unavailable = "GET /management/v1/purge-jobs answered 404"
		return db, nil
	}
	feed, err := followPurgeFeed(ctx, leader)
	if errors.Is(err, errFeedUnavailable) {
		db.Unavailable = err.Error()
		return db, nil
	}
	if err != nil {
		return nil, err
	}
	defer feed.stop()

	if err := dropsStart(ctx, c, leader, s3, proxy, cl, feed, db, sz, log); err != nil {
		return db, fmt.Errorf("purge start: %w", err)
	}
	if err := dropsLarge(ctx, c, leader, s3, proxy, cl, feed, db, sz, log); err != nil {
		return db, fmt.Errorf("largest purge: %w", err)
	}
	if err := dropsLatency(ctx, leader, s3, cl, feed, db, sz, log); err != nil {
		return db, fmt.Errorf("drop latency: %w", err)
	}
	feed.stop()
	c.Stop()

	// Throughput on a fresh cluster: the copies' purges above would still
	// be running.
	cc.Dir = filepath.Join(dir, "floe-tput")
	c2, err := startCluster(ctx, cc, log)
	if err != nil {
		return db, err
	}
	defer c2.Stop()
	if err := dropsThroughput(ctx, c2, tputNS, db, sz, log); err != nil {
		return db, fmt.Errorf("drop throughput: %w", err)
	}
	return db, nil
}

// purgeRun drops ns.name (a table of files data files under loc, built
// beforehand) through via and follows its job to SUCCEEDED on the feed.
func purgeRun(ctx context.Context, c *Cluster, via *harness.Node, s3 *S3Server, proxy *s3CountingProxy, cl *http.Client, feed *purgeFeed,
	ns, name, loc, mode string, files int) (PurgeRun, error) {
	run := PurgeRun{Mode: mode, Files: files}
	prefix := s3Key(loc) + "/"
	var err error
	if run.Objects, err = s3.Count(ctx, prefix); err != nil {
		return run, err
	}
	m0, err := metricSums(ctx, cl, c.Nodes, metricPurgeBatches, metricPurgeFiles)
	if err != nil {
		return run, err
	}
	s0 := proxy.Counts()
	var headers []string
	if mode == "async" {
		headers = asyncHeaders
	}
	t0 := time.Now()
	st, rb, err := doRequestTimeout(ctx, cl, dropTimeout, http.MethodDelete, dropURL(via, ns, name), nil, headers...)
	run.Drop = time.Since(t0)
	if err := expect("DELETE "+ns+"."+name+"?purgeRequested=true ("+mode+")", http.StatusNoContent, st, rb, err); err != nil {
		return run, err
	}
	running, err := feed.wait(ctx, ns, name, fsm.JobRunning, dropsJobWait)
	if err != nil {
		return run, err
	}
	done, err := feed.wait(ctx, ns, name, fsm.JobSucceeded, purgeWait)
	if err != nil {
		return run, err
	}
	run.S3 = proxy.Counts().Sub(s0)
	run.Node, run.JobID = running.Node, running.ID
	if n := c.Node(run.Node); n != nil {
		if at, ok := logTime(n.LogPath(), "purge job started", "job_id="+run.JobID); ok {
			run.Started = at.Sub(t0)
		}
	}
	if mode == "async" {
		run.Running, run.Done = running.At.Sub(t0), done.At.Sub(t0)
	} else {
		run.Done = run.Drop
	}
	m1, err := metricSums(ctx, cl, c.Nodes, metricPurgeBatches, metricPurgeFiles)
	if err != nil {
		return run, err
	}
	run.FloeBatches, run.FloeFiles = m1[metricPurgeBatches]-m0[metricPurgeBatches], m1[metricPurgeFiles]-m0[metricPurgeFiles]
	if run.Left, err = s3.Count(ctx, prefix); err != nil {
		return run, err
	}
	return run, nil
}

// dropsStart measures when an async purge starts and ends against a sync
// one of the same shape, one job at a time: rounds of an async and a sync
// drop of StartFiles-file tables.
func dropsStart(ctx context.Context, c *Cluster, leader *harness.Node, s3 *S3Server, proxy *s3CountingProxy, cl *http.Client, feed *purgeFeed,
	db *DropsBench, sz Sizes, log *slog.Logger) error {
	const ns = "start"
	n := 2*sz.StartRounds + 1
	locs := make([]string, n)
	names := make([]string, n)
	t0 := time.Now()
	for i := range n {
		names[i] = fmt.Sprintf("t%03d", i)
		var err error
		if locs[i], err = buildTable(ctx, leader, s3, ns, names[i], sz.StartFiles, s3.bulkWriteObjects); err != nil {
			return err
		}
	}
	log.Info("item 9: start tables built", "tables", n, "files", sz.StartFiles, "s", fmt.Sprintf("%.1f", time.Since(t0).Seconds()))
	// The first one, untimed: the leader's scheduler leases only to nodes
	// whose heartbeat it has seen move.
	st, rb, err := doRequest(ctx, cl, http.MethodDelete, dropURL(leader, ns, names[0]), nil, asyncHeaders...)
	if err := expect("warm-up async drop", http.StatusNoContent, st, rb, err); err != nil {
		return err
	}
	if _, err := feed.wait(ctx, ns, names[0], fsm.JobSucceeded, dropsStartWarmWait); err != nil {
		return err
	}
	w0, err := metricSums(ctx, cl, c.Nodes, metricPurgeWakes)
	if err != nil {
		return err
	}
	for r := range sz.StartRounds {
		for k, mode := range []string{"async", "sync"} {
			i := 1 + 2*r + k
			run, err := purgeRun(ctx, c, leader, s3, proxy, cl, feed, ns, names[i], locs[i], mode, sz.StartFiles)
			if err != nil {
				return err
			}
			db.Start = append(db.Start, run)
			log.Info("item 9: purge", "mode", mode, "files", run.Files, "drop_ms", ms(run.Drop), "running_ms", ms(run.Running),
				"done_ms", ms(run.Done), "node", run.Node, "delete_objects", run.S3.DeleteObjects, "gets", run.S3.Get, "left", run.Left)
		}
	}
	w1, err := metricSums(ctx, cl, c.Nodes, metricPurgeWakes)
	if err != nil {
		return err
	}
	db.Wakes = w1[metricPurgeWakes] - w0[metricPurgeWakes]
	return nil
}

// dropsLarge purges a table of the largest size async, sampling every
// node's RSS until the job SUCCEEDED.
func dropsLarge(ctx context.Context, c *Cluster, leader *harness.Node, s3 *S3Server, proxy *s3CountingProxy, cl *http.Client, feed *purgeFeed,
	db *DropsBench, sz Sizes, log *slog.Logger) error {
	const ns = "large"
	files := 0
	for _, f := range sz.DropLatFiles {
		files = max(files, f)
	}
	t0 := time.Now()
	loc, err := buildTable(ctx, leader, s3, ns, "t0", files, s3.bulkWriteObjects)
	if err != nil {
		return err
	}
	log.Info("item 9: largest table built", "files", files, "s", fmt.Sprintf("%.1f", time.Since(t0).Seconds()))
	before := map[string]int64{}
	samplers := map[string]*rssSampler{}
	for _, n := range c.Nodes {
		if pid := n.Pid(); pid > 0 {
			if m, err := procMemory(pid); err == nil {
				before[n.ID] = m.RSS
				samplers[n.ID] = sampleRSS(pid)
			}
		}
	}
	run, err := purgeRun(ctx, c, leader, s3, proxy, cl, feed, ns, "t0", loc, "async", files)
	peaks := map[string]int64{}
	counts := map[string]int{}
	for id, s := range samplers {
		peaks[id], counts[id] = s.finish()
	}
	if err != nil {
		return err
	}
	db.Large = run
	db.LargeRSSBefore, db.LargeRSSPeak, db.LargeRSSSamples = before[run.Node], peaks[run.Node], counts[run.Node]
	log.Info("item 9: largest purge", "files", files, "done_ms", ms(run.Done), "node", run.Node,
		"rss_before", mib(db.LargeRSSBefore), "rss_peak", mib(db.LargeRSSPeak), "left", run.Left)
	return nil
}

// registerCopies writes n copies of the metadata file at src, each with
// its own location (a sibling of the source's) and table UUID, and
// registers them as ns.<prefix>_0000…: tables whose snapshot is the
// source's (same manifest list, same manifests, same data files) without
// writing any of those again.
func registerCopies(ctx context.Context, cl *http.Client, base string, objects *storage.Mux, src loadedTable, ns, prefix string, n int) ([]string, error) {
	raw, err := objects.Read(ctx, src.MetadataLocation)
	if err != nil {
		return nil, err
	}
	parent := src.Metadata.Location[:strings.LastIndexByte(strings.TrimSuffix(src.Metadata.Location, "/"), '/')]
	names := make([]string, n)
	err = parallel(ctx, n, dropsRegisterers, func(ctx context.Context, i int) error {
		names[i] = fmt.Sprintf("%s_%04d", prefix, i)
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber() // snapshot ids are 64-bit
		var meta map[string]any
		if err := dec.Decode(&meta); err != nil {
			return err
		}
		loc := parent + "/" + names[i]
		meta["location"] = loc
		meta["table-uuid"] = uuid.NewString()
		b, err := json.Marshal(meta)
		if err != nil {
			return err
		}
		ml := fmt.Sprintf("%s/metadata/00000-%s.metadata.json", loc, uuid.NewString())
		if err := objects.Write(ctx, ml, b); err != nil {
			return err
		}
		st, rb, err := doRequest(ctx, cl, http.MethodPost, base+"/v1/namespaces/"+ns+"/register",
			map[string]any{"name": names[i], "metadata-location": ml})
		return expect("register "+ns+"."+names[i], http.StatusOK, st, rb, err)
	})
	return names, err
}

// dropsLatency measures async drop latency as a distribution at each size,
// the sizes interleaved, under a background commit load.
func dropsLatency(ctx context.Context, leader *harness.Node, s3 *S3Server, cl *http.Client, feed *purgeFeed,
	db *DropsBench, sz Sizes, log *slog.Logger) error {
	const ns, bgNS = "lat", "bg"
	objects, err := s3.Storage()
	if err != nil {
		return err
	}
	copies := make([][]string, len(sz.DropLatFiles))
	for k, files := range sz.DropLatFiles {
		t0 := time.Now()
		src := fmt.Sprintf("src%d", files)
		// The source's data files are never read or deleted (they lie
		// outside every copy's location), so none are written.
		if _, err := buildTable(ctx, leader, s3, ns, src, files, nil); err != nil {
			return err
		}
		lt, err := loadTableAt(ctx, leader.BaseURL(), ns, src)
		if err != nil {
			return err
		}
		if copies[k], err = registerCopies(ctx, cl, leader.BaseURL(), objects, lt, ns, fmt.Sprintf("c%d", files), sz.DropLatN); err != nil {
			return err
		}
		db.Lat = append(db.Lat, DropLatencySize{Files: files})
		log.Info("item 9: copies registered", "files", files, "copies", sz.DropLatN, "s", fmt.Sprintf("%.1f", time.Since(t0).Seconds()))
	}
	bgTables, _, err := createTables(ctx, leader.BaseURL(), bgNS, dropsBgTables*sz.DropLatClients)
	if err != nil {
		return err
	}
	if db.LoadQuiet, _, err = commitLoad(ctx, bgNS, bgTables, sz.DropLatClients, sz.DropLatQuiet,
		func(int, int) string { return leader.BaseURL() }, nil); err != nil {
		return fmt.Errorf("background commits alone: %w", err)
	}
	log.Info("item 9: background commits alone", "clients", sz.DropLatClients, "per_s", fmt.Sprintf("%.0f", db.LoadQuiet.PerSecond()),
		"p50_ms", ms(db.LoadQuiet.P50), "p99_ms", ms(db.LoadQuiet.P99))

	httpc := make([]*http.Client, sz.DropLatClients)
	for i := range httpc {
		httpc[i] = harness.NewHTTPClient(2, 0)
		defer httpc[i].CloseIdleConnections()
	}
	per := max(1, len(bgTables)/sz.DropLatClients)
	bg, err := startLoad(ctx, sz.DropLatClients, 2, func(ctx context.Context, i, j int) error {
		t := bgTables[(i+(j%per)*sz.DropLatClients)%len(bgTables)]
		st, body, err := commitURL(ctx, httpc[i], leader.BaseURL()+tablePath(bgNS, t), "", 1_000_000+j)
		if err != nil {
			return err
		}
		if st != http.StatusOK {
			return fmt.Errorf("commit to %s: status %d, body %s", t, st, body)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("background commits: %w", err)
	}
	dcl := harness.NewHTTPClient(2, 0)
	defer dcl.CloseIdleConnections()
	t0 := time.Now()
	var dropErr error
drops:
	for i := range sz.DropLatN {
		for k := range sz.DropLatFiles {
			name := copies[k][i]
			d0 := time.Now()
			st, rb, err := doRequest(ctx, dcl, http.MethodDelete, dropURL(leader, ns, name), nil, asyncHeaders...)
			d := time.Since(d0)
			if err := expect("async drop of "+ns+"."+name, http.StatusNoContent, st, rb, err); err != nil {
				dropErr = err
				break drops
			}
			db.Lat[k].Drops = append(db.Lat[k].Drops, d)
		}
	}
	db.LatWindow = time.Since(t0)
	db.LoadDuring = bg.stop()
	if dropErr != nil {
		return dropErr
	}
	db.LatJobsQueued = len(sz.DropLatFiles) * sz.DropLatN
	for k := range sz.DropLatFiles {
		for _, name := range copies[k] {
			if _, ok := feed.seen(ns, name, fsm.JobSucceeded); ok {
				db.LatJobsDone++
			}
		}
	}
	for _, l := range db.Lat {
		log.Info("item 9: async drop latency", "files", l.Files, "n", len(l.Drops), "p50_ms", ms(percentile(l.Drops, 0.5)),
			"p99_ms", ms(percentile(l.Drops, 0.99)), "max_ms", ms(percentile(l.Drops, 1)))
	}
	log.Info("item 9: background commits during the drops", "per_s", fmt.Sprintf("%.0f", db.LoadDuring.PerSecond()),
		"p50_ms", ms(db.LoadDuring.P50), "p99_ms", ms(db.LoadDuring.P99), "errors", db.LoadDuring.Errors,
		"purges_done", db.LatJobsDone, "of", db.LatJobsQueued)
	return nil
}

// dropsThroughput creates TputClients×TputPerClient empty tables and has
// TputClients clients drop their own with purge (async), all at once.
func dropsThroughput(ctx context.Context, c *Cluster, ns string, db *DropsBench, sz Sizes, log *slog.Logger) error {
	leader, err := c.Leader(ctx)
	if err != nil {
		return err
	}
	feed, err := followPurgeFeed(ctx, leader)
	if err != nil {
		return err
	}
	defer feed.stop()
	clients, per := sz.DropTputClients, sz.DropTputPerClient
	t0 := time.Now()
	tables, _, err := createTables(ctx, leader.BaseURL(), ns, clients*per)
	if err != nil {
		return err
	}
	log.Info("item 9: throughput tables created", "tables", len(tables), "s", fmt.Sprintf("%.1f", time.Since(t0).Seconds()))
	httpc := make([]*http.Client, clients)
	for i := range httpc {
		httpc[i] = harness.NewHTTPClient(2, 0)
		defer httpc[i].CloseIdleConnections()
	}
	type clientRes struct {
		lat      []time.Duration
		errs     int
		firstErr string
	}
	res := make([]clientRes, clients)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			<-start
			cr := &res[i]
			for j := range per {
				name := tables[j*clients+i]
				d0 := time.Now()
				st, rb, err := doRequest(ctx, httpc[i], http.MethodDelete, dropURL(leader, ns, name), nil, asyncHeaders...)
				d := time.Since(d0)
				if err = expect("async drop of "+ns+"."+name, http.StatusNoContent, st, rb, err); err != nil {
					cr.errs++
					if cr.firstErr == "" {
						cr.firstErr = err.Error()
					}
					continue
				}
				cr.lat = append(cr.lat, d)
			}
		})
	}
	mcl := harness.NewHTTPClient(1, 0)
	defer mcl.CloseIdleConnections()
	ci0, ciErr := metricValue(ctx, mcl, leader, "floe_raft_commit_index")
	cpu0 := c.clusterCPU()
	m0 := readMachineCPU()
	t0 = time.Now()
	close(start)
	wg.Wait()
	r := LoadResult{Clients: clients, Elapsed: time.Since(t0), Machine: machineLoadSince(m0), CPU: c.clusterCPU() - cpu0}
	var lat []time.Duration
	for _, cr := range res {
		r.OK += len(cr.lat)
		r.Errors += cr.errs
		if r.FirstError == "" {
			r.FirstError = cr.firstErr
		}
		lat = append(lat, cr.lat...)
	}
	r.P50, r.P99 = percentile(lat, 0.5), percentile(lat, 0.99)
	db.Tput = r
	log.Info("item 9: drop throughput", "clients", clients, "drops", r.OK, "per_s", fmt.Sprintf("%.0f", r.PerSecond()),
		"p50_ms", ms(r.P50), "p99_ms", ms(r.P99), "errors", r.Errors, "first_error", r.FirstError)
	if r.Errors > 0 {
		return fmt.Errorf("%d of %d drops failed, first: %s", r.Errors, clients*per, r.FirstError)
	}
	// How far the purges got behind the drops.
	last := time.Now()
	deadline := last.Add(sz.DropDrainWait)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if db.TputDrained = feed.count(ns, fsm.JobSucceeded); db.TputDrained == len(tables) {
			db.TputDrainTime = time.Since(last)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	db.TputDrainSpan = time.Since(t0)
	if ci1, err := metricValue(ctx, mcl, leader, "floe_raft_commit_index"); ciErr == nil && err == nil && ci1 > ci0 {
		db.TputEntries = uint64(ci1 - ci0)
	}
	log.Info("item 9: purge jobs after the drops", "succeeded", db.TputDrained, "of", len(tables), "wait", sz.DropDrainWait,
		"log_entries", db.TputEntries, "entries_per_purge", fmt.Sprintf("%.2f", db.EntriesPerPurge()))
	return ctx.Err()
}

// logTime returns the time of the last line of the node log at path that
// holds every one of subs (a text-format slog line: time=RFC3339 first).
func logTime(path string, subs ...string) (time.Time, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return time.Time{}, false
	}
	var at time.Time
	found := false
lines:
	for _, line := range strings.Split(string(b), "\n") {
		for _, sub := range subs {
			if !strings.Contains(line, sub) {
				continue lines
			}
		}
		rest, ok := strings.CutPrefix(line, "time=")
		if !ok {
			continue
		}
		ts, _, _ := strings.Cut(rest, " ")
		if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
			at, found = t, true
		}
	}
	return at, found
}
