package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// cliCluster is GET /management/v1/cluster: the cluster as one node sees it.
type cliCluster struct {
	Self         string      `json:"self"`
	LeaderID     string      `json:"leader-id"`
	LeaderAddr   string      `json:"leader-address"`
	Term         uint64      `json:"term"`
	CommitIndex  uint64      `json:"commit-index"`
	AppliedIndex uint64      `json:"applied-index"`
	ClusterID    string      `json:"cluster-id"`
	Members      []cliMember `json:"members"`
}

// cliMember is one member of cliCluster, with what it reports about itself
// when reachable.
type cliMember struct {
	ID           string `json:"id"`
	ClusterAddr  string `json:"cluster-address"`
	HTTPAddr     string `json:"http-address"`
	Suffrage     string `json:"suffrage"`
	Leader       bool   `json:"leader"`
	Reachable    bool   `json:"reachable"`
	State        string `json:"state"`
	Term         uint64 `json:"term"`
	CommitIndex  uint64 `json:"commit-index"`
	AppliedIndex uint64 `json:"applied-index"`
	LastContact  string `json:"last-contact"`
	Error        string `json:"error"`
}

func runStatusCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runGroup(ctx, "status", statusLeaves(), args, stdout, stderr)
}

func runMembersCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runGroup(ctx, "members", memberLeaves(), args, stdout, stderr)
}

func runLeaderCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runGroup(ctx, "leader", leaderLeaves(), args, stdout, stderr)
}

func statusLeaves() []cliLeaf {
	return []cliLeaf{{
		group:   "status",
		summary: "the leader, term, indexes, and every member with its health",
		about: `Reads GET /management/v1/cluster from the node, then asks every member's
/readyz for its health. Exits 0 when the node answered, whatever the health
it reports. --json prints the node's /management/v1/cluster answer.`,
		timeout: defaultCLITimeout,
		run:     runStatus,
	}}
}

func memberLeaves() []cliLeaf {
	return []cliLeaf{
		{
			group:   "members",
			summary: "the cluster's members: suffrage, state, addresses",
			about:   `--json prints the node's /management/v1/cluster answer.`,
			timeout: defaultCLITimeout,
			run:     runMembersList,
		},
		{
			group: "members", name: "add-voter", args: "ID ADDR",
			summary: "add a voter with cluster address ADDR, or promote the non-voter ID",
			about: `POST /management/v1/cluster/voters. ADDR is the member's cluster address
(host:port, its --cluster-addr). Also moves a member to a new address.`,
			minArgs: 2, maxArgs: 2, timeout: defaultCLITimeout,
			run: func(ctx context.Context, s *cliSession, args []string) error {
				return addMember(ctx, s, "/management/v1/cluster/voters", args[0], args[1], "Voter", "a voter")
			},
		},
		{
			group: "members", name: "add-nonvoter", args: "ID ADDR",
			summary: "add a non-voter (replicates, does not vote) with cluster address ADDR",
			about:   `POST /management/v1/cluster/non-voters. ADDR is the member's cluster address.`,
			minArgs: 2, maxArgs: 2, timeout: defaultCLITimeout,
			run: func(ctx context.Context, s *cliSession, args []string) error {
				return addMember(ctx, s, "/management/v1/cluster/non-voters", args[0], args[1], "Nonvoter", "a non-voter")
			},
		},
		{
			group: "members", name: "remove", args: "ID",
			summary: "remove the member ID from the cluster",
			about:   `DELETE /management/v1/cluster/members/ID. An unknown ID exits 1.`,
			minArgs: 1, maxArgs: 1, timeout: defaultCLITimeout,
			run: func(ctx context.Context, s *cliSession, args []string) error {
				if _, err := s.api.change(ctx, "DELETE", "/management/v1/cluster/members/"+url.PathEscape(args[0]), nil); err != nil {
					return err
				}
				if !s.opts.json {
					fmt.Fprintf(s.stdout, "removed member %s\n", args[0])
				}
				return nil
			},
		},
	}
}

