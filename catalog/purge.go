package catalog

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/storage"
	"github.com/floe-catalog/floe/purge"
)

// AsyncPurgeHeader opts a purging drop into asynchronous deletion: with
// the value "true" the drop answers 204 as soon as the table is gone from
// the catalog and its purge job is committed. Without it the node that took
// the request runs the job and answers when every file is gone (or the job
// failed). Either way the job is the same, and survives crashes.
const AsyncPurgeHeader = "X-Gravitino-Async-Purge"

// Purger runs purge jobs on this node: a *purge.Service.
type Purger interface {
	// NodeID names this node in leases.
	NodeID() string
	// LeaseTimeout is how long a lease outlives a silent node.
	LeaseTimeout() time.Duration
	// Run starts the job if it is leased to this node and returns a
	// channel closed when the local run ends.
	Run(jobID string) <-chan struct{}
}

// purger returns the service that runs this server's synchronous purges:
// Config.Purger, else a purge service private to this server, which does not
// heartbeat: fine for a catalog used alone, but a node of a cluster passes
// its node-wide service so the scheduler sees the lease renewed.
func (s *Server) purger() (Purger, error) {
	s.purgerMu.Lock()
	defer s.purgerMu.Unlock()
	if s.closed {
		return nil, &apiError{status: http.StatusServiceUnavailable, typ: "ServiceUnavailableException", msg: "the catalog is shutting down", retryAfter: "1"}
	}
	if s.purgerSvc != nil {
		return s.purgerSvc, nil
	}
	svc, err := purge.New(purge.Config{
		NodeID:           "inline-" + uuid.NewString(),
		Store:            s.store,
		Storage:          purge.StorageFor(s.purgeBases(), 0),
		AllowedLocations: s.allowedEverywhere(),
		Logger:           s.log,
		Now:              s.cfg.Now,
	})
	if err != nil {
		return nil, err
	}
	s.purgerSvc, s.ownPurger = svc, svc
	return svc, nil
}

// Close stops what the server started itself: the private purge service
// of a server built without Config.Purger (its runs stop; their jobs stay
// leased until another node's scheduler reassigns them). Requests still in
// flight may fail. Close is idempotent.
func (s *Server) Close() {
	s.purgerMu.Lock()
	svc := s.ownPurger
	s.closed = true
	s.purgerMu.Unlock()
	if svc != nil {
		svc.Stop()
	}
}

// purgeSpec is the job a purging drop adds: id (UUIDv7), the FileIO
// properties of the request's warehouse (every table lies inside its
// allowed locations), who dropped
// it, and for a synchronous drop a lease to this node.
func (s *Server) purgeSpec(ctx context.Context, p Purger, async bool, principal string) (*fsm.PurgeJobSpec, error) {
	wh := s.whOf(ctx)
	id, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	spec := &fsm.PurgeJobSpec{
		ID:        id.String(),
		Warehouse: wh.location,
		// The storage settings without credentials: the job is replicated
		// and snapshotted; the node that runs it uses its own credentials.
		FileIO:    storage.WithoutSecrets(wh.objects.ClientConfig(wh.location)),
		DroppedBy: principal,
	}
	if !async {
		spec.LeaseNode = p.NodeID()
		spec.LeaseExpiresMs = s.cfg.Now().Add(p.LeaseTimeout()).UnixMilli()
	}
	return spec, nil
}

