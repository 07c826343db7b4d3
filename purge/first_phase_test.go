package purge

import (
	"bytes"
	"compress/gzip"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/iceberg-go/table"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/storage"
)

// FirstPhase never answers later than the first phase a walk finds a
// file in: a job stamped with it skips only empty phases.
func TestFirstPhaseIsNoLaterThanTheWalksFirstFile(t *testing.T) {
	const loc = "file:///w/t"
	cases := []struct {
		name                             string
		lists, stats, partStats, history []string
		want                             int
	}{
		{"only the root", nil, nil, nil, nil, PhaseRoot},
		{"previous metadata files", nil, nil, nil, []string{loc + "/metadata/0.json"}, PhaseMetadataLog},
		{"statistics", nil, []string{loc + "/metadata/s.puffin"}, nil, []string{loc + "/metadata/0.json"}, PhaseStatistics},
		{"partition statistics", nil, nil, []string{loc + "/metadata/p.parquet"}, []string{loc + "/metadata/0.json"}, PhaseStatistics},
		{"a snapshot", []string{loc + "/metadata/snap-1.avro"}, nil, nil, nil, PhaseData},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			meta, err := table.ParseMetadataBytes([]byte(FixtureMetadata{Location: loc, Lists: tc.lists, Stats: tc.stats, PartStats: tc.partStats, Previous: tc.history}.JSON()))
			require.NoError(t, err)
			got := FirstPhase(meta)
			assert.Equal(t, tc.want, got)
			walked := PhaseDone
			w := Walker{Reader: noReader{}, MayRead: func(string) bool { return false }}
			require.NoError(t, w.Walk(context.Background(), meta, loc+"/metadata/1.json", Checkpoint{}, func(f File) error {
				walked = min(walked, f.Phase)
				return nil
			}))
			assert.LessOrEqual(t, got, walked, "the walk's first file is in phase %s", PhaseName(walked))
		})
	}
}

type noReader struct{}

func (noReader) Read(context.Context, string) ([]byte, error) { return nil, storage.ErrNotFound }

// runStamped drops a table whose root metadata file is root (written with
// body unless body is empty), its job stamped with first, runs it on one
// node and returns the finished job and the commands proposed after the drop.
func runStamped(t *testing.T, root, body string, first int) (fsm.PurgeJob, []fsm.CommandType) {
	t.Helper()
	if body != "" {
		require.NoError(t, os.MkdirAll(filepath.Dir(strings.TrimPrefix(root, "file://")), 0o755))
		require.NoError(t, os.WriteFile(strings.TrimPrefix(root, "file://"), []byte(body), 0o644))
	}
	st := newLaggingStore(t, root, first)
	st.mu.Lock()
	st.proposed = nil
	st.mu.Unlock()
	job := runToEnd(t, st)
	st.mu.Lock()
	defer st.mu.Unlock()
	return job, slices.Clone(st.proposed)
}

// A job stamped at the root phase, whose root metadata file is its only
// file, deletes it without recording the phase first: one entry (the
// outcome) instead of two.
func TestJobStampedAtTheRootRecordsNoPhase(t *testing.T) {
	dir := filepath.ToSlash(t.TempDir())
	root := "file://" + dir + "/db/t/metadata/00000-0190a0a0-0000-7000-8000-000000000000.metadata.json"
	job, proposed := runStamped(t, root, FixtureMetadata{Location: "file://" + dir + "/db/t"}.JSON(), PhaseRoot)
	assert.Equal(t, fsm.JobSucceeded, job.State, job.LastError)
	assert.Equal(t, PhaseRoot, job.FirstPhase)
	assert.Equal(t, int64(1), job.Progress.Deleted)
	assert.NotContains(t, proposed, fsm.TypeReportPurgeProgress, "no phase record")
	assert.Contains(t, proposed, fsm.TypeFinishPurgeJob)
	assert.NoFileExists(t, strings.TrimPrefix(root, "file://"))
}

