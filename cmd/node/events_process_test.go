package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/fsm"
)

// feedFollower follows the change feed as a Server-Sent Events client
// does: it keeps the events of each entry once the entry's id line has
// arrived (the id comes with an entry's last event) and resumes after the
// last such id. Events of an entry cut off by a disconnect are dropped, to
// be received again on resume.
type feedFollower struct {
	client *http.Client

	mu      sync.Mutex
	events  []fsm.Event
	lastID  uint64
	hasID   bool
	streams []string // "node via header|query|start" per stream opened
	lastErr string
}

func newFeedFollower() *feedFollower {
	// No client timeout: a stream lasts until its context ends.
	return &feedFollower{client: &http.Client{}}
}

// follow streams from p until ctx ends, reopening the stream if it
// breaks. With byQuery it resumes with ?after=, else with Last-Event-ID.
func (f *feedFollower) follow(ctx context.Context, p *clusterProc, byQuery bool) {
	for ctx.Err() == nil {
		err := f.stream(ctx, p, byQuery)
		if ctx.Err() != nil {
			return
		}
		f.mu.Lock()
		f.lastErr = fmt.Sprintf("%s: %v", p.id, err)
		f.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond): // reconnect backoff
		}
	}
}

// start runs follow in a goroutine; stop ends it and waits until it has.
func (f *feedFollower) start(p *clusterProc, byQuery bool) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.follow(ctx, p, byQuery)
	}()
	return func() {
		cancel()
		<-done
	}
}

func (f *feedFollower) stream(ctx context.Context, p *clusterProc, byQuery bool) error {
	f.mu.Lock()
	last, has := f.lastID, f.hasID
	f.mu.Unlock()
	url := "http://" + p.httpAddr + "/management/v1/events"
	how := "start"
	if has && byQuery {
		url += "?after=" + strconv.FormatUint(last, 10)
		how = "query after " + strconv.FormatUint(last, 10)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if has && !byQuery {
		req.Header.Set("Last-Event-ID", strconv.FormatUint(last, 10))
		how = "Last-Event-ID " + strconv.FormatUint(last, 10)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d", url, resp.StatusCode)
	}
	f.mu.Lock()
	f.streams = append(f.streams, p.id+" via "+how)
	f.mu.Unlock()

	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var (
		pending  []fsm.Event
		id, data string
	)
	for sc.Scan() {
		line := sc.Text()
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch {
		case line == "":
			if data != "" {
				var e fsm.Event
				if err := json.Unmarshal([]byte(data), &e); err != nil {
					return fmt.Errorf("event %q: %w", data, err)
				}
				pending = append(pending, e)
			}
			if id != "" {
				n, err := strconv.ParseUint(id, 10, 64)
				if err != nil {
					return fmt.Errorf("id %q: %w", id, err)
				}
				f.mu.Lock()
				f.events = append(f.events, pending...)
				f.lastID, f.hasID = n, true
				f.mu.Unlock()
				pending = nil
			}
			id, data = "", ""
		case field == "id":
			id = value
		case field == "data":
			data = value
		case field == "event" && value != "":
			return fmt.Errorf("%s event", value)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return errors.New("stream ended")
}

func (f *feedFollower) snapshot() []fsm.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.events)
}

// sawNamespace reports whether a namespace-created event for name arrived.
func (f *feedFollower) sawNamespace(name string) bool {
	for _, e := range f.snapshot() {
		if e.Type == fsm.EventNamespaceCreated && len(e.Namespace) == 1 && e.Namespace[0] == name {
			return true
		}
	}
	return false
}

func (f *feedFollower) describe() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fmt.Sprintf("%d events, last id %d, streams %v, last error %q", len(f.events), f.lastID, f.streams, f.lastErr)
}

// feedLine renders an event for comparisons: its position, type and names.
func feedLine(e fsm.Event) string {
	s := fmt.Sprintf("%d/%d %s", e.Index, e.Seq, e.Type)
	if e.Namespace != nil {
		s += " " + strings.Join(e.Namespace, ".")
	}
	if e.Ident != nil {
		s += " " + e.Ident.String()
	}
	if e.To != nil {
		s += " -> " + e.To.String()
	}
	return s
}

