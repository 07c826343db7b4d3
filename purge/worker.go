package purge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/storage"
)

// errStale stops a run whose lease token is no longer the job's.
var errStale = errors.New("purge: lease lost")

// errPermanent marks a failure retrying cannot fix.
var errPermanent = errors.New("permanent")

// errMissingManifest fails a run that found a manifest of the table
// missing. It is retried: storage may have answered "not
// found" wrongly, or an operator may restore the file.
var errMissingManifest = errors.New("purge: missing manifest")

// maxOutsideLogged bounds the per-file warnings for files outside the
// table's location in one run; the rest are counted and summarised.
const maxOutsideLogged = 20

// execute runs one job under rn's lease until it finishes, fails, loses
// its lease or ctx ends, and reports the outcome through the log.
func (s *Service) execute(ctx context.Context, job fsm.PurgeJob, rn *run) {
	log := s.log.With("job_id", job.ID, "table", job.Ident.String(), "token", rn.token)
	s.renewals.track(rn.token)
	defer s.renewals.forget(rn.token)
	// The poll loop finds runs in the local replica, which may lag (a node
	// that just restarted is still catching up): its checkpoint may predate
	// what an earlier run under this very token recorded, e.g. the root
	// phase whose root file is already gone. Start from the committed job.
	// Its root metadata is read meanwhile: a job's metadata location and
	// FileIO properties never change, so the local copy names them.
	octx, stopOpen := context.WithCancel(ctx)
	defer stopOpen()
	opened := make(chan openedJob, 1)
	go func(local fsm.PurgeJob) { opened <- s.openJob(octx, local) }(job)
	job, err := s.committedJob(ctx, job.ID, rn.token)
	if err != nil {
		stopOpen()
		<-opened
		log.Debug("purge run not started", "reason", err)
		return
	}
	rn.started.Store(true)
	if s.marks.lost(job.ID, rn.token) {
		stopOpen()
		<-opened
		s.lostRun(ctx, log, job, rn)
		return
	}
	s.marks.begin(job.ID, rn.token)
	defer s.marks.end(job.ID)
	root := <-opened
	start := time.Now()
	log.Info("purge job started", "attempt", job.Attempts+1, "sync", rn.sync, "location", job.Location,
		"metadata_location", job.MetadataLocation, "resume_phase", PhaseName(job.Progress.Phase), "resume_offset", job.Progress.Offset,
		"first_phase", PhaseName(job.FirstPhase))
	jr := &jobRun{s: s, job: job, token: rn.token, log: log, progress: job.Progress,
		committed: Checkpoint{Phase: job.Progress.Phase, Offset: job.Progress.Offset}, reportedPhase: job.Progress.Phase}
	err = jr.runRecovered(ctx, root)
	progress := jr.snapshot()
	switch {
	case errors.Is(err, errStale):
		s.m.staleLeases.Inc()
		log.Warn("purge lease lost; run stopped", "files_deleted", progress.Deleted)
		return
	case ctx.Err() != nil:
		log.Info("purge run stopped", "reason", context.Cause(ctx), "files_deleted", progress.Deleted,
			"checkpoint_phase", PhaseName(progress.Phase), "checkpoint_offset", progress.Offset)
		return
	}
	if err == nil {
		jr.removeEmptyDirsRecovered(ctx)
	}
	var cmd fsm.FinishPurgeJob
	switch {
	case err == nil:
		cmd = s.finish(job, rn, progress, fsm.OutcomeSucceeded, "")
		cmd.Progress.Phase, cmd.Progress.Offset = PhaseDone, 0
	case errors.Is(err, errPermanent):
		cmd = s.finish(job, rn, progress, fsm.OutcomeFailed, truncate(err.Error()))
	default:
		cmd = s.finish(job, rn, progress, fsm.OutcomeRetry, truncate(err.Error()))
	}
	rn.finishing.Store(true)
	if ferr := s.proposeLeased(ctx, log, cmd); ferr != nil {
		rn.finishing.Store(false)
		if errors.Is(ferr, errStale) {
			s.m.staleLeases.Inc()
			log.Warn("purge lease lost before the outcome was recorded", "outcome", cmd.Outcome)
		} else {
			log.Info("purge run stopped before its outcome was recorded", "outcome", cmd.Outcome, "error", ferr)
		}
		return
	}
	s.noteEnded(job.ID, rn.token)
	attrs := []any{"files_deleted", progress.Deleted, "bytes_deleted", progress.Bytes,
		"files_skipped_outside", progress.Skipped, "files_skipped_owned", progress.SkippedOwned, "duration", time.Since(start).Round(time.Millisecond)}
	switch {
	case err == nil:
		s.m.completed.Inc()
		log.Info("purge job completed", attrs...)
	case cmd.Outcome == fsm.OutcomeRetry && job.Attempts+1 < s.cfg.MaxAttempts:
		s.m.failed.Inc()
		s.m.retried.Inc()
		log.Warn("purge attempt failed; job back to PENDING", append(attrs, "attempt", job.Attempts+1,
			"max_attempts", s.cfg.MaxAttempts, "retry_after", s.backoff(job.Attempts), "error", err)...)
	default:
		s.m.failed.Inc()
		log.Error("purge job failed", append(attrs, "attempt", job.Attempts+1, "error", err)...)
	}
}

