package raftnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/hashicorp/raft"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/admin"
	"github.com/floe-catalog/floe/transport"
)

var _ admin.Cluster = (*Node)(nil)

// RPC methods served on the cluster port. The set is fixed (method names
// are metric labels).
const (
	rpcPropose   = "propose"
	rpcReadIndex = "read_index"
	rpcInfo      = "info"
	rpcJoin      = "join"
	rpcRemove    = "remove"
	rpcTransfer  = "transfer"
)

// RemoteError codes, mapped back to this package's errors by the caller.
const (
	codeNotLeader      = "not_leader"
	codeNoLeader       = "no_leader"
	codeUnknownOutcome = "unknown_outcome"
	codeShutdown       = "shutdown"
	codeNotAccepted    = "not_accepted"
	codeBadRequest     = "bad_request"
	codeNotFound       = "not_found"
)

// toRemote turns a local error into a RemoteError whose code says what the
// caller can know.
func toRemote(err error) error {
	code := transport.CodeInternal
	switch {
	case errors.Is(err, ErrUnknownOutcome):
		code = codeUnknownOutcome
	case errors.Is(err, ErrNotLeader):
		code = codeNotLeader
	case errors.Is(err, ErrNoLeader):
		code = codeNoLeader
	case errors.Is(err, ErrShutdown):
		code = codeShutdown
	case errors.Is(err, raft.ErrEnqueueTimeout), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		code = codeNotAccepted
	case errors.Is(err, admin.ErrBadRequest):
		code = codeBadRequest
	case errors.Is(err, admin.ErrNotFound):
		code = codeNotFound
	}
	return &transport.RemoteError{Code: code, Message: err.Error()}
}

// fromRemote maps the error of a call to the leader. write says whether the
// call carried a command: then a lost answer is an unknown outcome.
func fromRemote(err error, write bool) error {
	var re *transport.RemoteError
	if errors.As(err, &re) {
		switch re.Code {
		case codeNotLeader:
			return fmt.Errorf("%w: leader changed: %s", ErrNotLeader, re.Message)
		case codeNoLeader:
			return fmt.Errorf("%w: %s", ErrNoLeader, re.Message)
		case codeShutdown:
			return fmt.Errorf("%w: leader is shutting down: %s", ErrNotLeader, re.Message)
		case codeUnknownOutcome:
			return fmt.Errorf("%w: %s", ErrUnknownOutcome, re.Message)
		case codeNotAccepted:
			return fmt.Errorf("raftnode: leader did not accept the command in time: %w: %s", context.DeadlineExceeded, re.Message)
		case codeBadRequest:
			return &remoteErr{sentinel: admin.ErrBadRequest, msg: re.Message}
		case codeNotFound:
			return &remoteErr{sentinel: admin.ErrNotFound, msg: re.Message}
		case transport.CodeDeadlineExceeded, transport.CodeCanceled:
			return fmt.Errorf("raftnode: leader gave up: %w: %s", context.DeadlineExceeded, re.Message)
		}
		if write {
			return fmt.Errorf("%w: leader failed: %s", ErrUnknownOutcome, re.Message)
		}
		return fmt.Errorf("raftnode: leader failed: %s", re.Message)
	}
	if errors.Is(err, transport.ErrOutcomeUnknown) {
		if write {
			return fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
		}
		return fmt.Errorf("%w: %w", ErrNoLeader, err)
	}
	// The request certainly did not reach the leader (dial failed).
	return fmt.Errorf("%w: %w", ErrNoLeader, err)
}

// remoteErr is an operator error the leader reported: its message already
// names the kind, so it is shown as is while still matching the sentinel.
type remoteErr struct {
	sentinel error
	msg      string
}

func (e *remoteErr) Error() string { return e.msg }
func (e *remoteErr) Unwrap() error { return e.sentinel }

