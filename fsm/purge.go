package fsm

import (
	"bytes"
	"encoding/binary"
	"strconv"

	bolt "go.etcd.io/bbolt"
)

// Purge jobs: the crash-safe hard deletion of a dropped table's files. A
// purging DropTable removes the table, adds its job and adds the name and
// location tombstones in one entry; the leader leases jobs to nodes
// (AssignPurgeLease, token = that entry's log index); workers report
// progress and finish with their token; a stale token is refused
// (StatusStaleLease). See purge/DESIGN.md.
const (
	TypeAssignPurgeLease    CommandType = 8
	TypeReportPurgeProgress CommandType = 9
	TypeFinishPurgeJob      CommandType = 10
	TypePurgeHeartbeat      CommandType = 11
	TypeRetryPurgeJob       CommandType = 12
	TypeReleasePurgeJob     CommandType = 13
	TypePrunePurgeJobs      CommandType = 14
)

// Bucket layout of the purge state.
//
//	purge_jobs        job id → JSON PurgeJob
//	purge_by_state    state, 0x00, job id → empty
//	purge_by_ident    table key, 0x01, job id → empty
//	purge_tomb_names  table key → job id (a job holding its name tombstone)
//	purge_tomb_locs   normalised location, 0x00, job id → empty
//	purge_nodes       node id → JSON PurgeNode (the last heartbeat)
var (
	bucketPurgeJobs    = []byte("purge_jobs")
	bucketPurgeByState = []byte("purge_by_state")
	bucketPurgeByIdent = []byte("purge_by_ident")
	bucketPurgeNames   = []byte("purge_tomb_names")
	bucketPurgeLocs    = []byte("purge_tomb_locs")
	bucketPurgeNodes   = []byte("purge_nodes")
)

// JobState is a purge job's state.
type JobState string

// Job states. PENDING and RUNNING are active; SUCCEEDED and FAILED are
// terminal. A FAILED job keeps its tombstones until it is retried (back to
// PENDING) or released.
const (
	JobPending   JobState = "PENDING"
	JobRunning   JobState = "RUNNING"
	JobSucceeded JobState = "SUCCEEDED"
	JobFailed    JobState = "FAILED"
)

// Terminal reports whether no worker will touch a job in state s again.
func (s JobState) Terminal() bool { return s == JobSucceeded || s == JobFailed }

// Valid reports whether s is one of the four states.
func (s JobState) Valid() bool {
	switch s {
	case JobPending, JobRunning, JobSucceeded, JobFailed:
		return true
	}
	return false
}

// PurgeLease says which node may work on a job. Token is the log index of
// the entry that assigned it: every later assignment has a larger one, so a
// worker holding an older token is fenced off.
type PurgeLease struct {
	Node  string `json:"node"`
	Token uint64 `json:"token"`
	// ExpiresMs is advisory: the assigning or last renewing node's clock
	// plus the heartbeat timeout. The leader decides reassignment from the
	// heartbeats it observes, not from this value (clocks differ).
	ExpiresMs int64 `json:"expires-ms"`
}

// PurgeProgress is a job's checkpoint and counters. Phase and Offset say
// where the enumeration of the table's files (purge.Enumerate) may resume:
// every file before Offset in Phase, and every file of earlier phases, is
// gone.
type PurgeProgress struct {
	Phase   int   `json:"phase"`
	Offset  int64 `json:"offset"`
	Deleted int64 `json:"files-deleted"`
	Bytes   int64 `json:"bytes-deleted"`
	Skipped int64 `json:"files-skipped-outside"`
	// SkippedOwned counts files left in place because they lie inside
	// another live table's location or outside the allowed locations.
	SkippedOwned int64 `json:"files-skipped-owned,omitempty"`
}

// PurgeJob is one table's purge.
type PurgeJob struct {
	ID        string `json:"id"`
	Warehouse string `json:"warehouse"`
	Ident     Ident  `json:"ident"`
	TableUUID string `json:"table-uuid"`
	Location  string `json:"location"`
	// LocationKey is the normalised location its tombstone is stored
	// under (LocationKey at the time the table's location was set);
	// empty for jobs added before keys were stamped.
	LocationKey string `json:"location-key,omitempty"`
	// FormerLocations are the locations the dropped table had moved away
	// from (Table.FormerLocations): its files there are purged too, and
	// they are tombstoned with its location while the job holds them.
	FormerLocations  []FormerLocation  `json:"former-locations,omitempty"`
	MetadataLocation string            `json:"metadata-location"`
	FileIO           map[string]string `json:"file-io,omitempty"`
	State            JobState          `json:"state"`
	Attempts         int               `json:"attempts"`
	LastError        string            `json:"last-error,omitempty"`
	Lease            *PurgeLease       `json:"lease,omitempty"`
	Progress         PurgeProgress     `json:"progress"`
	// NotBeforeMs delays the next assignment of a PENDING job (backoff
	// after a failure), on the clock of the node whose run failed; the
	// leader's scheduler also counts the backoff it stands for
	// (NotBeforeMs - UpdatedMs) on its own clock, for clocks that differ.
	NotBeforeMs int64 `json:"not-before-ms,omitempty"`
	// FirstPhase is the first purge phase with files to delete, as the
	// dropping node judged from the job's metadata file (0: not judged).
	// No phase before it has a file, so a worker may start there without
	// first recording it; it checks the claim against the file it reads.
	FirstPhase int    `json:"first-phase,omitempty"`
	DroppedBy  string `json:"dropped-by"`
	// Released marks a FAILED job whose tombstones an operator dropped.
	Released   bool   `json:"released,omitempty"`
	ReleasedBy string `json:"released-by,omitempty"`
	CreatedMs  int64  `json:"created-ms"`
	UpdatedMs  int64  `json:"updated-ms"`
}