// finish is the command that ends rn's run of job with outcome. A retry
// carries its not-before from the same clock reading as its time, so that
// the leader's scheduler reads the backoff meant as their difference
// (dueInBackoff), whatever this node's clock says.
func (s *Service) finish(job fsm.PurgeJob, rn *run, progress fsm.PurgeProgress, outcome, msg string) fsm.FinishPurgeJob {
	now := s.cfg.Now()
	cmd := fsm.FinishPurgeJob{JobID: job.ID, Token: rn.token, Progress: progress, MaxAttempts: s.cfg.MaxAttempts,
		AtMs: now.UnixMilli(), Outcome: outcome, Error: msg}
	if outcome == fsm.OutcomeRetry {
		cmd.NotBeforeMs = now.Add(s.backoff(job.Attempts)).UnixMilli()
	}
	return cmd
}

// errLostRun is the error recorded for a run the node's process ended
// during.
var errLostRun = errors.New("this node's process ended during the previous run under this lease (a crash, an out-of-memory kill, SIGKILL or a power loss)")

// lostRun records the run the previous process left marked under rn's
// lease as a failed attempt, as a run that failed would: the job goes
// back to PENDING after its backoff, or to FAILED at MaxAttempts. A job
// whose runs end the process so reaches FAILED instead of ending it at
// every restart. If the outcome cannot be recorded, the mark stays and
// the next run under this lease tries again.
func (s *Service) lostRun(ctx context.Context, log *slog.Logger, job fsm.PurgeJob, rn *run) {
	cmd := s.finish(job, rn, job.Progress, fsm.OutcomeRetry, errLostRun.Error())
	rn.finishing.Store(true)
	if err := s.proposeLeased(ctx, log, cmd); err != nil {
		rn.finishing.Store(false)
		if errors.Is(err, errStale) {
			s.m.staleLeases.Inc()
			s.marks.end(job.ID)
		}
		log.Info("lost purge run not recorded yet", "error", err)
		return
	}
	s.marks.end(job.ID)
	s.noteEnded(job.ID, rn.token)
	s.m.lostRuns.Inc()
	s.m.failed.Inc()
	if job.Attempts+1 < s.cfg.MaxAttempts {
		s.m.retried.Inc()
		log.Warn("purge attempt failed: the process ended during its run; job back to PENDING", "attempt", job.Attempts+1,
			"max_attempts", s.cfg.MaxAttempts, "retry_after", s.backoff(job.Attempts), "checkpoint_phase", PhaseName(job.Progress.Phase))
		return
	}
	log.Error("purge job failed: the process ended during its runs", "attempt", job.Attempts+1, "error", errLostRun)
}

