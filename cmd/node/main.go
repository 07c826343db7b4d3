// Command floe runs one node of the floe Iceberg REST catalog: a Raft node
// with its state machine, the catalog's HTTP API under /v1/, and /healthz,
// /readyz and /metrics. With no flags it bootstraps a cluster of one with its
// data under ./floe-data. See --help.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/admin"
	"github.com/floe-catalog/floe/internal/httpserve"
	"github.com/floe-catalog/floe/internal/raftnode"
	"github.com/floe-catalog/floe/internal/storage"
	"github.com/floe-catalog/floe/internal/ui"
	"github.com/floe-catalog/floe/purge"
)

// handOverTimeout bounds how long a stopping leader tries to hand
// leadership to another voter.
const handOverTimeout = 5 * time.Second

// httpShutdownTimeout bounds the graceful HTTP shutdown: requests still
// running after it are cut off, and Raft is shut down regardless.
const httpShutdownTimeout = 10 * time.Second

// handlerWaitTimeout bounds the wait, once Raft is down, for handlers the
// HTTP server cut off: they end with ErrShutdown, and their audit lines are
// written before the audit log closes.
const handlerWaitTimeout = 5 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	go func() {
		// After the first signal, a second one kills the process at once.
		<-ctx.Done()
		stop()
	}()
	// floe COMMAND [arguments] runs a subcommand (floe help lists them);
	// floe [flags] runs a node.
	if _, isCommand := commands[firstArg(os.Args)]; isCommand {
		// A reader of the output or the progress that went away (| head)
		// is an error to handle, not a signal that kills the command
		// halfway through a download.
		ignoreBrokenPipes()
		out := &outputWriter{w: os.Stdout}
		code, _ := runCommand(ctx, os.Args[1:], out, os.Stderr)
		stop()
		os.Exit(out.exitCode(code, "floe "+os.Args[1], os.Stderr))
	}
	err := run(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// exitCode reports err on stderr and maps it to the process exit code: 0 for
// success and --help, 2 for a bad flag or environment value, 1 otherwise.
func exitCode(err error, stderr io.Writer) int {
	var ue usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "floe: %v\nRun 'floe --help' for the flags.\n", err)
		return 2
	default:
		fmt.Fprintf(stderr, "floe: %v\n", err)
		return 1
	}
}