func (j PurgeJob) locKey() string { return stampedKey(j.LocationKey, j.Location) }

// tombKeys are the location keys the job's tombstones are stored under:
// its location's and its former locations'.
func (j PurgeJob) tombKeys() []string { return keysWithFormer(j.locKey(), j.FormerLocations) }

// Locations are the locations whose files the job deletes: the dropped
// table's and those it had moved away from.
func (j PurgeJob) Locations() []string {
	out := []string{j.Location}
	for _, f := range j.FormerLocations {
		out = append(out, f.Location)
	}
	return out
}

// HoldsTombstones reports whether the job still blocks its name and location.
func (j PurgeJob) HoldsTombstones() bool { return j.State != JobSucceeded && !j.Released }

// PurgeNode is a node's last purge heartbeat.
type PurgeNode struct {
	Node string `json:"node"`
	// Slots is the node's worker-threads.
	Slots int `json:"slots"`
	// Index is the log index of the heartbeat: the leader watches it move
	// to tell live nodes from silent ones without comparing clocks.
	Index uint64 `json:"index"`
	AtMs  int64  `json:"at-ms"`
	// Features are the PurgeFeature* bits the node's binary has.
	Features uint64 `json:"features,omitempty"`
	// Settings fingerprints the node's storage settings (PurgeHeartbeat).
	Settings string `json:"settings,omitempty"`
}

// MaxPurgeFirstPhase bounds a purge job's first phase (PurgeJobSpec's
// FirstPhase): the last phase of a purge, the root metadata file's
// (purge.PhaseRoot; purge's tests hold the two equal). It is part of the
// log's meaning: a stamp beyond it is ignored, never refused, so that a
// later release adding a phase cannot make replicas disagree about a drop;
// such a release announces a new feature bit instead.
const MaxPurgeFirstPhase = 5

// Purge features a node announces in its heartbeats, so that a change
// whose entries an older binary would apply differently is used only once
// every node has it.
const (
	// PurgeFeatureFirstPhase: the node applies PurgeJobSpec.FirstPhase and
	// its workers honour a job's FirstPhase.
	PurgeFeatureFirstPhase uint64 = 1 << 0
	// PurgeFeatureMoves: the node applies CommitTables body version 3 (a
	// moved table keeps the locations it left). A node without it stops
	// at such an entry, so the catalog refuses to move a table while a
	// node announces less (it is not a purge feature, but every node
	// heartbeats and nothing else carries a node's binary to the others).
	PurgeFeatureMoves uint64 = 1 << 1
	// PurgeFeatureAdopts: the node applies CommitTables body version 4 (a
	// register adopts the places its metadata points into). Until every
	// node announces it, the catalog registers without adopting.
	PurgeFeatureAdopts uint64 = 1 << 2
	// PurgeFeatureSilentCheck: the node applies AssignPurgeLease body
	// version 2 (a reassignment refused when the node heartbeat since it
	// was seen silent). Until every node announces it, the scheduler
	// reassigns without the check.
	PurgeFeatureSilentCheck uint64 = 1 << 3
	// PurgeFeatureDropJobEvent: the node applies DropTable body version 2
	// (the table-dropped event carries its job's state). Until every node
	// announces it, the catalog writes version 1.
	PurgeFeatureDropJobEvent uint64 = 1 << 4

	// PurgeFeaturesOfThisBinary are the bits this binary announces.
	PurgeFeaturesOfThisBinary = PurgeFeatureFirstPhase | PurgeFeatureMoves | PurgeFeatureAdopts | PurgeFeatureSilentCheck |
		PurgeFeatureDropJobEvent
)

// PurgeFeaturesEverywhere reports whether every node with a heartbeat row
// announced all of want. With no row at all it is false: no node is known
// to have them.
func PurgeFeaturesEverywhere(nodes []PurgeNode, want uint64) bool {
	for _, n := range nodes {
		if n.Features&want != want {
			return false
		}
	}
	return len(nodes) > 0
}

