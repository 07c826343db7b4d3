package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/floe-catalog/floe/catalog"
	"github.com/floe-catalog/floe/internal/harness"
	"github.com/floe-catalog/floe/internal/raftnode"
	"github.com/floe-catalog/floe/internal/storage"
)

// Item 3's table shape: loadTableTables tables, each with loadTableCommits
// set-properties commits, so that each metadata file carries a metadata log
// like a table in use, not a freshly created one.
const (
	loadTableTables  = 8
	loadTableCommits = 20
)

// LoadTableLatency is item 3: warm loadTable latency of one in-process
// floe node, served by two catalogs over the same Raft node and warehouse:
// one with the metadata cache (the default) and one with it disabled
// (catalog.Config.MetadataCacheSize < 0), which reads and parses the
// metadata file on every call.
type LoadTableLatency struct {
	N             int // timed loads per configuration
	Tables        int
	MetadataBytes int // size of one table's current metadata file
	CacheOn       []time.Duration
	CacheOff      []time.Duration
}

// inProcessNode is one floe node in this process: a single-voter Raft node
// and the catalog served over loopback HTTP, once per catalog config.
type inProcessNode struct {
	node    *raftnode.Node
	objects catalog.Objects
	servers []*http.Server
	urls    []string
}

// startInProcessNode starts the node with floe's storage layer for its
// files and one catalog per configuration.
func startInProcessNode(ctx context.Context, dir string, log *slog.Logger, cfgs ...catalog.Config) (*inProcessNode, error) {
	return startInProcessNodeWith(ctx, dir, log, nil, cfgs...)
}

// startInProcessNodeWith is startInProcessNode with the catalog's files in
// objects (nil: floe's storage layer).
func startInProcessNodeWith(ctx context.Context, dir string, log *slog.Logger, objects catalog.Objects, cfgs ...catalog.Config) (*inProcessNode, error) {
	node, err := raftnode.Open(raftnode.Config{
		NodeID: "inproc", DataDir: filepath.Join(dir, "data"), ClusterAddr: "127.0.0.1:0", Bootstrap: true, Logger: log,
	})
	if err != nil {
		return nil, err
	}
	p := &inProcessNode{node: node, objects: objects}
	if p.objects == nil {
		if p.objects, err = storage.New(storage.Config{}); err != nil {
			p.stop()
			return nil, err
		}
	}
	if err := harness.Poll(ctx, harness.HealthyTimeout, harness.PollInterval, func(context.Context) error {
		return node.Ready()
	}); err != nil {
		p.stop()
		return nil, fmt.Errorf("in-process node not ready: %w", err)
	}
	for _, cfg := range cfgs {
		if cfg.Warehouse == "" {
			cfg.Warehouse = "file://" + filepath.ToSlash(filepath.Join(dir, "warehouse"))
		}
		cfg.Logger = log
		srv, err := catalog.New(cfg, node, p.objects)
		if err != nil {
			p.stop()
			return nil, err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			p.stop()
			return nil, err
		}
		hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = hs.Serve(ln) }()
		p.servers = append(p.servers, hs)
		p.urls = append(p.urls, "http://"+ln.Addr().String())
	}
	return p, nil
}

func (p *inProcessNode) stop() {
	for _, s := range p.servers {
		ctx, cancel := context.WithTimeout(context.Background(), harness.ExitTimeout)
		_ = s.Shutdown(ctx)
		cancel()
	}
	if p.node != nil {
		_ = p.node.Shutdown()
	}
}

// getTable loads path from base once and returns the body's size.
func getTable(ctx context.Context, cl *http.Client, base, path string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return 0, err
	}
	resp, err := cl.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: status %d", path, resp.StatusCode)
	}
	return int(n), err
}

func runLoadTableLatency(ctx context.Context, o *SuiteOptions, dir string) (*LoadTableLatency, error) {
	log := o.log()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	p, err := startInProcessNode(ctx, dir, quiet,
		catalog.Config{},                      // cache on: the default size
		catalog.Config{MetadataCacheSize: -1}) // cache off
	if err != nil {
		return nil, err
	}
	defer p.stop()
	on, off := p.urls[0], p.urls[1]
	cl := harness.NewHTTPClient(4, 0)
	defer cl.CloseIdleConnections()

	res := &LoadTableLatency{N: o.Sizes.LoadTableN, Tables: loadTableTables}
	const ns = "lt"
	if err := ensureNamespace(ctx, cl, on, ns); err != nil {
		return nil, err
	}
	paths := make([]string, loadTableTables)
	for i := range paths {
		name := fmt.Sprintf("t%d", i)
		if _, err := createTableAt(ctx, cl, on, ns, name); err != nil {
			return nil, err
		}
		paths[i] = tablePath(ns, name)
		for j := range loadTableCommits {
			st, body, err := commitURL(ctx, cl, on+paths[i], "", j)
			if err := expect("commit "+paths[i], http.StatusOK, st, []byte(body), err); err != nil {
				return nil, err
			}
		}
	}
	// The size of a metadata file, as read by the cache-off catalog.
	var lt loadedTable
	st, rb, err := doRequest(ctx, cl, http.MethodGet, off+paths[0], nil)
	if err := expect("load "+paths[0], http.StatusOK, st, rb, err); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(rb, &lt); err != nil {
		return nil, err
	}
	raw, err := p.objects.Read(ctx, lt.MetadataLocation)
	if err != nil {
		return nil, err
	}
	res.MetadataBytes = len(raw)

	// Warm-up: every table through both catalogs (fills the cache, warms
	// the page cache and the connections).
	for range 3 {
		for _, path := range paths {
			for _, base := range []string{on, off} {
				if _, err := getTable(ctx, cl, base, path); err != nil {
					return nil, err
				}
			}
		}
	}
	// Alternate the two configurations so both see the same noise.
	for i := range 2 * res.N {
		base := on
		if i%2 == 1 {
			base = off
		}
		path := paths[(i/2)%len(paths)]
		t0 := time.Now()
		if _, err := getTable(ctx, cl, base, path); err != nil {
			return nil, err
		}
		d := time.Since(t0)
		if base == on {
			res.CacheOn = append(res.CacheOn, d)
		} else {
			res.CacheOff = append(res.CacheOff, d)
		}
	}
	log.Info("item 3: loadTable latency", "n", res.N, "cache_on_p50_ms", ms(median(res.CacheOn)),
		"cache_off_p50_ms", ms(median(res.CacheOff)), "metadata_bytes", res.MetadataBytes)
	if len(res.CacheOn) == 0 || len(res.CacheOff) == 0 {
		return res, errors.New("no loads timed")
	}
	return res, nil
}