// run runs a node until ctx ends, then shuts it down gracefully: the HTTP
// server first (bounded by httpShutdownTimeout), then Raft. env holds
// KEY=VALUE entries as os.Environ returns them.
func run(ctx context.Context, args, env []string, stdout, stderr io.Writer) error {
	cfg, err := parseConfig(args, env, stdout)
	if err != nil {
		return err
	}
	logger := newLogger(cfg, stderr)
	logger.Info("starting floe", cfg.logAttrs()...)
	cfg.logNotices(logger)

	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)

	// What can fail on this node's own settings without the node is
	// checked before the node opens Raft: a node started with --join asks
	// the cluster to add it as a voter while it opens, and one that then
	// exited (its HTTP port taken, its audit log unwritable) left the
	// cluster a dead voter, a single node's cluster without a quorum.
	// What needs the node (auth, credential vending, the catalog's own
	// set-up) can still fail after it.
	objects, err := storage.New(storage.Config{
		S3Endpoint:        cfg.S3Endpoint,
		S3Region:          cfg.S3Region,
		S3AccessKeyID:     cfg.S3AccessKeyID,
		S3SecretAccessKey: cfg.S3SecretAccessKey,
		S3PathStyle:       cfg.S3PathStyle,
		DeleteBatchSize:   cfg.PurgeDeleteBatchSize,
	})
	if err != nil {
		return err
	}
	warehouses, err := openWarehouses(cfg)
	if err != nil {
		return err
	}
	if err := checkAuditLog(cfg.AuditLog); err != nil {
		return err
	}
	if cfg.HTTPTLSCert != "" {
		if err := httpserve.CheckKeyPair(cfg.HTTPTLSCert, cfg.HTTPTLSKey); err != nil {
			return fmt.Errorf("http server: %w", err)
		}
	}
	// The HTTP port is tried, not kept: bound through a long Open (a
	// snapshot restored), it would take connections no one serves, and
	// clients would wait for them instead of being refused.
	if l, err := net.Listen("tcp", cfg.HTTPAddr); err != nil {
		return fmt.Errorf("http listener: %w", err)
	} else if err := l.Close(); err != nil {
		return fmt.Errorf("http listener: %w", err)
	}

	join := cfg.joinAddrs()
	node, err := raftnode.Open(raftnode.Config{
		NodeID:        cfg.NodeID,
		DataDir:       cfg.DataDir,
		ClusterAddr:   cfg.ClusterAddr,
		AdvertiseAddr: cfg.ClusterAdvertise,
		HTTPAddr:      cfg.HTTPAdvertise, // published to the cluster; --http-addr when not set
		// Without --join a node forms a cluster of one; --bootstrap-expect 1
		// says the same explicitly. A node with state never bootstraps.
		Bootstrap:         len(join) == 0 || cfg.BootstrapExpect == 1,
		Join:              join,
		BootstrapExpect:   cfg.BootstrapExpect,
		RejoinAsNonvoter:  cfg.RejoinAsNonvoter,
		TLS:               cfg.tls(),
		SnapshotThreshold: cfg.SnapshotThreshold,
		SnapshotInterval:  cfg.SnapshotInterval,
		// Raft's own checks want ElectionTimeout ≥ HeartbeatTimeout ≥
		// LeaderLeaseTimeout; one flag keeps them so.
		HeartbeatTimeout:   cfg.RaftHeartbeatTimeout,
		ElectionTimeout:    cfg.RaftHeartbeatTimeout,
		LeaderLeaseTimeout: cfg.RaftHeartbeatTimeout,
		Logger:             logger,
		Registerer:         reg,
	})
	if err != nil {
		return err
	}
	clusterCertExpiry(cfg, reg, logger)
	defer func() {
		if err := node.Shutdown(); err != nil {
			logger.Error("raft shutdown", "error", err)
		}
	}()

	// Purge workers run on every node; the scheduler runs on the leader
	// only, switched on and off with leadership.
	// The storage settings every node must share (settingscheck.go):
	// announced in the purge heartbeats, compared with the others'.
	settings := newSettingsCheck(cfg, node.ID(), node.StaleRead, logger, reg)
	purger, err := purge.New(purge.Config{
		NodeID:           node.ID(),
		Settings:         settings.mine,
		Store:            node,
		Storage:          purge.StorageFor(purgeBases(cfg, objects, warehouses), cfg.PurgeDeleteBatchSize),
		AllowedLocations: cfg.allowedEverywhere(),
		WorkerThreads:    cfg.PurgeWorkerThreads,
		DeleteThreads:    cfg.PurgeDeleteThreads,
		DeleteBatchSize:  cfg.PurgeDeleteBatchSize,
		HeartbeatTimeout: cfg.PurgeHeartbeatTimeout,
		MaxAttempts:      cfg.PurgeMaxAttempts,
		Retention:        cfg.PurgeRetention,
		RunMarkDir:       filepath.Join(cfg.DataDir, "purge-runs"),
		Logger:           logger,
		Registerer:       reg,
	})
	if err != nil {
		return err
	}
	defer purger.Stop() // before the node's Shutdown (deferred earlier, runs later)
	// An asynchronous purge starts as soon as its drop is applied: the
	// state machine wakes the leader's scheduler.
	node.FSM().OnPurgeWork(purger.Wake)
	defer node.FSM().OnPurgeWork(nil)
	node.OnLeadership(purger.Lead)
	purger.Start()
	// Every node heartbeats as soon as it learns of a new leader, so that
	// the new leader's scheduler knows at once which nodes can take jobs.
	node.OnNewLeader(purger.NewLeader)
	defer node.OnNewLeader(nil)
	sec, err := newSecurity(cfg, logger, reg, node, node.ID())
	if err != nil {
		return err
	}
	defer sec.audit.Close()
	if sec.on {
		node.OnLeadership(sec.lead)
	}
	// stopping ends with the process, whatever its reason: the change-feed
	// streams, which never end on their own, and synchronous purges still
	// waiting for their jobs end before the HTTP server waits for its
	// requests.
	stopping, stopStreams := context.WithCancel(ctx)
	defer stopStreams()
	catalogHandler, err := newCatalogHandler(cfg, logger, reg, node, objects, warehouses, purger, sec, stopping.Done())
	if err != nil {
		return err
	}

	management := admin.New(node, node, admin.Config{IdempotencyLifetime: cfg.idempotencyLifetime, Logger: logger, Principal: sec.principal,
		Reauthorize: sec.stillAdmin})
	purgeJobs := management.PurgeJobs(node)
	// The status page under /ui: its Retry and Release go through the
	// operator API's purge-jobs handler.
	uiCfg := ui.Config{
		Warehouse: cfg.Warehouse, Prefix: cfg.Prefix, Store: node, Cluster: node, Objects: objects,
		PurgeJobs: purgeJobs, Logger: logger, Registerer: reg,
	}
	for _, w := range warehouses {
		uiCfg.Warehouses = append(uiCfg.Warehouses, ui.Warehouse{Name: w.spec.Name, Location: w.spec.Location, Objects: w.objects})
	}
	if sec.on {
		uiCfg.Authorizer, uiCfg.VerifyToken = authorizer{sec}, sec.verifyToken
	}
	statusPage, err := ui.New(uiCfg)
	if err != nil {
		return err
	}
	go settings.run(stopping)
	handler := withStatusPage(statusPage.Handler(), routes(settings.guard(catalogHandler), managementRoutes(management.Handler(), purgeJobs,
		management.Auth(node, authConfig(cfg, sec, warehouses)),
		management.Events(node.FSM(), admin.EventsConfig{Registerer: reg, Done: stopping.Done(),
			Linearize: func(ctx context.Context) error { return node.Read(ctx, func(*fsm.Reader) error { return nil }) }}),
		management.Backup(node, reg)), sec.tokens, settings.readiness(node), reg))
	srv, err := httpserve.New(refuseDotSegments(collapseLeadingSlashes(sec.wrap(handler))), httpserve.Config{
		CertFile:          cfg.HTTPTLSCert,
		KeyFile:           cfg.HTTPTLSKey,
		MaxHeaderBytes:    cfg.HTTPMaxHeaderBytes,
		ReadHeaderTimeout: cfg.HTTPReadHeaderTimeout,
		ReadTimeout:       cfg.HTTPReadTimeout,
		WriteTimeout:      cfg.HTTPWriteTimeout,
		WriteStallTimeout: cfg.HTTPWriteStall,
		IdleTimeout:       cfg.HTTPIdleTimeout,
		MaxInFlight:       cfg.HTTPMaxInFlight,
		Uncapped:          uncappedPaths,
		Outer:             requestIDs,
		Logger:            logger,
		Registerer:        reg,
	})
	if err != nil {
		return fmt.Errorf("http server: %w", err)
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("http listener: %w", err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	logger.Info("http server listening", "addr", ln.Addr().String(), "tls", srv.TLS())

	// failed is the node's reason for giving up on the cluster, if it did;
	// the process then shuts down like on a signal and exits with it.
	var failed error
	select {
	case <-ctx.Done():
		logger.Info("shutting down", "reason", context.Cause(ctx))
	case err := <-served:
		// The listener failed; the connections it accepted still run, and
		// go through the same graceful shutdown.
		failed = fmt.Errorf("http server: %w", err)
		logger.Error("shutting down: the http server stopped", "error", err)
	case <-node.Failed():
		failed = explainNodeFailure(node.Err(), node.ID(), node.Addr())
		logger.Error("shutting down: this node cannot join the cluster", "error", node.Err())
	}
	if failed == nil {
		// A leader hands over first, so that the commands in flight on it
		// finish and followers send new ones to the next leader.
		hctx, hcancel := context.WithTimeout(context.Background(), handOverTimeout)
		if err := node.HandOver(hctx); err != nil {
			logger.Warn("could not hand leadership over before stopping", "error", err)
		}
		hcancel()
	}
	stopStreams()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), httpShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		logger.Warn("http shutdown did not finish in time; closing connections", "error", err)
		_ = srv.Close()
	}
	purger.Stop()
	shutdownErr := node.Shutdown()
	// Handlers cut off by Close end now that the node answers ErrShutdown;
	// wait for them (and their audit lines) before the audit log closes.
	waitCtx, cancelWait := context.WithTimeout(context.Background(), handlerWaitTimeout)
	defer cancelWait()
	if err := srv.Wait(waitCtx); err != nil {
		logger.Warn("http handlers still running at exit", "error", err)
	}
	if shutdownErr != nil {
		return errors.Join(failed, shutdownErr)
	}
	logger.Info("floe stopped")
	return failed
}

