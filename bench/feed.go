package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/harness"
)

// errFeedUnavailable: the node has no change feed.
var errFeedUnavailable = errors.New("GET /management/v1/events answered 404")

// jobSeen is what the change feed told about one purge job: when (by the
// driver's clock, on receipt) each state was first seen, and which node
// held the lease when it was RUNNING.
type jobSeen struct {
	at        map[fsm.JobState]time.Time
	node      string
	lastError string
}

// purgeFeed follows a node's change feed (GET /management/v1/events, SSE)
// and timestamps every purge job's transitions as they arrive, so that the
// driver learns when a job went RUNNING or SUCCEEDED without polling. The
// receipt time includes the feed's delivery (the node's apply, its read of
// the events, loopback HTTP): a figure taken from it is an upper bound.
type purgeFeed struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every event
	jobOf   map[string]string
	jobs    map[string]*jobSeen
	err     error
	events  int
}

// followPurgeFeed opens n's change feed from its oldest kept event and
// follows it until stop. It returns errFeedUnavailable when the node has
// no feed.
func followPurgeFeed(ctx context.Context, n *harness.Node) (*purgeFeed, error) {
	ctx, cancel := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.BaseURL()+"/management/v1/events?limit=1000", nil)
	if err != nil {
		cancel()
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	cl := harness.NewHTTPClient(1, 0)
	resp, err := cl.Do(req)
	if err != nil {
		cancel()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		cancel()
		if resp.StatusCode == http.StatusNotFound {
			return nil, errFeedUnavailable
		}
		return nil, fmt.Errorf("GET /management/v1/events on %s: status %d", n.ID, resp.StatusCode)
	}
	f := &purgeFeed{cancel: cancel, done: make(chan struct{}), changed: make(chan struct{}),
		jobOf: map[string]string{}, jobs: map[string]*jobSeen{}}
	go func() {
		defer close(f.done)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var ev fsm.Event
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				f.fail(fmt.Errorf("change feed: %w", err))
				return
			}
			f.record(ev, time.Now())
		}
		err := sc.Err()
		if err == nil {
			err = errors.New("change feed ended")
		}
		if ctx.Err() == nil {
			f.fail(err)
		}
	}()
	return f, nil
}

func identKey(ns, name string) string { return ns + "." + name }

func (f *purgeFeed) record(ev fsm.Event, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events++
	if ev.PurgeJob == nil || ev.Ident == nil {
		return
	}
	id := ev.PurgeJob.ID
	if ev.Type == fsm.EventTableDropped {
		f.jobOf[identKey(strings.Join(ev.Ident.Namespace, "."), ev.Ident.Name)] = id
	}
	if ev.Type != fsm.EventPurgeJob {
		return
	}
	f.jobOf[identKey(strings.Join(ev.Ident.Namespace, "."), ev.Ident.Name)] = id
	j := f.jobs[id]
	if j == nil {
		j = &jobSeen{at: map[fsm.JobState]time.Time{}}
		f.jobs[id] = j
	}
	if _, ok := j.at[ev.PurgeJob.State]; !ok {
		j.at[ev.PurgeJob.State] = at
	}
	if ev.PurgeJob.State == fsm.JobRunning && ev.PurgeJob.Node != "" {
		j.node = ev.PurgeJob.Node
	}
	if ev.PurgeJob.LastError != "" {
		j.lastError = ev.PurgeJob.LastError
	}
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *purgeFeed) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
	close(f.changed)
	f.changed = make(chan struct{})
}

// jobState is what the feed has seen of the job of the table ns.name.
type jobState struct {
	ID   string
	At   time.Time // when the state asked for was first seen; zero: not yet
	Node string    // lease holder when RUNNING
}

// seen returns the job of ns.name and when it was first seen in state.
func (f *purgeFeed) seen(ns, name string, state fsm.JobState) (jobState, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seenLocked(ns, name, state)
}

func (f *purgeFeed) seenLocked(ns, name string, state fsm.JobState) (jobState, bool) {
	id, ok := f.jobOf[identKey(ns, name)]
	if !ok {
		return jobState{}, false
	}
	js := jobState{ID: id}
	j := f.jobs[id]
	if j == nil {
		return js, false
	}
	js.Node = j.node
	at, ok := j.at[state]
	js.At = at
	return js, ok
}

// wait waits up to timeout for the job of ns.name to be seen in state. A
// job seen FAILED is an error.
func (f *purgeFeed) wait(ctx context.Context, ns, name string, state fsm.JobState, timeout time.Duration) (jobState, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		f.mu.Lock()
		js, ok := f.seenLocked(ns, name, state)
		var failed string
		if j := f.jobs[js.ID]; j != nil && state != fsm.JobFailed {
			if _, bad := j.at[fsm.JobFailed]; bad {
				failed = j.lastError
			}
		}
		err, ch := f.err, f.changed
		f.mu.Unlock()
		switch {
		case ok:
			return js, nil
		case failed != "":
			return js, fmt.Errorf("purge job %s of %s.%s FAILED: %s", js.ID, ns, name, failed)
		case err != nil:
			return js, err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return js, fmt.Errorf("purge job of %s.%s not seen %s within %s (job %q)", ns, name, state, timeout, js.ID)
		}
	}
}

// count returns how many jobs of tables in ns were seen in state.
func (f *purgeFeed) count(ns string, state fsm.JobState) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for ident, id := range f.jobOf {
		if !strings.HasPrefix(ident, ns+".") {
			continue
		}
		if j := f.jobs[id]; j != nil {
			if _, ok := j.at[state]; ok {
				n++
			}
		}
	}
	return n
}

// stop closes the stream.
func (f *purgeFeed) stop() {
	f.cancel()
	<-f.done
}
