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
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/auth"
	"github.com/floe-catalog/floe/internal/raftnode"
	"github.com/floe-catalog/floe/internal/ui"
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

// returningReplica is a node whose leader comes back while a request is
// served: linearizable reads read fresh until back is set, which fail;
// its own replica, stale, is behind (a revocation not yet applied).
type returningReplica struct {
	stale, fresh *fsm.FSM
	back         *atomic.Bool
}

func (r returningReplica) Read(_ context.Context, fn func(*fsm.Reader) error) error {
	if !r.back.Load() {
		return errNoLeaderHere
	}
	return r.fresh.View(fn)
}

func (r returningReplica) StaleRead(fn func(*fsm.Reader) error) error { return r.stale.View(fn) }

func (r returningReplica) Propose(context.Context, fsm.Command) (fsm.Result, error) {
	return fsm.Result{}, errNoLeaderHere
}

// leaderBackAfterChecks is the node's authorizer, after whose checks the
// leader is back.
type leaderBackAfterChecks struct {
	authorizer
	back *atomic.Bool
}

func (a leaderBackAfterChecks) Allowed(r *http.Request, priv string, ns []string) (bool, error) {
	defer a.back.Store(true)
	return a.authorizer.Allowed(r, priv, ns)
}

func (a leaderBackAfterChecks) Visible(r *http.Request, ns []string) (bool, error) {
	return a.authorizer.Visible(r, ns)
}

type stillCluster struct{}

func (stillCluster) Status(context.Context) (raftnode.Status, error) { return raftnode.Status{}, nil }
func (stillCluster) Ready() error                                    { return nil }

type noObjects struct{}

func (noObjects) Read(context.Context, string) ([]byte, error) {
	return nil, errors.New("no objects here")
}