// explainNodeFailure adds to a node's failure what the operator can do about
// it. A refused rejoin names the ways out: remove the old member through the
// operator API, start under a new ID, or rejoin as a non-voter and promote.
func explainNodeFailure(err error, id, clusterAddr string) error {
	if !errors.Is(err, raftnode.ErrRejoinRefused) {
		return err
	}
	return fmt.Errorf("%w\n"+
		"Ways out:\n"+
		"  - remove the old member first, through any node's operator API: DELETE /management/v1/cluster/members/%s,\n"+
		"    then start this node again\n"+
		"  - or start this node under a new --node-id\n"+
		"  - or start it with --rejoin-as-nonvoter; once it has caught up as a non-voter, promote it:\n"+
		"    POST /management/v1/cluster/voters {\"id\":%q,\"address\":%q}",
		err, url.PathEscape(id), id, clusterAddr)
}

// authConfig is the operator API's auth settings: the signing key window,
// and the warehouses a grant may name.
func authConfig(cfg config, sec *security, warehouses []namedWarehouse) admin.AuthConfig {
	ac := admin.AuthConfig{KeyWindow: sec.keyWindow(), DefaultPrefix: cfg.Prefix}
	for _, w := range warehouses {
		ac.Warehouses = append(ac.Warehouses, w.spec.Name)
	}
	return ac
}