// call sends one RPC to addr, unless this node is isolated.
func (n *Node) call(ctx context.Context, addr, method string, req, resp any) error {
	if n.layer.isolated.Load() {
		return fmt.Errorf("%w: %w", ErrNoLeader, errIsolated)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	out, err := n.rpc.Call(ctx, addr, method, body)
	if err != nil {
		return err
	}
	if resp == nil {
		return nil
	}
	return json.Unmarshal(out, resp)
}

// leaderAddr returns the leader's cluster address, or ErrNoLeader.
func (n *Node) leaderAddr() (string, error) {
	addr, id := n.raft.LeaderWithID()
	if id == "" || addr == "" {
		return "", ErrNoLeader
	}
	return string(addr), nil
}

type proposeRequest struct {
	Command []byte `json:"command"`
}

// forward sends an encoded command to the leader: one hop. The caller's
// deadline travels with it. If the leader turns out not to be the leader
// any more, nothing was appended (ErrNotLeader); a lost answer is
// ErrUnknownOutcome.
func (n *Node) forward(ctx context.Context, data []byte) (fsm.Result, error) {
	addr, err := n.leaderAddr()
	if err != nil {
		return fsm.Result{}, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, n.cfg.ApplyTimeout)
		defer cancel()
	}
	n.metrics.forwarded.Inc()
	var res fsm.Result
	if err := n.call(ctx, addr, rpcPropose, proposeRequest{Command: data}, &res); err != nil {
		return fsm.Result{}, fromRemote(err, true)
	}
	return res, nil
}

type readIndexResponse struct {
	Index uint64 `json:"index"`
}

// leaderReadIndex runs the leader's part of ReadIndex and returns the read
// index: every write acknowledged before the call is at or below it.
func (n *Node) leaderReadIndex(ctx context.Context) (uint64, error) {
	if n.raft.State() != raft.Leader {
		return 0, ErrNotLeader
	}
	// 2. Note the term: every later step must happen within this one
	// leadership, or its conclusions do not combine.
	term := n.raft.CurrentTerm()

	// 3. A new leader has every committed entry in its log but does not know
	// which of its entries are committed until it commits one of its own
	// term (Raft §5.4.2): until then its commit index can be below writes
	// an earlier leader acknowledged. A barrier is such an entry, and Raft
	// answers it only after the state machine has applied everything before
	// it. Once per term is enough: the commit index never goes back.
	if err := n.termBarrier(ctx, term); err != nil {
		return 0, err
	}

	// 4. The read index: every write acknowledged before this call is at or
	// below the commit index now, provided we are still the leader now
	// (step 5) in the same term (step 6).
	readIndex := n.raft.CommitIndex()

	// 5. Confirm leadership with a quorum (a heartbeat round started after
	// step 4). A leader cut off from the others keeps believing it leads
	// until its lease runs out, while a new leader on the other side may
	// already acknowledge writes; a quorum answering us means no other
	// leader of a higher term existed when it answered.
	if err := n.await(ctx, n.raft.VerifyLeader()); err != nil {
		return 0, readError(err)
	}

	// 6. If the term moved, steps 3 to 5 may describe different
	// leaderships (lost and regained in between): the read index could
	// predate another leader's writes.
	if now := n.raft.CurrentTerm(); now != term {
		return 0, fmt.Errorf("%w: term changed from %d to %d during the read", ErrNotLeader, term, now)
	}
	return readIndex, nil
}

// followerReadIndex asks the leader for a read index, then waits until this
// node's log has reached it, so that the wait for the state machine below
// knows which entries it must see.
func (n *Node) followerReadIndex(ctx context.Context) (uint64, error) {
	addr, err := n.leaderAddr()
	if err != nil {
		return 0, err
	}
	var resp readIndexResponse
	if err := n.call(ctx, addr, rpcReadIndex, struct{}{}, &resp); err != nil {
		return 0, fromRemote(err, false)
	}
	if err := n.waitLogReaches(ctx, resp.Index); err != nil {
		return 0, err
	}
	return resp.Index, nil
}

