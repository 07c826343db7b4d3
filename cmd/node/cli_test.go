package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/internal/testenv"
)

// fastCLI shortens the admin commands' pauses for a test and keeps the
// environment's FLOE_NODE and FLOE_TOKEN out of it.
func fastCLI(t *testing.T) {
	t.Helper()
	backoff, maxBackoff, poll, every := cliBackoff, cliMaxBackoff, cliPollInterval, cliProgressEvery
	cliBackoff, cliMaxBackoff, cliPollInterval, cliProgressEvery = time.Millisecond, 5*time.Millisecond, 5*time.Millisecond, time.Hour
	t.Cleanup(func() {
		cliBackoff, cliMaxBackoff, cliPollInterval, cliProgressEvery = backoff, maxBackoff, poll, every
	})
	t.Setenv("FLOE_NODE", "")
	t.Setenv("FLOE_TOKEN", "")
}

// runCLI runs floe ARGS in process and returns its exit code and output.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code, ok := runCommand(context.Background(), args, &stdout, &stderr)
	require.True(t, ok, "%q is not a command", args)
	return code, stdout.String(), stderr.String()
}

// seenRequest is one request a fake node received.
type seenRequest struct {
	method, path, query string
	key, auth, body     string
}

// fakeNode is an httptest server standing in for a node's API; handle
// answers each request, n counting them from 0.
type fakeNode struct {
	*httptest.Server
	mu   sync.Mutex
	seen []seenRequest
}

func newFakeNode(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, n int)) *fakeNode {
	t.Helper()
	f := &fakeNode{}
	f.Server = httptest.NewServer(f.handler(handle))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeNode) handler(handle func(w http.ResponseWriter, r *http.Request, n int)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		n := len(f.seen)
		f.seen = append(f.seen, seenRequest{method: r.Method, path: r.URL.Path, query: r.URL.RawQuery,
			key: r.Header.Get("Idempotency-Key"), auth: r.Header.Get("Authorization"), body: string(body)})
		f.mu.Unlock()
		handle(w, r, n)
	})
}

func (f *fakeNode) requests() []seenRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seenRequest(nil), f.seen...)
}

func answerJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

func icebergError(w http.ResponseWriter, status int, typ, msg string) {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": status}})
	answerJSON(w, status, string(b))
}

func TestRunCommandDispatch(t *testing.T) {
	// No arguments, or a flag first: a node runs, as before.
	for _, args := range [][]string{nil, {}, {"--http-addr", "127.0.0.1:0"}, {"-h"}, {"--help"}, {"--data-dir=x", "status"}, {"nosuchcommand"}} {
		code, ok := runCommand(context.Background(), args, io.Discard, io.Discard)
		assert.False(t, ok, "%q", args)
		assert.Equal(t, 0, code)
	}
	// floe help, and every admin command's --help.
	for _, args := range [][]string{{"help"}, {"help", "purge"}, {"help", "purge", "wait"}, {"status", "--help"}, {"members", "--help"},
		{"members", "remove", "-h"}, {"leader", "--help"}, {"leader", "transfer", "--help"}, {"purge", "--help"}, {"purge", "list", "--help"}} {
		var out bytes.Buffer
		code, ok := runCommand(context.Background(), args, &out, io.Discard)
		assert.True(t, ok, "%q", args)
		assert.Equal(t, exitOK, code, "%q", args)
		assert.Contains(t, out.String(), "floe", "%q", args)
	}
}

func TestHelpListsCommandsFlagsAndExitCodes(t *testing.T) {
	fastCLI(t)
	code, out, _ := runCLI(t, "help")
	require.Equal(t, exitOK, code)
	for _, want := range []string{"status", "members add-voter ID ADDR", "members add-nonvoter ID ADDR", "members remove ID",
		"leader transfer [ID]", "purge list", "purge show ID", "purge retry ID", "purge release ID", "purge wait ID",
		"--node URL", "FLOE_NODE", "--token token", "FLOE_TOKEN", "--ca file", "--json", "--timeout duration", "Idempotency-Key",
		"Exit codes:", "  0    done", "  1    the operation failed", "  2    usage error", "  3    the node could not be reached",
		"  4    not authorized"} {
		assert.Contains(t, out, want)
	}
	for name, cmd := range commands {
		assert.Contains(t, out, "  "+name, "floe help lists %s", name)
		assert.NotEmpty(t, cmd.summary, name)
	}

	code, out, _ = runCLI(t, "purge", "wait", "--help")
	require.Equal(t, exitOK, code)
	assert.Contains(t, out, "Usage: floe purge wait ID [flags]")
	assert.Contains(t, out, "how long to wait for the job; 0: no limit")
	code, out, _ = runCLI(t, "purge", "list", "--help")
	require.Equal(t, exitOK, code)
	for _, want := range []string{"--state", "--namespace", "--table", "--node", "(default 30s)"} {
		assert.Contains(t, out, want)
	}

	code, _, errOut := runCLI(t, "help", "nosuch")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, `unknown command "nosuch"`)
}

func TestParseInterspersed(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		pos     []string
		json    bool
		timeout time.Duration
	}{
		{args: nil, pos: nil, timeout: defaultCLITimeout},
		{args: []string{"ID"}, pos: []string{"ID"}, timeout: defaultCLITimeout},
		{args: []string{"ID", "--json"}, pos: []string{"ID"}, json: true, timeout: defaultCLITimeout},
		{args: []string{"--json", "ID", "--timeout", "5s", "ADDR"}, pos: []string{"ID", "ADDR"}, json: true, timeout: 5 * time.Second},
		{args: []string{"ID", "--timeout=1m", "ADDR", "--json"}, pos: []string{"ID", "ADDR"}, json: true, timeout: time.Minute},
		{args: []string{"--", "--json", "x"}, pos: []string{"--json", "x"}, timeout: defaultCLITimeout},
		{args: []string{"ID", "--", "-odd-id"}, pos: []string{"ID", "-odd-id"}, timeout: defaultCLITimeout},
	} {
		var o cliOptions
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		o.register(fs, defaultCLITimeout)
		pos, err := parseInterspersed(fs, tc.args)
		require.NoError(t, err, "%q", tc.args)
		assert.Equal(t, tc.pos, pos, "%q", tc.args)
		assert.Equal(t, tc.json, o.json, "%q", tc.args)
		assert.Equal(t, tc.timeout, o.timeout, "%q", tc.args)
	}
	var o cliOptions
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.register(fs, 0)
	_, err := parseInterspersed(fs, []string{"ID", "--no-such"})
	assert.ErrorContains(t, err, "no-such")
	_, err = parseInterspersed(fs, []string{"ID", "--help"})
	assert.ErrorIs(t, err, flag.ErrHelp)
}

