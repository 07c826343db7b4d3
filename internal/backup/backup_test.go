package backup

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/raftnode"
)

func testHeader(payload int) Header {
	return Header{
		Created: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC), NodeID: "node2",
		Members: []string{"node1", "node2", "node3"}, Index: 4242, PayloadSize: int64(payload),
	}
}

// encode writes a backup of payload, in uneven pieces.
func encode(t *testing.T, h Header, payload []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, h)
	require.NoError(t, err)
	for rest := payload; len(rest) > 0; {
		n := min(len(rest), 1+len(rest)/3)
		_, err := w.Write(rest[:n])
		require.NoError(t, err)
		rest = rest[n:]
	}
	require.NoError(t, w.Close())
	assert.Equal(t, int64(buf.Len()), w.Written())
	return buf.Bytes()
}

func randomPayload(n int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(r.IntN(256))
	}
	return p
}

func TestRoundTrip(t *testing.T) {
	for _, size := range []int{0, 1, 4096, 100_000} {
		payload := randomPayload(size)
		h := testHeader(size)
		file := encode(t, h, payload)
		want, err := Size(h)
		require.NoError(t, err)
		assert.Equal(t, want, int64(len(file)), "Size for payload %d", size)

		br, err := NewReader(bytes.NewReader(file))
		require.NoError(t, err)
		assert.Equal(t, h, br.Header())
		got, err := io.ReadAll(br)
		require.NoError(t, err, "payload %d", size)
		assert.Equal(t, payload, got)
		assert.Len(t, br.Checksum(), 64)

		vh, sum, err := Verify(bytes.NewReader(file))
		require.NoError(t, err)
		assert.Equal(t, h, vh)
		assert.Equal(t, br.Checksum(), sum)
	}
}

// TestEveryFlippedByteIsRefused flips one bit of every byte of a file in
// turn: header, header checksum, payload and file checksum alike.
func TestEveryFlippedByteIsRefused(t *testing.T) {
	file := encode(t, testHeader(3000), randomPayload(3000))
	for i := range file {
		for _, bit := range []byte{0x01, 0x80} {
			bad := bytes.Clone(file)
			bad[i] ^= bit
			_, _, err := Verify(bytes.NewReader(bad))
			require.Error(t, err, "byte %d bit %#x flipped was accepted", i, bit)
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrVersion) && !errors.Is(err, ErrNotBackup) {
				t.Fatalf("byte %d: unexpected error %v", i, err)
			}
		}
	}
	// Which error, where: the payload and its checksum are corrupt, not
	// truncated; the header is corrupt.
	for _, i := range []int{20, len(file) - 3000 - 32 + 5, len(file) - 1} {
		bad := bytes.Clone(file)
		bad[i] ^= 0x10
		_, _, err := Verify(bytes.NewReader(bad))
		assert.ErrorIs(t, err, ErrCorrupt, "byte %d", i)
	}
}

func TestTruncatedFileIsRefused(t *testing.T) {
	file := encode(t, testHeader(2000), randomPayload(2000))
	for n := 0; n < len(file); n++ {
		_, _, err := Verify(bytes.NewReader(file[:n]))
		require.ErrorIs(t, err, ErrTruncated, "file cut to %d of %d bytes", n, len(file))
	}
}

func TestTrailingDataIsRefused(t *testing.T) {
	file := encode(t, testHeader(100), randomPayload(100))
	_, _, err := Verify(bytes.NewReader(append(bytes.Clone(file), 0)))
	assert.ErrorIs(t, err, ErrCorrupt)
}

func TestUnknownFormatVersionIsRefused(t *testing.T) {
	file := encode(t, testHeader(100), randomPayload(100))
	bad := bytes.Clone(file)
	binary.BigEndian.PutUint32(bad[8:12], FormatVersion+1)
	_, _, err := Verify(bytes.NewReader(bad))
	require.ErrorIs(t, err, ErrVersion)
	assert.Contains(t, err.Error(), "format version 2")
}

func TestNotABackupIsRefused(t *testing.T) {
	_, _, err := Verify(bytes.NewReader([]byte("SQLite format 3\x00 and more bytes")))
	assert.ErrorIs(t, err, ErrNotBackup)
}

func TestWriterEnforcesPayloadSize(t *testing.T) {
	w, err := NewWriter(io.Discard, testHeader(10))
	require.NoError(t, err)
	_, err = w.Write(make([]byte, 11))
	assert.ErrorIs(t, err, ErrPayloadSize)
	_, err = w.Write(make([]byte, 9))
	require.NoError(t, err)
	assert.ErrorIs(t, w.Close(), ErrPayloadSize)
}