// waitLogReaches waits until Raft has handed every entry up to index to the
// state machine.
func (n *Node) waitLogReaches(ctx context.Context, index uint64) error {
	resp := readIndexResponse{Index: index}
	// raft.AppliedIndex passes an entry once Raft has handed it to the state
	// machine, so every entry up to the read index is then in the local log
	// (or compacted into a snapshot this node already applied).
	for wait := time.Millisecond; n.raft.AppliedIndex() < resp.Index; wait = min(2*wait, 20*time.Millisecond) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("raftnode: read: waiting for index %d: %w", resp.Index, ctx.Err())
		case <-n.ctx.Done():
			return ErrShutdown
		case <-time.After(wait):
		}
	}
	return nil
}

// nodeInfo is what a node reports about itself.
type nodeInfo struct {
	ID          string `json:"id"`
	ClusterAddr string `json:"cluster-addr"`
	HTTPAddr    string `json:"http-addr"`
	HasState    bool   `json:"has-state"`
	LeaderID    string `json:"leader-id"`
	LeaderAddr  string `json:"leader-addr"`
	State       string `json:"state"`
	Term        uint64 `json:"term"`
	CommitIndex uint64 `json:"commit-index"`
	Applied     uint64 `json:"applied-index"`
	LastContact string `json:"last-contact"`
}

func (n *Node) info() nodeInfo {
	leaderAddr, leaderID := n.raft.LeaderWithID()
	has, _ := raft.HasExistingState(n.logs, n.logs, n.snaps)
	lc := "0s"
	if n.raft.State() != raft.Leader {
		if t := n.raft.LastContact(); t.IsZero() {
			lc = "never"
		} else {
			lc = time.Since(t).Round(time.Millisecond).String()
		}
	}
	return nodeInfo{
		ID: string(n.id), ClusterAddr: n.Addr(), HTTPAddr: n.cfg.HTTPAddr, HasState: has,
		LeaderID: string(leaderID), LeaderAddr: string(leaderAddr), State: stateLabel(n.raft.State()),
		Term: n.raft.CurrentTerm(), CommitIndex: n.raft.CommitIndex(), Applied: n.fsm.AppliedIndex(), LastContact: lc,
	}
}

type memberRequest struct {
	ID    string `json:"id"`
	Addr  string `json:"addr"`
	Voter bool   `json:"voter"`
	// Forwarded marks a request a follower sent on to the leader: it is
	// not forwarded again (one hop).
	Forwarded bool `json:"forwarded,omitempty"`
}

// handleRPC serves the cluster RPC methods.
func (n *Node) handleRPC(ctx context.Context, method string, body []byte) ([]byte, error) {
	if n.layer.isolated.Load() {
		return nil, &transport.RemoteError{Code: codeNoLeader, Message: errIsolated.Error()}
	}
	var (
		out any
		err error
	)
	switch method {
	case rpcPropose:
		var req proposeRequest
		if err = json.Unmarshal(body, &req); err != nil {
			return nil, &transport.RemoteError{Code: codeBadRequest, Message: err.Error()}
		}
		if n.raft.State() != raft.Leader {
			return nil, toRemote(ErrNotLeader)
		}
		out, err = n.proposeLocal(ctx, req.Command)
	case rpcReadIndex:
		var idx uint64
		idx, err = n.leaderBatch.get(ctx)
		out = readIndexResponse{Index: idx}
	case rpcInfo:
		out = n.info()
	case rpcJoin:
		var req memberRequest
		if err = json.Unmarshal(body, &req); err != nil {
			return nil, &transport.RemoteError{Code: codeBadRequest, Message: err.Error()}
		}
		err = n.addServer(ctx, req.ID, req.Addr, req.Voter, !req.Forwarded)
	case rpcRemove:
		var req memberRequest
		if err = json.Unmarshal(body, &req); err != nil {
			return nil, &transport.RemoteError{Code: codeBadRequest, Message: err.Error()}
		}
		if req.Forwarded {
			err = n.removeLocal(ctx, req.ID)
		} else {
			err = n.Remove(ctx, req.ID)
		}
	case rpcTransfer:
		var req memberRequest
		if err = json.Unmarshal(body, &req); err != nil {
			return nil, &transport.RemoteError{Code: codeBadRequest, Message: err.Error()}
		}
		if req.Forwarded {
			err = n.transferLocal(ctx, req.ID)
		} else {
			err = n.TransferLeadership(ctx, req.ID)
		}
	default:
		return nil, &transport.RemoteError{Code: codeBadRequest, Message: "unknown method " + method}
	}
	if err != nil {
		return nil, toRemote(err)
	}
	return json.Marshal(out)
}

