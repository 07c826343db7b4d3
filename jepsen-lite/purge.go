package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go/table"

	iceio "github.com/apache/iceberg-go/io"
	_ "github.com/apache/iceberg-go/io/gocloud/s3" // S3 FileIO for data files and the reachability walk
)

// purgeNamespace holds the purge workload's tables.
const purgeNamespace = "jepsen_purge"

// asyncPurgeHeader asks for an asynchronous purge: the drop answers once the
// job is recorded, a worker deletes the files later.
const asyncPurgeHeader = "X-Gravitino-Async-Purge"

// purgeWorkload creates tables with real Parquet data (written by iceberg-go
// straight to the S3 server, committed through floe with Idempotency-Keys),
// drops them with purgeRequested=true (asynchronously or synchronously, at
// random) and at once tries to create the same name again, whose default
// location is the same directory: the purge must delete the old
// incarnation's files and only those.
//
// Each worker owns a few names, so no two clients commit to one table; the
// files reachable from a table's metadata just before its drop are what the
// purge must delete.
type purgeWorkload struct {
	api       *api
	hist      *history
	s3        *s3Server
	anomalies *anomalies
	names     int  // per worker
	jobsAPI   bool // false: the build has no purge-job API; sync purge only

	mu      sync.Mutex
	dropped []droppedTable
	// live holds the purge workload's tables known to exist: added when a
	// create is acknowledged (or a load finds the table), refreshed after
	// each append, removed before the drop is sent. The overlap workload
	// picks its targets here.
	live map[string]tableRef

	created, refused, appends, appendFailed, appendUnknown, drops, dropsAsync, dropsUnknown atomic.Int64
}

// purgeLoad is a LoadTableResult with the metadata kept raw for iceberg-go.
type purgeLoad struct {
	MetadataLocation string          `json:"metadata-location"`
	Metadata         json.RawMessage `json:"metadata"`
}

type incarnation struct {
	name string
	tbl  *table.Table
}

// tableRef names one incarnation of a table and where it lives.
type tableRef struct {
	Namespace        string `json:"namespace"`
	Name             string `json:"name"`
	UUID             string `json:"uuid"`
	Location         string `json:"location"`
	MetadataLocation string `json:"metadata-location"`
}

func refOf(tbl *table.Table) tableRef {
	id := tbl.Identifier()
	return tableRef{Namespace: id[0], Name: id[len(id)-1], UUID: tbl.Metadata().TableUUID().String(),
		Location: tbl.Location(), MetadataLocation: tbl.MetadataLocation()}
}

var errUnknownOutcome = errors.New("commit outcome unknown")

// keyedCatalog is the table.CatalogIO iceberg-go commits through: every
// commit is a keyed mutation with retries on other nodes (api.mutate).
type keyedCatalog struct {
	w   *purgeWorkload
	rng *rand.Rand
}

func (c *keyedCatalog) LoadTable(ctx context.Context, ident table.Identifier) (*table.Table, error) {
	tbl, status, err := c.w.load(ctx, c.rng, ident[0], ident[len(ident)-1], c)
	if err == nil && tbl == nil {
		err = fmt.Errorf("load %v: %d", ident, status)
	}
	return tbl, err
}

