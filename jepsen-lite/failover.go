package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/floe-catalog/floe/internal/harness"
)

// The failover fault: SIGSTOP the leader and drive writes and linearizable
// reads through every other node, one new request every failoverProbeEvery
// per node and kind (requests overlap: one left hanging does not hold up
// the next), until each node has acknowledged one of each; then SIGCONT.
// A node that takes longer than failoverBound is a violation: a new leader
// is elected within a few seconds, and every surviving node, the ones that
// lose the election too, must serve again soon after.
const (
	failoverProbeEvery   = 100 * time.Millisecond
	failoverProbeTimeout = 12 * time.Second // longer than any timeout inside floe, so a stuck request shows its real length
	failoverBound        = 8 * time.Second
	failoverWait         = 15 * time.Second // the longest pause: then the leader is resumed whatever was acknowledged
)

// failoverProbe is what one surviving node did after the leader was
// stopped: how long until it acknowledged a write and a linearizable read
// (zero: none within failoverWait), how many probe requests it was sent and
// how many of those failed (an error status, or no answer within
// failoverProbeTimeout) before the fault ended.
type failoverProbe struct {
	Node      string        `json:"node"`
	NewLeader bool          `json:"new_leader"` // it won the election
	Write     time.Duration `json:"write_ns"`
	Read      time.Duration `json:"read_ns"`
	Sent      int           `json:"sent"`
	Failed    int           `json:"failed"`
}

func (p failoverProbe) String() string {
	show := func(d time.Duration) string {
		if d == 0 {
			return "none"
		}
		return d.Round(time.Millisecond).String()
	}
	role := ""
	if p.NewLeader {
		role = " (new leader)"
	}
	return fmt.Sprintf("via %s%s: write %s, read %s (%d requests, %d failed)", p.Node, role, show(p.Write), show(p.Read), p.Sent, p.Failed)
}

// failover injects the failover fault (see failoverBound).
func (n *nemesis) failover(ctx context.Context) (string, error) {
	victim, err := n.leader(ctx)
	if err != nil {
		return "", err
	}
	var survivors []*harness.Node
	for _, nd := range n.cl.Nodes {
		if nd != victim {
			survivors = append(survivors, nd)
		}
	}
	probes := make([]failoverProbe, len(survivors))
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	var streams sync.WaitGroup

	t0 := time.Now()
	if err := victim.Pause(); err != nil {
		return "", err
	}
	deadline := t0.Add(failoverWait)
	for i, nd := range survivors {
		probes[i].Node = nd.ID
		for _, write := range []bool{true, false} {
			streams.Go(func() {
				acked := make(chan struct{})
				var once sync.Once
				tick := time.NewTicker(failoverProbeEvery)
				defer tick.Stop()
				for seq := 0; ; seq++ {
					wg.Go(func() {
						ok := n.failoverRequest(pctx, nd, write, seq)
						at := time.Since(t0)
						mu.Lock()
						defer mu.Unlock()
						p := &probes[i]
						p.Sent++
						switch {
						case !ok && pctx.Err() == nil:
							p.Failed++
						case !ok: // still in flight when the fault ended
						case write && p.Write == 0:
							p.Write = at
						case !write && p.Read == 0:
							p.Read = at
						}
						if ok {
							once.Do(func() { close(acked) })
						}
					})
					select {
					case <-acked:
						return
					case <-pctx.Done():
						return
					case <-tick.C:
					}
					if time.Now().After(deadline) {
						return
					}
				}
			})
		}
	}
	streams.Wait()
	paused := time.Since(t0)
	cancel() // requests still in flight end now
	wg.Wait()
	if err := victim.Continue(); err != nil {
		return "", err
	}
	if ctx.Err() != nil {
		return fmt.Sprintf("SIGSTOP leader %s; run ended after %s; SIGCONT", victim.ID, paused.Round(time.Millisecond)), nil
	}
	// Who won: the serving nodes name the new leader.
	lctx, lcancel := context.WithTimeout(context.Background(), 5*time.Second)
	if ln, err := leader(lctx, n.cl); err == nil {
		for i := range probes {
			probes[i].NewLeader = probes[i].Node == ln.ID
		}
	}
	lcancel()
	var parts []string
	for _, p := range probes {
		parts = append(parts, p.String())
		for _, kind := range []struct {
			name string
			d    time.Duration
		}{{"write", p.Write}, {"linearizable read", p.Read}} {
			switch {
			case kind.d == 0:
				n.violate("failover: no %s acknowledged through %s within %s of SIGSTOP of the leader %s", kind.name, p.Node, failoverWait, victim.ID)
			case kind.d > failoverBound:
				n.violate("failover: the first %s through %s was acknowledged %s after SIGSTOP of the leader %s (bound %s)",
					kind.name, p.Node, kind.d.Round(time.Millisecond), victim.ID, failoverBound)
			}
		}
	}
	n.mu.Lock()
	n.failovers = append(n.failovers, probes...)
	n.mu.Unlock()
	return fmt.Sprintf("SIGSTOP leader %s for %s; %s", victim.ID, paused.Round(time.Millisecond), strings.Join(parts, "; ")), nil
}

// failoverRequest sends one probe through nd: a namespace property update
// (forwarded to the leader by a follower) or a linearizable namespace load
// (a read index from the leader). It reports whether it was acknowledged.
func (n *nemesis) failoverRequest(ctx context.Context, nd *harness.Node, write bool, seq int) bool {
	if !write {
		r := n.api.send(ctx, nd, http.MethodGet, "/v1/namespaces/"+padNamespace, nil, nil, failoverProbeTimeout)
		return r.status == http.StatusOK
	}
	key := "failover-" + nd.ID
	body, _ := json.Marshal(map[string]any{"updates": map[string]string{key: fmt.Sprint(time.Now().UnixNano(), "-", seq)}, "removals": []string{}})
	r := n.api.send(ctx, nd, http.MethodPost, "/v1/namespaces/"+padNamespace+"/properties", body, nil, failoverProbeTimeout)
	return r.status == http.StatusOK
}

// failoverSummary summarises every surviving node's times over the run:
// median and longest to the first acknowledged write and read, and whether
// the nodes that lost the election differ.
func failoverSummary(probes []failoverProbe, survivors int) string {
	if len(probes) == 0 || survivors < 1 {
		return ""
	}
	stats := func(pick func(failoverProbe) time.Duration, losers bool) string {
		var ds []time.Duration
		missing := 0
		for _, p := range probes {
			if losers && p.NewLeader {
				continue
			}
			if d := pick(p); d > 0 {
				ds = append(ds, d)
			} else {
				missing++
			}
		}
		if len(ds) == 0 {
			return fmt.Sprintf("none acknowledged (%d)", missing)
		}
		slices.Sort(ds)
		s := fmt.Sprintf("median %s, max %s", ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
		if missing > 0 {
			s += fmt.Sprintf(", %d none", missing)
		}
		return s
	}
	write := func(p failoverProbe) time.Duration { return p.Write }
	read := func(p failoverProbe) time.Duration { return p.Read }
	faults := fmt.Sprintf("%d faults", len(probes)/survivors)
	if len(probes)/survivors == 1 {
		faults = "1 fault"
	}
	return fmt.Sprintf("failover: SIGSTOP of the leader to the first acknowledged answer through each other node (%s, %d nodes each): write %s; read %s; through the nodes that lost the election: write %s; read %s",
		faults, survivors, stats(write, false), stats(read, false), stats(write, true), stats(read, true))
}