func TestCLIUsageErrorsExit2(t *testing.T) {
	fastCLI(t)
	f := newFakeNode(t, func(w http.ResponseWriter, r *http.Request, n int) { w.WriteHeader(http.StatusNoContent) })
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"members", "remove"}, "missing arguments: usage: floe members remove ID"},
		{[]string{"members", "add-voter", "n4"}, "missing arguments"},
		{[]string{"members", "remove", "a", "b"}, `unexpected argument "b"`},
		{[]string{"status", "extra"}, `unexpected argument "extra"`},
		{[]string{"leader", "transfer", "a", "b"}, `unexpected argument "b"`},
		{[]string{"members", "frobnicate"}, `unknown subcommand "frobnicate"`},
		{[]string{"purge"}, "a subcommand is needed"},
		{[]string{"leader"}, "a subcommand is needed"},
		{[]string{"purge", "show", "ID", "--no-such-flag"}, "flag provided but not defined: -no-such-flag"},
		{[]string{"purge", "wait", "ID", "--timeout", "soon"}, `invalid value "soon"`},
		{[]string{"purge", "wait", "ID", "--timeout=-5s"}, "--timeout -5s: want 0 (no limit) or more"},
		{[]string{"purge", "retry", ""}, "argument 1 is empty"},
		{[]string{"members", "remove", " "}, "argument 1 is empty"},
		{[]string{"status", "--token", "a\nb"}, "holds a control character"},
		{[]string{"status", "--token", "secret\r"}, "holds a control character"},
		{[]string{"members", "--token", "tok\x1b[31m"}, "holds a control character"},
		{[]string{"status", "--node", "ftp://host:1"}, "want an http:// or https:// URL"},
		{[]string{"status", "--node", "http://host:1/?x=1"}, "want scheme://host:port"},
		{[]string{"status", "--node", "127.0.0.1:99999"}, "port 99999 is not between 1 and 65535"},
		{[]string{"status", "--node", "http://127.0.0.1:0"}, "port 0 is not between 1 and 65535"},
		{[]string{"status", "--node", "http://user:NODEPASS@host:1"}, `--node "http://user:xxxxx@host:1": want scheme://host:port`},
		{[]string{"status", "--node", "http://user:NODEPASS@host:1:2"}, "--node: not a URL"},
		{[]string{"status", "--ca", filepath.Join(t.TempDir(), "missing.pem")}, "--ca"},
		// Which of two values was meant is unknown: flag would keep the last.
		{[]string{"purge", "list", "--state", "FAILED", "--state", "PENDING"}, `flag -state: given more than once`},
		{[]string{"purge", "list", "--json", "--json"}, `flag json: given more than once`},
	} {
		code, out, errOut := runCLI(t, tc.args...)
		assert.Equal(t, exitUsage, code, "%q: %s", tc.args, errOut)
		assert.Contains(t, errOut, tc.want, "%q", tc.args)
		assert.Empty(t, out, "%q", tc.args)
	}
	assert.Empty(t, f.requests(), "a usage error sends nothing")
	for _, node := range []string{"http://user:NODEPASS@host:1", "http://user:NODEPASS@host:1:2"} {
		_, _, errOut := runCLI(t, "status", "--node", node)
		assert.NotContains(t, errOut, "NODEPASS", "a password in --node is never echoed")
	}
}

// A node never redirects: the CLI does not follow a redirect, so its token
// goes nowhere but the node it was given.
func TestCLIDoesNotFollowRedirects(t *testing.T) {
	fastCLI(t)
	elsewhere := newFakeNode(t, func(w http.ResponseWriter, r *http.Request, n int) { w.WriteHeader(http.StatusOK) })
	f := newFakeNode(t, func(w http.ResponseWriter, r *http.Request, n int) {
		http.Redirect(w, r, elsewhere.URL+r.URL.Path, http.StatusTemporaryRedirect)
	})
	code, _, _ := runCLI(t, "status", "--node", f.URL, "--token", "secret-token")
	assert.NotEqual(t, 0, code)
	assert.NotEmpty(t, f.requests())
	assert.Empty(t, elsewhere.requests(), "the redirect was not followed")
}

func TestCLIExitCodes(t *testing.T) {
	ctx := context.Background()
	for status, want := range map[int]int{
		0: exitUnavailable, 503: exitUnavailable, 401: exitUnauthorized, 403: exitUnauthorized,
		400: exitUsage, 404: exitFailed, 409: exitFailed, 422: exitFailed, 500: exitFailed, 502: exitFailed,
	} {
		assert.Equal(t, want, cliExitCode(ctx, &apiError{status: status, message: "x"}), "status %d", status)
		assert.Equal(t, want, cliExitCode(ctx, fmt.Errorf("wrapped: %w", &apiError{status: status})), "wrapped status %d", status)
	}
	assert.Equal(t, exitFailed, cliExitCode(ctx, &cliFailure{code: exitFailed, msg: "job FAILED"}))
	assert.Equal(t, exitUnavailable, cliExitCode(ctx, &cliFailure{code: exitUnavailable, msg: "still RUNNING"}))
	assert.Equal(t, exitFailed, cliExitCode(ctx, errors.New("malformed answer")))
	assert.Equal(t, exitUnavailable, cliExitCode(ctx, context.DeadlineExceeded))
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	assert.Equal(t, exitInterrupted, cliExitCode(canceled, context.Canceled))

	assert.Equal(t, "no member with id \"x\" (404 NotFoundException)",
		errorOf(404, []byte(`{"error":{"message":"no member with id \"x\"","type":"NotFoundException","code":404}}`)).Error())
	assert.Equal(t, "Bad Gateway: upstream down (502)", errorOf(502, []byte("upstream down\n")).Error())
	assert.Equal(t, "Service Unavailable (503); gave up after 6 attempts", (&apiError{status: 503, message: "Service Unavailable", attempts: 6}).Error())
}