func (c *keyedCatalog) CommitTable(ctx context.Context, ident table.Identifier, reqs []table.Requirement, updates []table.Update) (table.Metadata, string, error) {
	ns, name := ident[0], ident[len(ident)-1]
	body, err := json.Marshal(struct {
		Requirements []table.Requirement `json:"requirements"`
		Updates      []table.Update      `json:"updates"`
	}{reqs, updates})
	if err != nil {
		return nil, "", err
	}
	m := c.w.api.mutate(ctx, c.rng, newKey(), http.MethodPost, tablePath(ns, name), body, nil)
	switch {
	case !m.definite:
		return nil, "", fmt.Errorf("%w: %d %v", errUnknownOutcome, m.last.status, m.last.err)
	case m.last.status == http.StatusOK:
		var pl purgeLoad
		if err := json.Unmarshal(m.last.body, &pl); err != nil {
			return nil, "", err
		}
		meta, err := table.ParseMetadataBytes(pl.Metadata)
		return meta, pl.MetadataLocation, err
	case m.last.status == http.StatusConflict:
		return nil, "", fmt.Errorf("%w: %s", table.ErrCommitFailed, truncate(string(m.last.body), 200))
	default:
		c.w.anomalies.add("commit %s.%s: %d %s", ns, name, m.last.status, truncate(string(m.last.body), 200))
		return nil, "", fmt.Errorf("commit %s: %d", name, m.last.status)
	}
}

func (w *purgeWorkload) fsF(location string) table.FSysF {
	props := w.s3.fileIOProps()
	return func(ctx context.Context) (iceio.IO, error) { return iceio.LoadFS(ctx, props, location) }
}

func (w *purgeWorkload) incarnationFrom(ns, name string, pl purgeLoad, cat table.CatalogIO) (*table.Table, error) {
	meta, err := table.ParseMetadataBytes(pl.Metadata)
	if err != nil {
		return nil, err
	}
	return table.New(table.Identifier{ns, name}, meta, pl.MetadataLocation, w.fsF(meta.Location()), cat), nil
}

// load reads ns.name from a random node: the table, or nil with the status
// (404: not there).
func (w *purgeWorkload) load(ctx context.Context, rng *rand.Rand, ns, name string, cat table.CatalogIO) (*table.Table, int, error) {
	var r reply
	for range 4 {
		r = w.api.read(ctx, rng, tablePath(ns, name))
		if !r.unknown() {
			break
		}
	}
	if r.status != http.StatusOK {
		return nil, r.status, nil
	}
	var pl purgeLoad
	if err := json.Unmarshal(r.body, &pl); err != nil {
		return nil, r.status, err
	}
	tbl, err := w.incarnationFrom(ns, name, pl, cat)
	return tbl, r.status, err
}

// setLive records tbl as an existing table of the purge workload (nil: no
// change).
func (w *purgeWorkload) setLive(tbl *table.Table) {
	if tbl == nil {
		return
	}
	ref := refOf(tbl)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.live == nil {
		w.live = map[string]tableRef{}
	}
	w.live[ref.Name] = ref
}

func (w *purgeWorkload) unsetLive(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.live, name)
}

// pickLive returns a random table of the purge workload known to exist.
func (w *purgeWorkload) pickLive(rng *rand.Rand) (tableRef, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.live) == 0 {
		return tableRef{}, false
	}
	names := sortedKeys(w.live)
	return w.live[names[rng.IntN(len(names))]], true
}

func (w *purgeWorkload) setup(ctx context.Context, rng *rand.Rand) error {
	return createNamespace(ctx, w.api, rng, purgeNamespace)
}

func (w *purgeWorkload) run(ctx, opCtx context.Context, clients int, seed uint64) {
	var wg sync.WaitGroup
	for c := range clients {
		rng := rand.New(rand.NewPCG(seed, uint64(2000+c)))
		wg.Go(func() { w.worker(ctx, opCtx, c, rng) })
	}
	wg.Wait()
}

func (w *purgeWorkload) worker(ctx, opCtx context.Context, client int, rng *rand.Rand) {
	cat := &keyedCatalog{w: w, rng: rng}
	cur := map[string]*table.Table{}
	for range 100_000 {
		if ctx.Err() != nil {
			return
		}
		name := fmt.Sprintf("c%d_t%d", client, rng.IntN(w.names))
		tbl := cur[name]
		switch {
		case tbl == nil:
			cur[name] = w.create(opCtx, rng, name, cat)
		case rng.Float64() < 0.6:
			cur[name] = w.appendRows(opCtx, rng, tbl)
		default:
			cur[name] = nil
			w.drop(opCtx, rng, purgeNamespace, name, cat, rng.IntN(2) == 0)
			if rng.Float64() < 0.7 {
				cur[name] = w.create(opCtx, rng, name, cat)
			}
		}
		w.setLive(cur[name])
	}
}