// committedJob reads the job linearizably and returns it if it is still
// RUNNING under token; errStale if not. A read that gets no answer is
// retried until ctx ends.
func (s *Service) committedJob(ctx context.Context, id string, token uint64) (fsm.PurgeJob, error) {
	wait := 20 * time.Millisecond
	for {
		var (
			j  fsm.PurgeJob
			ok bool
		)
		rctx, cancel := context.WithTimeout(ctx, max(s.cfg.HeartbeatTimeout, time.Second))
		err := s.cfg.Store.Read(rctx, func(r *fsm.Reader) error {
			j, ok = r.PurgeJob(id)
			return nil
		})
		cancel()
		if err == nil {
			if !ok || j.State != fsm.JobRunning || j.Lease == nil || j.Lease.Token != token {
				return j, fmt.Errorf("%w: job is %s, no longer leased under token %d", errStale, j.State, token)
			}
			return j, nil
		}
		if ctx.Err() != nil {
			return j, ctx.Err()
		}
		select {
		case <-ctx.Done():
			return j, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// backoff is the delay after the attempts-th failure (0-based).
func (s *Service) backoff(attempts int) time.Duration {
	d := s.cfg.RetryBackoff
	for range min(attempts, 30) {
		d *= 2
		if d >= s.cfg.MaxRetryBackoff {
			return s.cfg.MaxRetryBackoff
		}
	}
	return min(d, s.cfg.MaxRetryBackoff)
}

// truncate keeps last errors short in the replicated state.
func truncate(msg string) string {
	const limit = 2048
	if len(msg) <= limit {
		return msg
	}
	return msg[:limit-3] + "..."
}

// proposeLeased proposes a command guarded by this run's lease. A stale
// lease (or a job that is gone) is errStale; a command that did not get an
// answer (no leader, forwarding failed) is retried until ctx ends, since
// progress and outcome must reach the log. Retrying is safe: a command
// whose first copy did apply is refused as stale, or rewrites the same
// progress.
func (s *Service) proposeLeased(ctx context.Context, log *slog.Logger, cmd fsm.Command) error {
	wait := 20 * time.Millisecond
	for {
		pctx, cancel := context.WithTimeout(ctx, max(s.cfg.HeartbeatTimeout, time.Second))
		res, err := s.cfg.Store.Propose(pctx, cmd)
		cancel()
		if err == nil {
			rerr := res.Err()
			if errors.Is(rerr, fsm.ErrStaleLease) || errors.Is(rerr, fsm.ErrNoSuchJob) {
				return fmt.Errorf("%w: %v", errStale, rerr)
			}
			return rerr
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		log.Debug("purge command not applied; retrying", "command", fmt.Sprintf("%T", cmd), "error", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// jobRun is the state of one run: the producer (walking the table's files
// and filling batches) on the run's goroutine, and the batches in flight on
// the shared delete pool.
type jobRun struct {
	s     *Service
	job   fsm.PurgeJob
	token uint64
	log   *slog.Logger
	objs  Objects
	ctx   context.Context // the run's: deletes stop with it

	// Producer-only state.
	phase         int      // phase being walked
	uris          []string // the batch being filled
	bytes         int64    // known size of the batch being filled
	end           int64    // offset after the batch's last file
	reportedPhase int      // phase of the last checkpoint the log accepted
	phaseUnsaid   bool     // phase is later than reportedPhase: record it before deleting
	lastReport    time.Time
	outsideLogged int
	pending       sync.WaitGroup

	mu        sync.Mutex
	progress  fsm.PurgeProgress // counters (at least what was done)
	committed Checkpoint        // everything before it is done
	inflight  []*batch          // in submission order
	err       error             // first delete failure
}

type batch struct {
	end  int64 // offset after the batch's last file
	done bool
}

// openedJob is a job's storage and root metadata, or why they could not
// be had (err: from the storage, err set; from reading the metadata,
// metaErr set).
type openedJob struct {
	objs    Objects
	meta    table.Metadata
	err     error
	metaErr error
}

// openJob builds the job's storage from its FileIO properties and reads
// its root metadata file.
// A panic (a metadata file a decoder was not written for) is the open's
// error, as runRecovered makes a run's.
func (s *Service) openJob(ctx context.Context, job fsm.PurgeJob) (opened openedJob) {
	defer func() {
		if p := recover(); p != nil {
			opened = openedJob{err: s.recovered(s.log.With("job_id", job.ID), "opening the job", p)}
		}
	}()
	warehouse, _ := fsm.SplitWarehouse(job.Ident.Namespace)
	objs, err := s.cfg.Storage(warehouse, job.FileIO)
	if err != nil {
		return openedJob{err: fmt.Errorf("%w: storage for the job's FileIO properties: %v", errPermanent, err)}
	}
	meta, err := ReadMetadata(ctx, objs, job.MetadataLocation)
	return openedJob{objs: objs, meta: meta, metaErr: err}
}

// run walks and deletes the job's files, from its storage and root
// metadata as openJob found them.
func (r *jobRun) run(ctx context.Context, root openedJob) error {
	if root.err != nil {
		return root.err
	}
	// A node without the job's warehouse (during a rolling addition, or
	// after its retirement) allows none of its files: the run would skip
	// them all and succeed having deleted nothing, freeing the name and
	// location over them. The attempt fails instead; the job is retried,
	// then FAILED, until the node has the definition.
	if !r.s.allowed(r.job.Location) {
		wh, _ := fsm.SplitWarehouse(r.job.Ident.Namespace)
		return fmt.Errorf("the table's location %s lies outside this node's allowed locations: define its warehouse (%q; \"\" is the default one) or location on every node, then retry the job", r.job.Location, wh)
	}
	r.objs, r.ctx = root.objs, ctx
	meta, err := root.meta, root.metaErr
	switch {
	case errors.Is(err, storage.ErrNotFound) && r.job.Progress.Phase >= PhaseRoot:
		// An earlier run deleted the root metadata file (the last one)
		// and stopped before recording the outcome: nothing is left.
		return nil
	case errors.Is(err, storage.ErrNotFound) && r.job.FirstPhase == PhaseRoot:
		// The drop found the root to be the job's only file, so a run
		// that deleted it had nothing else to delete.
		r.log.Warn("purge: root metadata file already gone; the drop found it the table's only file", "metadata_location", r.job.MetadataLocation)
		return nil
	case errors.Is(err, storage.ErrNotFound):
		return fmt.Errorf("%w: metadata file %s is missing, so the table's files cannot be found", errPermanent, r.job.MetadataLocation)
	case errors.Is(err, ErrCorruptMetadata), errors.Is(err, storage.ErrTooLarge):
		return fmt.Errorf("%w: %v", errPermanent, err)
	case err != nil:
		return fmt.Errorf("reading metadata: %w", err)
	}
	r.startAtFirstPhase(meta)
	r.phase = r.committed.Phase
	r.end = r.committed.Offset
	r.lastReport = time.Now()
	w := Walker{
		Reader:  r.objs,
		OnPhase: r.enterPhase,
		OnMissing: func(uri string, list bool) error {
			r.s.m.missingManifests.Inc()
			if list {
				// A snapshot may name a list never written (a client
				// that committed and lost the file; tools and tests
				// that make snapshots by hand): skipped, as the
				// reference does.
				r.log.Warn("purge: manifest list missing; its manifests and their files cannot be found and are left", "uri", uri)
				return nil
			}
			// A manifest named by a list that exists: the only record
			// of the files it lists. Skipping it would leave them
			// behind under a SUCCEEDED job, and the later phases would
			// delete the manifests that still name them (after a
			// false "not found", all of them). Manifests are deleted
			// only in a phase after every phase that reads them, so no
			// earlier run of the job removed it. The run fails and is
			// retried; a job that keeps failing so waits for an
			// operator (retry once the file is back, or release).
			r.log.Warn("purge: manifest missing; the files it lists cannot be found", "uri", uri)
			return fmt.Errorf("%w: %s is missing, so the files it lists cannot be found", errMissingManifest, uri)
		},
		// Only the table's own files are read, as only they are deleted:
		// a snapshot may name any path, and what a read finds (that the
		// file exists, its first bytes in a parser's error) reaches the
		// job's record and a synchronous drop's answer, so a principal
		// who may write one table could otherwise probe another
		// namespace's or warehouse's files through its purge. Entries of
		// a manifest outside the table's locations lie outside them too,
		// but for a table written oddly: they are left in place.
		MayRead: func(uri string) bool { return r.s.allowed(uri) && r.inside(uri) },
		OnNotRead: func(uri string) {
			r.s.m.notRead.Inc()
			r.log.Warn("purge: manifest list or manifest outside the table's locations (or the allowed locations) not read; its entries are left in place", "uri", uri)
		},
	}
	err = w.Walk(ctx, meta, r.job.MetadataLocation, r.committed, func(f File) error {
		return r.file(ctx, f)
	})
	if err == nil {
		err = r.drain()
	} else {
		// Stopping: delete nothing more, but let the batches in flight end
		// so that the checkpoint reported with the outcome is exact.
		r.uris = nil
		r.pending.Wait()
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, ErrCorruptMetadata) || errors.Is(err, storage.ErrTooLarge) {
		// A file too large to read whole stays so: retrying cannot help.
		return fmt.Errorf("%w: %v", errPermanent, err)
	}
	return err
}

// startAtFirstPhase moves a run whose checkpoint lies before the job's
// FirstPhase to that phase, already recorded: the dropping node saw no file
// in any earlier phase, so nothing a later owner must read can be deleted
// before the first phase's record, which the stamp stands for. The claim is
// checked against the root metadata file itself (it is what every run of
// the job reads); a file that names more than the stamp said (it was
// written over after the drop) is walked from the checkpoint as if no
// stamp were there.
func (r *jobRun) startAtFirstPhase(meta table.Metadata) {
	first := r.job.FirstPhase
	if first <= r.committed.Phase {
		return
	}
	if got := FirstPhase(meta); got < first {
		r.log.Warn("purge: the job's first phase does not match its metadata file; walking every phase",
			"first_phase", PhaseName(first), "metadata_first_phase", PhaseName(got))
		return
	}
	r.mu.Lock()
	r.committed = Checkpoint{Phase: first}
	r.mu.Unlock()
	r.reportedPhase = first
}

// enterPhase finishes the previous phase (every batch done). The new phase
// is recorded in the log before any of its files is deleted (flush): a
// stale worker can then never be in a later phase than the job's
// checkpoint, so it never deletes a manifest (or list, or the root) that
// the new owner still has to read. A phase with nothing to delete is not
// recorded on its own; the next one's record covers it.
func (r *jobRun) enterPhase(phase int) error {
	if err := r.drain(); err != nil {
		return err
	}
	r.phase, r.end = phase, 0
	if phase == r.committed.Phase {
		r.end = r.committed.Offset
	}
	if phase <= r.reportedPhase {
		return nil
	}
	r.mu.Lock()
	r.committed = Checkpoint{Phase: phase}
	r.mu.Unlock()
	r.phaseUnsaid = true
	return nil
}

// inside reports whether uri lies in the dropped table's location or in
// one it had moved away from.
func (r *jobRun) inside(uri string) bool {
	for _, loc := range r.job.Locations() {
		if storage.IsWithin(loc, uri) {
			return true
		}
	}
	return false
}

// file takes one reachable file: outside the table's locations it is
// skipped; otherwise it joins the batch being filled.
func (r *jobRun) file(ctx context.Context, f File) error {
	if err := r.failure(); err != nil {
		return err
	}
	r.end = f.Offset + 1
	if !r.inside(f.URI) {
		r.s.m.skippedOutside.Inc()
		r.mu.Lock()
		r.progress.Skipped++
		r.mu.Unlock()
		if r.outsideLogged < maxOutsideLogged {
			r.outsideLogged++
			r.log.Warn("purge: file outside the table's location left in place", "uri", f.URI, "location", r.job.Location, "phase", PhaseName(f.Phase))
		}
	} else {
		r.uris = append(r.uris, f.URI)
		r.bytes += f.Size
		if f.Decoded != "" && r.inside(f.Decoded) {
			// Checked by the guard like any other file.
			r.uris = append(r.uris, f.Decoded)
		}
	}
	if len(r.uris) >= r.s.cfg.DeleteBatchSize {
		r.flush()
		if time.Since(r.lastReport) >= r.s.cfg.CheckpointInterval {
			return r.report(ctx)
		}
	}
	return nil
}

// runRecovered is run with a panic turned into the run's failure: a
// decoder or storage client meeting input it was not written for (a
// crafted manifest, say) fails the attempt, retried and then FAILED like
// any other, rather than killing the process, then the next node the
// job's lease goes to, and so the cluster's quorum.
func (r *jobRun) runRecovered(ctx context.Context, root openedJob) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = r.s.recovered(r.log, "the run", p)
			// As run does on an error: the batches in flight finish
			// first, so the progress reported with the outcome counts
			// them and nothing is deleted after it is recorded.
			r.pending.Wait()
		}
	}()
	return r.run(ctx, root)
}

// removeEmptyDirsRecovered is removeEmptyDirs with a panic logged (see
// runRecovered): best effort, as removeEmptyDirs is.
func (r *jobRun) removeEmptyDirsRecovered(ctx context.Context) {
	defer func() {
		if p := recover(); p != nil {
			_ = r.s.recovered(r.log, "removing empty directories", p)
		}
	}()
	r.removeEmptyDirs(ctx)
}

// deleteRecovered is r.objs.Delete with a panic turned into its error (see
// runRecovered): it runs on the delete pool's threads, where a panic would
// end the process.
func (r *jobRun) deleteRecovered(ctx context.Context, uris []string) (n int, err error) {
	defer func() {
		if p := recover(); p != nil {
			n, err = 0, r.s.recovered(r.log, "the delete", p)
		}
	}()
	return r.objs.Delete(ctx, uris)
}

// recovered counts and logs (with the stack) a panic p recovered in a
// purge run at where, and returns it as the error it becomes.
func (s *Service) recovered(log *slog.Logger, where string, p any) error {
	s.m.panics.Inc()
	log.Error("purge run panicked", "where", where, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
	return fmt.Errorf("purge: %s panicked: %v", where, p)
}

// decodedLocalURI returns, for a file: URI whose path holds %-escapes,
// the same URI with its path decoded. Writers disagree on where such a
// file lies: iceberg-go's local FileIO decodes the path of the URI a
// manifest stores (a partition value "x/y" is stored as name=x%2Fy and
// written to name=x/y), while Hadoop's keeps it as written; S3 keys are
// literal for both. A purge deletes both spellings, so a file is not left
// behind while counted as deleted. ok is false when there is nothing to
// decode, the escapes are malformed, or the decoded path has an empty,
// "." or ".." segment (it could then leave the directory the URI names).
func decodedLocalURI(uri string) (string, bool) {
	rest, ok := strings.CutPrefix(uri, "file:")
	if !ok || !strings.Contains(rest, "%") {
		return "", false
	}
	prefix := "file:"
	if strings.HasPrefix(rest, "//") {
		i := strings.IndexByte(rest[2:], '/')
		if i < 0 {
			return "", false
		}
		prefix, rest = prefix+rest[:2+i], rest[2+i:]
	}
	dec, err := url.PathUnescape(rest)
	if err != nil || dec == rest || !strings.HasPrefix(dec, "/") {
		return "", false
	}
	for _, seg := range strings.Split(dec[1:], "/") {
		if seg == "" || seg == "." || seg == ".." || strings.ContainsRune(seg, 0) {
			return "", false
		}
	}
	return prefix + dec, true
}

// flush hands the batch being filled to the delete pool (or runs it here
// when the pool's queue is full), once guard has taken out every file the
// batch must not touch.
func (r *jobRun) flush() {
	b := &batch{end: r.end}
	uris, size := r.uris, r.bytes
	r.uris, r.bytes = nil, 0
	r.mu.Lock()
	r.inflight = append(r.inflight, b)
	r.mu.Unlock()
	if len(uris) > 0 {
		var err error
		if r.phaseUnsaid {
			uris, err = r.recordPhaseAndGuard(uris)
		} else {
			uris, err = r.guard(uris)
		}
		if err != nil {
			r.complete(b, 0, 0, err)
			return
		}
	}
	if len(uris) == 0 {
		r.complete(b, 0, 0, nil)
		return
	}
	r.pending.Add(1)
	task := func() {
		defer r.pending.Done()
		var (
			n     int
			err   error
			start = time.Now()
		)
		for range maxFencedSends {
			var (
				fctx   *fenced
				cancel context.CancelFunc
			)
			if fctx, cancel, err = r.s.fence(r.ctx, r.token); err != nil {
				r.complete(b, 0, 0, fmt.Errorf("deleting %d files: %w", len(uris), err))
				return
			}
			n, err = r.deleteRecovered(fctx, uris)
			// Cut off only when the fence cancelled the request: one it
			// let finish past the deadline (written whole, awaiting its
			// answer) and that then failed on its own (storage's own
			// timeout, a server error) failed, and is not sent again.
			expired := err != nil && fctx.cutOff() && fctx.Err() != nil && r.ctx.Err() == nil
			cancel()
			if !expired {
				break
			}
			// Cut off at the fence's deadline, not failed: sent again
			// (deleting is idempotent) under a fresh renewal.
		}
		r.s.m.batchLatency.Observe(time.Since(start).Seconds())
		if err == nil {
			r.complete(b, n, size, nil)
			return
		}
		r.s.m.deleteErrors.Add(float64(len(uris) - n))
		err = fmt.Errorf("deleting %d of %d files failed: %w", len(uris)-n, len(uris), err)
		if errors.Is(err, storage.ErrSymlink) || errors.Is(err, storage.ErrIsDirectory) || errors.Is(err, storage.ErrInvalidURI) {
			// A path through a symbolic link stays so, a directory named
			// as a file stays a directory, and a path that does not
			// parse never will: no retry can delete it (the purge never
			// follows links nor removes what is not a file). FAILED at
			// once, for an operator to deal with.
			err = fmt.Errorf("%w: %w", errPermanent, err)
		}
		r.complete(b, n, 0, err)
	}
	ran := "pool"
	if r.s.pool.submit(task) {
		ran = "inline"
	}
	r.s.m.batches.WithLabelValues(ran).Inc()
}

// recordPhaseAndGuard records the phase being walked in the log and guards
// the phase's first batch, both at once: the two wait on the leader (the
// record to commit, the guard's read for its read index), and neither
// needs the other. Nothing of the batch is deleted unless both succeed; a
// stale lease is errStale.
func (r *jobRun) recordPhaseAndGuard(uris []string) ([]string, error) {
	recorded := make(chan error, 1)
	go func() { recorded <- r.report(r.ctx) }()
	keep, gerr := r.guard(uris)
	if err := <-recorded; err != nil {
		return nil, err
	}
	r.reportedPhase, r.phaseUnsaid = r.phase, false
	if gerr != nil {
		return nil, gerr
	}
	return keep, nil
}

// guard is the last check before a batch is deleted, the second lock
// behind location ownership: one linearizable read of the location index
// drops every file that lies inside a live table's location (the dropped
// table is no longer live) or outside the allowed locations. With
// ownership enforced when locations are claimed it drops nothing; it
// protects state written before that, and any path that would miss it.
// A JSON file inside a live view's location (a table may share a view's
// place, and its metadata log may name the view's earlier metadata files)
// is read, and deleted only if it is a table's metadata file. A read of
// the index that fails fails the batch (the run is retried later); it
// never deletes unchecked.
func (r *jobRun) guard(uris []string) ([]string, error) {
	keep := uris[:0:0]
	type skipped struct{ uri, reason, owner string }
	var skips, inViews []skipped
	ctx, cancel := context.WithTimeout(r.ctx, max(r.s.cfg.HeartbeatTimeout, time.Second))
	defer cancel()
	err := r.s.cfg.Store.Read(ctx, func(rd *fsm.Reader) error {
		keep, skips, inViews = keep[:0], skips[:0], inViews[:0]
		// The same read fences the run: a run whose lease was lost (the
		// job failed or released, or leased again elsewhere) deletes no
		// further batch, even before the local replica's sweep stops it.
		if j, ok := rd.PurgeJob(r.job.ID); !ok || j.State != fsm.JobRunning || j.Lease == nil || j.Lease.Token != r.token {
			return fmt.Errorf("%w: job %s is no longer leased to this run (token %d)", errStale, r.job.ID, r.token)
		}
		for _, u := range uris {
			if !r.s.allowed(u) {
				skips = append(skips, skipped{uri: u, reason: "disallowed"})
				continue
			}
			if owner, ok := rd.LocationOwner(u); ok {
				skips = append(skips, skipped{uri: u, reason: "owned", owner: owner.Ident().String()})
				continue
			}
			if storage.MayBeViewMetadata(u) {
				if v, ok := rd.ViewOverlapping(u); ok {
					inViews = append(inViews, skipped{uri: u, reason: "view", owner: v.Ident().String()})
					continue
				}
			}
			keep = append(keep, u)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("checking %d files against the live tables' locations: %w", len(uris), err)
	}
	for _, f := range inViews {
		raw, err := r.objs.Read(r.ctx, f.uri)
		if err == nil && storage.IsTableMetadata(raw) {
			keep = append(keep, f.uri)
			continue
		}
		skips = append(skips, f) // a view's, unreadable (gone, or unreachable) or not metadata
	}
	if len(skips) > 0 {
		r.mu.Lock()
		r.progress.SkippedOwned += int64(len(skips))
		r.mu.Unlock()
		for _, sk := range skips {
			r.s.m.skippedOwned.WithLabelValues(sk.reason).Inc()
			if r.outsideLogged < maxOutsideLogged {
				r.outsideLogged++
				r.log.Warn("purge: file left in place", "uri", sk.uri, "reason", sk.reason, "owner", sk.owner)
			}
		}
	}
	return keep, nil
}

// maxFencedSends bounds how often a delete batch cut off by its fence's
// deadline (fence.go) is sent again under a fresh renewal before it fails.
const maxFencedSends = 4

// dirRemover is storage that has directories: local files
// (storage.Mux.RemoveEmptyDirs; a no-op for object stores).
type dirRemover interface {
	RemoveEmptyDirs(ctx context.Context, uri string) (int, error)
}

// removeEmptyDirs removes the directories a successful run left empty at
// and under the table's locations, before the outcome lifts their
// tombstones, so that no new table can be writing there yet. Only empty
// directories go: a file anyone put there since keeps its directory. A
// location is left alone when a live table's location overlaps it (state
// from before locations were owned) or it lies outside the allowed
// locations, as the guard leaves such files, and when the run no longer
// holds the job's lease. Best effort: the files are gone, so a failure is
// logged and the job still succeeds.
func (r *jobRun) removeEmptyDirs(ctx context.Context) {
	dr, ok := r.objs.(dirRemover)
	if !ok || !slices.ContainsFunc(r.job.Locations(), func(loc string) bool {
		scheme, _, _, err := storage.ParseURI(loc)
		return err == nil && scheme == storage.SchemeFile
	}) {
		return // object stores have no directories: no read, no fence
	}
	var locs []string
	rctx, cancel := context.WithTimeout(ctx, max(r.s.cfg.HeartbeatTimeout, time.Second))
	err := r.s.cfg.Store.Read(rctx, func(rd *fsm.Reader) error {
		locs = locs[:0]
		if j, ok := rd.PurgeJob(r.job.ID); !ok || j.State != fsm.JobRunning || j.Lease == nil || j.Lease.Token != r.token {
			return fmt.Errorf("%w: job %s is no longer leased to this run (token %d)", errStale, r.job.ID, r.token)
		}
		for _, loc := range r.job.Locations() {
			if _, owned := rd.LocationOwner(loc); !owned && r.s.allowed(loc) {
				locs = append(locs, loc)
			}
		}
		return nil
	})
	cancel()
	if err != nil {
		r.log.Warn("purge: empty directories left in place", "error", err)
		return
	}
	for _, loc := range locs {
		fctx, cancel, err := r.s.fence(ctx, r.token)
		if err != nil {
			r.log.Warn("purge: empty directories left in place", "location", loc, "error", err)
			return
		}
		n, err := dr.RemoveEmptyDirs(fctx, loc)
		cancel()
		r.s.m.dirsRemoved.Add(float64(n))
		if err != nil {
			r.log.Warn("purge: empty directories under a location not all removed", "location", loc, "removed", n, "error", err)
		}
	}
}

// allowed reports whether uri lies inside one of the allowed locations
// (always, when none are configured).
func (s *Service) allowed(uri string) bool {
	if len(s.cfg.AllowedLocations) == 0 {
		return true
	}
	for _, p := range s.cfg.AllowedLocations {
		if storage.IsWithin(p, uri) {
			return true
		}
	}
	return false
}

// complete records a finished batch and moves the checkpoint over every
// batch done in submission order.
func (r *jobRun) complete(b *batch, deleted int, size int64, err error) {
	r.s.m.filesDeleted.Add(float64(deleted))
	r.s.m.bytesDeleted.Add(float64(size))
	r.mu.Lock()
	defer r.mu.Unlock()
	r.progress.Deleted += int64(deleted)
	r.progress.Bytes += size
	if err != nil {
		if r.err == nil {
			r.err = err
		}
		return // the checkpoint stays before this batch
	}
	b.done = true
	for len(r.inflight) > 0 && r.inflight[0].done {
		r.committed.Offset = r.inflight[0].end
		r.inflight = r.inflight[1:]
	}
}

func (r *jobRun) failure() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// drain flushes the batch being filled and waits for every batch in flight.
func (r *jobRun) drain() error {
	r.flush()
	r.pending.Wait()
	return r.failure()
}

// snapshot is the progress to record: the checkpoint plus the counters.
func (r *jobRun) snapshot() fsm.PurgeProgress {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.progress
	p.Phase, p.Offset = r.committed.Phase, r.committed.Offset
	return p
}

// report records the checkpoint through the log; a stale lease stops the run.
func (r *jobRun) report(ctx context.Context) error {
	r.lastReport = time.Now()
	return r.s.proposeLeased(ctx, r.log, fsm.ReportPurgeProgress{
		JobID: r.job.ID, Token: r.token, Progress: r.snapshot(), AtMs: r.s.cfg.Now().UnixMilli(),
	})
}
