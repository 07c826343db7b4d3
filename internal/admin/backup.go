package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/backup"
	"github.com/floe-catalog/floe/internal/raftnode"
)

// BackupContentType is the media type of a backup file.
const BackupContentType = "application/vnd.floe.backup"

// BackupSource is what the backup endpoint needs from the node (a
// raftnode.Node): a linearizable read of the state machine, the node's ID
// and the cluster's member IDs for the header.
type BackupSource interface {
	Read(ctx context.Context, fn func(*fsm.Reader) error) error
	ID() string
	MemberIDs() ([]string, error)
}

var _ BackupSource = (*raftnode.Node)(nil)

// Backup returns the backup endpoint, with its metrics (floe_backup_*)
// registered on reg (nil: not registered):
//
//	GET /management/v1/backup   the whole replicated state as one backup file
//	                            (package internal/backup), streamed
//
// The copy is taken after a linearizable read barrier, so it holds every
// write acknowledged anywhere in the cluster before the request arrived; it
// is one bbolt read transaction, so it is a single point in time. The
// answer has a Content-Length and the X-Floe-Backup-Index header (the log
// index the copy reflects). Without a leader it answers 503 before sending
// anything. A failure once the body has started aborts the connection: the
// client gets a short body, which the backup reader refuses as truncated.
func (s *Server) Backup(src BackupSource, reg prometheus.Registerer) http.Handler {
	b := &backupAPI{srv: s, src: src, now: s.cfg.Now, log: s.log, m: newBackupMetrics(reg, s.log)}
	r := mux.NewRouter()
	r.Handle("/management/v1/backup", s.wrap(b.serve)).Methods("GET")
	r.NotFoundHandler = s.wrap(func(w http.ResponseWriter, r *http.Request) error {
		return fmt.Errorf("%w: no such route %s %s", ErrNotFound, r.Method, r.URL.Path)
	})
	r.MethodNotAllowedHandler = s.methodNotAllowed(r)
	return r
}

type backupAPI struct {
	srv *Server
	src BackupSource
	now func() time.Time
	log *slog.Logger
	m   *backupMetrics
}

// serve streams one backup. See Backup.
func (b *backupAPI) serve(w http.ResponseWriter, r *http.Request) error {
	members, err := b.src.MemberIDs()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	start := time.Now()
	b.m.inProgress.Inc()
	defer b.m.inProgress.Dec()

	var (
		h       backup.Header
		bw      *backup.Writer
		started bool  // the status line and headers were sent
		inner   error // the stream's own failure, as opposed to the read barrier's
	)
	err = b.src.Read(r.Context(), func(rd *fsm.Reader) error {
		h = backup.Header{
			Created: b.now().UTC(), NodeID: b.src.ID(), ClusterID: rd.ClusterID(), Members: members,
			Index: rd.AppliedIndex(), PayloadSize: rd.Size(),
		}
		size, err := backup.Size(h)
		if err != nil {
			inner = err
			return err
		}
		// A large backup may take longer than --http-write-timeout allows
		// an answer; it is bounded by the client instead. Writers that
		// cannot clear the deadline keep it.
		_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
		w.Header().Set("Content-Type", BackupContentType)
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="floe-%d.backup"`, h.Index))
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("X-Floe-Backup-Index", strconv.FormatUint(h.Index, 10))
		w.WriteHeader(http.StatusOK)
		started = true
		if bw, err = backup.NewWriter(w, h); err != nil {
			inner = err
			return err
		}
		if _, err := rd.WriteTo(bw); err != nil {
			inner = err
			return err
		}
		inner = bw.Close()
		return inner
	})
	var written int64
	if bw != nil {
		written = bw.Written()
	}
	b.m.bytes.Add(float64(written))
	d := time.Since(start)
	if err == nil {
		b.m.taken.WithLabelValues("ok").Inc()
		b.m.duration.Observe(d.Seconds())
		b.log.Info("backup taken", "index", h.Index, "members", h.Members, "bytes", written,
			"duration", d.Round(time.Millisecond), "principal", b.srv.principal(r), "remote", r.RemoteAddr)
		return nil
	}
	b.m.taken.WithLabelValues("failed").Inc()
	if started {
		// The status is sent: the only way left to tell the client is to
		// cut the body short.
		b.log.Warn("backup aborted", "index", h.Index, "bytes", written, "duration", d.Round(time.Millisecond),
			"principal", b.srv.principal(r), "remote", r.RemoteAddr, "error", err)
		panic(http.ErrAbortHandler)
	}
	if inner != nil && errors.Is(err, inner) {
		return err
	}
	// The read barrier failed: no leader, leadership lost, shutting down.
	return fmt.Errorf("%w: %v", ErrUnavailable, err)
}

// backupMetrics are the floe_backup_* collectors.
type backupMetrics struct {
	taken      *prometheus.CounterVec
	bytes      prometheus.Counter
	duration   prometheus.Histogram
	inProgress prometheus.Gauge
}

func newBackupMetrics(reg prometheus.Registerer, log *slog.Logger) *backupMetrics {
	const ns, sub = "floe", "backup"
	m := &backupMetrics{
		taken: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "total",
			Help: "Backups served by this node, by result (ok, failed).",
		}, []string{"result"}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "bytes_total",
			Help: "Bytes of backup files sent by this node, failed ones included.",
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "duration_seconds",
			Help:    "Time to take and send a backup that succeeded, read barrier included.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 10), // 10ms to ~44min
		}),
		inProgress: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "in_progress",
			Help: "Backups being sent by this node now.",
		}),
	}
	m.taken.WithLabelValues("ok")
	m.taken.WithLabelValues("failed")
	if reg == nil {
		return m
	}
	m.taken = registerOrReuse(reg, m.taken, log)
	m.bytes = registerOrReuse(reg, m.bytes, log)
	m.duration = registerOrReuse(reg, m.duration, log)
	m.inProgress = registerOrReuse(reg, m.inProgress, log)
	return m
}

// registerOrReuse registers c on reg, or returns the collector already
// registered under its name. Any other failure is logged and c is used
// unregistered.
func registerOrReuse[C prometheus.Collector](reg prometheus.Registerer, c C, log *slog.Logger) C {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	log.Warn("backup metrics not registered", "error", err)
	return c
}