// create creates name; on an unknown outcome or "already exists" it loads
// whatever is there. 409 naming a purge is counted as a refusal.
func (w *purgeWorkload) create(ctx context.Context, rng *rand.Rand, name string, cat table.CatalogIO) *table.Table {
	body, _ := json.Marshal(map[string]any{"name": name, "schema": tableSchema})
	m := w.api.mutate(ctx, rng, newKey(), http.MethodPost, "/v1/namespaces/"+purgeNamespace+"/tables", body, nil)
	if m.definite && m.last.status == http.StatusOK {
		var pl purgeLoad
		if err := json.Unmarshal(m.last.body, &pl); err == nil {
			if tbl, err := w.incarnationFrom(purgeNamespace, name, pl, cat); err == nil {
				w.created.Add(1)
				return tbl
			}
		}
	}
	if m.definite && m.last.status == http.StatusConflict && strings.Contains(strings.ToLower(string(m.last.body)), "purg") {
		w.refused.Add(1)
		// The purge takes a moment: do not spin on the refusal.
		time.Sleep(time.Duration(100+rng.IntN(200)) * time.Millisecond)
		return nil
	}
	if m.definite && m.last.status != http.StatusConflict {
		w.anomalies.add("create %s.%s: %d %s", purgeNamespace, name, m.last.status, truncate(string(m.last.body), 200))
	}
	tbl, _, _ := w.load(ctx, rng, purgeNamespace, name, cat)
	return tbl
}

// appendRows appends a few rows as a new Parquet data file. It returns the
// table as it now is (reloaded when the outcome is unknown).
func (w *purgeWorkload) appendRows(ctx context.Context, rng *rand.Rand, tbl *table.Table) *table.Table {
	w.appends.Add(1)
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	var rows []string
	for i := range 1 + rng.IntN(5) {
		id := rng.Int64N(1e9)
		rows = append(rows, fmt.Sprintf(`{"id": %d, "name": "row-%d-%d"}`, id, id, i))
	}
	at, err := array.TableFromJSON(memory.DefaultAllocator, sc, []string{"[" + strings.Join(rows, ",") + "]"})
	if err != nil {
		w.anomalies.add("harness: arrow table: %v", err)
		return tbl
	}
	defer at.Release()
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	tx := tbl.NewTransaction()
	if err := tx.AppendTable(cctx, at, 1024, nil); err != nil {
		w.appendFailed.Add(1)
		return tbl
	}
	next, err := tx.Commit(cctx)
	switch {
	case err == nil:
		return next
	case errors.Is(err, errUnknownOutcome):
		w.appendUnknown.Add(1)
	default:
		w.appendFailed.Add(1)
	}
	id := tbl.Identifier()
	if t, _, _ := w.load(ctx, rng, id[0], id[len(id)-1], &keyedCatalog{w: w, rng: rng}); t != nil {
		return t
	}
	return tbl
}

// purgeQueryValues are the spellings of purgeRequested=true the drops use:
// query booleans are case-insensitive, so each must purge.
var purgeQueryValues = []string{"true", "True", "TRUE"}