// replicaOf returns a state machine that has applied cmds, in order.
func replicaOf(t *testing.T, cmds ...fsm.Command) *fsm.FSM {
	t.Helper()
	f, err := fsm.Open(filepath.Join(t.TempDir(), "fsm.db"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	for i, cmd := range cmds {
		data, err := fsm.Encode(cmd)
		require.NoError(t, err)
		res := f.Apply(&raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: data}).(fsm.Result)
		require.NoError(t, res.Err())
	}
	return f
}

// TestPageAuthorizedByTheReplicaShowsTheReplica: a page whose reader was
// checked against this node's replica (no leader at the time) shows the
// replica too, even when the leader is back by the time it reads its
// data: the state after a revocation the replica had not applied yet is
// never shown to the reader it revoked.
func TestPageAuthorizedByTheReplicaShowsTheReplica(t *testing.T) {
	id, token := auth.NewStaticToken()
	_, secret, ok := auth.ParseStaticToken(token)
	require.True(t, ok)
	open := func(cmds ...fsm.Command) *fsm.FSM {
		return replicaOf(t, append([]fsm.Command{
			fsm.PutAuthToken{Token: fsm.AuthToken{ID: id, Hash: auth.HashToken(secret), Principal: "bob"}},
			fsm.CreateNamespace{Namespace: []string{"db"}},
		}, cmds...)...)
	}
	table := func(name string) fsm.Command {
		return fsm.CommitTables{Changes: []fsm.TableChange{{Kind: fsm.ChangeCreate, Ident: fsm.Ident{Namespace: []string{"db"}, Name: name},
			MetadataLocation: "s3://bucket/db/" + name + "/metadata/1.metadata.json", Location: "s3://bucket/db/" + name, UUID: name + "-uuid"}}}
	}
	grant := fsm.SetGrant{Grant: fsm.Grant{Grantee: "principal:bob", Namespace: []string{"db"}, Privilege: auth.PrivilegeRead}}
	back := &atomic.Bool{}
	store := returningReplica{stale: open(grant, table("before_revocation")), fresh: open(table("after_revocation")), back: back}

	cfg := config{Auth: authOn, AuthRootToken: "root-token-for-a-returning-leader-0123456789", AuthTokenTTL: time.Hour,
		AuthMaxTokenTTL: time.Hour, AuthAudience: "floe"}
	s, err := newSecurity(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry(), store, "n1")
	require.NoError(t, err)
	page, err := ui.New(ui.Config{Warehouse: "s3://bucket", Prefix: "floe", Store: store, Cluster: stillCluster{},
		Objects: noObjects{}, PurgeJobs: http.NotFoundHandler(), Authorizer: leaderBackAfterChecks{authorizer{s}, back},
		VerifyToken: s.verifyToken, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	h := s.wrap(page.Handler())

	for _, c := range []struct {
		name     string
		leader   bool   // a leader before the checks
		consider string // X-Floe-Read-Consistency
	}{
		{name: "the leader back after the checks"},
		// A follower behind its leader, asked for a stale read.
		{name: "a stale read asked for", leader: true, consider: "stale"},
	} {
		t.Run(c.name, func(t *testing.T) {
			back.Store(c.leader)
			r := httptest.NewRequest(http.MethodGet, "/ui/namespace?ns=db", nil)
			r.Header.Set("Authorization", "Bearer "+token)
			if c.consider != "" {
				r.Header.Set("X-Floe-Read-Consistency", c.consider)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			require.True(t, back.Load(), "a leader after the checks")
			body := rec.Body.String()
			require.Equal(t, http.StatusOK, rec.Code, body)
			assert.True(t, strings.Contains(body, "before_revocation"), "the replica's table is not shown")
			assert.False(t, strings.Contains(body, "after_revocation"), "the page showed a state its reader was not checked against")
			assert.True(t, strings.Contains(body, "No linearizable read was possible"), "the page does not say it shows the replica")
		})
	}
}

// TestStaleHeaderLowersOnlyCatalogReadChecks: a node whose replica has not
// applied a revocation yet (an admin grant revoked, a static token
// deleted) checks a request asking for a stale read against its replica
// only where the answer is read from the replica too: the catalog's reads
// and the status page. The operator API (whose answers, a backup among
// them, are read linearizably) and storage credentials (a live secret)
// are checked against the cluster whatever the request asks.
func TestStaleHeaderLowersOnlyCatalogReadChecks(t *testing.T) {
	adminID, adminToken := auth.NewStaticToken()
	_, adminSecret, ok := auth.ParseStaticToken(adminToken)
	require.True(t, ok)
	goneID, goneToken := auth.NewStaticToken()
	_, goneSecret, ok := auth.ParseStaticToken(goneToken)
	require.True(t, ok)
	open := func(cmds ...fsm.Command) *fsm.FSM {
		return replicaOf(t, append([]fsm.Command{
			fsm.PutAuthToken{Token: fsm.AuthToken{ID: adminID, Hash: auth.HashToken(adminSecret), Principal: "adm"}},
		}, cmds...)...)
	}
	behind := open(
		fsm.SetGrant{Grant: fsm.Grant{Grantee: "principal:adm", Privilege: auth.PrivilegeAdmin}},
		fsm.PutAuthToken{Token: fsm.AuthToken{ID: goneID, Hash: auth.HashToken(goneSecret), Principal: "gone"}},
	)
	back := &atomic.Bool{}
	back.Store(true) // a leader throughout: the cluster has revoked both
	store := returningReplica{stale: behind, fresh: open(), back: back}
	cfg := config{Auth: authOn, AuthRootToken: "root-token-for-a-replica-behind-0123456789", AuthTokenTTL: time.Hour,
		AuthMaxTokenTTL: time.Hour, AuthAudience: "floe"}
	s, err := newSecurity(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry(), store, "n1")
	require.NoError(t, err)
	h := s.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

	for _, c := range []struct {
		name, target, bearer, delegation string
		want                             int
	}{
		// The documented exception: checked as its data is read.
		{name: "catalog read", target: "/v1/namespaces/db", bearer: goneToken, want: http.StatusOK},
		{name: "operator API backup", target: "/management/v1/backup", bearer: adminToken, want: http.StatusForbidden},
		{name: "operator API clients", target: "/management/v1/auth/clients", bearer: adminToken, want: http.StatusForbidden},
		{name: "credentials route", target: "/v1/namespaces/db/tables/t/credentials", bearer: goneToken, want: http.StatusUnauthorized},
		{name: "load with vended credentials", target: "/v1/namespaces/db/tables/t", bearer: goneToken,
			delegation: "vended-credentials", want: http.StatusUnauthorized},
		{name: "load with vended credentials, named warehouse", target: "/v1/sales/namespaces/db/tables/t", bearer: goneToken,
			delegation: "vended-credentials", want: http.StatusUnauthorized},
		// Some clients send the header on every request: a listing vends nothing.
		{name: "listing with the delegation header", target: "/v1/namespaces/db/tables", bearer: goneToken,
			delegation: "vended-credentials", want: http.StatusOK},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, c.target, nil)
			r.Header.Set("Authorization", "Bearer "+c.bearer)
			r.Header.Set("X-Floe-Read-Consistency", "stale")
			if c.delegation != "" {
				r.Header.Set("X-Iceberg-Access-Delegation", c.delegation)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			assert.Equal(t, c.want, rec.Code, rec.Body.String())
		})
	}
}