func TestCLIServerAnswersMapToExitCodes(t *testing.T) {
	fastCLI(t)
	for _, tc := range []struct {
		status   int
		typ      string
		want     int
		attempts int
	}{
		{401, "NotAuthorizedException", exitUnauthorized, 1},
		{403, "ForbiddenException", exitUnauthorized, 1},
		{404, "NotFoundException", exitFailed, 1},
		{409, "ConflictException", exitFailed, 1},
		{422, "UnprocessableEntityException", exitFailed, 1},
		{400, "BadRequestException", exitUsage, 1},
		{500, "InternalServerError", exitFailed, cliAttempts}, // a change, keyed: sent again
		{503, "ServiceUnavailableException", exitUnavailable, cliAttempts},
	} {
		msg := fmt.Sprintf("the server says %d", tc.status)
		f := newFakeNode(t, func(w http.ResponseWriter, r *http.Request, n int) { icebergError(w, tc.status, tc.typ, msg) })
		code, out, errOut := runCLI(t, "purge", "retry", "job-1", "--node", f.URL)
		assert.Equal(t, tc.want, code, "status %d", tc.status)
		assert.Empty(t, out)
		assert.Contains(t, errOut, "floe purge retry: "+msg+fmt.Sprintf(" (%d %s)", tc.status, tc.typ))
		assert.Len(t, f.requests(), tc.attempts, "status %d", tc.status)
	}

	// Nobody listening: retried, then 3.
	f := newFakeNode(t, func(w http.ResponseWriter, r *http.Request, n int) {})
	url := f.URL
	f.Close()
	code, _, errOut := runCLI(t, "status", "--node", url)
	assert.Equal(t, exitUnavailable, code)
	assert.Contains(t, errOut, "no answer to GET "+url+"/management/v1/cluster")
	assert.Contains(t, errOut, fmt.Sprintf("gave up after %d attempts", cliAttempts))

	// A node slower than --timeout: 3.
	slow := newFakeNode(t, func(w http.ResponseWriter, r *http.Request, n int) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	})
	code, _, errOut = runCLI(t, "members", "--node", slow.URL, "--timeout", "100ms")
	assert.Equal(t, exitUnavailable, code)
	assert.Contains(t, errOut, "before --timeout passed")
}

// TestMutationsRetryWithTheSameKey: a change that gets no answer or a 503 is
// sent again with the same Idempotency-Key, a UUIDv7; each command has its
// own key; reads carry none.
func TestMutationsRetryWithTheSameKey(t *testing.T) {
	fastCLI(t)
	var posts atomic.Int32
	f := newFakeNode(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		if r.Method == http.MethodGet {
			// The status read for the message: node4 is not a member.
			answerJSON(w, http.StatusOK, `{"members":[{"id":"node1","cluster-address":"127.0.0.1:8182","suffrage":"Voter"}]}`)
			return
		}
		switch posts.Add(1) - 1 {
		case 0:
			// The connection drops before an answer.
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		case 1, 2:
			icebergError(w, http.StatusServiceUnavailable, "ServiceUnavailableException", "no leader")
		case 3:
			// The change may have taken effect; the answer was lost.
			icebergError(w, http.StatusInternalServerError, "InternalServerError", "outcome unknown, read the state before retrying")
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	})
	code, out, errOut := runCLI(t, "members", "add-voter", "node4", "127.0.0.1:8482", "--node", f.URL)
	require.Equal(t, exitOK, code, errOut)
	assert.Equal(t, "added node4 (127.0.0.1:8482) as a voter\n", out)
	seen := slices.DeleteFunc(f.requests(), func(r seenRequest) bool { return r.method == http.MethodGet })
	require.Len(t, seen, 5)
	key := seen[0].key
	u, err := uuid.Parse(key)
	require.NoError(t, err, "Idempotency-Key %q", key)
	assert.Equal(t, uuid.Version(7), u.Version())
	for _, r := range seen {
		assert.Equal(t, "POST", r.method)
		assert.Equal(t, "/management/v1/cluster/voters", r.path)
		assert.Equal(t, key, r.key, "every attempt carries the same key")
		assert.JSONEq(t, `{"id":"node4","address":"127.0.0.1:8482"}`, r.body)
	}

	// A second command: a key of its own.
	g := newFakeNode(t, func(w http.ResponseWriter, r *http.Request, n int) { w.WriteHeader(http.StatusNoContent) })
	code, out, _ = runCLI(t, "members", "remove", "node/4", "--node", g.URL)
	require.Equal(t, exitOK, code)
	assert.Equal(t, "removed member node/4\n", out)
	code, out, _ = runCLI(t, "members", "add-nonvoter", "node5", "127.0.0.1:8582", "--node", g.URL)
	require.Equal(t, exitOK, code)
	assert.Equal(t, "added node5 (127.0.0.1:8582) as a non-voter\n", out)
	code, out, _ = runCLI(t, "leader", "transfer", "node2", "--node", g.URL)
	require.Equal(t, exitOK, code)
	assert.Equal(t, "leadership transferred to node2\n", out)
	code, out, _ = runCLI(t, "leader", "transfer", "--node", g.URL, "--json")
	require.Equal(t, exitOK, code)
	assert.Empty(t, out, "--json prints nothing for an answer without a body")
	// The changes; the plain transfer also reads the cluster's status
	// before and after, for its message.
	seen = slices.DeleteFunc(g.requests(), func(r seenRequest) bool { return r.method == "GET" })
	require.Len(t, seen, 4)
	assert.Equal(t, "DELETE", seen[0].method)
	assert.Equal(t, "/management/v1/cluster/members/node/4", seen[0].path, "the id is one path segment")
	assert.Equal(t, "/management/v1/cluster/non-voters", seen[1].path)
	assert.Equal(t, "/management/v1/cluster/leadership-transfer", seen[2].path)
	assert.JSONEq(t, `{"id":"node2"}`, seen[2].body)
	assert.Empty(t, seen[3].body, "no id: any up-to-date voter")
	keys := map[string]bool{key: true}
	for _, r := range seen {
		require.NotEmpty(t, r.key)
		assert.False(t, keys[r.key], "a fresh key per command")
		keys[r.key] = true
	}

	// Reads carry no key, and are retried too.
	h := newFakeNode(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 0 {
			icebergError(w, http.StatusServiceUnavailable, "ServiceUnavailableException", "no leader")
			return
		}
		answerJSON(w, http.StatusOK, `{"self":"n1","members":[]}`)
	})
	code, _, errOut = runCLI(t, "members", "--node", h.URL)
	require.Equal(t, exitOK, code, errOut)
	for _, r := range h.requests() {
		assert.Empty(t, r.key)
	}
	assert.Len(t, h.requests(), 2)
}