// onLeader runs op locally when this node leads, else sends method to the
// leader (one hop).
func (n *Node) onLeader(ctx context.Context, method string, req memberRequest, local func() error) error {
	if n.raft.State() == raft.Leader {
		return local()
	}
	addr, err := n.leaderAddr()
	if err != nil {
		return fmt.Errorf("%w: %w", admin.ErrUnavailable, err)
	}
	req.Forwarded = true
	if err := n.call(ctx, addr, method, req, nil); err != nil {
		err = fromRemote(err, true)
		if errors.Is(err, ErrNoLeader) || errors.Is(err, ErrNotLeader) {
			return fmt.Errorf("%w: %w", admin.ErrUnavailable, err)
		}
		return err
	}
	return nil
}

// AddVoter adds (or re-adds) a voting member. See addServer.
func (n *Node) AddVoter(ctx context.Context, id, addr string) error {
	return n.addServer(ctx, id, addr, true, true)
}

// AddNonvoter adds a member that replicates the log but does not vote.
func (n *Node) AddNonvoter(ctx context.Context, id, addr string) error {
	return n.addServer(ctx, id, addr, false, true)
}

// addServer adds a member on the leader. An existing member with the same ID
// and address is left as is (a node that lost its data and rejoins is caught
// up by the leader). A member holding the address under another ID is
// removed first; a member with the ID under another address is re-addressed.
func (n *Node) addServer(ctx context.Context, id, addr string, voter, forward bool) error {
	if id == "" || addr == "" {
		return fmt.Errorf("%w: id and address are required", admin.ErrBadRequest)
	}
	if n.raft.State() != raft.Leader {
		if !forward {
			return ErrNotLeader
		}
		return n.onLeader(ctx, rpcJoin, memberRequest{ID: id, Addr: addr, Voter: voter}, func() error {
			return n.addServer(ctx, id, addr, voter, false)
		})
	}
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return err
	}
	for _, s := range cf.Configuration().Servers {
		switch {
		case string(s.ID) == id && string(s.Address) == addr && (s.Suffrage == raft.Voter) == voter:
			return nil
		case string(s.ID) != id && string(s.Address) == addr:
			n.logger.Info("removing member that held the joining node's address", "old_id", string(s.ID), "address", addr)
			if err := n.await(ctx, n.raft.RemoveServer(s.ID, 0, n.enqueueTimeout(ctx))); err != nil {
				return fmt.Errorf("remove %s: %w", s.ID, err)
			}
		}
	}
	var f raft.IndexFuture
	if voter {
		f = n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, n.enqueueTimeout(ctx))
	} else {
		f = n.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(addr), 0, n.enqueueTimeout(ctx))
	}
	if err := n.await(ctx, f); err != nil {
		return fmt.Errorf("add %s at %s: %w", id, addr, err)
	}
	n.logger.Info("cluster member added", "id", id, "address", addr, "voter", voter)
	return nil
}

// Remove removes a member.
func (n *Node) Remove(ctx context.Context, id string) error {
	return n.onLeader(ctx, rpcRemove, memberRequest{ID: id}, func() error { return n.removeLocal(ctx, id) })
}