// PurgeJobSpec is what a purging DropTable stamps into its job. The
// proposer chooses the id (UUIDv7), snapshots the FileIO properties and
// names the principal.
type PurgeJobSpec struct {
	ID        string            `json:"id"`
	Warehouse string            `json:"warehouse"`
	FileIO    map[string]string `json:"file-io,omitempty"`
	DroppedBy string            `json:"dropped-by"`
	// LeaseNode, when set, leases the job to that node at once (a
	// synchronous drop: the receiving node runs it); the token is the
	// drop's log index. Empty: the job waits PENDING for the scheduler.
	LeaseNode      string `json:"lease-node,omitempty"`
	LeaseExpiresMs int64  `json:"lease-expires-ms,omitempty"`
	// FirstPhase, when positive, is the first purge phase with files to
	// delete (purge.FirstPhase), as the proposer judged from the metadata
	// file FirstPhaseOf. The job takes it only when the dropped table's
	// metadata location is that file; otherwise (a commit won the race)
	// the job starts at phase 0 as always.
	FirstPhase   int    `json:"first-phase,omitempty"`
	FirstPhaseOf string `json:"first-phase-of,omitempty"`
}

// AssignPurgeLease leases a job to a node. It is a compare-and-set: the
// job must be PENDING with no lease, or RUNNING under ExpectedToken (a
// reassignment away from a silent node). Otherwise StatusStaleLease.
type AssignPurgeLease struct {
	JobID         string `json:"job-id"`
	Node          string `json:"node"`
	ExpectedToken uint64 `json:"expected-token,omitempty"`
	AtMs          int64  `json:"at-ms"`
	ExpiresMs     int64  `json:"expires-ms"`
	// SilentIndex, on a reassignment (body version 2), is the index of the
	// leased node's heartbeat row the scheduler saw stand still: the
	// reassignment is refused (StatusStaleLease) if the node heartbeat
	// since. Its workers take a heartbeat that applied while it still held
	// the lease as leave to delete for a heartbeat timeout; a decision made
	// on an older view must not take the lease from under them.
	SilentIndex uint64 `json:"silent-index,omitempty"`
}

// bodyVersion is 2 when the reassignment is checked against the node's
// heartbeat (SilentIndex), which a binary from before it cannot apply
// alike; the scheduler sends it only once every node announces
// PurgeFeatureSilentCheck.
func (c AssignPurgeLease) bodyVersion() uint8 {
	if c.SilentIndex != 0 {
		return 2
	}
	return 1
}

// ReportPurgeProgress records a worker's checkpoint. StatusStaleLease when
// the job is not RUNNING under Token.
type ReportPurgeProgress struct {
	JobID    string        `json:"job-id"`
	Token    uint64        `json:"token"`
	Progress PurgeProgress `json:"progress"`
	AtMs     int64         `json:"at-ms"`
}

// Purge outcomes reported by FinishPurgeJob.
const (
	OutcomeSucceeded = "succeeded" // every file is gone: SUCCEEDED, tombstones dropped
	OutcomeRetry     = "retry"     // transient failure: attempts+1, PENDING, or FAILED at MaxAttempts
	OutcomeFailed    = "failed"    // permanent failure: FAILED at once, tombstones kept
)

// FinishPurgeJob ends a worker's run. StatusStaleLease when the job is not
// RUNNING under Token.
type FinishPurgeJob struct {
	JobID    string        `json:"job-id"`
	Token    uint64        `json:"token"`
	Outcome  string        `json:"outcome"`
	Error    string        `json:"error,omitempty"`
	Progress PurgeProgress `json:"progress"`
	// MaxAttempts is the proposer's max-attempts setting, so that applying
	// a retry needs no configuration.
	MaxAttempts int   `json:"max-attempts,omitempty"`
	NotBeforeMs int64 `json:"not-before-ms,omitempty"`
	AtMs        int64 `json:"at-ms"`
}

// LeaseRef names a lease a node holds.
type LeaseRef struct {
	JobID string `json:"job-id"`
	Token uint64 `json:"token"`
}

// PurgeHeartbeat says a node is alive, how many workers it has, and renews
// the leases it holds (their ExpiresMs).
type PurgeHeartbeat struct {
	Node      string     `json:"node"`
	Slots     int        `json:"slots"`
	Leases    []LeaseRef `json:"leases,omitempty"`
	AtMs      int64      `json:"at-ms"`
	ExpiresMs int64      `json:"expires-ms"`
	// Features are the PurgeFeature* bits this node's binary has.
	Features uint64 `json:"features,omitempty"`
	// Settings is an opaque fingerprint of the node's storage settings
	// (its default warehouse), which every node of a cluster must share: the nodes compare theirs with the others'
	// outside Apply. Stored as sent; empty from older binaries (which,
	// replaying a heartbeat that carries it, store it without: nothing
	// in Apply reads it).
	Settings string `json:"settings,omitempty"`
}

// RetryPurgeJob puts a FAILED, unreleased job back to PENDING with its
// attempts reset. StatusNoSuchJob, or StatusCommitFailed when the job is
// not in that state.
type RetryPurgeJob struct {
	JobID string `json:"job-id"`
	By    string `json:"by"`
	AtMs  int64  `json:"at-ms"`
}

