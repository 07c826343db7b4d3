package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floe-catalog/floe/internal/harness"
)

// Settings the nodes run with. Frequent snapshots make the snapshot-install
// fault affordable and put snapshotting under the other faults too.
const (
	nodeSnapshotThreshold = 512
	nodeSnapshotInterval  = "1s"
	warehousePrefix       = "wh"
	healthyTimeout        = 90 * time.Second
	purgeQuiesceTimeout   = 120 * time.Second
	padNamespace          = "jepsen_pad"
)

// runner runs one harness run: set up, workload + nemesis, heal, full
// restart, final reads, checks, report, tear down.
type runner struct {
	cfg config
	log *slog.Logger
	out io.Writer

	dir   string
	s3    *s3Server
	s3p   *s3Proxy
	links *linkNet
	cl    *harness.Cluster
	api   *api
	hist  *history
	anom  *anomalies
	nem   *nemesis
	reg   *registerWorkload
	purge *purgeWorkload
	ovl   *overlapWorkload

	purgeSkip string     // why the purge workload did not run, "" if it did
	jobs      []purgeJob // the purge jobs after quiescence
	noted     bool       // a check left notes (e.g. a FAILED purge job): keep the run directory
	checks    []checkResult
	padded    atomic.Int64
}

func (r *runner) run(ctx context.Context) (code int) {
	cfg := r.cfg
	fmt.Fprintf(r.out, "jepsen-lite: seed %d; reproduce with:\n  %s\n", cfg.seed, cfg.commandLine())
	defer func() { r.teardown(code == exitOK && !r.noted) }()
	code, err := r.setup(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return exitInterrupt
		}
		fmt.Fprintf(r.out, "jepsen-lite: setup failed: %v\n", err)
		if r.cl != nil {
			fmt.Fprint(r.out, r.cl.LogTails(15))
		}
		return exitHarness
	}
	return r.exercise(ctx)
}

// setup starts versitygw, the S3 proxy, the link proxies and the cluster,
// and prepares the workloads. The returned code is exitOK unless err.
func (r *runner) setup(ctx context.Context) (int, error) {
	cfg := r.cfg
	var err error
	if cfg.dir != "" {
		r.dir, err = filepath.Abs(cfg.dir)
		if err == nil {
			err = os.MkdirAll(r.dir, 0o755)
		}
	} else {
		r.dir, err = os.MkdirTemp("", "jepsen-lite-")
	}
	if err != nil {
		return exitHarness, err
	}
	r.log.Info("run directory", "dir", r.dir)
	bin := cfg.floe
	if bin == "" {
		if bin, err = buildFloe(ctx, r.dir, r.log); err != nil {
			return exitHarness, err
		}
	}
	if bin, err = filepath.Abs(bin); err != nil {
		return exitHarness, err
	}
	if r.s3, err = startS3(ctx, r.dir); err != nil {
		return exitHarness, err
	}
	if r.s3p, err = startS3Proxy(r.s3.Endpoint, cfg.seed); err != nil {
		return exitHarness, err
	}
	r.links = newLinkNet(cfg.nodes)
	var proxyAddrs []string
	for i := range cfg.nodes {
		addr, err := r.links.listen(i)
		if err != nil {
			return exitHarness, err
		}
		proxyAddrs = append(proxyAddrs, addr)
	}
	// The nodes reach S3 through the fault proxy.
	args := []string{"--log-format", "json",
		"--snapshot-threshold", fmt.Sprint(nodeSnapshotThreshold),
		"--snapshot-interval", nodeSnapshotInterval}
	args = append(args, r.s3.NodeArgsVia(r.s3p.Endpoint())...)
	warehouse := "s3://" + r.s3.Bucket + "/" + warehousePrefix
	if r.cl, err = newCluster(bin, r.dir, cfg.nodes, proxyAddrs, warehouse, args); err != nil {
		return exitHarness, err
	}
	for i, n := range r.cl.Nodes {
		r.links.serve(i, n.ClusterAddr)
	}
	if err := r.cl.Start(); err != nil {
		return exitHarness, err
	}
	for _, n := range r.cl.Nodes {
		r.log.Info("node started", "node", n.ID, "http", n.HTTPAddr, "cluster", n.ClusterAddr, "proxy", n.Advertise, "log", n.LogPath())
	}
	if err := waitHealthy(ctx, r.cl, healthyTimeout); err != nil {
		return exitHarness, err
	}
	r.log.Info("cluster healthy")

	r.hist = newHistory()
	r.anom = &anomalies{}
	r.api = newAPI(r.cl.Nodes)
	rng := rand.New(rand.NewPCG(cfg.seed, 1))
	if err := createNamespace(ctx, r.api, rng, padNamespace); err != nil {
		return exitHarness, err
	}
	if cfg.runsRegister() {
		r.reg = newRegisterWorkload(r.api, r.hist, r.anom, cfg.tables, cfg.maxWrites)
		if err := r.reg.setup(ctx, rng); err != nil {
			return exitHarness, err
		}
	}
	if cfg.runsPurge() {
		_, found, err := purgeJobs(ctx, r.api, rng)
		switch {
		case err != nil:
			return exitHarness, err
		case !found && !cfg.purgeForce:
			r.purgeSkip = "GET /management/v1/purge-jobs answered 404: this floe build has no purge-job API (async purge), so the purge workload and checker are skipped (--purge-without-jobs runs them against synchronous purge only)"
			if cfg.runsOverlap() {
				r.purgeSkip += "; the overlap workload, which races purges, is skipped too"
			}
			r.log.Warn("purge workload skipped", "reason", r.purgeSkip)
		default:
			r.purge = &purgeWorkload{api: r.api, hist: r.hist, s3: r.s3, anomalies: r.anom, names: 3, jobsAPI: found}
			if err := r.purge.setup(ctx, rng); err != nil {
				return exitHarness, err
			}
		}
	}
	if cfg.runsOverlap() && r.purge != nil {
		r.ovl = &overlapWorkload{api: r.api, hist: r.hist, s3: r.s3, purge: r.purge, anomalies: r.anom,
			warehouse: r.cl.Warehouse}
		if err := r.ovl.setup(ctx, rng); err != nil {
			return exitHarness, err
		}
	}
	r.nem = &nemesis{
		cl: r.cl, api: r.api, links: r.links, s3p: r.s3p, hist: r.hist, log: r.log,
		kinds: cfg.nemesis, rng: rand.New(rand.NewPCG(cfg.seed, 2)), timing: cfg.timing,
		padLog: r.padLog, snapshotThreshold: nodeSnapshotThreshold,
		counts: map[string]int{}, failed: map[string]int{}, firstRound: make(chan struct{}),
	}
	return exitOK, nil
}

