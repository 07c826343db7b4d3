package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/auth"
)

// leaderlessReplica is a node without a leader: linearizable reads fail,
// its own replica reads.
type leaderlessReplica struct{ f *fsm.FSM }

var errNoLeaderHere = errors.New("raftnode: no leader")

func (l leaderlessReplica) Propose(context.Context, fsm.Command) (fsm.Result, error) {
	return fsm.Result{}, errNoLeaderHere
}

func (l leaderlessReplica) Read(context.Context, func(*fsm.Reader) error) error {
	return errNoLeaderHere
}

func (l leaderlessReplica) StaleRead(fn func(*fsm.Reader) error) error { return l.f.View(fn) }

// TestStatusPageWithoutLeaderChecksTheReplica: without a leader, the
// status page's reads (GET) check a static token and its grants against
// this node's replica, as the page reads its data, and root needs no
// grants at all; the API, and the page's actions (POST), still need a
// linearizable read and answer 503, never "refused".
func TestStatusPageWithoutLeaderChecksTheReplica(t *testing.T) {
	f, err := fsm.Open(filepath.Join(t.TempDir(), "fsm.db"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	id, token := auth.NewStaticToken()
	_, secret, ok := auth.ParseStaticToken(token)
	require.True(t, ok)
	for i, cmd := range []fsm.Command{
		fsm.PutAuthToken{Token: fsm.AuthToken{ID: id, Hash: auth.HashToken(secret), Principal: "bob"}},
		fsm.SetGrant{Grant: fsm.Grant{Grantee: "principal:bob", Namespace: []string{"db"}, Privilege: auth.PrivilegeRead}},
	} {
		data, err := fsm.Encode(cmd)
		require.NoError(t, err)
		res := f.Apply(&raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: data}).(fsm.Result)
		require.NoError(t, res.Err())
	}
	const root = "root-token-for-a-leaderless-test-0123456789"
	cfg := config{Auth: authOn, AuthRootToken: root, AuthTokenTTL: time.Hour, AuthMaxTokenTTL: time.Hour, AuthAudience: "floe"}
	s, err := newSecurity(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry(), leaderlessReplica{f}, "n1")
	require.NoError(t, err)

	var seen []string
	h := s.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		visible, err := authorizer{s}.Visible(r, []string{"db"})
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		seen = append(seen, r.URL.Path)
		if !visible {
			w.WriteHeader(http.StatusForbidden)
		}
	}))
	do := func(method, target, bearer, cookie string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, target, nil)
		if bearer != "" {
			r.Header.Set("Authorization", "Bearer "+bearer)
		}
		if cookie != "" {
			r.AddCookie(&http.Cookie{Name: "floe_ui_session", Value: cookie})
		}
		if method == http.MethodPost {
			r.Header.Set("Origin", "http://"+r.Host)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec
	}

	assert.Equal(t, http.StatusOK, do("GET", "/ui/catalog", root, "").Code, "root on the status page")
	assert.Equal(t, http.StatusOK, do("GET", "/ui/catalog", "", token).Code, "a static token's session on the status page")
	assert.Equal(t, http.StatusOK, do("GET", "/ui/namespace?ns=db", token, "").Code, "a static token on the status page")
	assert.Equal(t, http.StatusOK, do("GET", "/v1/namespaces", root, "").Code, "root needs no grants on the API either")

	// The API needs a leader to check a static token: 503, not 401.
	api := do("GET", "/v1/namespaces/db", token, "")
	assert.Equal(t, http.StatusServiceUnavailable, api.Code, api.Body.String())
	// A page's action keeps linearizable checks: 503, the session kept.
	post := do("POST", "/ui/purge-jobs/x/retry", "", token)
	assert.Equal(t, http.StatusServiceUnavailable, post.Code, post.Body.String())
	assert.Empty(t, post.Header().Values("Set-Cookie"), "the session cookie is kept")
	assert.True(t, strings.Contains(post.Body.String(), "could not be checked now"), post.Body.String())
	assert.Equal(t, []string{"/ui/catalog", "/ui/catalog", "/ui/namespace", "/v1/namespaces"}, seen)
}
