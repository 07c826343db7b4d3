package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// ControlTimeout bounds one control request to a node (/readyz, cluster
// status) unless ClusterConfig.ControlTimeout says otherwise.
const ControlTimeout = 5 * time.Second

// Node is one floe process of a Cluster. Its command line is fixed when the
// cluster is laid out (NewCluster); every Start runs exactly the same one,
// with the same data directory. The embedded Process starts, stops, kills
// and pauses it.
type Node struct {
	*Process
	ID          string // n1, n2, …
	Index       int    // 0-based position in Cluster.Nodes
	HTTPAddr    string // 127.0.0.1:port
	ClusterAddr string // ip:port the node binds for Raft and RPC
	// Advertise is the node's --cluster-advertise address; "" when it
	// advertises ClusterAddr.
	Advertise string
	DataDir   string

	control *http.Client // shared by the cluster; bounded by the control timeout
}

// BaseURL is the node's HTTP root, without a trailing slash.
func (n *Node) BaseURL() string { return "http://" + n.HTTPAddr }

// Ready returns nil when the node answers GET /readyz with 200, and an
// error naming the node otherwise. One request, bounded by the cluster's
// control timeout.
func (n *Node) Ready(ctx context.Context) error {
	if err := getOK(ctx, n.control, n.BaseURL()+"/readyz"); err != nil {
		return fmt.Errorf("%s: %w", n.ID, err)
	}
	return nil
}

// WaitReady waits, at most timeout, until the node answers /readyz with
// 200; it gives up at once when the process exits.
func (n *Node) WaitReady(ctx context.Context, timeout time.Duration) error {
	return n.pollWhileRunning(ctx, timeout, n.Ready)
}

// ClusterStatus is the part of GET /management/v1/cluster the harness and
// the tools read.
type ClusterStatus struct {
	Self        string          `json:"self"`
	LeaderID    string          `json:"leader-id"`
	CommitIndex uint64          `json:"commit-index"`
	Members     []ClusterMember `json:"members"`
}

// ClusterMember is one member of ClusterStatus.
type ClusterMember struct {
	ID        string `json:"id"`
	HTTPAddr  string `json:"http-address"`
	Leader    bool   `json:"leader"`
	Reachable bool   `json:"reachable"`
}

// Status returns the node's view of the cluster: one request, bounded by
// the cluster's control timeout; any answer but 200 with a JSON body is an error.
func (n *Node) Status(ctx context.Context) (ClusterStatus, error) {
	var st ClusterStatus
	url := n.BaseURL() + "/management/v1/cluster"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return st, err
	}
	resp, err := n.control.Do(req)
	if err != nil {
		return st, fmt.Errorf("%s: %w", n.ID, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return st, fmt.Errorf("%s: GET %s: %w", n.ID, url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("%s: GET %s: %d %s", n.ID, url, resp.StatusCode, truncate(string(body), 300))
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return st, fmt.Errorf("%s: GET %s: %w", n.ID, url, err)
	}
	return st, nil
}

// RemoveMember asks n to remove the member id from the cluster
// (DELETE /management/v1/cluster/members/{id}); n forwards it to the leader
// when it is not the leader. A 503 (nothing done) is sent again until ctx
// ends; any other answer but 2xx is an error.
func (n *Node) RemoveMember(ctx context.Context, id string) error {
	url := n.BaseURL() + "/management/v1/cluster/members/" + id
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodDelete, url, nil)
		if err != nil {
			return err
		}
		resp, err := n.control.Do(req)
		if err != nil {
			return fmt.Errorf("%s: %w", n.ID, err)
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		switch {
		case resp.StatusCode/100 == 2:
			return nil
		case resp.StatusCode == http.StatusServiceUnavailable:
			// Nothing was done (no leader for a moment, say): sent
			// again, as a client resends a 503, until ctx ends.
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s: DELETE %s: %d %s", n.ID, url, resp.StatusCode, truncate(string(body), 300))
			case <-time.After(200 * time.Millisecond):
			}
		default:
			return fmt.Errorf("%s: DELETE %s: %d %s", n.ID, url, resp.StatusCode, truncate(string(body), 300))
		}
	}
}