// endWorkload ends the workload and the nemesis (cancel) once the run's
// duration has passed. With --ci, which requires every fault kind at least
// once, it waits past the duration until the nemesis has tried each kind
// (a slow machine may spend most of the duration on one fault), at most
// one more duration, so the run stays bounded.
func (r *runner) endWorkload(ctx context.Context, cancel func()) {
	defer cancel()
	select {
	case <-ctx.Done():
		return
	case <-time.After(r.cfg.duration):
	}
	if !r.cfg.ci {
		return
	}
	select {
	case <-r.nem.firstRound:
		return
	default:
	}
	r.log.Info("the duration has passed before every fault kind was tried: running on until it has (--ci)", "at most", r.cfg.duration)
	select {
	case <-ctx.Done():
	case <-r.nem.firstRound:
	case <-time.After(r.cfg.duration):
	}
}

// exercise runs the workload and the nemesis, heals, restarts every node,
// reads the final state and checks it.
func (r *runner) exercise(ctx context.Context) int {
	cfg := r.cfg
	r.log.Info("workload and nemesis running", "duration", cfg.duration, "workload", cfg.workload, "nemesis", cfg.nemesis)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go r.endWorkload(wctx, cancel)
	var wg sync.WaitGroup
	if r.reg != nil {
		wg.Go(func() { r.reg.run(wctx, ctx, cfg.clients, cfg.seed, 0) })
	}
	if r.purge != nil {
		wg.Go(func() { r.purge.run(wctx, ctx, cfg.purgeClients, cfg.seed) })
	}
	if r.ovl != nil {
		wg.Go(func() { r.ovl.run(wctx, ctx, cfg.overlapClients, cfg.seed) })
	}
	wg.Go(func() { r.nem.run(wctx) })
	progressDone := make(chan struct{})
	go r.progress(wctx, progressDone)
	wg.Wait()
	<-progressDone
	if ctx.Err() != nil {
		return exitInterrupt
	}

	r.log.Info("healing")
	r.nem.healAll()
	if err := waitHealthy(ctx, r.cl, healthyTimeout); err != nil {
		r.nem.violate("cluster not healthy after the final heal: %v", err)
	}
	r.log.Info("full restart: SIGKILL every node at once, start them again")
	for _, n := range r.cl.Nodes {
		if n.Running() {
			if err := n.Kill(); err != nil {
				r.nem.violate("final kill %s: %v", n.ID, err)
			}
		}
	}
	if err := r.cl.Start(); err != nil {
		r.nem.violate("final restart: %v", err)
	}
	if err := waitHealthy(ctx, r.cl, healthyTimeout); err != nil {
		r.nem.violate("cluster not healthy after the full restart: %v", err)
	}
	for _, c := range r.cl.TakeCrashes() {
		r.nem.violate("node crashed: %s", c)
	}
	if ctx.Err() != nil {
		return exitInterrupt
	}
	r.finalChecks(ctx)
	return r.report()
}

