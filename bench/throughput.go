package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/floe-catalog/floe/catalog"
	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/harness"
	"github.com/floe-catalog/floe/internal/storage"
)

// throughputTablesPerClient: each client commits only to its own tables
// (table index ≡ client mod clients), so no two clients race for one
// table's compare-and-set and the figure is the commit path, not conflicts.
const throughputTablesPerClient = 4

// Rows of item 1, in the order they run and are reported.
const (
	TputRaw         = "raw hashicorp/raft, no-op entries, discard state machine"
	TputRawFloeFSM  = "raw hashicorp/raft + floe's state machine (fsm.Noop entries)"
	TputMetaWrites  = "metadata file writes alone (internal/storage, file://, no Raft)"
	TputFloeInProc  = "floe in-process, one node (no replication, no process boundary)"
	TputFloeInMem   = "floe in-process, one node, metadata files in memory (diagnostic: not durable)"
	TputFloeLeader  = "floe, 3 nodes, REST commits to the leader"
	TputFloeRR      = "floe, 3 nodes, REST commits round-robin over all nodes"
	tputProfileFile = "commits-inprocess.pprof"
)

// ThroughputRow is one closed-loop measurement of item 1.
type ThroughputRow struct {
	Label   string
	Clients int
	Result  LoadResult // Result.CPU: see CPUOf
	CPUOf   string     // which processes Result.CPU covers
	// DriverCPU is the driver's CPU time (the load clients) over a row
	// whose Result.CPU covers other processes.
	DriverCPU time.Duration
	// Conflicts counts commits answered 409 (none are expected).
	Conflicts int
	// Leader is the leader process's own CPU over a 3-node row (to the
	// leader, or round-robin), split into user space and the kernel; zero
	// for the in-process and raw rows.
	Leader CPUSplit
}

// LeaderPerOp is the leader's CPU per successful operation.
func (r ThroughputRow) LeaderPerOp() CPUSplit {
	if r.Result.OK == 0 {
		return CPUSplit{}
	}
	n := time.Duration(r.Result.OK)
	return CPUSplit{User: r.Leader.User / n, System: r.Leader.System / n}
}

// CommitThroughput is item 1: table commits through the REST API of a
// 3-node cluster against no-op entries of the same size through a raw Raft
// cluster built from the same parts, at each client count, plus the rows
// that split floe's commit into its parts.
type CommitThroughput struct {
	EntryBytes    int // encoded CommitTables entry of one commit (= each no-op)
	MetadataBytes int // metadata file written by one commit, at its start
	// MetadataBytesEnd is the metadata file's size after the floe rows:
	// the size the "metadata file writes alone" row writes.
	MetadataBytesEnd int
	Tables           int
	Duration         time.Duration
	Rows             []ThroughputRow
	// ProfilePath is the CPU profile of the in-process row at the most
	// clients (kept only when SuiteOptions.ProfileDir is set); Profile is
	// what it says about where that row's CPU went.
	ProfilePath  string
	Profile      []ProfileShare
	ProfileTotal time.Duration
}

// Row returns the row with label and clients, ok false when absent.
func (ct *CommitThroughput) Row(label string, clients int) (ThroughputRow, bool) {
	for _, r := range ct.Rows {
		if r.Label == label && r.Clients == clients {
			return r, true
		}
	}
	return ThroughputRow{}, false
}

// commitEntrySize is the encoded size of the CommitTables entry floe
// proposes for a set-properties commit on t.
func commitEntrySize(ns, name string, t loadedTable) (int, error) {
	next := t.MetadataLocation
	if i := strings.LastIndexByte(next, '/'); i >= 0 {
		next = next[:i+1] + fmt.Sprintf("%05d-%s.metadata.json", 1, uuid.NewString())
	}
	b, err := fsm.Encode(fsm.CommitTables{
		Changes: []fsm.TableChange{{
			Kind: fsm.ChangeUpdate, Ident: fsm.Ident{Namespace: []string{ns}, Name: name},
			ExpectedMetadataLocation: t.MetadataLocation, ExpectedUUID: t.Metadata.UUID,
			MetadataLocation: next, Location: t.Metadata.Location, UUID: t.Metadata.UUID,
		}},
		AtMs: time.Now().UnixMilli(),
	})
	return len(b), err
}

