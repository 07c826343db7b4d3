package backup

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/google/uuid"

	"github.com/floe-catalog/floe/internal/raftnode"
)

// RestoreConfig says where a backup is restored and for which node.
type RestoreConfig struct {
	// DataDir is the data directory of the node that will start the new
	// cluster. It must hold no node state (raftnode.CheckNoState); it may
	// not exist yet.
	DataDir string
	// NodeID and Address are the Raft server ID and cluster address that
	// node will start with; it refuses to start under others.
	NodeID  string
	Address string
	// ClusterID is the new cluster's identity, which replaces the one the
	// backup's state holds (raftnode.SeedConfig.ClusterID): nodes of the
	// cluster the backup came from are then refused by the new one.
	// Default: a new UUIDv7.
	ClusterID string
	// Logger receives the snapshot store's logs. Default slog.Default().
	Logger *slog.Logger
	// Progress, when set, is called as the file is read, with the step
	// ("verifying", then "restoring") and the bytes of the file read so
	// far in it; the caller reports it (a long restore otherwise looks
	// hung). It is called from the reading goroutine, often.
	Progress func(step string, read int64)
	// Context, when set, stops the restore as soon as it ends (Ctrl-C):
	// what was written is removed, as after any failure, and the error
	// wraps the context's.
	Context context.Context
}

// ctxReader fails its next read once ctx has ended.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, fmt.Errorf("backup: stopped: %w", err)
	}
	return c.r.Read(b)
}

// progressReader counts what passes through it for RestoreConfig.Progress.
type progressReader struct {
	r    io.Reader
	step string
	n    int64
	fn   func(string, int64)
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	p.fn(p.step, p.n)
	return n, err
}

// progress wraps r for cfg.Progress and cfg.Context, if set.
func (cfg RestoreConfig) progress(r io.Reader, step string) io.Reader {
	if cfg.Context != nil {
		r = ctxReader{ctx: cfg.Context, r: r}
	}
	if cfg.Progress == nil {
		return r
	}
	return &progressReader{r: r, step: step, fn: cfg.Progress}
}

// Restore seeds a new cluster from the backup file at path: it prepares
// cfg.DataDir so that a node started on it with cfg.NodeID and cfg.Address
// is a one-node cluster holding the backup's state, at the backup's log
// index (raftnode.Seed); further nodes join it with empty data directories.
//
// Nothing is written before the whole file has been verified: a data
// directory with state is refused (raftnode.ErrHasState), and a file that is
// not a backup, of another format version, truncated or altered anywhere is
// refused with the Reader's errors (ErrNotBackup, ErrVersion, ErrTruncated,
// ErrCorrupt). The file is then read a second time, checked again, while the
// state is written; a failure then (the file changed in between, a disk
// error) removes what was written. It returns the header of the restored
// backup and its file checksum.
func Restore(path string, cfg RestoreConfig) (Header, string, error) {
	if err := raftnode.CheckNoState(cfg.DataDir); err != nil {
		return Header{}, "", err
	}
	f, err := os.Open(path)
	if err != nil {
		return Header{}, "", fmt.Errorf("backup: %w", err)
	}
	defer f.Close()
	if _, _, err := Verify(bufio.NewReaderSize(cfg.progress(f, "verifying"), 1<<20)); err != nil {
		return Header{}, "", err
	}

	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return Header{}, "", fmt.Errorf("backup: %w", err)
	}
	br, err := NewReader(bufio.NewReaderSize(cfg.progress(f, "restoring"), 1<<20))
	if err != nil {
		return Header{}, "", fmt.Errorf("backup: the file changed after it was verified: %w", err)
	}
	h := br.Header()
	// A snapshot index must be at least 1; a state that reflects no entry
	// at all is the same state at index 1.
	index := max(h.Index, 1)
	if cfg.ClusterID == "" {
		u, err := uuid.NewV7()
		if err != nil {
			return h, "", fmt.Errorf("backup: %w", err)
		}
		cfg.ClusterID = u.String()
	}
	err = raftnode.Seed(raftnode.SeedConfig{
		DataDir: cfg.DataDir, NodeID: cfg.NodeID, Address: cfg.Address, Index: index,
		ClusterID: cfg.ClusterID, Logger: cfg.Logger,
	}, br)
	if err != nil {
		return h, "", err
	}
	return h, br.Checksum(), nil
}