// ReleasePurgeJob drops a FAILED job's tombstones after an operator cleaned
// up by hand; the job stays, FAILED and Released, for the record.
type ReleasePurgeJob struct {
	JobID string `json:"job-id"`
	By    string `json:"by"`
	AtMs  int64  `json:"at-ms"`
}

// PrunePurgeJobs removes SUCCEEDED and released FAILED jobs last updated
// before BeforeMs, and heartbeat rows older than it. An unreleased FAILED
// job is never pruned: it holds tombstones and waits for an operator.
// Result.Count is the number of jobs removed.
type PrunePurgeJobs struct {
	BeforeMs int64 `json:"before-ms"`
	// Limit bounds the jobs removed by one entry; 0 means 10000.
	Limit int   `json:"limit,omitempty"`
	AtMs  int64 `json:"at-ms"`
}

func (AssignPurgeLease) Type() CommandType    { return TypeAssignPurgeLease }
func (ReportPurgeProgress) Type() CommandType { return TypeReportPurgeProgress }
func (FinishPurgeJob) Type() CommandType      { return TypeFinishPurgeJob }
func (PurgeHeartbeat) Type() CommandType      { return TypePurgeHeartbeat }
func (RetryPurgeJob) Type() CommandType       { return TypeRetryPurgeJob }
func (ReleasePurgeJob) Type() CommandType     { return TypeReleasePurgeJob }
func (PrunePurgeJobs) Type() CommandType      { return TypePrunePurgeJobs }

func init() {
	allBuckets = append(allBuckets, bucketPurgeJobs, bucketPurgeByState, bucketPurgeByIdent,
		bucketPurgeNames, bucketPurgeLocs, bucketPurgeNodes)
	register(TypeAssignPurgeLease, registration{2, jsonCodec[AssignPurgeLease](2), applyAssignPurgeLease})
	register(TypeReportPurgeProgress, registration{1, jsonCodec[ReportPurgeProgress](1), applyReportPurgeProgress})
	register(TypeFinishPurgeJob, registration{1, jsonCodec[FinishPurgeJob](1), applyFinishPurgeJob})
	register(TypePurgeHeartbeat, registration{1, jsonCodec[PurgeHeartbeat](1), applyPurgeHeartbeat})
	register(TypeRetryPurgeJob, registration{1, jsonCodec[RetryPurgeJob](1), applyRetryPurgeJob})
	register(TypeReleasePurgeJob, registration{1, jsonCodec[ReleasePurgeJob](1), applyReleasePurgeJob})
	register(TypePrunePurgeJobs, registration{1, jsonCodec[PrunePurgeJobs](1), applyPrunePurgeJobs})
}

// --- keys and normalised locations ---

func stateKey(s JobState, id string) []byte { return []byte(string(s) + "\x00" + id) }

// The value of a job's entry in the state index sums the job up, so that
// walks over many jobs need not decode each one: the scheduler's walk of
// PENDING jobs passes over those in backoff, the prune over recent or
// unreleased finished jobs, the job counts over unreleased FAILED ones. It
// is 8 bytes, big-endian, then one byte of flags:
//
//   - PENDING: NotBeforeMs (0: due at once);
//   - any other state: UpdatedMs;
//   - flag summaryReleased: Released.
//
// Entries written by earlier releases have an empty value; a reader then
// decodes the job. Either way a reader decides as the job itself would, so
// replicas whose index entries differ in format apply entries alike.
const (
	summaryLen      = 9
	summaryReleased = 1
)

type jobSummary struct {
	ms       int64
	released bool
}

func summaryOf(j PurgeJob) []byte {
	ms := j.UpdatedMs
	if j.State == JobPending {
		ms = j.NotBeforeMs
	}
	v := binary.BigEndian.AppendUint64(make([]byte, 0, summaryLen), uint64(ms))
	var flags byte
	if j.Released {
		flags |= summaryReleased
	}
	return append(v, flags)
}

// parseSummary reads a state index value; false when it holds none (an
// entry written by an earlier release).
func parseSummary(v []byte) (jobSummary, bool) {
	if len(v) != summaryLen {
		return jobSummary{}, false
	}
	return jobSummary{ms: int64(binary.BigEndian.Uint64(v)), released: v[8]&summaryReleased != 0}, true
}

func identJobKey(id Ident, jobID string) []byte {
	return append(append(tableKey(id), 0x01), jobID...)
}

func locKey(norm, jobID string) []byte { return []byte(norm + "\x00" + jobID) }

// --- txn helpers ---

func (t *txn) purgeJob(id string) (PurgeJob, bool) {
	var j PurgeJob
	ok := t.get(bucketPurgeJobs, []byte(id), &j)
	return j, ok
}