func leaderLeaves() []cliLeaf {
	return []cliLeaf{{
		group: "leader", name: "transfer", args: "[ID]",
		summary: "hand leadership to the voter ID, or to any up-to-date voter",
		about: `POST /management/v1/cluster/leadership-transfer. Exits 3 when the transfer
did not complete (no leader, or the target did not take over in time).`,
		maxArgs: 1, timeout: defaultCLITimeout,
		run: func(ctx context.Context, s *cliSession, args []string) error {
			var body any
			if len(args) == 1 {
				body = map[string]string{"id": args[0]}
			}
			if s.opts.json {
				_, err := s.api.change(ctx, "POST", "/management/v1/cluster/leadership-transfer", body)
				return err
			}
			// Only for the message: who led before and after.
			before := leaderID(ctx, s)
			if _, err := s.api.change(ctx, "POST", "/management/v1/cluster/leadership-transfer", body); err != nil {
				return err
			}
			switch after := leaderID(ctx, s); {
			case len(args) == 1 && before == args[0] && after == args[0]:
				fmt.Fprintf(s.stdout, "%s is the leader already\n", args[0])
			case len(args) == 1:
				fmt.Fprintf(s.stdout, "leadership transferred to %s\n", args[0])
			case after != "" && after != before:
				fmt.Fprintf(s.stdout, "leadership transferred to %s\n", after)
			default:
				fmt.Fprintln(s.stdout, "leadership transferred")
			}
			return nil
		},
	}}
}

// addMember adds id at addr with the change at path. suffrage is the
// member's suffrage once added, as the cluster status spells it; as says
// it in words. A member that was there already, at addr and with that
// suffrage, is reported as such: the change left it as it was.
func addMember(ctx context.Context, s *cliSession, path, id, addr, suffrage, as string) error {
	// Only for the message: whether the member was there already.
	already := false
	if !s.opts.json {
		ctx, cancel := context.WithTimeout(ctx, leaderIDTimeout)
		if st, _, err := readCluster(ctx, s); err == nil {
			already = slices.ContainsFunc(st.Members, func(m cliMember) bool {
				return m.ID == id && m.ClusterAddr == addr && m.Suffrage == suffrage
			})
		}
		cancel()
	}
	if _, err := s.api.change(ctx, "POST", path, map[string]string{"id": id, "address": addr}); err != nil {
		return err
	}
	switch {
	case s.opts.json:
	case already:
		fmt.Fprintf(s.stdout, "%s (%s) is %s already; nothing changed\n", id, addr, as)
	default:
		fmt.Fprintf(s.stdout, "added %s (%s) as %s\n", id, addr, as)
	}
	return nil
}

// leaderIDTimeout bounds leaderID.
const leaderIDTimeout = 2 * time.Second

// leaderID is the id of the member the cluster's status names leader, ""
// when it names none or cannot be read within leaderIDTimeout: for
// messages only, so it never holds up the command for long.
func leaderID(ctx context.Context, s *cliSession) string {
	ctx, cancel := context.WithTimeout(ctx, leaderIDTimeout)
	defer cancel()
	st, _, err := readCluster(ctx, s)
	if err != nil {
		return ""
	}
	for _, m := range st.Members {
		if m.Leader {
			return m.ID
		}
	}
	return ""
}

// readCluster reads the cluster's status; raw is the answer as it came.
func readCluster(ctx context.Context, s *cliSession) (cliCluster, []byte, error) {
	var st cliCluster
	raw, err := s.api.get(ctx, "/management/v1/cluster")
	if err != nil {
		return st, nil, err
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return st, nil, fmt.Errorf("malformed answer from GET /management/v1/cluster: %v", err)
	}
	return st, raw, nil
}

func runStatus(ctx context.Context, s *cliSession, _ []string) error {
	st, raw, err := readCluster(ctx, s)
	if err != nil {
		return err
	}
	if s.opts.json {
		printRaw(s.stdout, raw)
		return nil
	}
	self := s.api.readyz(ctx, s.api.base)
	health := memberHealth(ctx, s.api, st.Members)
	renderStatus(s.stdout, s.api.base, self, st, health)
	return nil
}

func runMembersList(ctx context.Context, s *cliSession, _ []string) error {
	st, raw, err := readCluster(ctx, s)
	if err != nil {
		return err
	}
	if s.opts.json {
		printRaw(s.stdout, raw)
		return nil
	}
	renderMembers(s.stdout, st.Members)
	return nil
}