// stampFirstPhase tells the job which purge phase holds the table's first
// file (purge.FirstPhase), when this node has the table's current metadata
// file parsed in its cache: a small table's purge then skips recording its
// first phase, one log entry of three. It reads nothing from storage, so a
// drop costs no more for it; without the file cached the job starts at
// phase 0 as always. Only a file named with a UUID (<version>-<uuid>
// .metadata.json, as floe and the Java, Python and Rust clients name
// theirs) is judged: such a path is never reused, so the cached parse is
// the file. The state machine takes the stamp only if the table is still at
// that file when the drop applies. Nothing is stamped until every node's
// purge heartbeat announces fsm.PurgeFeatureFirstPhase: a replica on an
// older binary would keep the job without it.
func (s *Server) stampFirstPhase(spec *fsm.PurgeJobSpec, id fsm.Ident) {
	if s.cache.lru == nil {
		return
	}
	var (
		loc   string
		first int
	)
	_ = s.store.StaleRead(func(r *fsm.Reader) error {
		t, ok := r.Table(id)
		if !ok || !metadataFileRE.MatchString(path.Base(t.MetadataLocation)) {
			return nil
		}
		tm, ok := s.cache.get(t.MetadataLocation)
		if !ok {
			return nil
		}
		// A node on an older binary would drop the stamp from its copy of
		// the job: stamp only once every node's heartbeat says it has
		// the feature. Asked last: it decodes every node's heartbeat.
		if !fsm.PurgeFeaturesEverywhere(r.PurgeNodes(), fsm.PurgeFeatureFirstPhase) {
			return nil
		}
		loc, first = t.MetadataLocation, purge.FirstPhase(tm.meta)
		return nil
	})
	if first > 0 {
		spec.FirstPhase, spec.FirstPhaseOf = first, loc
	}
}

// dropJobEvent reports whether every node's purge heartbeat announces
// fsm.PurgeFeatureDropJobEvent, so that a purging drop may be written as
// DropTable body version 2 (its table-dropped event carries the job's
// state): replicas on an older binary would record another event under the
// same index. It reads the local replica at most once a second, since every
// drop asks.
func (s *Server) dropJobEvent() bool {
	s.featMu.Lock()
	defer s.featMu.Unlock()
	now := s.cfg.Now()
	if now.Before(s.featNext) {
		return s.featOK
	}
	ok := false
	_ = s.store.StaleRead(func(r *fsm.Reader) error {
		ok = fsm.PurgeFeaturesEverywhere(r.PurgeNodes(), fsm.PurgeFeatureDropJobEvent)
		return nil
	})
	s.featOK, s.featNext = ok, now.Add(time.Second)
	return ok
}

// olderBinaryWindow is how recent a node's purge heartbeat must be for
// checkMovesEverywhere to count the node: a node removed from the cluster
// (its row stays until the purge retention passes) stops counting after
// it; a node stopped for an upgrade announces its new binary as it starts.
const olderBinaryWindow = 10 * time.Minute

// checkMovesEverywhere answers 503 while a node whose purge heartbeat
// arrived within olderBinaryWindow lacks fsm.PurgeFeatureMoves: its binary
// predates CommitTables body version 3 and would stop at a commit that
// moves a table (set-location, a register with overwrite), during a
// rolling upgrade. Nothing is written before it; a 503 is not kept under an
// Idempotency-Key, so the same request succeeds once every node is
// upgraded. It reads the local replica: a node that started on an older
// binary since is missed, as the upgrade notes say.
func (s *Server) checkMovesEverywhere() error {
	old := s.nodesWithout(fsm.PurgeFeatureMoves)
	if len(old) == 0 {
		return nil
	}
	return &apiError{status: http.StatusServiceUnavailable, typ: "ServiceUnavailableException", retryAfter: "30",
		msg: fmt.Sprintf("cannot move a table while node(s) %s run an older release that would stop at the commit: upgrade every node first", strings.Join(old, ", "))}
}

func asyncPurgeRequested(r *http.Request) bool {
	return strings.EqualFold(strings.TrimSpace(r.Header.Get(AsyncPurgeHeader)), "true")
}

