package raftnode

import "errors"

// Errors of the membership changes (AddVoter, AddNonvoter, Remove,
// TransferLeadership), which run on the leader. The texts are what the
// operator API shows after them.
var (
	// ErrInvalidMember: the change does not name a member properly (an ID
	// and an address are required to add one). Nothing changed.
	ErrInvalidMember = errors.New("bad request")
	// ErrNoSuchMember: the configuration holds no member with the ID the
	// change names. Nothing changed.
	ErrNoSuchMember = errors.New("not found")
	// ErrUnavailable: no leader could take the change (none is known, or
	// the one asked is no longer leader), or a leadership transfer did not
	// complete. Retry later.
	ErrUnavailable = errors.New("unavailable")
)

// Member is one server in the Raft configuration, as seen from the node
// answering, plus what that server reports about itself when reachable.
type Member struct {
	ID          string `json:"id"`
	ClusterAddr string `json:"cluster-address"`
	HTTPAddr    string `json:"http-address,omitempty"`
	Suffrage    string `json:"suffrage"`
	Leader      bool   `json:"leader"`
	Reachable   bool   `json:"reachable"`
	State       string `json:"state,omitempty"`
	Term        uint64 `json:"term,omitempty"`
	CommitIndex uint64 `json:"commit-index,omitempty"`
	// AppliedIndex is the member's state machine applied index.
	AppliedIndex uint64 `json:"applied-index,omitempty"`
	// LastContact is how long ago the member last heard from the leader
	// ("0s" on the leader itself), as the member reports it.
	LastContact string `json:"last-contact,omitempty"`
	// ClusterID is the cluster identity the member holds, as it reports
	// it (see Status.ClusterID).
	ClusterID string `json:"cluster-id,omitempty"`
	Error     string `json:"error,omitempty"`
}

// Status is the cluster as seen from one node.
type Status struct {
	Self         string `json:"self"`
	LeaderID     string `json:"leader-id"`
	LeaderAddr   string `json:"leader-address"`
	Term         uint64 `json:"term"`
	CommitIndex  uint64 `json:"commit-index"`
	AppliedIndex uint64 `json:"applied-index"`
	// ClusterID is the identity of the cluster whose state the answering
	// node holds (fsm.SetClusterID); absent until a leader stamped one.
	// A cluster restored from a backup has one of its own.
	ClusterID string   `json:"cluster-id,omitempty"`
	Members   []Member `json:"members"`
}