func (r *runner) progress(ctx context.Context, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			attrs := []any{"requests", r.api.requests.Load(), "no-answer", r.api.noAnswer.Load(), "5xx", r.api.serverErr.Load()}
			if r.reg != nil {
				attrs = append(attrs, "cas-ok", r.reg.casOK.Load(), "cas-409", r.reg.casFail.Load(), "cas-unknown", r.reg.casUnknown.Load())
			}
			if r.purge != nil {
				attrs = append(attrs, "drops", r.purge.drops.Load())
			}
			if r.ovl != nil {
				attrs = append(attrs, "overlap-tried", r.ovl.tried.Load(), "overlap-accepted", r.ovl.accepted.Load())
			}
			r.log.Info("progress", attrs...)
		}
	}
}

// finalChecks reads the final state and runs every checker.
func (r *runner) finalChecks(ctx context.Context) {
	cfg := r.cfg
	var finals []tableState
	if r.reg != nil {
		r.log.Info("final reads of every register table on every node")
		finals = r.reg.finalStates(ctx, r.cl.Nodes, cfg.clients)
		ops := r.hist.regOps()
		r.log.Info("checking linearizability", "operations", len(ops), "tables", len(r.reg.allTables()))
		listing, err := r.s3.list(ctx, warehousePrefix+"/"+regNamespace+"/")
		if err != nil {
			r.log.Warn("list the register tables' files; metadata files not checked", "error", err)
			listing = nil
		}
		r.checks = append(r.checks,
			checkLinearizable(ops, r.hist.faultEvents(), cfg.checkTimeout, r.dir),
			checkIdempotency(ops, finals),
			checkDurability(ops, finals, r.reg.allTables(), listing),
		)
	}
	var pr checkResult
	var purgeExtra map[string]any
	switch {
	case r.purge != nil:
		pr, purgeExtra = r.checkPurge(ctx)
	case r.purgeSkip != "":
		pr = checkResult{Name: "purge", Verdict: verdictSkipped, Summary: r.purgeSkip}
	}
	if pr.Name != "" {
		r.checks = append(r.checks, pr)
	}
	if r.ovl != nil {
		r.log.Info("reading whether the overlap attempts with unknown outcomes took effect")
		r.ovl.resolve(ctx)
		r.purge.mu.Lock()
		dropped := append([]droppedTable(nil), r.purge.dropped...)
		r.purge.mu.Unlock()
		attempts := r.ovl.allAttempts()
		r.checks = append(r.checks, checkOverlap(attempts, dropped, r.jobs, cfg.ci))
		if purgeExtra == nil {
			purgeExtra = map[string]any{}
		}
		purgeExtra["overlap"] = attempts
	}
	r.checks = append(r.checks, r.anom.result(), r.nemesisCheck())
	r.nem.mu.Lock()
	failovers := slices.Clone(r.nem.failovers)
	r.nem.mu.Unlock()
	extra := map[string]any{"finals": finals, "checks": r.checks, "seed": cfg.seed, "command": cfg.commandLine(), "failovers": failovers}
	for k, v := range purgeExtra {
		extra[k] = v
	}
	if err := r.hist.save(filepath.Join(r.dir, "history.json"), extra); err != nil {
		r.log.Warn("save history", "error", err)
	}
}

