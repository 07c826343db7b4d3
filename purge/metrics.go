package purge

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	jobs             *prometheus.GaugeVec
	oldestPending    prometheus.Gauge
	completed        prometheus.Counter
	failed           prometheus.Counter
	retried          prometheus.Counter
	filesDeleted     prometheus.Counter
	bytesDeleted     prometheus.Counter
	skippedOutside   prometheus.Counter
	skippedOwned     *prometheus.CounterVec
	deleteErrors     prometheus.Counter
	dirsRemoved      prometheus.Counter
	unrenewed        prometheus.Counter
	batches          *prometheus.CounterVec
	batchLatency     prometheus.Histogram
	leases           *prometheus.CounterVec
	staleLeases      prometheus.Counter
	panics           prometheus.Counter
	lostRuns         prometheus.Counter
	missingManifests prometheus.Counter
	notRead          prometheus.Counter
	wakes            prometheus.Counter
	leaderBeats      prometheus.Counter
	all              []prometheus.Collector
}

func newMetrics() *metrics {
	m := &metrics{
		jobs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "floe_purge_jobs", Help: "Purge jobs in the replicated state by state (FAILED counts unreleased jobs; RELEASED the released ones).",
		}, []string{"state"}),
		oldestPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "floe_purge_oldest_pending_age_seconds", Help: "Age of the oldest PENDING purge job, 0 when none.",
		}),
		completed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_purge_jobs_completed_total", Help: "Purge jobs this node finished as SUCCEEDED.",
		}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_purge_jobs_failed_total", Help: "Purge runs on this node that ended in a failure (retried or FAILED).",
		}),
		retried: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_purge_jobs_retried_total", Help: "Purge runs on this node that failed transiently and were sent back to PENDING or FAILED at max attempts.",
		}),
		filesDeleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_purge_files_deleted_total", Help: "Files deleted by purge jobs on this node (a missing file counts as deleted).",
		}),
		bytesDeleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_purge_bytes_deleted_total", Help: "Bytes of deleted files whose size the metadata records.",
		}),
		skippedOutside: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_purge_files_skipped_outside_total", Help: "Reachable files left alone because they lie outside the dropped table's location.",
		}),
		unrenewed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_purge_batches_unfenced_total", Help: "Delete batches (and removals of a purged table's empty directories) not sent because no heartbeat of this node had renewed the job's lease within half the heartbeat timeout, and none did within a whole one (the lease may have been reassigned).",
		}),
		dirsRemoved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_purge_directories_removed_total", Help: "Empty directories removed under dropped tables' locations after their purges succeeded (local file warehouses; object stores have none).",
		}),
		skippedOwned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floe_purge_files_skipped_guarded_total",
			Help: "Files a purge batch left in place at the last check before deleting: inside another live table's location (owned), outside the allowed locations (disallowed), or a file in a live view's location that is not a table's metadata file (view).",
		}, []string{"reason"}),
		deleteErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_purge_delete_errors_total", Help: "Files a delete batch could not delete.",
		}),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floe_purge_delete_batches_total", Help: "Delete batches by where they ran: pool, or inline on the producer when the pool's queue was full.",
		}, []string{"ran"}),
		batchLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "floe_purge_delete_batch_duration_seconds", Help: "Latency of one bulk delete batch.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		leases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floe_purge_lease_assignments_total", Help: "Leases the scheduler on this node assigned: new (a PENDING job) or reassigned (away from a silent node).",
		}, []string{"kind"}),
		staleLeases: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_purge_stale_leases_total", Help: "Runs on this node stopped because their lease token was no longer current.",
		}),
		panics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_purge_run_panics_total", Help: "Purge runs on this node that panicked (a decoder or storage client meeting input it was not written for); each failed its attempt instead of the process.",
		}),
		lostRuns: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_purge_lost_runs_total", Help: "Purge runs this node's previous process ended during (crash, OOM kill, SIGKILL), each recorded as a failed attempt when the node got the job's lease back.",
		}),
		leaderBeats: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_purge_new_leader_heartbeats_total", Help: "Heartbeats this node sent at once because a new leader became known.",
		}),
		wakes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_purge_scheduler_wakes_total", Help: "Times the leader's purge scheduler was woken by a newly claimable job instead of waiting for its next poll.",
		}),
		missingManifests: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_purge_missing_manifests_total", Help: "Manifest lists (skipped) or manifests (the run fails) missing when a purge walked them.",
		}),
		notRead: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_purge_manifests_not_read_total", Help: "Manifest lists or manifests a purge did not read because they lie outside the table's own locations or the allowed locations; their entries are left in place.",
		}),
	}
	m.all = []prometheus.Collector{m.jobs, m.oldestPending, m.completed, m.failed, m.retried, m.filesDeleted, m.bytesDeleted,
		m.skippedOutside, m.skippedOwned, m.deleteErrors, m.dirsRemoved, m.unrenewed, m.batches, m.batchLatency, m.leases, m.staleLeases, m.panics, m.lostRuns, m.missingManifests, m.notRead, m.wakes, m.leaderBeats}
	return m
}

func (m *metrics) register(reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	for i, c := range m.all {
		if err := reg.Register(c); err != nil {
			for _, done := range m.all[:i] {
				reg.Unregister(done)
			}
			return fmt.Errorf("purge: register metrics: %w", err)
		}
	}
	return nil
}

func (m *metrics) unregister(reg prometheus.Registerer) {
	if reg == nil {
		return
	}
	for _, c := range m.all {
		reg.Unregister(c)
	}
}