// rawThroughput applies entry through the leader of a fresh raw cluster of
// kind under dir, with clients concurrent appliers, for dur.
func rawThroughput(ctx context.Context, dir string, kind RawFSM, entry []byte, clients int, dur time.Duration, log *slog.Logger) (LoadResult, error) {
	rc, err := StartRawCluster(ctx, dir, ClusterSize, kind, log)
	if err != nil {
		return LoadResult{}, fmt.Errorf("raw raft cluster: %w", err)
	}
	defer rc.Stop()
	leader, err := rc.Leader(ctx)
	if err != nil {
		return LoadResult{}, err
	}
	return runLoad(ctx, clients, dur, 5, func(ctx context.Context, _, _ int) error {
		f := leader.Apply(entry, writeTimeout)
		if err := f.Error(); err != nil {
			return err
		}
		if r, ok := f.Response().(fsm.Result); ok && r.Err() != nil {
			return r.Err()
		}
		return nil
	}, func() time.Duration { return procCPU(0) })
}

// metadataWriteThroughput writes new files of size bytes through floe's
// storage layer into a file:// warehouse under dir, the way a commit writes
// its metadata file (temporary file, fsync, rename, directory fsync), each
// client into its own tables' metadata directories.
func metadataWriteThroughput(ctx context.Context, dir string, size, tables, clients int, dur time.Duration) (LoadResult, error) {
	objects, err := storage.New(storage.Config{})
	if err != nil {
		return LoadResult{}, err
	}
	data := []byte(strings.Repeat("x", size))
	base := "file://" + filepath.ToSlash(dir)
	per := max(1, tables/clients)
	return runLoad(ctx, clients, dur, 2, func(ctx context.Context, i, j int) error {
		t := (i + (j%per)*clients) % tables
		uri := fmt.Sprintf("%s/ns/t%05d/metadata/%05d-%s.metadata.json", base, t, j, uuid.NewString())
		return objects.Write(ctx, uri, data)
	}, func() time.Duration { return procCPU(0) })
}

// commitLoad runs clients closed-loop committers for dur. Client i commits
// set-properties to its own tables (i, i+clients, …) and sends its j-th
// commit to target(i, j), a node's base URL.
func commitLoad(ctx context.Context, ns string, tables []string, clients int, dur time.Duration, target func(i, j int) string, cpu func() time.Duration) (LoadResult, int, error) {
	per := max(1, len(tables)/clients)
	httpc := make([]*http.Client, clients)
	for i := range httpc {
		httpc[i] = harness.NewHTTPClient(4, 0)
		defer httpc[i].CloseIdleConnections()
	}
	conflicts := make([]int, clients)
	res, err := runLoad(ctx, clients, dur, 2, func(ctx context.Context, i, j int) error {
		t := tables[(i+(j%per)*clients)%len(tables)]
		base := target(i, j)
		st, body, err := commitURL(ctx, httpc[i], base+tablePath(ns, t), "", j)
		if err != nil {
			return err
		}
		if st != http.StatusOK {
			if st == http.StatusConflict {
				conflicts[i]++
			}
			return fmt.Errorf("commit to %s via %s: status %d, body %s", t, base, st, body)
		}
		return nil
	}, cpu)
	n := 0
	for _, x := range conflicts {
		n += x
	}
	return res, n, err
}

// createTables creates ns and n tables t00000… through base.
func createTables(ctx context.Context, base, ns string, n int) ([]string, loadedTable, error) {
	cl := harness.NewHTTPClient(16, 0)
	defer cl.CloseIdleConnections()
	if err := ensureNamespace(ctx, cl, base, ns); err != nil {
		return nil, loadedTable{}, err
	}
	names := make([]string, n)
	var first loadedTable
	err := parallel(ctx, n, 16, func(ctx context.Context, i int) error {
		names[i] = fmt.Sprintf("t%05d", i)
		lt, err := createTableAt(ctx, cl, base, ns, names[i])
		if i == 0 {
			first = lt
		}
		return err
	})
	return names, first, err
}