// drop loads ns.name (linearizably, so it is the last metadata: the caller
// is the only writer), walks every file reachable from it, then drops it
// with purgeRequested=true (spelt in any case), asynchronously when async.
// It returns the drop's record, or false when no drop was sent (the table
// could not be loaded).
func (w *purgeWorkload) drop(ctx context.Context, rng *rand.Rand, ns, name string, cat table.CatalogIO, async bool) (droppedTable, bool) {
	if ns == purgeNamespace {
		w.unsetLive(name)
	}
	tbl, status, err := w.load(ctx, rng, ns, name, cat)
	if tbl == nil {
		if err != nil || (status != 0 && status < 500 && status != http.StatusNotFound) {
			w.anomalies.add("load %s.%s before drop: %d %v", ns, name, status, err)
		}
		return droppedTable{}, false
	}
	files, err := reachableFiles(ctx, tbl)
	if err != nil {
		w.anomalies.add("harness: walk %s.%s before drop: %v", ns, name, err)
		return droppedTable{}, false
	}
	// The catalog serves loads from its cache: check in the bucket itself
	// that the live table's files are all there.
	var missing []string
	for _, f := range files {
		if ok, err := w.s3.exists(ctx, f); err == nil && !ok {
			missing = append(missing, f)
		}
	}
	var hdr http.Header
	if async {
		hdr = http.Header{asyncPurgeHeader: {"true"}}
		w.dropsAsync.Add(1)
	}
	query := "purgeRequested=" + purgeQueryValues[rng.IntN(len(purgeQueryValues))]
	w.drops.Add(1)
	call := w.hist.now()
	m := w.api.mutate(ctx, rng, newKey(), http.MethodDelete, tablePath(ns, name)+"?"+query, nil, hdr)
	d := droppedTable{
		Namespace: ns, Name: name, UUID: tbl.Metadata().TableUUID().String(), Location: tbl.Location(),
		Reachable: files, Async: async, Query: query, Status: m.last.status,
		Key: m.key, Call: call, Return: w.hist.now(), Attempts: m.tries, Replayed: m.replayed,
		MissingAtDrop: missing,
	}
	switch {
	case !m.definite:
		d.Outcome = outcomeUnknown
		w.dropsUnknown.Add(1)
	case m.last.status == http.StatusNoContent || m.last.status == http.StatusOK:
		d.Outcome = outcomeOK
	default:
		d.Outcome = outcomeFail
		w.anomalies.add("drop %s.%s (%s): %d %s", ns, name, query, m.last.status, truncate(string(m.last.body), 200))
	}
	w.mu.Lock()
	w.dropped = append(w.dropped, d)
	w.mu.Unlock()
	return d, true
}