// change makes one catalog change through targets in turn until it is
// acknowledged: want, or on a retry after an answer that left the outcome
// unknown (none, or 5xx), one of retried (the first attempt was applied).
func (c *testCluster) change(t *testing.T, targets []*clusterProc, method, path, body string, want int, retried ...int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	unknown := false
	for attempt := 0; ; attempt++ {
		p := targets[attempt%len(targets)]
		code, resp, err := c.do(p, method, path, body)
		switch {
		case err == nil && code == want:
			return
		case err == nil && unknown && slices.Contains(retried, code):
			return
		case err == nil && code < 500:
			t.Fatalf("%s %s via %s: %d %s", method, path, p.id, code, resp)
		}
		unknown = true
		require.False(t, time.Now().After(deadline), "%s %s not acknowledged within 30s; last: %d %s %v", method, path, code, resp, err)
		time.Sleep(50 * time.Millisecond) // retry backoff
	}
}

const feedTableBody = `{"name":%q,"schema":{"type":"struct","schema-id":0,"fields":[{"id":1,"name":"id","type":"long","required":true}]}}`

// TestChangeFeedAcrossLeaderKill follows the change feed from a follower
// while namespaces are created through every node, SIGKILLs the leader,
// moves the stream to the other follower (Last-Event-ID) and back
// (?after=), restarts the killed node, and checks that every acknowledged
// change arrived exactly once, in log-index order, and that every node
// serves the same feed.
func TestChangeFeedAcrossLeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three processes")
	}
	c := startTestCluster(t)
	leader := c.awaitStable(t, 20*time.Second)
	var followers []*clusterProc
	for _, p := range c.procs {
		if p != leader {
			followers = append(followers, p)
		}
	}
	require.Len(t, followers, 2)
	f1, f2 := followers[0], followers[1]

	feed := newFeedFollower()
	stopFeed := feed.start(f1, false)
	defer func() { stopFeed() }()

	// A few kinds of change on the stable cluster.
	through := []*clusterProc{f2, leader, f1}
	c.change(t, through, http.MethodPost, "/v1/namespaces", `{"namespace":["feed"]}`, http.StatusOK)
	c.change(t, through, http.MethodPost, "/v1/namespaces/feed/tables", fmt.Sprintf(feedTableBody, "t"), http.StatusOK)
	c.change(t, through, http.MethodPost, "/v1/namespaces/feed/properties", `{"updates":{"k":"v"},"removals":[]}`, http.StatusOK)
	c.change(t, through, http.MethodDelete, "/v1/namespaces/feed/tables/t", "", http.StatusNoContent)

	// Namespaces from two clients through all three nodes, throughout.
	load := &writeLoad{ackedSet: map[string]bool{}, attempted: map[string]bool{}, retries: map[string]int{}}
	stopLoad := make(chan struct{})
	var wg sync.WaitGroup
	for client := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			load.run(c, client, c.procs, stopLoad)
		}()
	}
	loadStopped := false
	endLoad := func() {
		if !loadStopped {
			loadStopped = true
			close(stopLoad)
			wg.Wait()
		}
	}
	defer endLoad()
	awaitAcked := func(n int64, what string) {
		t.Helper()
		require.Eventually(t, func() bool { return load.acked.Load() >= n }, 30*time.Second, 10*time.Millisecond,
			"%s: %d writes acknowledged, want %d", what, load.acked.Load(), n)
	}

	awaitAcked(15, "before the kill")
	require.Eventually(t, func() bool { return len(feed.snapshot()) >= 10 }, 10*time.Second, 10*time.Millisecond,
		"the feed on %s did not follow: %s", f1.id, feed.describe())
	atKill := load.acked.Load()
	leader.kill(t)
	t.Logf("SIGKILLed leader %s after %d acknowledged writes; feed: %s", leader.id, atKill, feed.describe())

	// Writes resume once a new leader is elected; then the stream moves
	// to the other follower, resuming with Last-Event-ID.
	awaitAcked(atKill+10, "after the kill")
	stopFeed()
	stopFeed = feed.start(f2, false)
	survivors := []*clusterProc{f1, f2}
	c.change(t, survivors, http.MethodPost, "/v1/namespaces/feed/tables", fmt.Sprintf(feedTableBody, "t2"), http.StatusOK, http.StatusConflict)
	c.change(t, survivors, http.MethodPost, "/v1/tables/rename",
		`{"source":{"namespace":["feed"],"name":"t2"},"destination":{"namespace":["feed"],"name":"t3"}}`, http.StatusNoContent, http.StatusNotFound)

	// And back to the first follower, resuming with ?after=.
	awaitAcked(load.acked.Load()+10, "after moving the stream")
	stopFeed()
	stopFeed = feed.start(f1, true)

	// The killed node comes back and catches up.
	leader.start(t, c.bin)
	c.awaitStable(t, 30*time.Second)
	awaitAcked(load.acked.Load()+10, "after the restart")
	endLoad()
	c.change(t, c.procs, http.MethodPost, "/v1/namespaces", `{"namespace":["zz_end"]}`, http.StatusOK, http.StatusConflict)
	require.Eventually(t, func() bool { return feed.sawNamespace("zz_end") }, 20*time.Second, 10*time.Millisecond,
		"the last change did not arrive: %s", feed.describe())
	stopFeed()
	stopFeed = func() {}

	events := feed.snapshot()
	t.Logf("feed: %s", feed.describe())

	// Exactly once, in log-index order.
	for i := 1; i < len(events); i++ {
		prev, cur := events[i-1], events[i]
		if cur.Index < prev.Index || (cur.Index == prev.Index && cur.Seq <= prev.Seq) {
			t.Errorf("event %s follows %s", feedLine(cur), feedLine(prev))
		}
	}

	// The changes made on the stable cluster and after the kill, in order.
	var tables []string
	for _, e := range events {
		if !strings.HasPrefix(string(e.Type), "namespace-") || (len(e.Namespace) == 1 && e.Namespace[0] == "feed") {
			line := feedLine(e)
			tables = append(tables, line[strings.Index(line, " ")+1:])
		}
	}
	assert.Equal(t, []string{
		"namespace-created feed",
		"table-created feed.t",
		"namespace-updated feed",
		"table-dropped feed.t",
		"table-created feed.t2",
		"table-renamed feed.t2 -> feed.t3",
	}, tables)

	// Every acknowledged namespace exactly once, no other more than once,
	// none nobody asked for.
	load.mu.Lock()
	acked, attempted, failures := load.ackedSet, load.attempted, load.failures
	load.mu.Unlock()
	assert.Empty(t, failures, "writes answered with an unexpected status")
	seen := map[string]int{}
	for _, e := range events {
		if e.Type == fsm.EventNamespaceCreated && len(e.Namespace) == 1 && strings.HasPrefix(e.Namespace[0], "c") {
			seen[e.Namespace[0]]++
		}
	}
	for name := range acked {
		assert.Equal(t, 1, seen[name], "namespace %s (acknowledged) in the feed", name)
	}
	for name, n := range seen {
		assert.True(t, attempted[name], "namespace %s in the feed was never written", name)
		assert.LessOrEqual(t, n, 1, "namespace %s in the feed %d times", name, n)
	}
	t.Logf("%d namespaces acknowledged, %d in the feed; retried answers: %v", len(acked), len(seen), load.retries)

	// Every node, the restarted one included, serves the same feed from
	// the start.
	want := make([]string, 0, len(events))
	for _, e := range events {
		want = append(want, feedLine(e))
	}
	for _, p := range c.procs {
		full := newFeedFollower()
		stop := full.start(p, false)
		require.Eventually(t, func() bool { return full.sawNamespace("zz_end") }, 20*time.Second, 10*time.Millisecond,
			"the feed on %s did not reach the last change: %s", p.id, full.describe())
		stop()
		var got []string
		for _, e := range full.snapshot() {
			got = append(got, feedLine(e))
		}
		assert.Equal(t, want, got, "the feed on %s", p.id)
	}
}