func TestTokenAndNodeFromFlagsAndEnvironment(t *testing.T) {
	fastCLI(t)
	f := newFakeNode(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if r.Header.Get("Authorization") == "" {
			icebergError(w, http.StatusUnauthorized, "NotAuthorizedException", "a bearer token is required")
			return
		}
		answerJSON(w, http.StatusOK, `{"self":"n1","members":[]}`)
	})
	code, _, errOut := runCLI(t, "members", "--node", f.URL)
	assert.Equal(t, exitUnauthorized, code)
	assert.Contains(t, errOut, "a bearer token is required (401 NotAuthorizedException)")

	code, _, _ = runCLI(t, "members", "--node", f.URL, "--token", "from-flag")
	assert.Equal(t, exitOK, code)

	t.Setenv("FLOE_NODE", strings.TrimPrefix(f.URL, "http://")) // host:port means http://
	t.Setenv("FLOE_TOKEN", "from-env")
	code, _, errOut = runCLI(t, "members")
	assert.Equal(t, exitOK, code, errOut)
	code, _, _ = runCLI(t, "members", "--token", "flag-wins")
	assert.Equal(t, exitOK, code)
	// Given empty, the token is none, not FLOE_TOKEN's.
	code, _, _ = runCLI(t, "members", "--token", "")
	assert.Equal(t, exitUnauthorized, code)
	// An empty --node names no node: a usage error, sending nothing.
	code, _, errOut = runCLI(t, "members", "--node", "")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "--node is empty")

	var auths []string
	for _, r := range f.requests() {
		auths = append(auths, r.auth)
	}
	assert.Equal(t, []string{"", "Bearer from-flag", "Bearer from-env", "Bearer flag-wins", ""}, auths)
}

// clusterAnswer is a /management/v1/cluster answer naming the members'
// HTTP addresses.
func clusterAnswer(http1, http2 string) string {
	return fmt.Sprintf(`{"self":"node1","leader-id":"node2","leader-address":"127.0.0.1:8282","term":7,"commit-index":42,"applied-index":41,
"members":[
 {"id":"node1","cluster-address":"127.0.0.1:8182","http-address":%q,"suffrage":"Voter","leader":false,"reachable":true,"state":"follower","term":7,"commit-index":42,"applied-index":41,"last-contact":"12ms"},
 {"id":"node2","cluster-address":"127.0.0.1:8282","http-address":%q,"suffrage":"Voter","leader":true,"reachable":true,"state":"leader","term":7,"commit-index":42,"applied-index":42,"last-contact":"0s"},
 {"id":"node3","cluster-address":"127.0.0.1:8382","suffrage":"Nonvoter","leader":false,"reachable":false,"error":"connection refused"}]}`, http1, http2)
}

func TestMembersTable(t *testing.T) {
	var st cliCluster
	require.NoError(t, json.Unmarshal([]byte(clusterAnswer("127.0.0.1:8181", "127.0.0.1:8281")), &st))
	var out bytes.Buffer
	renderMembers(&out, st.Members)
	assert.Equal(t, ""+
		"ID     SUFFRAGE  STATE     REACHABLE  CLUSTER         HTTP\n"+
		"node1  Voter     follower  yes        127.0.0.1:8182  127.0.0.1:8181\n"+
		"node2  Voter     leader    yes        127.0.0.1:8282  127.0.0.1:8281\n"+
		"node3  Nonvoter  -         no         127.0.0.1:8382  -\n", out.String())
}

func TestStatusShowsLeaderIndexesAndHealth(t *testing.T) {
	fastCLI(t)
	notReady := newFakeNode(t, func(w http.ResponseWriter, r *http.Request, n int) {
		answerJSON(w, http.StatusServiceUnavailable, `{"status":"not ready","reason":"raftnode: no leader"}`)
	})
	var self *fakeNode
	self = newFakeNode(t, func(w http.ResponseWriter, r *http.Request, n int) {
		switch r.URL.Path {
		case "/readyz":
			answerJSON(w, http.StatusOK, `{"status":"ready"}`)
		case "/management/v1/cluster":
			answerJSON(w, http.StatusOK, clusterAnswer(strings.TrimPrefix(self.URL, "http://"), strings.TrimPrefix(notReady.URL, "http://")))
		default:
			http.NotFound(w, r)
		}
	})
	code, out, errOut := runCLI(t, "status", "--node", self.URL)
	require.Equal(t, exitOK, code, errOut)
	selfAddr, otherAddr := strings.TrimPrefix(self.URL, "http://"), strings.TrimPrefix(notReady.URL, "http://")
	lines := strings.Split(out, "\n")
	assert.Equal(t, "node           "+self.URL+" (node1): ready", lines[0])
	assert.Equal(t, "leader         node2 (127.0.0.1:8282)", lines[1])
	assert.Equal(t, "term           7", lines[2])
	assert.Equal(t, "commit index   42", lines[3])
	assert.Equal(t, "applied index  41", lines[4])
	assert.Empty(t, lines[5])
	assert.Regexp(t, `^ID +SUFFRAGE +STATE +HTTP +CLUSTER +TERM +COMMIT +APPLIED +CONTACT +HEALTH$`, lines[6])
	assert.Regexp(t, `^node1 +Voter +follower +`+selfAddr+` +127.0.0.1:8182 +7 +42 +41 +12ms +ready$`, lines[7])
	assert.Regexp(t, `^node2 +Voter +leader +`+otherAddr+` +127.0.0.1:8282 +7 +42 +42 +0s +not ready: raftnode: no leader$`, lines[8])
	assert.Regexp(t, `^node3 +Nonvoter +- +- +127.0.0.1:8382 +- +- +- +- +unreachable: connection refused$`, lines[9])

	code, out, _ = runCLI(t, "status", "--node", self.URL, "--json")
	require.Equal(t, exitOK, code)
	var st cliCluster
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	assert.Equal(t, "node2", st.LeaderID)
	assert.Len(t, st.Members, 3)
}