// runCommitThroughput runs item 1. The floe cluster is started first only
// to create the tables and learn the size of a commit's log entry; it is
// stopped while the in-process rows run (so they do not share the CPUs with
// its idle heartbeats), resumed for its own rows and stopped again for the
// metadata-write row, which writes files of the size the commits reached.
func runCommitThroughput(ctx context.Context, o *SuiteOptions, dir string) (*CommitThroughput, error) {
	log := o.log()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	dur := o.Sizes.CommitDuration
	ct := &CommitThroughput{Duration: dur}
	maxClients := 0
	for _, n := range o.Sizes.CommitClients {
		maxClients = max(maxClients, n)
	}
	ct.Tables = throughputTablesPerClient * maxClients
	add := func(label string, clients int, res LoadResult, cpuOf string, conflicts int, err error) error {
		if err != nil {
			return fmt.Errorf("%s, %d clients: %w", label, clients, err)
		}
		ct.Rows = append(ct.Rows, ThroughputRow{Label: label, Clients: clients, Result: res, CPUOf: cpuOf, Conflicts: conflicts})
		log.Info("item 1", "row", label, "clients", clients, "per_s", fmt.Sprintf("%.0f", res.PerSecond()),
			"p50_ms", ms(res.P50), "p99_ms", ms(res.P99), "cpu_per_op_ms", ms(res.CPUPerOp()), "errors", res.Errors, "first_error", res.FirstError)
		return nil
	}

	log.Info("item 1: starting a floe cluster to create the tables")
	c, err := startCluster(ctx, harness.ClusterConfig{Bin: o.Floe, Dir: filepath.Join(dir, "floe"), Size: ClusterSize}, log)
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	leader, err := c.Leader(ctx)
	if err != nil {
		return nil, err
	}
	const ns = "tput"
	tables, first, err := createTables(ctx, leader.BaseURL(), ns, ct.Tables)
	if err != nil {
		return nil, err
	}
	if ct.EntryBytes, err = commitEntrySize(ns, tables[0], first); err != nil {
		return nil, err
	}
	probe, err := storage.New(storage.Config{})
	if err != nil {
		return nil, err
	}
	meta, err := probe.Read(ctx, first.MetadataLocation)
	if err != nil {
		return nil, err
	}
	ct.MetadataBytes = len(meta)
	entry, err := NoopOfSize(ct.EntryBytes)
	if err != nil {
		return nil, err
	}
	log.Info("item 1: tables ready; stopping the floe cluster while the in-process rows run",
		"tables", len(tables), "entry_bytes", ct.EntryBytes, "noop_bytes", len(entry), "metadata_bytes", ct.MetadataBytes)
	c.Stop()

	for _, clients := range o.Sizes.CommitClients {
		for _, kind := range []RawFSM{RawDiscard, RawFloeFSM} {
			label := TputRaw
			if kind == RawFloeFSM {
				label = TputRawFloeFSM
			}
			res, err := rawThroughput(ctx, filepath.Join(dir, fmt.Sprintf("raw-%d-%d", kind, clients)), kind, entry, clients, dur, quiet)
			if err := add(label, clients, res, "driver (3 Raft nodes + clients)", 0, err); err != nil {
				return ct, err
			}
		}
		res, conflicts, err := inProcessCommits(ctx, o, filepath.Join(dir, fmt.Sprintf("inproc-%d", clients)), ct, clients, nil, clients == maxClients)
		if err := add(TputFloeInProc, clients, res, "driver (node + clients)", conflicts, err); err != nil {
			return ct, err
		}
		res, conflicts, err = inProcessCommits(ctx, o, filepath.Join(dir, fmt.Sprintf("inmem-%d", clients)), ct, clients, newMemObjects(), false)
		if err := add(TputFloeInMem, clients, res, "driver (node + clients)", conflicts, err); err != nil {
			return ct, err
		}
	}

	log.Info("item 1: resuming the floe cluster")
	if err := c.resume(ctx); err != nil {
		return ct, err
	}
	if leader, err = c.Leader(ctx); err != nil {
		return ct, err
	}
	// clusterCPU for commitLoad, which calls it at the start signal and at
	// the end; it also samples the leader's own CPU at those two points.
	var lead []CPUSplit
	cpu := func() time.Duration {
		lead = append(lead, procCPUSplit(leader.Pid()))
		return c.clusterCPU()
	}
	leaderCPU := func() CPUSplit {
		defer func() { lead = nil }()
		if len(lead) != 2 {
			return CPUSplit{}
		}
		return lead[1].Sub(lead[0])
	}
	for _, clients := range o.Sizes.CommitClients {
		d0 := procCPU(0)
		res, conflicts, err := commitLoad(ctx, ns, tables, clients, dur, func(int, int) string { return leader.BaseURL() }, cpu)
		if err := add(TputFloeLeader, clients, res, "3 floe processes", conflicts, err); err != nil {
			return ct, err
		}
		ct.Rows[len(ct.Rows)-1].DriverCPU = procCPU(0) - d0
		ct.Rows[len(ct.Rows)-1].Leader = leaderCPU()
		if clients != maxClients {
			continue
		}
		d0 = procCPU(0)
		res, conflicts, err = commitLoad(ctx, ns, tables, clients, dur, func(i, j int) string {
			return c.Nodes[(i+j)%len(c.Nodes)].BaseURL()
		}, cpu)
		if err := add(TputFloeRR, clients, res, "3 floe processes", conflicts, err); err != nil {
			return ct, err
		}
		ct.Rows[len(ct.Rows)-1].DriverCPU = procCPU(0) - d0
		ct.Rows[len(ct.Rows)-1].Leader = leaderCPU()
	}

	// The metadata file alone, at the size the commits above left it (the
	// largest a commit wrote), with the cluster stopped.
	lt, err := loadTableAt(ctx, leader.BaseURL(), ns, tables[0])
	if err != nil {
		return ct, err
	}
	if meta, err = probe.Read(ctx, lt.MetadataLocation); err != nil {
		return ct, err
	}
	ct.MetadataBytesEnd = len(meta)
	c.Stop()
	for _, clients := range o.Sizes.CommitClients {
		res, err := metadataWriteThroughput(ctx, filepath.Join(dir, fmt.Sprintf("meta-%d", clients)), ct.MetadataBytesEnd, ct.Tables, clients, dur)
		if err := add(TputMetaWrites, clients, res, "driver", 0, err); err != nil {
			return ct, err
		}
	}
	// Report the rows per client count in a fixed order.
	order := map[string]int{TputRaw: 0, TputRawFloeFSM: 1, TputMetaWrites: 2, TputFloeInProc: 3, TputFloeInMem: 4, TputFloeLeader: 5, TputFloeRR: 6}
	slices.SortStableFunc(ct.Rows, func(a, b ThroughputRow) int {
		if a.Clients != b.Clients {
			return a.Clients - b.Clients
		}
		return order[a.Label] - order[b.Label]
	})
	return ct, nil
}

