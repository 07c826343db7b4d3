package raftnode

import (
	"fmt"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the node's Prometheus collectors, all named floe_raft_*.
type metrics struct {
	state         *prometheus.GaugeVec
	term          prometheus.Gauge
	commitIndex   prometheus.Gauge
	appliedIndex  prometheus.Gauge
	leaderChanges prometheus.Counter
	applyDuration prometheus.Histogram
	readIndexWait prometheus.Histogram
	forwarded     prometheus.Counter
	// leaderRetries and leaderAbandoned count, by method, calls to the
	// leader sent again and calls abandoned in flight during failovers.
	leaderRetries   *prometheus.CounterVec
	leaderAbandoned *prometheus.CounterVec
	// readIndexRounds counts, by role, the round trips linearizable reads
	// cost: on the leader one quorum confirmation (VerifyLeader) each, on a
	// follower one read-index call to the leader each. readIndexBatch is
	// how many read-index requests one fetch answered (see indexBatcher).
	readIndexRounds *prometheus.CounterVec
	readIndexBatch  *prometheus.HistogramVec

	snapshotDuration prometheus.Histogram
	snapshotBytes    prometheus.Gauge
	// foreignDials counts Raft dials refused because the peer holds
	// another cluster's identity (checkPeerCluster).
	foreignDials prometheus.Counter
	// clockOff is 1 while this leader's clock disagrees with the other
	// voters' (checkClock).
	clockOff prometheus.Gauge
}

// Values of the role label of the read-index metrics, and the batchers'
// names in logs.
const (
	roleLeader   = "leader"
	roleFollower = "follower"
)

// observeReads returns a batcher's served hook recording into h.
func observeReads(h prometheus.Observer) func(reads int) {
	return func(reads int) { h.Observe(float64(reads)) }
}

// raftStates are the values of the state label, in raft.RaftState order.
var raftStates = []raft.RaftState{raft.Follower, raft.Candidate, raft.Leader, raft.Shutdown}

func stateLabel(s raft.RaftState) string {
	switch s {
	case raft.Follower:
		return "follower"
	case raft.Candidate:
		return "candidate"
	case raft.Leader:
		return "leader"
	default:
		return "shutdown"
	}
}

func newMetrics() *metrics {
	const ns, sub = "floe", "raft"
	// Raft commits on a LAN take well under a millisecond to tens of
	// milliseconds (an fsync on each of a quorum); a slow disk or a leader
	// change pushes them to seconds.
	buckets := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	return &metrics{
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "state",
			Help: "Raft state of this node: 1 for the current state, 0 for the others.",
		}, []string{"state"}),
		term: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "term",
			Help: "Current Raft term.",
		}),
		commitIndex: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "commit_index",
			Help: "Index of the last log entry this node knows to be committed.",
		}),
		appliedIndex: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "applied_index",
			Help: "Index of the last log entry the state machine has applied (entries the state machine never sees, such as no-ops and barriers, do not advance it).",
		}),
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "leader_changes_total",
			Help: "Number of times this node observed a new leader (itself included).",
		}),
		applyDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "apply_duration_seconds",
			Help:    "Time from proposing a command on this node to its result from the state machine (or failure).",
			Buckets: buckets,
		}),
		readIndexWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "read_index_wait_seconds",
			Help:    "Time a linearizable read waited for leadership confirmation and the state machine to reach the read index.",
			Buckets: buckets,
		}),
		forwarded: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "forwarded_commands_total",
			Help: "Commands this node forwarded to the leader.",
		}),
		leaderRetries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "leader_call_retries_total",
			Help: "Forwarded commands and read-index requests this node sent again, to the leader known then, after the leader changed, did not answer in time or answered that it does not lead.",
		}, []string{"method"}),
		leaderAbandoned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "leader_calls_abandoned_total",
			Help: "Calls to the leader this node gave up on while they were in flight, because another leader was elected or none was known for a while (or, for read indexes, no answer came in time).",
		}, []string{"method"}),
		readIndexRounds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "read_index_round_trips_total",
			Help: "Round trips spent on linearizable reads: role=leader counts leadership confirmations by a quorum (one heartbeat round each), role=follower counts read-index calls to the leader (calls sent again included).",
		}, []string{"role"}),
		readIndexBatch: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "read_index_batch_size",
			Help:    "Read-index requests answered by one shared fetch: role=leader counts the leader's own reads and followers' read-index calls sharing one quorum confirmation, role=follower the reads on this follower sharing one request to the leader.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11),
		}, []string{"role"}),
		snapshotDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "snapshot_persist_seconds",
			Help:    "Time to write a state machine snapshot.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
		snapshotBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "snapshot_bytes",
			Help: "Size of the last state machine snapshot written.",
		}),
		foreignDials: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "foreign_peer_dials_refused_total",
			Help: "Raft connections this node did not open because the member at that address holds another cluster's identity (a node that formed a cluster of its own).",
		}),
		clockOff: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "leader_clock_off",
			Help: "1 while this node leads with a clock more than 5 minutes from a majority of the other voters' (keyed changes and prunes are refused, leadership is handed over); 0 otherwise.",
		}),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.state, m.term, m.commitIndex, m.appliedIndex, m.leaderChanges, m.applyDuration, m.readIndexWait, m.forwarded, m.leaderRetries, m.leaderAbandoned, m.readIndexRounds, m.readIndexBatch, m.snapshotDuration, m.snapshotBytes, m.foreignDials, m.clockOff}
}

// register registers every collector with reg, or none: on failure the ones
// already registered are unregistered again.
func (m *metrics) register(reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	var done []prometheus.Collector
	for _, c := range m.collectors() {
		if err := reg.Register(c); err != nil {
			for _, d := range done {
				reg.Unregister(d)
			}
			return fmt.Errorf("raftnode: register metrics: %w", err)
		}
		done = append(done, c)
	}
	return nil
}

func (m *metrics) unregister(reg prometheus.Registerer) {
	if reg == nil {
		return
	}
	for _, c := range m.collectors() {
		reg.Unregister(c)
	}
}

func (m *metrics) setState(s raft.RaftState) {
	for _, st := range raftStates {
		v := 0.0
		if st == s {
			v = 1
		}
		m.state.WithLabelValues(stateLabel(st)).Set(v)
	}
}
