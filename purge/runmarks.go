package purge

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// runMarks records on this node's disk the purge runs in flight: one file
// per job, named by the job's id (hex-encoded), holding its lease token.
// A run writes its mark before it deletes anything and removes it when it
// ends in any way the process survives (an outcome recorded, a lease
// lost, a stop). A mark found when the service is created is a run the
// process ended during: a crash, an OOM kill, SIGKILL, a power loss.
//
// Without marks such a run was invisible: the node resumed the job under
// the same lease and the same attempt number at its restart, and a job
// whose run ends the process (input that exhausts memory, say) would do so
// on every restart, for ever. The service answers a mark left under the
// job's current lease by recording the lost run as a failed attempt
// (lostRun), so such a job reaches FAILED after MaxAttempts.
//
// A nil *runMarks (no directory configured) marks nothing. Errors writing
// or removing a mark are logged, never fatal: a mark is a guard against
// crash loops, not part of the job's safety.
type runMarks struct {
	dir string
	log *slog.Logger

	mu sync.Mutex
	// left holds the marks found at start, by job id: their tokens.
	left map[string]uint64
}

// openRunMarks creates dir if need be and reads the marks a previous
// process left there.
func openRunMarks(dir string, log *slog.Logger) (*runMarks, error) {
	if dir == "" {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("purge: run marks directory: %w", err)
	}
	m := &runMarks{dir: dir, log: log, left: map[string]uint64{}}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("purge: run marks directory: %w", err)
	}
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		id, token, ok := readMark(path, e)
		if !ok {
			// Not a mark (or one cut short by the crash): it tells nothing.
			log.Warn("purge run mark unreadable; removed", "file", path)
			_ = os.Remove(path)
			continue
		}
		m.left[id] = token
	}
	if len(m.left) > 0 {
		log.Warn("purge runs were in flight when this node's process last ended; each counts as a failed attempt if its job is still leased here under the same token",
			"runs", len(m.left))
	}
	return m, nil
}

// readMark reads the mark at path: its job id and token. Only a small
// regular file is read (a FIFO's read would wait for ever).
func readMark(path string, e fs.DirEntry) (id string, token uint64, ok bool) {
	raw, err := hex.DecodeString(e.Name())
	if err != nil || !e.Type().IsRegular() {
		return "", 0, false
	}
	if fi, err := e.Info(); err != nil || fi.Size() > 32 {
		return "", 0, false
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", 0, false
	}
	token, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return "", 0, false
	}
	return string(raw), token, true
}

func (m *runMarks) path(jobID string) string {
	return filepath.Join(m.dir, hex.EncodeToString([]byte(jobID)))
}

// begin marks the run of jobID under token as in flight; it replaces a
// mark found at start.
func (m *runMarks) begin(jobID string, token uint64) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.left, jobID)
	if err := os.WriteFile(m.path(jobID), []byte(strconv.FormatUint(token, 10)+"\n"), 0o600); err != nil {
		m.log.Warn("purge run mark not written", "job_id", jobID, "error", err)
	}
}

// drop removes the mark found at start for jobID under token, unless a
// run here has replaced it since (begin).
func (m *runMarks) drop(jobID string, token uint64) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if t, ok := m.left[jobID]; !ok || t != token {
		return
	}
	m.removeLocked(jobID)
}

// end removes jobID's mark, and forgets the one found at start.
func (m *runMarks) end(jobID string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.removeLocked(jobID)
}

// removeLocked forgets the mark found at start for jobID and removes its
// file; m.mu is held.
func (m *runMarks) removeLocked(jobID string) {
	delete(m.left, jobID)
	if err := os.Remove(m.path(jobID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		m.log.Warn("purge run mark not removed", "job_id", jobID, "error", err)
	}
}

// lost reports whether a run of jobID under token was in flight when the
// previous process ended.
func (m *runMarks) lost(jobID string, token uint64) bool {
	if m == nil {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.left[jobID]
	return ok && t == token
}

// leftOver lists the marks found at start not yet handled.
func (m *runMarks) leftOver() map[string]uint64 {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.left) == 0 {
		return nil
	}
	out := make(map[string]uint64, len(m.left))
	for id, t := range m.left {
		out[id] = t
	}
	return out
}