// managementRoutes serves the operator API: the cluster under
// /management/v1/cluster and the rest, purge jobs under
// /management/v1/purge-jobs, the change feed at /management/v1/events,
// backups at /management/v1/backup.
func managementRoutes(cluster, purgeJobs, authAPI, events, backupAPI http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/management/v1/events", events)
	mux.Handle("/management/v1/backup", backupAPI)
	mux.Handle("/management/v1/auth/", authAPI)
	mux.Handle("/management/", cluster)
	mux.Handle("/management/v1/purge-jobs", purgeJobs)
	mux.Handle("/management/v1/purge-jobs/", purgeJobs)
	mux.Handle("/management/v1/locations/", purgeJobs)
	// A subtree's own path, which is no route, goes where every other
	// unknown path does (a 404 in the error model): ServeMux would redirect
	// it to the subtree (307, a POST followed as a POST).
	mux.Handle("/management/v1/auth", cluster)
	mux.Handle("/management/v1/locations", cluster)
	return mux
}

// withStatusPage serves the status page at /ui and below it, and every
// other path with rest.
func withStatusPage(statusPage, rest http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/ui", statusPage)
	mux.Handle("/ui/", statusPage)
	mux.Handle("/", rest)
	return mux
}

// uncappedPaths are never refused by --http-max-in-flight, and not counted
// against it: a busy node still answers its probes (a refused liveness
// probe would get a merely busy node restarted) and its metrics (the
// overload must stay visible). They are cheap and read no replicated state
// but readiness.
var uncappedPaths = []string{"/healthz", "/readyz", "/metrics"}