func (n *Node) removeLocal(ctx context.Context, id string) error {
	if n.raft.State() != raft.Leader {
		return ErrNotLeader
	}
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return err
	}
	if !slices.ContainsFunc(cf.Configuration().Servers, func(s raft.Server) bool { return string(s.ID) == id }) {
		return fmt.Errorf("%w: no member with id %q", admin.ErrNotFound, id)
	}
	if err := n.await(ctx, n.raft.RemoveServer(raft.ServerID(id), 0, n.enqueueTimeout(ctx))); err != nil {
		return fmt.Errorf("remove %s: %w", id, err)
	}
	n.logger.Info("cluster member removed", "id", id)
	return nil
}

// TransferLeadership hands leadership to the member id, or to any
// up-to-date voter when id is empty.
func (n *Node) TransferLeadership(ctx context.Context, id string) error {
	return n.onLeader(ctx, rpcTransfer, memberRequest{ID: id}, func() error { return n.transferLocal(ctx, id) })
}

func (n *Node) transferLocal(ctx context.Context, id string) error {
	if n.raft.State() != raft.Leader {
		return ErrNotLeader
	}
	var f raft.Future
	if id == "" {
		f = n.raft.LeadershipTransfer()
	} else {
		cf := n.raft.GetConfiguration()
		if err := cf.Error(); err != nil {
			return err
		}
		i := slices.IndexFunc(cf.Configuration().Servers, func(s raft.Server) bool { return string(s.ID) == id })
		if i < 0 {
			return fmt.Errorf("%w: no member with id %q", admin.ErrNotFound, id)
		}
		s := cf.Configuration().Servers[i]
		if s.ID == n.id {
			return nil
		}
		f = n.raft.LeadershipTransferToServer(s.ID, s.Address)
	}
	if err := n.await(ctx, f); err != nil {
		return fmt.Errorf("%w: leadership transfer: %w", admin.ErrUnavailable, err)
	}
	n.logger.Info("leadership transferred", "to", id)
	return nil
}

// readdress runs at start on a node that has Raft state. If the
// configuration records this node under another address (it was
// rescheduled with a new IP, or given --cluster-advertise), the leader can
// no longer reach it, so it cannot learn who leads from Raft itself: it asks
// the other members and the Join nodes for the leader and asks it to update
// its address. It gives up when a leader reaches it or it shuts down.
func (n *Node) readdress() {
	for attempt := 0; ; attempt++ {
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(2 * n.cfg.HeartbeatTimeout):
		}
		cf := n.raft.GetConfiguration()
		if cf.Error() != nil {
			continue
		}
		var recorded string
		candidates := append([]string{}, n.cfg.Join...)
		for _, s := range cf.Configuration().Servers {
			if s.ID == n.id {
				recorded = string(s.Address)
			} else {
				candidates = append(candidates, string(s.Address))
			}
		}
		if recorded == "" || recorded == n.Addr() {
			return // not a member (removed), or the address is right
		}
		if _, id := n.raft.LeaderWithID(); id != "" && n.raft.LastContact().After(n.openedAt) {
			return // the leader reaches us: the address was updated
		}
		for _, addr := range candidates {
			ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
			err := n.call(ctx, addr, rpcJoin, memberRequest{ID: string(n.id), Addr: n.Addr(), Voter: true}, nil)
			cancel()
			if err == nil {
				n.logger.Info("asked the leader to update this node's address", "old", recorded, "new", n.Addr(), "via", addr)
				break
			}
			n.logger.Debug("address update request failed", "via", addr, "error", err)
		}
	}
}