// checkPurge waits until no purge job is PENDING or RUNNING (bounded), then
// compares the warehouse listing with what the tables and drops imply.
func (r *runner) checkPurge(ctx context.Context) (checkResult, map[string]any) {
	rng := rand.New(rand.NewPCG(r.cfg.seed, 3))
	var jobs []purgeJob
	if r.purge.jobsAPI {
		r.log.Info("waiting for purge jobs to settle", "timeout", purgeQuiesceTimeout)
		err := harness.Poll(ctx, purgeQuiesceTimeout, pollInterval, func(ctx context.Context) error {
			js, _, err := purgeJobs(ctx, r.api, rng)
			if err != nil {
				return err
			}
			jobs = js
			for _, j := range js {
				if j.State == "PENDING" || j.State == "RUNNING" {
					return fmt.Errorf("job %s is %s", j.ID, j.State)
				}
			}
			return nil
		})
		if err != nil {
			r.log.Warn("purge jobs did not settle", "error", err)
		}
	}
	r.jobs = jobs
	// The overlap workload's tables are live tables like the purge
	// workload's: every file reachable from them must be there.
	namespaces := []string{purgeNamespace}
	if r.ovl != nil {
		namespaces = append(namespaces, overlapNamespace)
	}
	live, err := r.purge.liveTables(ctx, namespaces...)
	if err != nil {
		return checkResult{Name: "purge", Verdict: verdictFail, Summary: "could not read the live tables", Violations: []string{err.Error()}}, nil
	}
	listing := map[string]bool{}
	for _, ns := range namespaces {
		l, err := r.s3.list(ctx, warehousePrefix+"/"+ns+"/")
		if err != nil {
			return checkResult{Name: "purge", Verdict: verdictFail, Summary: "could not list the warehouse", Violations: []string{err.Error()}}, nil
		}
		for k := range l {
			listing[k] = true
		}
	}
	r.purge.mu.Lock()
	dropped := append([]droppedTable(nil), r.purge.dropped...)
	r.purge.mu.Unlock()
	res := checkPurge(dropped, live, jobs, listing, r.purge.jobsAPI)
	if !r.purge.jobsAPI {
		res.Notes = append(res.Notes, "no purge-job API in this build: only acknowledged synchronous purges were checked")
	}
	return res, map[string]any{"purge": map[string]any{"dropped": dropped, "live": live, "jobs": jobs, "listed": len(listing)}}
}

// nemesisCheck turns the nemesis's own findings (a cluster that did not
// heal, a node that crashed) into a check, and, with --ci, fails when an
// enabled fault kind was never injected.
func (r *runner) nemesisCheck() checkResult {
	n := r.nem
	n.mu.Lock()
	defer n.mu.Unlock()
	res := checkResult{Name: "recovery"}
	res.Violations = append(res.Violations, n.violations...)
	var missing []string
	for _, k := range n.kinds {
		if n.counts[k] == 0 {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		msg := "fault kinds never injected: " + strings.Join(missing, ", ")
		if r.cfg.ci {
			res.fail("%s (--ci requires each at least once)", msg)
		} else {
			res.Notes = append(res.Notes, msg)
		}
	}
	res.finish("the cluster healed after every fault and no node crashed")
	return res
}

// padLog appends cheap entries (namespace property updates, one log entry
// each, nothing written to S3) with 48 concurrent clients until done
// reports true, ctx ends, or 90 s pass.
func (r *runner) padLog(ctx context.Context, done func() bool) int {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	var count atomic.Int64
	var stopped atomic.Bool
	var mu sync.Mutex
	var wg sync.WaitGroup
	for c := range 48 {
		rng := rand.New(rand.NewPCG(r.cfg.seed, uint64(3000+c)))
		wg.Go(func() {
			for i := 0; i < 1_000_000 && ctx.Err() == nil && !stopped.Load(); i++ {
				body, _ := json.Marshal(map[string]any{"updates": map[string]string{fmt.Sprintf("p%d", c): fmt.Sprint(i)}, "removals": []string{}})
				n := r.cl.Nodes[rng.IntN(len(r.cl.Nodes))]
				if !n.Serving() {
					continue
				}
				res := r.api.send(ctx, n, http.MethodPost, "/v1/namespaces/"+padNamespace+"/properties", body, nil, 3*time.Second)
				if res.status == http.StatusOK {
					count.Add(1)
				}
				mu.Lock()
				if done() {
					stopped.Store(true)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	r.padded.Add(count.Load())
	return int(count.Load())
}

// buildFloe builds ./cmd/node of the module the harness is run from into
// dir/floe.
func buildFloe(ctx context.Context, dir string, log *slog.Logger) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	gomod := strings.TrimSpace(string(out))
	if err != nil || gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside the floe module; run from the repository or pass --floe")
	}
	root := filepath.Dir(gomod)
	bin := filepath.Join(dir, "floe")
	log.Info("building floe", "module", root, "out", bin)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/node")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/node: %v\n%s", err, b)
	}
	return bin, nil
}

// teardown stops everything the run started, in reverse order, and removes
// the run directory after a passing run unless --keep or --dir.
func (r *runner) teardown(passed bool) {
	if r.cl != nil {
		r.cl.Stop() // continues paused nodes first
	}
	if r.links != nil {
		r.links.close()
	}
	r.s3p.close()
	if r.s3 != nil {
		_ = r.s3.Stop()
	}
	if r.dir == "" {
		return
	}
	if passed && !r.cfg.keep && r.cfg.dir == "" {
		_ = os.RemoveAll(r.dir)
		return
	}
	fmt.Fprintf(r.out, "run directory kept: %s (node logs, history.json, reports)\n", r.dir)
}