// readiness is what a node reports on /readyz.
type readiness interface{ Ready() error }

// routes is the HTTP mux: the catalog under /v1/, and the operational
// endpoints.
func routes(catalog, management, tokens http.Handler, node readiness, reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/v1/", catalog)
	if tokens != nil {
		// Every method: the handler answers all but POST with 405 in the
		// OAuth error model.
		mux.Handle("/v1/oauth/tokens", tokens)
	}
	mux.Handle("/management/", management)
	// /healthz: the process is up and serving HTTP.
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	// /readyz: a leader is known and this node's state machine has caught up.
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := node.Ready(); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	// The probes and metrics take GET (and HEAD) only; anything else is a
	// 405 in the error model, as on the catalog's routes.
	for _, path := range uncappedPaths {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "MethodNotAllowedException", fmt.Sprintf("%s is not allowed on %s", r.Method, path))
		})
	}
	// Everything else is a 404 in the error model, so that a client given
	// a wrong base URI reads why; "/v1" and "/management" too, which
	// ServeMux would redirect to their subtrees (307, a POST followed as a
	// POST to a path that is no route).
	notFound := func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "NotFoundException",
			fmt.Sprintf("no such route: %s (the catalog is under /v1/, the operator API under /management/v1/)", r.URL.EscapedPath()))
	}
	mux.HandleFunc("/", notFound)
	mux.HandleFunc("/v1", notFound)
	mux.HandleFunc("/management", notFound)
	return mux
}

// writeError answers in the Iceberg error model.
func writeError(w http.ResponseWriter, status int, typ, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": status}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// refuseDotSegments answers 400, in the Iceberg error model, a request
// whose path has a "." or ".." segment, or an empty one ("a//b"). Go's
// ServeMux would redirect it to the cleaned path with a 307, which keeps
// the method: a DELETE of ".../tables/.." followed there would drop the
// namespace, one of "namespaces/db//tables/t" would drop db.t. No object is
// named "." or ".." (the catalog refuses such names); an escaped segment
// (%2E%2E) is a name, not a dot segment, and passes.
func refuseDotSegments(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := r.URL.EscapedPath()
		if strings.HasPrefix("/"+strings.TrimLeft(r.URL.Path, "/"), "/management/") {
			// The operator API names nothing "." or "..", and its router
			// reads the decoded path: "%2E%2E" or "..%2F" would be cleaned
			// into a redirect to another route.
			path = r.URL.Path
		}
		refuse := func(what string) {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{
				"message": fmt.Sprintf("path %q has %s", r.URL.EscapedPath(), what),
				"type":    "BadRequestException", "code": http.StatusBadRequest}})
		}
		// Leading slashes are collapsed (collapseLeadingSlashes); a trailing
		// one is no redirect.
		segs := strings.Split(strings.TrimLeft(path, "/"), "/")
		for i, seg := range segs {
			switch {
			case seg == "." || seg == "..":
				refuse(fmt.Sprintf("a %q segment", seg))
				return
			case seg == "" && i < len(segs)-1:
				refuse("an empty segment")
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// collapseLeadingSlashes serves "//v1/..." as "/v1/...": iceberg-rust joins
// a base URI that ends in "/" with "/v1", and a redirect would turn its
// POSTs into GETs.
func collapseLeadingSlashes(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "//") {
			u := *r.URL
			u.Path = "/" + strings.TrimLeft(u.Path, "/")
			if u.RawPath != "" {
				u.RawPath = "/" + strings.TrimLeft(u.RawPath, "/")
			}
			r2 := r.Clone(r.Context())
			r2.URL = &u
			r = r2
		}
		h.ServeHTTP(w, r)
	})
}
