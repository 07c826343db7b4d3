package admin

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/backup"
	"github.com/floe-catalog/floe/internal/raftnode"
)

// fsmSource serves backups of a local state machine; readErr, when set,
// is what the read barrier fails with.
type fsmSource struct {
	f       *fsm.FSM
	readErr error
}

func (s *fsmSource) Read(ctx context.Context, fn func(*fsm.Reader) error) error {
	if s.readErr != nil {
		return s.readErr
	}
	return s.f.View(fn)
}
func (s *fsmSource) ID() string                   { return "node2" }
func (s *fsmSource) MemberIDs() ([]string, error) { return []string{"node1", "node2"}, nil }

func TestBackupEndpointStreamsVerifiableFile(t *testing.T) {
	f, err := fsm.Open(filepath.Join(t.TempDir(), "fsm.db"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	data, err := fsm.Encode(fsm.CreateNamespace{Namespace: []string{"demo"}, AtMs: 1700000000000})
	require.NoError(t, err)
	f.ApplyBatch([]*raft.Log{{Index: 12, Term: 2, Type: raft.LogCommand, Data: data}})

	reg := prometheus.NewRegistry()
	src := &fsmSource{f: f}
	srv := New(nil, nil, Config{Now: func() time.Time { return time.Unix(1700000000, 0) }})
	h := srv.Backup(src, reg)

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/management/v1/backup", nil))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	assert.Equal(t, BackupContentType, rec.Header().Get("Content-Type"))
	assert.Equal(t, strconv.Itoa(rec.Body.Len()), rec.Header().Get("Content-Length"))
	assert.Equal(t, "12", rec.Header().Get("X-Floe-Backup-Index"))

	br, err := backup.NewReader(bytes.NewReader(rec.Body.Bytes()))
	require.NoError(t, err)
	payload, err := io.ReadAll(br)
	require.NoError(t, err)
	hd := br.Header()
	assert.Equal(t, uint64(12), hd.Index)
	assert.Equal(t, "node2", hd.NodeID)
	assert.Equal(t, []string{"node1", "node2"}, hd.Members)
	assert.Equal(t, time.Unix(1700000000, 0).UTC(), hd.Created)
	assert.Equal(t, int64(len(payload)), hd.PayloadSize)
	assert.Equal(t, 1.0, testutil.ToFloat64(backupCounter(reg, "ok")))

	// Without a leader: 503 before anything is sent.
	src.readErr = raftnode.ErrNoLeader
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/management/v1/backup", nil))
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Contains(t, rec.Body.String(), "ServiceUnavailableException")
	assert.Equal(t, 1.0, testutil.ToFloat64(backupCounter(reg, "failed")))

	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/management/v1/backup", nil))
	assert.Equal(t, http.StatusMethodNotAllowed, rec.Code)
	assert.Equal(t, "GET", rec.Header().Get("Allow"))
}

// backupCounter returns the floe_backup_total counter of result, as
// registered on reg.
func backupCounter(reg *prometheus.Registry, result string) prometheus.Collector {
	m := newBackupMetrics(reg, slog.Default()) // reuses the registered collectors
	return m.taken.WithLabelValues(result)
}
