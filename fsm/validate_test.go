package fsm

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Commands whose keys bbolt cannot store are refused as values, never a
// panic, and change nothing. The first three entries are what a fuzzer
// found panicking ApplyBatch.
func TestMalformedCommandsAreRefusedNotPanics(t *testing.T) {
	f := mustOpen(t, filepath.Join(t.TempDir(), "fsm.db"))
	long := strings.Repeat("x", 255)
	deep := make([]string, 200)
	for i := range deep {
		deep[i] = long
	}
	for i, raw := range [][]byte{
		[]byte("\x01\x01{\"namespace\":[\"\"]}"), // CreateNamespace with an empty level
		[]byte("\x15\x01{}"),                     // RecordOutcome without a key
		[]byte("\x0b\x01{}"),                     // PurgeHeartbeat without a node
	} {
		res := result(t, f.Apply(&raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: raw}))
		assert.ErrorIs(t, res.Err(), ErrInvalidCommand, "%q", raw)
	}
	idx := uint64(10)
	for _, c := range []Command{
		CreateNamespace{Namespace: deep},
		CommitTables{Changes: []TableChange{{Kind: ChangeCreate, Ident: Ident{Namespace: []string{"a"}, Name: ""}}}},
		CommitTables{Changes: []TableChange{{Kind: ChangeCreate, Ident: tbl1, Location: "s3://b/" + strings.Repeat("y", 40000)}}},
		Keyed{Key: "", Command: []byte("\x07\x01{}")},
		RenameTable{From: tbl1, To: Ident{Namespace: deep, Name: "t"}},
	} {
		idx++
		res := result(t, f.Apply(entry(t, idx, c)))
		assert.ErrorIs(t, res.Err(), ErrInvalidCommand, "%T", c)
	}
	require.NoError(t, f.View(func(r *Reader) error {
		list, _ := r.Namespaces(nil, "", 0)
		assert.Empty(t, list)
		return nil
	}))
}