// putJob writes a job and keeps the state index in step with it.
func (t *txn) putJob(j PurgeJob, before JobState) {
	if before != "" && before != j.State {
		t.del(bucketPurgeByState, stateKey(before, j.ID))
	}
	t.put(bucketPurgeJobs, []byte(j.ID), j)
	if err := t.tx.Bucket(bucketPurgeByState).Put(stateKey(j.State, j.ID), summaryOf(j)); err != nil {
		panic("fsm: put purge state index: " + err.Error())
	}
}

func (t *txn) putEmpty(bucket, key []byte) {
	if err := t.tx.Bucket(bucket).Put(key, nil); err != nil {
		panic("fsm: put " + string(bucket) + ": " + err.Error())
	}
}

func (t *txn) addTombstones(j PurgeJob) {
	t.put(bucketPurgeNames, tableKey(j.Ident), j.ID)
	for _, k := range j.tombKeys() {
		t.putEmpty(bucketPurgeLocs, locKey(k, j.ID))
	}
}

func (t *txn) dropTombstones(j PurgeJob) {
	var holder string
	if t.get(bucketPurgeNames, tableKey(j.Ident), &holder) && holder == j.ID {
		t.del(bucketPurgeNames, tableKey(j.Ident))
	}
	for _, k := range j.tombKeys() {
		t.del(bucketPurgeLocs, locKey(k, j.ID))
	}
}

// nameTombstone returns the job blocking id, if any.
func (t *txn) nameTombstone(id Ident) (PurgeJob, bool) {
	var jobID string
	if !t.get(bucketPurgeNames, tableKey(id), &jobID) {
		return PurgeJob{}, false
	}
	j, ok := t.purgeJob(jobID)
	if !ok {
		panic("fsm: name tombstone for missing purge job " + jobID)
	}
	return j, true
}

// locationTombstone returns a job whose location is equal to, inside or
// contains loc.
func (t *txn) locationTombstone(loc string) (PurgeJob, bool) {
	if loc == "" {
		return PurgeJob{}, false
	}
	jobID, ok := overlappingLocation(t.tx.Bucket(bucketPurgeLocs).Cursor(), LocationKey(loc))
	if !ok {
		return PurgeJob{}, false
	}
	j, found := t.purgeJob(jobID)
	if !found {
		panic("fsm: location tombstone for missing purge job " + jobID)
	}
	return j, true
}

// overlappingLocation finds a tombstone key overlapping the location key n.
func overlappingLocation(c *bolt.Cursor, n string) (string, bool) {
	var jobID string
	scanOverlaps(c, n, func(k, _ []byte) bool {
		jobID = jobIDOfLocKey(k)
		return false
	})
	return jobID, jobID != ""
}

func jobIDOfLocKey(k []byte) string {
	i := bytes.IndexByte(k, 0)
	return string(k[i+1:])
}

func beingPurgedName(id Ident, j PurgeJob) Result {
	return fail(StatusBeingPurged, "table %s is being purged by purge job %s (%s); retry when the job has succeeded", id, j.ID, j.State)
}

func beingPurgedLocation(loc string, j PurgeJob) Result {
	return fail(StatusBeingPurged, "location %s overlaps %s, the location of table %s being purged by purge job %s (%s)",
		loc, j.Location, j.Ident, j.ID, j.State)
}

// checkTombstones refuses a table at id (when checkName) or at loc while a
// purge job holds either.
func (t *txn) checkTombstones(id Ident, checkName bool, loc string) (Result, bool) {
	if checkName {
		if j, ok := t.nameTombstone(id); ok {
			return beingPurgedName(id, j), true
		}
	}
	if j, ok := t.locationTombstone(loc); ok {
		return beingPurgedLocation(loc, j), true
	}
	return Result{}, false
}

// addPurgeJob is the purge half of a purging DropTable.
func (t *txn) addPurgeJob(dropped Table, spec PurgeJobSpec, atMs int64) {
	j := newPurgeJob(dropped, spec, atMs, t.index)
	if j.State == JobPending {
		t.purgeWork |= PurgeClaimable
	}
	t.putJob(j, "")
	t.putEmpty(bucketPurgeByIdent, identJobKey(j.Ident, j.ID))
	t.addTombstones(j)
}

// newPurgeJob is the job a purging drop of dropped adds, in the entry at
// index: PENDING, or RUNNING under a lease to the spec's node (a
// synchronous drop), the index being the lease's token.
func newPurgeJob(dropped Table, spec PurgeJobSpec, atMs int64, index uint64) PurgeJob {
	j := PurgeJob{
		ID:               spec.ID,
		Warehouse:        spec.Warehouse,
		Ident:            dropped.Ident(),
		TableUUID:        dropped.UUID,
		Location:         dropped.Location,
		LocationKey:      dropped.locKey(),
		FormerLocations:  dropped.FormerLocations,
		MetadataLocation: dropped.MetadataLocation,
		FileIO:           spec.FileIO,
		State:            JobPending,
		DroppedBy:        spec.DroppedBy,
		CreatedMs:        atMs,
		UpdatedMs:        atMs,
	}
	if spec.FirstPhase > 0 && spec.FirstPhase <= MaxPurgeFirstPhase && spec.FirstPhaseOf != "" && spec.FirstPhaseOf == dropped.MetadataLocation {
		j.FirstPhase = spec.FirstPhase
	}
	if spec.LeaseNode != "" {
		j.State = JobRunning
		j.Lease = &PurgeLease{Node: spec.LeaseNode, Token: index, ExpiresMs: spec.LeaseExpiresMs}
	}
	return j
}