func TestProbeAddr(t *testing.T) {
	assert.Equal(t, "10.0.0.5:8181", probeAddr(cliMember{HTTPAddr: "10.0.0.5:8181", ClusterAddr: "10.0.0.5:8182"}))
	assert.Equal(t, "10.0.0.5:8181", probeAddr(cliMember{HTTPAddr: "0.0.0.0:8181", ClusterAddr: "10.0.0.5:8182"}))
	assert.Equal(t, "10.0.0.5:8181", probeAddr(cliMember{HTTPAddr: ":8181", ClusterAddr: "10.0.0.5:8182"}))
	assert.Equal(t, "[fd00::5]:8181", probeAddr(cliMember{HTTPAddr: "[::]:8181", ClusterAddr: "[fd00::5]:8182"}))
	assert.Equal(t, "node1.internal:8181", probeAddr(cliMember{HTTPAddr: "node1.internal:8181"}))
	assert.Equal(t, "", probeAddr(cliMember{ClusterAddr: "10.0.0.5:8182"}))
}

// jobJSON is one purge job as the operator API shows it.
func jobJSON(id, state string, deleted int64, lastError string) string {
	b, _ := json.Marshal(map[string]any{
		"id": id, "warehouse": "file:///w", "namespace": []string{"db", "sales"}, "table": "orders", "table-uuid": "u-1",
		"location": "file:///w/db/orders", "metadata-location": "file:///w/db/orders/metadata/00001.json",
		"file-io": map[string]string{"s3.region": "eu-west-1"}, "state": state, "released": false, "attempts": 2,
		"last-error": lastError, "lease": map[string]any{"node": "node2", "token": 9, "expires-ms": 0},
		"progress":   map[string]any{"phase": 1, "offset": 3, "files-deleted": deleted, "bytes-deleted": deleted * 2048, "files-skipped-outside": 1},
		"dropped-by": "anonymous", "created-ms": 1700000000000, "updated-ms": 1700000060000,
	})
	return string(b)
}