// stateFile returns a backup of a real state machine holding namespace
// "restored", and its header.
func stateFile(t *testing.T) (string, Header) {
	t.Helper()
	f, err := fsm.Open(filepath.Join(t.TempDir(), "fsm.db"), nil)
	require.NoError(t, err)
	defer f.Close()
	data, err := fsm.Encode(fsm.CreateNamespace{Namespace: []string{"restored"}, AtMs: 1700000000000})
	require.NoError(t, err)
	f.ApplyBatch([]*raft.Log{{Index: 7, Term: 3, Type: raft.LogCommand, Data: data}})

	path := filepath.Join(t.TempDir(), "state.backup")
	out, err := os.Create(path)
	require.NoError(t, err)
	var h Header
	require.NoError(t, f.View(func(r *fsm.Reader) error {
		h = Header{Created: time.Now().UTC(), NodeID: "a", Members: []string{"a"}, Index: r.AppliedIndex(), PayloadSize: r.Size()}
		w, err := NewWriter(out, h)
		if err != nil {
			return err
		}
		if _, err := r.WriteTo(w); err != nil {
			return err
		}
		return w.Close()
	}))
	require.NoError(t, out.Close())
	assert.Equal(t, uint64(7), h.Index)
	return path, h
}

func TestRestoreSeedsDataDir(t *testing.T) {
	path, h := stateFile(t)
	dir := filepath.Join(t.TempDir(), "data")
	got, sum, err := Restore(path, RestoreConfig{DataDir: dir, NodeID: "r1", Address: "127.0.0.1:9999"})
	require.NoError(t, err)
	assert.Equal(t, h.Index, got.Index)
	assert.Len(t, sum, 64)
	assert.ErrorIs(t, raftnode.CheckNoState(dir), raftnode.ErrHasState)

	// A second restore into the same directory is refused.
	_, _, err = Restore(path, RestoreConfig{DataDir: dir, NodeID: "r1", Address: "127.0.0.1:9999"})
	assert.ErrorIs(t, err, raftnode.ErrHasState)
}

func TestRestoreRefusesCorruptFileWritingNothing(t *testing.T) {
	path, _ := stateFile(t)
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	raw[len(raw)/2] ^= 0x04
	require.NoError(t, os.WriteFile(path, raw, 0o600))

	// A data directory that does not exist stays so; an empty one stays empty.
	missing := filepath.Join(t.TempDir(), "data")
	_, _, err = Restore(path, RestoreConfig{DataDir: missing, NodeID: "r1", Address: "127.0.0.1:9999"})
	require.ErrorIs(t, err, ErrCorrupt)
	_, statErr := os.Stat(missing)
	assert.True(t, errors.Is(statErr, os.ErrNotExist), "data dir was created")

	empty := t.TempDir()
	_, _, err = Restore(path, RestoreConfig{DataDir: empty, NodeID: "r1", Address: "127.0.0.1:9999"})
	require.ErrorIs(t, err, ErrCorrupt)
	entries, err := os.ReadDir(empty)
	require.NoError(t, err)
	assert.Empty(t, entries)

	// Truncated: refused too.
	require.NoError(t, os.WriteFile(path, raw[:len(raw)-1], 0o600))
	_, _, err = Restore(path, RestoreConfig{DataDir: empty, NodeID: "r1", Address: "127.0.0.1:9999"})
	require.ErrorIs(t, err, ErrTruncated)
}

// A restore stopped by its context (Ctrl-C) fails at its next read of the
// file and leaves no state behind: the directory can be restored into.
func TestRestoreStoppedByItsContextLeavesNoState(t *testing.T) {
	path, _ := stateFile(t)
	dir := filepath.Join(t.TempDir(), "data")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, _, err := Restore(path, RestoreConfig{DataDir: dir, NodeID: "r1", Address: "127.0.0.1:9999", Context: ctx,
		Progress: func(step string, read int64) {
			if read > 0 {
				cancel() // the test's file is read whole at once: stop before the second pass
			}
		}})
	require.ErrorIs(t, err, context.Canceled)
	require.NoError(t, raftnode.CheckNoState(dir), "a stopped restore leaves no state")
	_, _, err = Restore(path, RestoreConfig{DataDir: dir, NodeID: "r1", Address: "127.0.0.1:9999"})
	require.NoError(t, err, "and the directory takes a restore afterwards")
}