// checkPurgeSpec refuses a purging drop whose job id is taken (a proposer
// bug or a replayed entry): nothing is dropped.
func (t *txn) checkPurgeSpec(spec *PurgeJobSpec) (Result, bool) {
	if spec.ID == "" {
		return fail(StatusCommitFailed, "purge job without an id"), true
	}
	if _, exists := t.purgeJob(spec.ID); exists {
		return fail(StatusAlreadyExists, "purge job %s already exists", spec.ID), true
	}
	return Result{}, false
}

// leased returns the job when it is RUNNING under token, else the stale
// outcome.
func (t *txn) leased(jobID string, token uint64) (PurgeJob, Result, bool) {
	j, ok := t.purgeJob(jobID)
	if !ok {
		return j, fail(StatusNoSuchJob, "purge job %s does not exist", jobID), false
	}
	if j.State != JobRunning || j.Lease == nil || j.Lease.Token != token {
		cur := "none"
		if j.Lease != nil {
			cur = j.Lease.Node + "@" + strconv.FormatUint(j.Lease.Token, 10)
		}
		return j, fail(StatusStaleLease, "purge job %s is %s with lease %s, not token %d", jobID, j.State, cur, token), false
	}
	return j, Result{}, true
}

// --- apply ---

func applyAssignPurgeLease(t *txn, c Command) Result {
	cmd := c.(AssignPurgeLease)
	j, ok := t.purgeJob(cmd.JobID)
	if !ok {
		return fail(StatusNoSuchJob, "purge job %s does not exist", cmd.JobID)
	}
	var cur uint64
	if j.Lease != nil {
		cur = j.Lease.Token
	}
	claimable := (j.State == JobPending && j.Lease == nil && cmd.ExpectedToken == 0) ||
		(j.State == JobRunning && cur == cmd.ExpectedToken && cmd.ExpectedToken != 0)
	if !claimable {
		return fail(StatusStaleLease, "purge job %s is %s with lease token %d, expected token %d", j.ID, j.State, cur, cmd.ExpectedToken)
	}
	if cmd.SilentIndex != 0 && j.Lease != nil {
		var n PurgeNode
		if t.get(bucketPurgeNodes, []byte(j.Lease.Node), &n) && n.Index != cmd.SilentIndex {
			return fail(StatusStaleLease, "purge job %s: node %s heartbeat at index %d since it was seen silent at %d", j.ID, j.Lease.Node, n.Index, cmd.SilentIndex)
		}
	}
	before := j.State
	j.State = JobRunning
	j.Lease = &PurgeLease{Node: cmd.Node, Token: t.index, ExpiresMs: cmd.ExpiresMs}
	j.UpdatedMs = cmd.AtMs
	t.putJob(j, before)
	// The leased node's workers start it as soon as they see the lease.
	t.purgeWork |= PurgeLeased
	return Result{}
}

func applyReportPurgeProgress(t *txn, c Command) Result {
	cmd := c.(ReportPurgeProgress)
	j, res, ok := t.leased(cmd.JobID, cmd.Token)
	if !ok {
		return res
	}
	j.Progress = cmd.Progress
	j.UpdatedMs = cmd.AtMs
	t.putJob(j, j.State)
	return Result{}
}

func applyFinishPurgeJob(t *txn, c Command) Result {
	cmd := c.(FinishPurgeJob)
	j, res, ok := t.leased(cmd.JobID, cmd.Token)
	if !ok {
		return res
	}
	before := j.State
	j.Progress = cmd.Progress
	j.Lease = nil
	j.UpdatedMs = cmd.AtMs
	switch cmd.Outcome {
	case OutcomeSucceeded, OutcomeRetry, OutcomeFailed:
	default:
		// The proposer only sends the three; an unknown one changes nothing.
		return fail(StatusCommitFailed, "unknown purge outcome %q", cmd.Outcome)
	}
	switch cmd.Outcome {
	case OutcomeSucceeded:
		j.State = JobSucceeded
		j.NotBeforeMs = 0
		t.dropTombstones(j)
	case OutcomeRetry:
		j.Attempts++
		j.LastError = cmd.Error
		if cmd.MaxAttempts > 0 && j.Attempts >= cmd.MaxAttempts {
			j.State = JobFailed
			j.NotBeforeMs = 0
		} else {
			j.State = JobPending
			j.NotBeforeMs = cmd.NotBeforeMs
		}
	case OutcomeFailed:
		j.Attempts++
		j.LastError = cmd.Error
		j.State = JobFailed
		j.NotBeforeMs = 0
	}
	t.putJob(j, before)
	// The run's worker slot is free: the leader's scheduler leases the
	// next job at once instead of at its next tick.
	t.purgeWork |= PurgeRunEnded
	return Result{}
}