func TestPurgeListFollowsPageTokens(t *testing.T) {
	fastCLI(t)
	f := newFakeNode(t, func(w http.ResponseWriter, r *http.Request, n int) {
		switch r.URL.Query().Get("page-token") {
		case "":
			answerJSON(w, http.StatusOK, `{"jobs":[`+jobJSON("job-1", "FAILED", 10, "s3: access\ndenied")+`,`+jobJSON("job-2", "RUNNING", 5, "")+`],"next-page-token":"job-2"}`)
		case "job-2":
			answerJSON(w, http.StatusOK, `{"jobs":[`+jobJSON("job-3", "SUCCEEDED", 7, "timeout")+`],"next-page-token":null}`)
		default:
			icebergError(w, http.StatusBadRequest, "BadRequestException", "bad token")
		}
	})
	code, out, errOut := runCLI(t, "purge", "list", "--node", f.URL, "--state", "failed", "--namespace", "db.sales", "--table", "orders")
	require.Equal(t, exitOK, code, errOut)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Len(t, lines, 4, out)
	assert.Regexp(t, `^ID +STATE +TABLE +ATTEMPTS +FILES DELETED +UPDATED +LAST ERROR$`, lines[0])
	assert.Regexp(t, `^job-1 +FAILED +db\.sales\.orders +2 +10 +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d +s3: access denied$`, lines[1])
	assert.Regexp(t, `^job-2 +RUNNING +db\.sales\.orders +2 +5 +.* +-$`, lines[2])
	// A succeeded job's last error is an earlier attempt's.
	assert.Regexp(t, `^job-3 +SUCCEEDED +.* +\(an earlier attempt\) timeout$`, lines[3])
	seen := f.requests()
	require.Len(t, seen, 2)
	assert.Equal(t, "namespace=db.sales&state=failed&table=orders", seen[0].query)
	assert.Equal(t, "namespace=db.sales&page-token=job-2&state=failed&table=orders", seen[1].query)

	code, out, _ = runCLI(t, "purge", "list", "--node", f.URL, "--json")
	require.Equal(t, exitOK, code)
	var list struct {
		Jobs []cliJob `json:"jobs"`
		Next *string  `json:"next-page-token"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &list), out)
	require.Len(t, list.Jobs, 3)
	assert.Equal(t, "job-3", list.Jobs[2].ID)
	assert.Nil(t, list.Next)

	empty := newFakeNode(t, func(w http.ResponseWriter, r *http.Request, n int) {
		answerJSON(w, http.StatusOK, `{"jobs":[],"next-page-token":null}`)
	})
	code, out, _ = runCLI(t, "purge", "list", "--node", empty.URL)
	require.Equal(t, exitOK, code)
	assert.Equal(t, "no purge jobs\n", out)
	code, out, _ = runCLI(t, "purge", "list", "--node", empty.URL, "--json")
	require.Equal(t, exitOK, code)
	assert.JSONEq(t, `{"jobs":[],"next-page-token":null}`, out)
}

func TestPurgeShowRetryRelease(t *testing.T) {
	fastCLI(t)
	f := newFakeNode(t, func(w http.ResponseWriter, r *http.Request, n int) {
		switch {
		case r.Method == "GET" && r.URL.Path == "/management/v1/purge-jobs/job-1":
			answerJSON(w, http.StatusOK, jobJSON("job-1", "FAILED", 10, "metadata unreadable"))
		case r.Method == "POST" && r.URL.Path == "/management/v1/purge-jobs/job-1/retry":
			answerJSON(w, http.StatusOK, jobJSON("job-1", "PENDING", 10, ""))
		case r.Method == "POST" && r.URL.Path == "/management/v1/purge-jobs/job-1/release":
			icebergError(w, http.StatusConflict, "ConflictException", "purge job job-1 is PENDING, not FAILED")
		default:
			icebergError(w, http.StatusNotFound, "NotFoundException", "purge job does not exist")
		}
	})
	code, out, errOut := runCLI(t, "purge", "show", "job-1", "--node", f.URL)
	require.Equal(t, exitOK, code, errOut)
	for _, want := range []string{"id                     job-1", "state                  FAILED", "table                  db.sales.orders",
		"attempts               2", "last error             metadata unreadable", "lease                  node2 (token 9)",
		"files deleted          10", "bytes deleted          20.0 KiB", "files skipped outside  1", "file-io s3.region      eu-west-1"} {
		assert.Contains(t, out, want+"\n")
	}
	code, out, _ = runCLI(t, "purge", "show", "job-1", "--node", f.URL, "--json")
	require.Equal(t, exitOK, code)
	assert.JSONEq(t, jobJSON("job-1", "FAILED", 10, "metadata unreadable"), out)

	code, out, _ = runCLI(t, "purge", "retry", "job-1", "--node", f.URL)
	require.Equal(t, exitOK, code)
	assert.True(t, strings.HasPrefix(out, "retried purge job job-1: now PENDING\n\n"), out)

	code, out, errOut = runCLI(t, "purge", "release", "job-1", "--node", f.URL)
	assert.Equal(t, exitFailed, code)
	assert.Empty(t, out)
	assert.Equal(t, "floe purge release: purge job job-1 is PENDING, not FAILED (409 ConflictException)\n", errOut)

	code, _, errOut = runCLI(t, "purge", "show", "nope", "--node", f.URL)
	assert.Equal(t, exitFailed, code)
	assert.Contains(t, errOut, "purge job does not exist (404 NotFoundException)")

	seen := f.requests()
	for _, r := range seen {
		if r.method == "POST" {
			assert.NotEmpty(t, r.key, "%s %s", r.method, r.path)
		} else {
			assert.Empty(t, r.key, "%s %s", r.method, r.path)
		}
	}
}

func TestPurgeWait(t *testing.T) {
	fastCLI(t)
	t.Run("succeeds", func(t *testing.T) {
		f := newFakeNode(t, func(w http.ResponseWriter, r *http.Request, n int) {
			switch {
			case n == 0:
				answerJSON(w, http.StatusOK, jobJSON("job-1", "PENDING", 0, ""))
			case n == 1:
				icebergError(w, http.StatusServiceUnavailable, "ServiceUnavailableException", "no leader")
			case n < 2+cliAttempts:
				// Unavailable through a whole round of retries: still waiting.
				icebergError(w, http.StatusServiceUnavailable, "ServiceUnavailableException", "still no leader")
			case n < 2+cliAttempts+3:
				answerJSON(w, http.StatusOK, jobJSON("job-1", "RUNNING", int64(100*n), ""))
			default:
				answerJSON(w, http.StatusOK, jobJSON("job-1", "SUCCEEDED", 1234, ""))
			}
		})
		code, out, errOut := runCLI(t, "purge", "wait", "job-1", "--node", f.URL)
		require.Equal(t, exitOK, code, errOut)
		assert.Equal(t, "purge job job-1 SUCCEEDED: 1234 files deleted (2.4 MiB)\n", out)
		assert.Contains(t, errOut, "purge job job-1: PENDING, 0 files deleted (0 B)")
		assert.Contains(t, errOut, "still waiting, the node is unavailable: still no leader (503 ServiceUnavailableException)")
		assert.Contains(t, errOut, "purge job job-1: RUNNING, ")
		assert.Contains(t, errOut, "purge job job-1: SUCCEEDED, 1234 files deleted (2.4 MiB)")
		assert.NotContains(t, errOut, "\r", "no redrawn line without a terminal")
		assert.Equal(t, 1, strings.Count(errOut, ": RUNNING,"), "a line per change of state:\n%s", errOut)
	})
	t.Run("json", func(t *testing.T) {
		f := newFakeNode(t, func(w http.ResponseWriter, r *http.Request, n int) {
			answerJSON(w, http.StatusOK, jobJSON("job-1", "SUCCEEDED", 3, ""))
		})
		code, out, _ := runCLI(t, "purge", "wait", "job-1", "--node", f.URL, "--json")
		require.Equal(t, exitOK, code)
		assert.JSONEq(t, jobJSON("job-1", "SUCCEEDED", 3, ""), out)
	})
	t.Run("fails", func(t *testing.T) {
		f := newFakeNode(t, func(w http.ResponseWriter, r *http.Request, n int) {
			answerJSON(w, http.StatusOK, jobJSON("job-1", "FAILED", 3, "access denied"))
		})
		code, out, errOut := runCLI(t, "purge", "wait", "job-1", "--node", f.URL)
		assert.Equal(t, exitFailed, code)
		assert.Empty(t, out)
		assert.Contains(t, errOut, "floe purge wait: purge job job-1 FAILED after 2 attempts: access denied")
		assert.Contains(t, errOut, "floe purge retry job-1")
	})
	t.Run("times out", func(t *testing.T) {
		f := newFakeNode(t, func(w http.ResponseWriter, r *http.Request, n int) {
			answerJSON(w, http.StatusOK, jobJSON("job-1", "RUNNING", 3, ""))
		})
		start := time.Now()
		code, _, errOut := runCLI(t, "purge", "wait", "job-1", "--node", f.URL, "--timeout", "200ms")
		assert.Equal(t, exitUnavailable, code)
		assert.Contains(t, errOut, "purge job job-1 is still RUNNING after --timeout 200ms")
		assert.Less(t, time.Since(start), 5*time.Second)
	})
	t.Run("unknown job", func(t *testing.T) {
		f := newFakeNode(t, func(w http.ResponseWriter, r *http.Request, n int) {
			icebergError(w, http.StatusNotFound, "NotFoundException", "purge job nope does not exist")
		})
		code, _, errOut := runCLI(t, "purge", "wait", "nope", "--node", f.URL)
		assert.Equal(t, exitFailed, code)
		assert.Contains(t, errOut, "purge job nope does not exist (404 NotFoundException)")
	})
}

func TestProgressRedrawsOnATerminal(t *testing.T) {
	var buf bytes.Buffer
	p := &cliProgress{w: &buf, terminal: true, id: "job-1", start: time.Now()}
	var j cliJob
	j.State = "RUNNING"
	j.Progress.Deleted = 5
	p.show(j)
	j.Progress.Deleted = 9
	p.show(j)
	p.note("a note")
	p.end()
	assert.Equal(t, "\r\033[K| purge job job-1: RUNNING, 5 files deleted (0 B), 0s"+
		"\r\033[K/ purge job job-1: RUNNING, 9 files deleted (0 B), 0s\na note\n", buf.String())

	assert.False(t, isTerminal(&buf))
	f, err := os.CreateTemp(t.TempDir(), "out")
	require.NoError(t, err)
	defer f.Close()
	assert.False(t, isTerminal(f), "a regular file is no terminal")
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 5 << 20: "5.0 MiB", 3 << 40: "3.0 TiB"} {
		assert.Equal(t, want, humanBytes(n))
	}
}

func TestHTTPSWithPrivateCA(t *testing.T) {
	fastCLI(t)
	var seen int
	var mu sync.Mutex
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen++
		mu.Unlock()
		answerJSON(w, http.StatusOK, `{"self":"n1","members":[]}`)
	}))
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))

	code, out, errOut := runCLI(t, "members", "--node", srv.URL, "--ca", ca)
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "ID")

	// Without the CA: the certificate is not trusted, and not retried.
	code, _, errOut = runCLI(t, "members", "--node", srv.URL)
	assert.Equal(t, exitUnavailable, code)
	assert.Contains(t, errOut, "certificate")
	assert.Contains(t, errOut, "--ca names the CA to trust")
	mu.Lock()
	assert.Equal(t, 1, seen)
	mu.Unlock()

	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("nope"), 0o600))
	code, _, errOut = runCLI(t, "members", "--node", srv.URL, "--ca", notPEM)
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "no PEM certificate")
}

// TestBinaryRunsANodeWithFlagsAndCommands: the one binary still runs a node
// when started with flags (and --help still prints the node's flags), and
// runs a command when the first argument names one.
func TestBinaryRunsANodeWithFlagsAndCommands(t *testing.T) {
	bin := floeBinary(t)
	run := func(args ...string) (int, string, string) {
		cmd := exec.Command(bin, args...)
		cmd.Env = cleanEnv()
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), stdout.String(), stderr.String()
		}
		require.NoError(t, err)
		return 0, stdout.String(), stderr.String()
	}

	code, out, _ := run("--help")
	assert.Equal(t, 0, code)
	assert.True(t, strings.HasPrefix(out, "Usage: floe [flags]"), out)
	assert.Contains(t, out, "--data-dir")
	code, out, _ = run("help")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "floe COMMAND [arguments]")
	code, _, errOut := run("nosuchcommand")
	assert.Equal(t, 2, code, "a word that names no command is a usage error")
	assert.Contains(t, errOut, `unknown command "nosuchcommand"`)

	dataDir := filepath.Join(t.TempDir(), "data")
	httpAddr, clusterAddr := freeAddr(t), freeAddr(t)
	node := exec.Command(bin, "--data-dir", dataDir, "--http-addr", httpAddr, "--cluster-addr", clusterAddr)
	node.Env = cleanEnv()
	var logs testenv.LogBuffer
	node.Stdout, node.Stderr = &logs, &logs
	node.SysProcAttr = killWithParent()
	require.NoError(t, node.Start())
	exited := make(chan error, 1)
	go func() { exited <- node.Wait() }()
	t.Cleanup(func() {
		_ = node.Process.Kill()
		<-exited
	})
	require.Eventually(t, func() bool {
		code, out, _ := run("status", "--node", httpAddr, "--timeout", "2s")
		return code == 0 && strings.Contains(out, ": ready")
	}, 30*time.Second, 100*time.Millisecond, "the node never became ready; logs:\n%s", &logs)
	code, out, errOut = run("members", "--node", "http://"+httpAddr, "--json")
	require.Equal(t, 0, code, errOut)
	var st cliCluster
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.Len(t, st.Members, 1)
	assert.Equal(t, clusterAddr, st.Members[0].ClusterAddr)

	require.NoError(t, node.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		require.NoError(t, err, "the node exits 0 after SIGTERM")
		exited <- nil // for the cleanup
	case <-time.After(15 * time.Second):
		t.Fatal("the node did not stop within 15s of SIGTERM")
	}
	assert.Contains(t, logs.String(), "floe stopped")
}

// Tables never pass a control character a node reports to the terminal.
func TestControlEscaper(t *testing.T) {
	var b strings.Builder
	w := controlEscaper{&b}
	n, err := w.Write([]byte("x\x1b]0;PWNED\x07\x1b[2J\tok\r\n"))
	require.NoError(t, err)
	assert.Equal(t, 20, n)
	assert.Equal(t, "x\\x1b]0;PWNED\\x07\\x1b[2J\tok\\x0d\n", b.String())
}

// A node that accepts a backup request and never answers: floe backup
// says which node it asks and, while it waits, that it is still waiting,
// and --timeout ends the wait.
func TestBackupSaysItIsWaitingForANodeThatNeverAnswers(t *testing.T) {
	fastCLI(t)
	old := backupWaitReport
	backupWaitReport = 50 * time.Millisecond
	t.Cleanup(func() { backupWaitReport = old })
	stop := make(chan struct{})
	f := newFakeNode(t, func(w http.ResponseWriter, r *http.Request, n int) {
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	})
	t.Cleanup(func() { close(stop) }) // before the server's Close, which waits for handlers
	to := filepath.Join(t.TempDir(), "b.floebackup")
	code, _, errOut := runCLI(t, "backup", "--node", f.URL, "--to", to, "--timeout", "400ms")
	assert.Equal(t, exitUnavailable, code, "--timeout passed: as for the other commands\n%s", errOut)
	assert.Contains(t, errOut, "asking "+f.URL+" for a backup")
	assert.Contains(t, errOut, "still waiting for "+f.URL+"/management/v1/backup to answer")
	_, err := os.Stat(to)
	assert.True(t, os.IsNotExist(err), "nothing written")
}

// A server that is not a floe node (a proxy's page, another service)
// answering 200 with other JSON: the CLI says so and fails, rather than
// printing "no purge jobs" or a job of dashes.
func TestPurgeCommandsRefuseAnswersThatAreNotFloes(t *testing.T) {
	fastCLI(t)
	f := newFakeNode(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"foo":1}`))
	})
	code, out, errOut := runCLI(t, "purge", "list", "--node", f.URL)
	assert.Equal(t, exitFailed, code, errOut)
	assert.Empty(t, out)
	assert.Contains(t, errOut, "has no \"jobs\"")
	code, out, errOut = runCLI(t, "purge", "show", "abc", "--node", f.URL)
	assert.Equal(t, exitFailed, code, errOut)
	assert.Empty(t, out)
	assert.Contains(t, errOut, "no id or state")
}

