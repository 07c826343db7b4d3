package raftnode

import (
	"bytes"
	"fmt"
	"log/slog"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
)

// Raft's "failed to take snapshot" for a snapshot asked for with nothing
// new to put in it is not an error an operator should see (the damaged
// snapshot's replacement asks every second); other snapshot failures are.
func TestHCLogQuietsNothingNewToSnapshot(t *testing.T) {
	var out bytes.Buffer
	l := newHCLog(slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo})), "raft")
	l.Error("failed to take snapshot", "error", raft.ErrNothingNewToSnapshot)
	assert.Empty(t, out.String())
	l.Error("failed to take snapshot", "error", fmt.Errorf("failed to create snapshot: disk full"))
	assert.Contains(t, out.String(), "level=ERROR")
	assert.Contains(t, out.String(), "disk full")
}