func applyPurgeHeartbeat(t *txn, c Command) Result {
	cmd := c.(PurgeHeartbeat)
	t.put(bucketPurgeNodes, []byte(cmd.Node), PurgeNode{Node: cmd.Node, Slots: cmd.Slots, Index: t.index, AtMs: cmd.AtMs, Features: cmd.Features, Settings: cmd.Settings})
	for _, l := range cmd.Leases {
		j, ok := t.purgeJob(l.JobID)
		if !ok || j.State != JobRunning || j.Lease == nil || j.Lease.Token != l.Token || j.Lease.Node != cmd.Node {
			continue // stale: the worker learns it from the job itself
		}
		j.Lease.ExpiresMs = cmd.ExpiresMs
		t.putJob(j, j.State)
	}
	return Result{}
}

func applyRetryPurgeJob(t *txn, c Command) Result {
	cmd := c.(RetryPurgeJob)
	j, ok := t.purgeJob(cmd.JobID)
	if !ok {
		return fail(StatusNoSuchJob, "purge job %s does not exist", cmd.JobID)
	}
	if j.State != JobFailed || j.Released {
		return fail(StatusCommitFailed, "purge job %s is %s%s; only a FAILED, unreleased job can be retried", j.ID, j.State, releasedSuffix(j))
	}
	j.State = JobPending
	j.Attempts = 0
	j.NotBeforeMs = 0
	j.UpdatedMs = cmd.AtMs
	t.putJob(j, JobFailed)
	t.purgeWork |= PurgeClaimable
	return Result{}
}

func applyReleasePurgeJob(t *txn, c Command) Result {
	cmd := c.(ReleasePurgeJob)
	j, ok := t.purgeJob(cmd.JobID)
	if !ok {
		return fail(StatusNoSuchJob, "purge job %s does not exist", cmd.JobID)
	}
	if j.State != JobFailed || j.Released {
		return fail(StatusCommitFailed, "purge job %s is %s%s; only a FAILED, unreleased job can be released", j.ID, j.State, releasedSuffix(j))
	}
	j.Released = true
	j.ReleasedBy = cmd.By
	j.UpdatedMs = cmd.AtMs
	t.dropTombstones(j)
	t.putJob(j, JobFailed)
	return Result{}
}

func releasedSuffix(j PurgeJob) string {
	if j.Released {
		return " (released)"
	}
	return ""
}

func applyPrunePurgeJobs(t *txn, c Command) Result {
	cmd := c.(PrunePurgeJobs)
	limit := cmd.Limit
	if limit <= 0 {
		limit = 10000
	}
	var doomed []PurgeJob
	for _, st := range []JobState{JobSucceeded, JobFailed} {
		prefix := stateKey(st, "")
		cur := t.tx.Bucket(bucketPurgeByState).Cursor()
		for k, v := cur.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) && len(doomed) < limit; k, v = cur.Next() {
			if sum, ok := parseSummary(v); ok && (sum.ms >= cmd.BeforeMs || (st == JobFailed && !sum.released)) {
				continue // kept: no need to decode it
			}
			j, ok := t.purgeJob(string(k[len(prefix):]))
			if !ok {
				panic("fsm: state index names missing purge job " + string(k))
			}
			if j.UpdatedMs < cmd.BeforeMs && (j.State == JobSucceeded || j.Released) {
				doomed = append(doomed, j)
			}
		}
	}
	for _, j := range doomed {
		t.del(bucketPurgeJobs, []byte(j.ID))
		t.del(bucketPurgeByState, stateKey(j.State, j.ID))
		t.del(bucketPurgeByIdent, identJobKey(j.Ident, j.ID))
	}
	var silent [][]byte
	_ = t.tx.Bucket(bucketPurgeNodes).ForEach(func(k, v []byte) error {
		var n PurgeNode
		mustUnmarshal(k, v, &n)
		if n.AtMs < cmd.BeforeMs {
			silent = append(silent, append([]byte(nil), k...))
		}
		return nil
	})
	for _, k := range silent {
		t.del(bucketPurgeNodes, k)
	}
	return Result{Count: len(doomed)}
}

// --- reads ---

// PurgeJob returns the job with that id.
func (r *Reader) PurgeJob(id string) (PurgeJob, bool) {
	var j PurgeJob
	ok := r.get(bucketPurgeJobs, []byte(id), &j)
	return j, ok
}

// PurgeJobFilter selects jobs for PurgeJobs. Empty fields match anything.
type PurgeJobFilter struct {
	State     JobState
	Warehouse string
	Namespace []string
	Table     string
	// After resumes a listing after the job with this id (ids sort by
	// creation: they are UUIDv7).
	After string
	// NoBackoff keeps only jobs without a NotBeforeMs: PENDING jobs that
	// never failed, or were retried by an operator.
	NoBackoff bool
}

