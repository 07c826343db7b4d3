package catalog

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	requests       *prometheus.CounterVec
	latency        *prometheus.HistogramVec
	commitRetries  prometheus.Counter
	turnTimeouts   prometheus.Counter
	orphanedFiles  prometheus.Counter
	metricsReports *prometheus.CounterVec
	cacheHits      prometheus.Counter
	cacheMisses    prometheus.Counter
	staleReads     prometheus.Counter
	idemStored     prometheus.Counter
	idemReplays    prometheus.Counter
	idemConflicts  prometheus.Counter
	idemNonV7      prometheus.Counter
	idemPruned     prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floe_catalog_requests_total", Help: "Catalog API requests by operation and HTTP status.",
		}, []string{"op", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "floe_catalog_request_duration_seconds", Help: "Catalog API request latency by operation.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"op"}),
		commitRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_catalog_commit_retries_total", Help: "Commits rebuilt on newer metadata after losing a compare-and-set.",
		}),
		turnTimeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_catalog_commit_turn_timeouts_total", Help: "Commits that went ahead without their turn on a table after waiting commitTurnWait for it (the commit before them was slow).",
		}),
		orphanedFiles: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_catalog_orphaned_metadata_files_total", Help: "Metadata files of losing attempts that could not be deleted.",
		}),
		metricsReports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floe_catalog_metrics_reports_total", Help: "Client metrics reports accepted, by report type (scan-report, commit-report, unknown).",
		}, []string{"report_type"}),
		cacheHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_catalog_metadata_cache_hits_total", Help: "Metadata files served from the in-memory cache.",
		}),
		cacheMisses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_catalog_metadata_cache_misses_total", Help: "Metadata files read from storage.",
		}),
		staleReads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_catalog_stale_reads_total", Help: "Reads served from the local replica at the client's request.",
		}),
		idemStored: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_idempotency_records_stored_total", Help: "Idempotency-Key outcomes stored by requests this node served.",
		}),
		idemReplays: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_idempotency_replays_total", Help: "Requests answered from a stored Idempotency-Key outcome.",
		}),
		idemConflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_idempotency_binding_conflicts_total", Help: "Idempotency-Keys reused for a different request (422).",
		}),
		idemNonV7: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_idempotency_non_v7_keys_total", Help: "Idempotency-Keys accepted that are not UUID version 7.",
		}),
		idemPruned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floe_idempotency_records_pruned_total", Help: "Expired Idempotency-Key records pruned by this node as leader.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.latency, m.commitRetries, m.turnTimeouts, m.orphanedFiles, m.metricsReports, m.cacheHits, m.cacheMisses, m.staleReads,
			m.idemStored, m.idemReplays, m.idemConflicts, m.idemNonV7, m.idemPruned)
	}
	return m
}
