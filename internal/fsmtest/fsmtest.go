// Package fsmtest is a one-replica store over a real state machine, for
// tests of what sits above the replicated log (idempotency, purge): every
// command is applied at once, one at a time, as under Raft.
package fsmtest

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/floe-catalog/floe/fsm"
)

// Store applies every proposed command at once to F. Read and StaleRead
// both read F as it is: there is no other replica to lag behind.
type Store struct {
	mu sync.Mutex
	F  *fsm.FSM
	i  uint64
}

// Open opens a state machine under t's temporary directory, closed when
// the test ends.
func Open(t testing.TB) *Store {
	t.Helper()
	f, err := fsm.Open(filepath.Join(t.TempDir(), "fsm.db"), nil)
	if err != nil {
		t.Fatalf("fsmtest: open the state machine: %v", err)
	}
	t.Cleanup(func() { f.Close() })
	return &Store{F: f}
}

// Propose applies c as the next log entry and returns its result.
func (s *Store) Propose(_ context.Context, c fsm.Command) (fsm.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := fsm.Encode(c)
	if err != nil {
		return fsm.Result{}, err
	}
	s.i++
	return s.F.Apply(&raft.Log{Index: s.i, Term: 1, Type: raft.LogCommand, Data: b}).(fsm.Result), nil
}

// Index is the index of the last entry applied.
func (s *Store) Index() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.i
}

func (s *Store) Read(_ context.Context, fn func(*fsm.Reader) error) error { return s.F.View(fn) }
func (s *Store) StaleRead(fn func(*fsm.Reader) error) error               { return s.F.View(fn) }

// Must proposes c and fails the test unless it applied without error.
func (s *Store) Must(t testing.TB, c fsm.Command) {
	t.Helper()
	res, err := s.Propose(context.Background(), c)
	if err == nil {
		err = res.Err()
	}
	if err != nil {
		t.Fatalf("fsmtest: %T: %v", c, err)
	}
}