func (f PurgeJobFilter) match(j PurgeJob) bool {
	if f.Warehouse != "" && j.Warehouse != f.Warehouse {
		return false
	}
	if f.Namespace != nil && nsName(j.Ident.Namespace) != nsName(f.Namespace) {
		return false
	}
	if f.Table != "" && j.Ident.Name != f.Table {
		return false
	}
	if f.NoBackoff && j.NotBeforeMs != 0 {
		return false
	}
	return true
}

// PurgeJobs lists jobs matching f in id order, at most limit (limit <= 0:
// all); more reports whether any follow. A state filter walks the state
// index, a namespace-and-table filter the identifier index; otherwise all
// jobs are scanned.
func (r *Reader) PurgeJobs(f PurgeJobFilter, limit int) (out []PurgeJob, more bool) {
	visit := func(id string) bool {
		if f.After != "" && id <= f.After {
			return true
		}
		j, ok := r.PurgeJob(id)
		if !ok || (f.State != "" && j.State != f.State) || !f.match(j) {
			return true
		}
		if limit > 0 && len(out) == limit {
			more = true
			return false
		}
		out = append(out, j)
		return true
	}
	switch {
	case f.State != "":
		prefix := stateKey(f.State, "")
		c := r.tx.Bucket(bucketPurgeByState).Cursor()
		for k, v := c.Seek(append(append([]byte{}, prefix...), f.After...)); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			if sum, ok := parseSummary(v); ok && f.State == JobPending && f.NoBackoff && sum.ms != 0 {
				continue // in backoff: not decoded
			}
			if !visit(string(k[len(prefix):])) {
				break
			}
		}
	case f.Namespace != nil && f.Table != "":
		// The identifier index is ordered by job id within one table.
		prefix := identJobKey(Ident{Namespace: f.Namespace, Name: f.Table}, "")
		c := r.tx.Bucket(bucketPurgeByIdent).Cursor()
		for k, _ := c.Seek(append(append([]byte{}, prefix...), f.After...)); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			if !visit(string(k[len(prefix):])) {
				break
			}
		}
	default:
		c := r.tx.Bucket(bucketPurgeJobs).Cursor()
		for k, _ := c.Seek([]byte(f.After)); k != nil; k, _ = c.Next() {
			if !visit(string(k)) {
				break
			}
		}
	}
	return out, more
}

// PurgeJobsInBackoff calls visit with the id and NotBeforeMs of every
// PENDING job that has one (that failed, and waits out a backoff), in id
// order, until visit returns false. Only entries written by earlier
// releases, which hold no summary, are decoded.
func (r *Reader) PurgeJobsInBackoff(visit func(id string, notBeforeMs int64) bool) {
	prefix := stateKey(JobPending, "")
	c := r.tx.Bucket(bucketPurgeByState).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		id := string(k[len(prefix):])
		sum, ok := parseSummary(v)
		if !ok {
			j, found := r.PurgeJob(id)
			if !found {
				continue
			}
			sum.ms = j.NotBeforeMs
		}
		if sum.ms != 0 && !visit(id, sum.ms) {
			return
		}
	}
}

// PurgeNodes returns every node's last heartbeat, in node id order.
func (r *Reader) PurgeNodes() []PurgeNode {
	var out []PurgeNode
	_ = r.tx.Bucket(bucketPurgeNodes).ForEach(func(k, v []byte) error {
		var n PurgeNode
		mustUnmarshal(k, v, &n)
		out = append(out, n)
		return nil
	})
	return out
}

// PurgeTombstone returns the job blocking a table name, if any.
func (r *Reader) PurgeTombstone(id Ident) (PurgeJob, bool) {
	var jobID string
	if !r.get(bucketPurgeNames, tableKey(id), &jobID) {
		return PurgeJob{}, false
	}
	return r.PurgeJob(jobID)
}

// PurgeLocationTombstone returns a job whose location overlaps loc, if any.
func (r *Reader) PurgeLocationTombstone(loc string) (PurgeJob, bool) {
	jobID, ok := overlappingLocation(r.tx.Bucket(bucketPurgeLocs).Cursor(), LocationKey(loc))
	if !ok {
		return PurgeJob{}, false
	}
	return r.PurgeJob(jobID)
}

// PurgeJobCounts counts jobs by state from the state index, and how many of
// the FAILED ones are released.
func (r *Reader) PurgeJobCounts() (counts map[JobState]int, released int) {
	counts = map[JobState]int{}
	_ = r.tx.Bucket(bucketPurgeByState).ForEach(func(k, v []byte) error {
		i := bytes.IndexByte(k, 0)
		st := JobState(k[:i])
		counts[st]++
		if st == JobFailed {
			if sum, ok := parseSummary(v); ok {
				if sum.released {
					released++
				}
			} else if j, ok := r.PurgeJob(string(k[i+1:])); ok && j.Released {
				released++
			}
		}
		return nil
	})
	return counts, released
}