// awaitPurge runs a synchronous drop's job here and waits, reading the job
// linearizably, until it has SUCCEEDED (nil) or FAILED (500 naming the job
// and its last error), or the request ends. If this node cannot finish it
// (it fails transiently, or loses its lease), another node will; the wait
// goes on regardless, bounded by the request's context.
func (s *Server) awaitPurge(ctx context.Context, p Purger, jobID string, dropped fsm.Table) error {
	done := p.Run(jobID)
	wait := 10 * time.Millisecond
	var failingSince time.Time // of the reads failing in a row
	for {
		var (
			job   fsm.PurgeJob
			found bool
		)
		err := s.store.Read(ctx, func(r *fsm.Reader) error {
			if job, found = r.PurgeJob(jobID); found {
				return nil
			}
			// An idempotent replay of the drop returns the first request's
			// outcome, whose job has another id: find it by the table.
			jobs, _ := r.PurgeJobs(fsm.PurgeJobFilter{Namespace: dropped.Namespace, Table: dropped.Name}, 0)
			for i := len(jobs) - 1; i >= 0; i-- {
				if jobs[i].TableUUID == dropped.UUID {
					job, found = jobs[i], true
					break
				}
			}
			return nil
		})
		if err == nil {
			failingSince = time.Time{}
		} else if failingSince.IsZero() {
			failingSince = time.Now()
		}
		switch {
		case err != nil && ctx.Err() != nil:
			return purgeUnfinished(jobID, ctx.Err())
		case err != nil && time.Since(failingSince) >= awaitReadFailures:
			// This node cannot read the job (it lost its leader, or was
			// removed from the cluster while the job moved to another
			// node): answer rather than hold the client until it gives up.
			s.log.Warn("waiting for purge job: reads keep failing; answering", "job_id", jobID,
				"failing_for", time.Since(failingSince).Round(time.Millisecond), "error", err)
			return purgeUnfinished(jobID, err)
		case err != nil:
			s.log.Debug("waiting for purge job: read failed; retrying", "job_id", jobID, "error", err)
		case !found && jobID == "":
			// A replay whose job was pruned since: only a SUCCEEDED or a
			// released FAILED job is pruned, and which one is no longer
			// known. 204, what the first request answered unless the job
			// FAILED and an operator released it, which leaves the name
			// free as a success does.
			s.cache.remove(dropped.MetadataLocation)
			return nil
		case !found:
			return fmt.Errorf("purge job %s of table %s not found after the drop", jobID, dropped.Ident())
		case job.State == fsm.JobSucceeded:
			s.cache.remove(dropped.MetadataLocation)
			return nil
		case job.State == fsm.JobFailed:
			return &apiError{status: http.StatusInternalServerError, typ: "PurgeFailedException", msg: fmt.Sprintf(
				"table %s was dropped but purge job %s FAILED after %d attempt(s): %s; files may remain (see /management/v1/purge-jobs/%s)",
				dropped.Ident(), job.ID, job.Attempts, job.LastError, job.ID)}
		}
		select {
		case <-done:
			done = nil // the local run ended; keep reading until the job does
		case <-time.After(wait):
			wait = min(2*wait, 250*time.Millisecond)
		case <-ctx.Done():
			return purgeUnfinished(jobID, ctx.Err())
		case <-s.cfg.Stopping:
			return purgeUnfinished(jobID, errStopping)
		}
	}
}

// awaitReadFailures is how long a synchronous purge waits for its job
// while every read of it fails before it answers (500: the job goes on).
// A variable for tests.
var awaitReadFailures = 30 * time.Second

// errStopping is why a synchronous purge stopped waiting when its node
// began to stop.
var errStopping = errors.New("this node is stopping")

// purgeUnfinished answers a synchronous purge whose wait ended: the drop
// took effect, so the answer is a 500, not a 503 a client would resend by
// itself into a 404.
// A replay that found its job by the table has no id to name (jobID "").
func purgeUnfinished(jobID string, cause error) error {
	job := "its purge job"
	if jobID != "" {
		job = "purge job " + jobID
	}
	return &apiError{status: http.StatusInternalServerError, typ: "InternalServerError", msg: fmt.Sprintf(
		"the table was dropped; %s had not finished when the request ended (%v) and continues in the background", job, cause)}
}

// nodesWithout lists the nodes whose purge heartbeat arrived within
// olderBinaryWindow without the feature bit: their binaries would stop at
// an entry that needs it. It reads the local replica.
func (s *Server) nodesWithout(feature uint64) []string {
	cutoff := s.cfg.Now().Add(-olderBinaryWindow).UnixMilli()
	var old []string
	_ = s.store.StaleRead(func(r *fsm.Reader) error {
		for _, n := range r.PurgeNodes() {
			if n.Features&feature == 0 && n.AtMs >= cutoff {
				old = append(old, n.Node)
			}
		}
		return nil
	})
	return old
}
