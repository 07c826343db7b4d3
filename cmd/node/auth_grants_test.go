package main

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/auth"
)

// countingReplica reads a real state machine and counts the reads.
type countingReplica struct {
	f     *fsm.FSM
	reads atomic.Int64
}

func (c *countingReplica) Propose(context.Context, fsm.Command) (fsm.Result, error) {
	panic("not used")
}

func (c *countingReplica) Read(_ context.Context, fn func(*fsm.Reader) error) error {
	c.reads.Add(1)
	return c.f.View(fn)
}

func (c *countingReplica) StaleRead(fn func(*fsm.Reader) error) error {
	c.reads.Add(1)
	return c.f.View(fn)
}

// One request reads its principal's grants once, however many namespaces
// it checks (a listing checks every one); another request reads them
// again, so a change between requests is seen.
func TestGrantsAreReadOncePerRequest(t *testing.T) {
	f, err := fsm.Open(filepath.Join(t.TempDir(), "fsm.db"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	store := &countingReplica{f: f}
	s := &security{store: store, on: true}
	a := authorizer{s}
	p := auth.Principal{Name: "alice"}

	r := withGrantsMemo(httptest.NewRequest("GET", "/v1/namespaces", nil))
	r = r.WithContext(auth.WithPrincipal(r.Context(), p))
	for _, ns := range []string{"a", "b", "c"} {
		_, err := a.Visible(r, []string{ns})
		require.NoError(t, err)
		_, err = a.Allowed(r, auth.PrivilegeRead, []string{ns})
		require.NoError(t, err)
	}
	assert.Equal(t, int64(1), store.reads.Load(), "one read for the request")

	next := withGrantsMemo(httptest.NewRequest("GET", "/v1/namespaces", nil))
	next = next.WithContext(auth.WithPrincipal(next.Context(), p))
	_, err = a.Visible(next, []string{"a"})
	require.NoError(t, err)
	assert.Equal(t, int64(2), store.reads.Load(), "the next request reads them again")
}