// floe backup exits as the other commands do: 4 when the node refuses the
// token, 3 when no node answers.
func TestBackupExitCodesAreTheCommands(t *testing.T) {
	fastCLI(t)
	f := newFakeNode(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"error":{"message":"no token","type":"NotAuthorizedException","code":401}}`)
	})
	to := filepath.Join(t.TempDir(), "b.floebackup")
	code, _, errOut := runCLI(t, "backup", "--node", f.URL, "--to", to)
	assert.Equal(t, exitUnauthorized, code, errOut)
	code, _, errOut = runCLI(t, "backup", "--node", "http://"+freeAddr(t), "--to", to)
	assert.Equal(t, exitUnavailable, code, errOut)
}

// A member that answers and is ready, yet holds another cluster's state,
// is shown as not in this cluster, with why.
func TestStatusShowsAMemberOfAnotherCluster(t *testing.T) {
	st := cliCluster{Members: []cliMember{{ID: "node3", Suffrage: "Voter", ClusterAddr: "127.0.0.1:8382", HTTPAddr: "127.0.0.1:8381",
		Reachable: true, State: "leader", Error: "holds another cluster's state (cluster id x)"}}}
	var out bytes.Buffer
	renderStatus(&out, "http://127.0.0.1:8181", "node1", st, map[string]string{"node3": "ready"})
	assert.Contains(t, out.String(), "not in this cluster: holds another cluster's state (cluster id x)")
}

// The common flags may come before the subcommand too, as the help says
// ("before or after the arguments"): "floe members --node URL remove ID"
// said `unexpected argument "remove"`, and "floe leader --node URL
// transfer" that a subcommand was needed.
func TestCommonFlagsBeforeTheSubcommand(t *testing.T) {
	f := newFakeNode(t, func(w http.ResponseWriter, r *http.Request, n int) { w.WriteHeader(http.StatusNoContent) })
	code, out, errOut := runCLI(t, "members", "--node", f.URL, "remove", "node4")
	require.Equal(t, exitOK, code, errOut)
	assert.Equal(t, "removed member node4\n", out)
	code, out, errOut = runCLI(t, "leader", "--node="+f.URL, "--json", "transfer", "node2", "--timeout", "5s")
	require.Equal(t, exitOK, code, errOut)
	assert.Empty(t, out)
	// Before a "--" that ends the flags, too.
	code, out, errOut = runCLI(t, "members", "--node", f.URL, "remove", "--", "-odd")
	require.Equal(t, exitOK, code, errOut)
	assert.Equal(t, "removed member -odd\n", out)
	seen := f.requests()
	require.Len(t, seen, 3)
	assert.Equal(t, "/management/v1/cluster/members/node4", seen[0].path)
	assert.JSONEq(t, `{"id":"node2"}`, seen[1].body)
	assert.Equal(t, "/management/v1/cluster/members/-odd", seen[2].path)

	// Given twice, before and after, a flag is still refused; a flag the
	// group does not know before a subcommand is still a usage error.
	code, _, errOut = runCLI(t, "members", "--node", f.URL, "remove", "node4", "--node", f.URL)
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "given more than once")
	code, _, _ = runCLI(t, "purge", "--state", "FAILED", "list", "--node", f.URL)
	assert.Equal(t, exitUsage, code)
	assert.Len(t, f.requests(), 3, "nothing sent")
}

// Adding a member that is there already, at that address and with that
// suffrage, says so: the change left the cluster as it was.
func TestAddMemberThereAlready(t *testing.T) {
	fastCLI(t)
	f := newFakeNode(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		if r.Method == http.MethodGet {
			answerJSON(w, http.StatusOK, `{"members":[{"id":"node4","cluster-address":"127.0.0.1:8482","suffrage":"Voter"},`+
				`{"id":"node5","cluster-address":"127.0.0.1:8582","suffrage":"Nonvoter"}]}`)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	for _, c := range []struct{ args, out string }{
		{"add-voter node4 127.0.0.1:8482", "node4 (127.0.0.1:8482) is a voter already; nothing changed\n"},
		{"add-nonvoter node5 127.0.0.1:8582", "node5 (127.0.0.1:8582) is a non-voter already; nothing changed\n"},
		// A non-voter promoted, a voter moved: changes.
		{"add-voter node5 127.0.0.1:8582", "added node5 (127.0.0.1:8582) as a voter\n"},
		{"add-voter node4 127.0.0.1:9482", "added node4 (127.0.0.1:9482) as a voter\n"},
	} {
		code, out, errOut := runCLI(t, append(append([]string{"members"}, strings.Fields(c.args)...), "--node", f.URL)...)
		require.Equal(t, exitOK, code, errOut)
		assert.Equal(t, c.out, out, c.args)
	}
}