// memberHealth asks every member with an HTTP address for its /readyz, all
// at once, and returns the answers by member ID.
func memberHealth(ctx context.Context, api *apiClient, members []cliMember) map[string]string {
	scheme := "http"
	if strings.HasPrefix(api.base, "https://") {
		scheme = "https"
	}
	health := map[string]string{}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for _, m := range members {
		addr := probeAddr(m)
		if addr == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := api.readyz(ctx, scheme+"://"+addr)
			mu.Lock()
			health[m.ID] = h
			mu.Unlock()
		}()
	}
	wg.Wait()
	return health
}

// probeAddr is where to reach a member's HTTP API: its HTTP address, with
// the host of its cluster address when the HTTP one binds every interface.
func probeAddr(m cliMember) string {
	if m.HTTPAddr == "" {
		return ""
	}
	host, port, err := net.SplitHostPort(m.HTTPAddr)
	if err != nil {
		return m.HTTPAddr
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return m.HTTPAddr
	}
	clusterHost, _, err := net.SplitHostPort(m.ClusterAddr)
	if err != nil || clusterHost == "" {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return net.JoinHostPort(clusterHost, port)
}

// printRaw writes an answer as it came, ending in a newline.
func printRaw(w io.Writer, raw []byte) {
	_, _ = w.Write(raw)
	if len(raw) == 0 || raw[len(raw)-1] != '\n' {
		fmt.Fprintln(w)
	}
}

// dash stands for an empty cell.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func count(n uint64) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

func renderStatus(w io.Writer, node, self string, st cliCluster, health map[string]string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	name := node
	if st.Self != "" {
		name += " (" + st.Self + ")"
	}
	fmt.Fprintf(tw, "node\t%s: %s\n", name, self)
	if st.LeaderID == "" {
		fmt.Fprintf(tw, "leader\tnone known\n")
	} else {
		fmt.Fprintf(tw, "leader\t%s (%s)\n", st.LeaderID, dash(st.LeaderAddr))
	}
	fmt.Fprintf(tw, "term\t%d\n", st.Term)
	fmt.Fprintf(tw, "commit index\t%d\n", st.CommitIndex)
	fmt.Fprintf(tw, "applied index\t%d\n", st.AppliedIndex)
	if st.ClusterID != "" {
		fmt.Fprintf(tw, "cluster id\t%s\n", st.ClusterID)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSUFFRAGE\tSTATE\tHTTP\tCLUSTER\tTERM\tCOMMIT\tAPPLIED\tCONTACT\tHEALTH")
	for _, m := range st.Members {
		h := health[m.ID]
		switch {
		case h == "" && !m.Reachable:
			h = "unreachable"
			if m.Error != "" {
				h += ": " + m.Error
			}
		case h == "":
			h = "unknown: no HTTP address"
		case h != "ready" && !m.Reachable && m.Error != "":
			h += " (" + m.Error + ")"
		case m.Reachable && m.Error != "":
			// Reachable and ready, yet not a member in fact: one that
			// holds another cluster's state, which Raft does not reach.
			h = "not in this cluster: " + m.Error
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.ID, m.Suffrage, memberState(m), dash(m.HTTPAddr), m.ClusterAddr,
			count(m.Term), count(m.CommitIndex), count(m.AppliedIndex), dash(m.LastContact), dash(h))
	}
	_ = tw.Flush()
}

func renderMembers(w io.Writer, members []cliMember) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSUFFRAGE\tSTATE\tREACHABLE\tCLUSTER\tHTTP")
	for _, m := range members {
		reachable := "yes"
		if !m.Reachable {
			reachable = "no"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", m.ID, m.Suffrage, memberState(m), reachable, m.ClusterAddr, dash(m.HTTPAddr))
	}
	_ = tw.Flush()
}

// memberState is the state the member reports, or "leader" for the one the
// answering node knows as leader when it reports none.
func memberState(m cliMember) string {
	if m.State == "" && m.Leader {
		return "leader"
	}
	return dash(m.State)
}