// A root file already gone under a root-phase stamp was the job's only
// file: an earlier run deleted it and stopped before its outcome.
func TestJobStampedAtTheRootWithItsRootGoneSucceeds(t *testing.T) {
	dir := filepath.ToSlash(t.TempDir())
	root := "file://" + dir + "/db/t/metadata/00000-0190a0a0-0000-7000-8000-000000000000.metadata.json"
	job, _ := runStamped(t, root, "", PhaseRoot)
	assert.Equal(t, fsm.JobSucceeded, job.State, job.LastError)
	assert.Equal(t, 0, job.Attempts)
}

// A stamp the root file contradicts (it names earlier files: written over
// after the drop) is not trusted: every phase is walked and recorded.
func TestStampContradictedByTheRootIsIgnored(t *testing.T) {
	dir := filepath.ToSlash(t.TempDir())
	loc := "file://" + dir + "/db/t"
	prev := loc + "/metadata/00000-0190a0a0-0000-7000-8000-00000000000a.metadata.json"
	root := loc + "/metadata/00001-0190a0a0-0000-7000-8000-00000000000b.metadata.json"
	require.NoError(t, os.MkdirAll(dir+"/db/t/metadata", 0o755))
	require.NoError(t, os.WriteFile(strings.TrimPrefix(prev, "file://"), []byte("{}"), 0o644))
	job, proposed := runStamped(t, root, FixtureMetadata{Location: loc, Previous: []string{prev}}.JSON(), PhaseRoot)
	assert.Equal(t, fsm.JobSucceeded, job.State, job.LastError)
	assert.Equal(t, int64(2), job.Progress.Deleted)
	assert.NoFileExists(t, strings.TrimPrefix(prev, "file://"), "the previous file the stamp missed")
	assert.Contains(t, proposed, fsm.TypeReportPurgeProgress, "the root phase is recorded before its delete")
}

// The state machine bounds a job's first phase by the root's phase.
func TestMaxFirstPhaseIsTheRoot(t *testing.T) {
	assert.Equal(t, PhaseRoot, fsm.MaxPurgeFirstPhase)
}

// A gzipped root metadata file (as Java writes with
// write.metadata.compression-codec=gzip) is read like a plain one.
func TestGzippedRootMetadataIsPurged(t *testing.T) {
	dir := filepath.ToSlash(t.TempDir())
	loc := "file://" + dir + "/db/t"
	prev := loc + "/metadata/00000-0190a0a0-0000-7000-8000-00000000000a.gz.metadata.json"
	root := loc + "/metadata/00001-0190a0a0-0000-7000-8000-00000000000b.gz.metadata.json"
	require.NoError(t, os.MkdirAll(dir+"/db/t/metadata", 0o755))
	require.NoError(t, os.WriteFile(strings.TrimPrefix(prev, "file://"), []byte("{}"), 0o644))
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	_, err := zw.Write([]byte(FixtureMetadata{Location: loc, Previous: []string{prev}}.JSON()))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	job, _ := runStamped(t, root, zb.String(), 0)
	assert.Equal(t, fsm.JobSucceeded, job.State, job.LastError)
	assert.Equal(t, int64(2), job.Progress.Deleted)
	assert.NoFileExists(t, strings.TrimPrefix(prev, "file://"))
	assert.NoFileExists(t, strings.TrimPrefix(root, "file://"))
}

// Only a root-phase stamp makes a missing root a finished job: under an
// earlier stamp, or none, the root was not the only file and its loss
// fails the job.
func TestMissingRootFailsUnlessStampedAtTheRoot(t *testing.T) {
	for _, first := range []int{0, PhaseMetadataLog} {
		t.Run(PhaseName(first), func(t *testing.T) {
			dir := filepath.ToSlash(t.TempDir())
			root := "file://" + dir + "/db/t/metadata/00000-0190a0a0-0000-7000-8000-000000000000.metadata.json"
			job, _ := runStamped(t, root, "", first)
			assert.Equal(t, fsm.JobFailed, job.State)
			assert.Contains(t, job.LastError, "is missing")
		})
	}
}