// loadTableAt loads ns.name through base.
func loadTableAt(ctx context.Context, base, ns, name string) (loadedTable, error) {
	var lt loadedTable
	cl := harness.NewHTTPClient(1, 0)
	defer cl.CloseIdleConnections()
	st, rb, err := doRequest(ctx, cl, http.MethodGet, base+tablePath(ns, name), nil)
	if err := expect("load "+ns+"."+name, http.StatusOK, st, rb, err); err != nil {
		return lt, err
	}
	err = json.Unmarshal(rb, &lt)
	return lt, err
}

// inProcessCommits runs the commit load against one floe node inside this
// process (same tables), CPU-profiled when profile is set and a profile
// directory was given.
func inProcessCommits(ctx context.Context, o *SuiteOptions, dir string, ct *CommitThroughput, clients int, objects catalog.Objects, profile bool) (LoadResult, int, error) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	p, err := startInProcessNodeWith(ctx, dir, quiet, objects, catalog.Config{})
	if err != nil {
		return LoadResult{}, 0, err
	}
	defer p.stop()
	const ns = "tput"
	tables, _, err := createTables(ctx, p.urls[0], ns, ct.Tables)
	if err != nil {
		return LoadResult{}, 0, err
	}
	if !profile {
		return commitLoad(ctx, ns, tables, clients, ct.Duration, func(int, int) string { return p.urls[0] }, func() time.Duration { return procCPU(0) })
	}
	path := filepath.Join(dir, tputProfileFile)
	if o.ProfileDir != "" {
		path = filepath.Join(o.ProfileDir, tputProfileFile)
		ct.ProfilePath = path
	}
	f, err := createFile(path)
	if err != nil {
		return LoadResult{}, 0, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return LoadResult{}, 0, err
	}
	res, conflicts, err := commitLoad(ctx, ns, tables, clients, ct.Duration, func(int, int) string { return p.urls[0] }, func() time.Duration { return procCPU(0) })
	pprof.StopCPUProfile()
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err == nil {
		ct.Profile, ct.ProfileTotal, err = profileShares(path, commitProfileFrames)
	}
	return res, conflicts, err
}

// memObjects keeps files in memory: the diagnostic row that takes the
// durable metadata write out of floe's commit path. Never durable.
type memObjects struct {
	mu sync.RWMutex
	m  map[string][]byte
}

func newMemObjects() *memObjects { return &memObjects{m: map[string][]byte{}} }

func (o *memObjects) Write(_ context.Context, uri string, data []byte) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.m[uri] = slices.Clone(data)
	return nil
}

func (o *memObjects) Read(_ context.Context, uri string) ([]byte, error) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	b, ok := o.m[uri]
	if !ok {
		return nil, fmt.Errorf("%s: %w", uri, storage.ErrNotFound)
	}
	return slices.Clone(b), nil
}

func (o *memObjects) Delete(_ context.Context, uris []string) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, u := range uris {
		delete(o.m, u)
	}
	return len(uris), nil
}

func (o *memObjects) ClientConfig(string) map[string]string { return map[string]string{} }