// reachableFiles lists every file reachable from the table's metadata: the
// metadata file, the previous ones in its log, and per snapshot the manifest
// list, the manifests and their data files.
func reachableFiles(ctx context.Context, tbl *table.Table) ([]string, error) {
	fs, err := tbl.FS(ctx)
	if err != nil {
		return nil, err
	}
	meta := tbl.Metadata()
	set := map[string]bool{tbl.MetadataLocation(): true}
	for e := range meta.PreviousFiles() {
		set[e.MetadataFile] = true
	}
	for _, s := range meta.Snapshots() {
		if s.ManifestList == "" {
			continue
		}
		set[s.ManifestList] = true
		mfs, err := s.Manifests(fs)
		if err != nil {
			return nil, fmt.Errorf("manifests of snapshot %d: %w", s.SnapshotID, err)
		}
		for _, mf := range mfs {
			set[mf.FilePath()] = true
			entries, err := mf.FetchEntries(fs, false)
			if err != nil {
				return nil, fmt.Errorf("entries of %s: %w", mf.FilePath(), err)
			}
			for _, e := range entries {
				set[e.DataFile().FilePath()] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for f := range set {
		out = append(out, f)
	}
	slices.Sort(out)
	return out, nil
}

// liveTables lists the namespaces and walks every table in them.
func (w *purgeWorkload) liveTables(ctx context.Context, namespaces ...string) ([]liveTable, error) {
	var out []liveTable
	for _, ns := range namespaces {
		tables, err := w.liveTablesIn(ctx, ns)
		if err != nil {
			return nil, err
		}
		out = append(out, tables...)
	}
	return out, nil
}

func (w *purgeWorkload) liveTablesIn(ctx context.Context, ns string) ([]liveTable, error) {
	rng := rand.New(rand.NewPCG(9, 9))
	var r reply
	for range 5 {
		if r = w.api.read(ctx, rng, "/v1/namespaces/"+ns+"/tables?pageSize=1000"); r.status == http.StatusOK {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	if r.status != http.StatusOK {
		return nil, fmt.Errorf("list tables of %s: %d %v", ns, r.status, r.err)
	}
	var lr struct {
		Identifiers []struct {
			Name string `json:"name"`
		} `json:"identifiers"`
		NextPageToken *string `json:"next-page-token"`
	}
	if err := json.Unmarshal(r.body, &lr); err != nil {
		return nil, err
	}
	if lr.NextPageToken != nil && *lr.NextPageToken != "" {
		return nil, fmt.Errorf("list tables of %s: more than one page", ns)
	}
	var out []liveTable
	cat := &keyedCatalog{w: w, rng: rng}
	for _, id := range lr.Identifiers {
		tbl, status, err := w.load(ctx, rng, ns, id.Name, cat)
		if err != nil || tbl == nil {
			if status == http.StatusNotFound {
				continue
			}
			return nil, fmt.Errorf("load %s.%s: %d %v", ns, id.Name, status, err)
		}
		name := id.Name
		if ns != purgeNamespace {
			name = ns + "." + id.Name
		}
		files, err := reachableFiles(ctx, tbl)
		if err != nil {
			// A live table whose files cannot be read lost some: report
			// it as such rather than failing the harness.
			out = append(out, liveTable{Name: name, UUID: tbl.Metadata().TableUUID().String(),
				Reachable: []string{"(unreadable: " + err.Error() + ")"}})
			continue
		}
		out = append(out, liveTable{Name: name, UUID: tbl.Metadata().TableUUID().String(), Reachable: files})
	}
	return out, nil
}

// purgeJobs reads GET /management/v1/purge-jobs. found is false when the
// build answers 404 (no purge-job API). The body is {"jobs": [...],
// "next-page-token": ...} (a bare array, or "purge-jobs"/"items", are
// accepted too); pages are followed with ?page-token= (at most 100).
func purgeJobs(ctx context.Context, a *api, rng *rand.Rand) (jobs []purgeJob, found bool, err error) {
	token := ""
	for range 100 {
		path := "/management/v1/purge-jobs"
		if token != "" {
			path += "?page-token=" + url.QueryEscape(token)
		}
		var r reply
		for range 5 {
			if r = a.read(ctx, rng, path); !r.unknown() {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		switch {
		case r.status == http.StatusNotFound && token == "":
			return nil, false, nil
		case r.status != http.StatusOK:
			return nil, true, fmt.Errorf("GET %s: %d %v %s", path, r.status, r.err, truncate(string(r.body), 200))
		}
		page, next, err := decodeJobs(r.body)
		if err != nil {
			return nil, true, err
		}
		jobs = append(jobs, page...)
		if next == "" {
			return jobs, true, nil
		}
		token = next
	}
	return jobs, true, errors.New("purge jobs: more than 100 pages")
}

func decodeJobs(body []byte) ([]purgeJob, string, error) {
	var arr []purgeJob
	if err := json.Unmarshal(body, &arr); err == nil {
		return arr, "", nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		return nil, "", fmt.Errorf("purge jobs: %w", err)
	}
	var next string
	for _, k := range []string{"next-page-token", "nextPageToken"} {
		if raw, ok := obj[k]; ok {
			_ = json.Unmarshal(raw, &next)
		}
	}
	for _, k := range []string{"jobs", "purge-jobs", "items"} {
		if raw, ok := obj[k]; ok {
			if err := json.Unmarshal(raw, &arr); err != nil {
				return nil, "", fmt.Errorf("purge jobs: %w", err)
			}
			return arr, next, nil
		}
	}
	return nil, "", fmt.Errorf("purge jobs: unrecognised body %s", truncate(string(body), 200))
}