// Status reports the configuration as this node knows it, with what each
// reachable member says about itself.
func (n *Node) Status(ctx context.Context) (admin.Status, error) {
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return admin.Status{}, err
	}
	leaderAddr, leaderID := n.raft.LeaderWithID()
	st := admin.Status{
		Self: string(n.id), LeaderID: string(leaderID), LeaderAddr: string(leaderAddr),
		Term: n.raft.CurrentTerm(), CommitIndex: n.raft.CommitIndex(), AppliedIndex: n.fsm.AppliedIndex(),
		Members: []admin.Member{},
	}
	for _, s := range cf.Configuration().Servers {
		m := admin.Member{ID: string(s.ID), ClusterAddr: string(s.Address), Suffrage: s.Suffrage.String(), Leader: s.ID == leaderID}
		var info nodeInfo
		var err error
		if s.ID == n.id {
			info = n.info()
		} else {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			err = n.call(cctx, string(s.Address), rpcInfo, struct{}{}, &info)
			cancel()
		}
		if err != nil {
			m.Error = err.Error()
		} else {
			m.Reachable = true
			m.HTTPAddr, m.State, m.Term, m.CommitIndex, m.AppliedIndex, m.LastContact =
				info.HTTPAddr, info.State, info.Term, info.CommitIndex, info.Applied, info.LastContact
		}
		st.Members = append(st.Members, m)
	}
	return st, nil
}

// formCluster runs at start. A node with Raft state is already a member:
// it only makes sure its recorded address is current (readdress).
// Otherwise, given Join addresses, until it is a
// member or shut down, it asks the Join nodes about themselves: if one knows
// a leader, it asks to be added as a voter; with BootstrapExpect, once it
// reaches enough nodes and none has state, it bootstraps them all (every
// node computes the same configuration, so several bootstrapping is safe).
func (n *Node) formCluster() {
	defer n.wg.Done()
	if has, err := raft.HasExistingState(n.logs, n.logs, n.snaps); err != nil || has {
		n.readdress()
		return
	}
	if len(n.cfg.Join) == 0 {
		return
	}
	log := n.logger.With("join", n.cfg.Join, "bootstrap_expect", n.cfg.BootstrapExpect)
	log.Info("joining cluster")
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			select {
			case <-n.ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
		if _, id := n.raft.LeaderWithID(); id != "" {
			log.Info("cluster joined", "leader_id", string(id))
			return
		}
		peers := map[string]nodeInfo{}
		var leader string
		for _, addr := range n.cfg.Join {
			if addr == n.Addr() {
				continue
			}
			ctx, cancel := context.WithTimeout(n.ctx, time.Second)
			var info nodeInfo
			err := n.call(ctx, addr, rpcInfo, struct{}{}, &info)
			cancel()
			if err != nil {
				log.Debug("join address not reachable", "address", addr, "error", err)
				continue
			}
			if info.ID == string(n.id) {
				continue
			}
			peers[info.ID] = info
			if info.LeaderID != "" {
				leader = addr
			}
		}
		if leader != "" {
			ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
			err := n.call(ctx, leader, rpcJoin, memberRequest{ID: string(n.id), Addr: n.Addr(), Voter: true}, nil)
			cancel()
			if err != nil {
				log.Warn("join request failed; retrying", "via", leader, "error", err)
				continue
			}
			log.Info("join request accepted", "via", leader)
			continue // returns once a leader is seen
		}
		if n.cfg.BootstrapExpect <= 0 || len(peers)+1 < n.cfg.BootstrapExpect {
			continue
		}
		servers := []raft.Server{{ID: n.id, Address: raft.ServerAddress(n.Addr()), Suffrage: raft.Voter}}
		fresh := true
		for _, p := range peers {
			fresh = fresh && !p.HasState
			servers = append(servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.ClusterAddr), Suffrage: raft.Voter})
		}
		if !fresh {
			continue // a cluster is forming or electing: wait for its leader
		}
		sort.Slice(servers, func(i, j int) bool { return servers[i].ID < servers[j].ID })
		if err := n.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			log.Warn("bootstrap failed; retrying", "error", err)
			continue
		}
		log.Info("bootstrapped new cluster", "servers", len(servers))
	}
}
