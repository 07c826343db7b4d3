package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/raftnode"
)

// clusterPage is the landing page: the cluster as this node sees it (GET
// /management/v1/cluster) with each member's /readyz, and the purge
// queue's counts. Admin only, like the operator API; other principals see
// where to go instead.
type clusterPage struct {
	Admin     bool
	Warehouse string
	Prefix    string
	// Named are the named warehouses, linked to their catalog pages.
	Named   []warehouseRow
	Err     string
	Status  raftnode.Status
	Members []memberRow
	Jobs    jobCounts
}

// memberRow is one member with its health: "ready", "not ready: REASON",
// "down: ERROR" or "unreachable".
type memberRow struct {
	raftnode.Member
	Self    bool
	Health  string
	Healthy bool
}

// jobCounts are the purge jobs by state.
type jobCounts struct {
	Pending, Running, Succeeded, Failed, Released int
}

func (s *Server) cluster(w http.ResponseWriter, r *http.Request) error {
	p := clusterPage{Warehouse: s.cfg.Warehouse, Prefix: s.cfg.Prefix}
	for _, wh := range s.warehouses[1:] {
		p.Named = append(p.Named, warehouseRow{Name: wh.name, Location: wh.location, Prefix: wh.prefix, Href: wh.catalogHref()})
	}
	ok, err := s.allowed(r, privAdmin, nil)
	if err != nil {
		return err
	}
	p.Admin = ok
	l := layout{Title: "Cluster", Content: &p}
	if ok {
		st, err := s.cfg.Cluster.Status(r.Context())
		if err != nil {
			p.Err = "cannot read the cluster status: " + err.Error()
		} else {
			p.Status = st
			p.Members = s.memberRows(r, st)
		}
		l.Stale, err = s.read(r.Context(), func(rd *fsm.Reader) error {
			counts, released := rd.PurgeJobCounts()
			p.Jobs = jobCounts{
				Pending: counts[fsm.JobPending], Running: counts[fsm.JobRunning],
				Succeeded: counts[fsm.JobSucceeded], Failed: counts[fsm.JobFailed], Released: released,
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	s.renderWith(w, r, http.StatusOK, "cluster", l, "cluster")
	return nil
}

// memberRows asks every member's /readyz, all at once; this node answers
// for itself without a request. A member this node cannot reach over the
// cluster port has no known HTTP address and is "unreachable".
func (s *Server) memberRows(r *http.Request, st raftnode.Status) []memberRow {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https" // the members serve what this node serves
	}
	rows := make([]memberRow, len(st.Members))
	var wg sync.WaitGroup
	for i, m := range st.Members {
		rows[i] = memberRow{Member: m, Self: m.ID == st.Self}
		switch {
		case rows[i].Self:
			if err := s.cfg.Cluster.Ready(); err != nil {
				rows[i].Health = "not ready: " + err.Error()
			} else {
				rows[i].Health, rows[i].Healthy = "ready", true
			}
		case probeAddr(m) == "":
			rows[i].Health = "unreachable"
		default:
			wg.Add(1)
			go func() {
				defer wg.Done()
				rows[i].Health = s.readyz(r.Context(), scheme+"://"+probeAddr(m))
				rows[i].Healthy = rows[i].Health == "ready"
			}()
		}
	}
	wg.Wait()
	return rows
}

// readyz asks the node at base for /readyz, once, without a token (the
// probes are open): "ready", "not ready: REASON", or "down: ERROR".
func (s *Server) readyz(ctx context.Context, base string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
	if err != nil {
		return "down: " + err.Error()
	}
	resp, err := s.cfg.HealthClient.Do(req)
	if err != nil {
		return "down: " + err.Error()
	}
	defer resp.Body.Close()
	var out struct {
		Reason string `json:"reason"`
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	_ = json.Unmarshal(body, &out)
	switch {
	case resp.StatusCode == http.StatusOK:
		return "ready"
	case out.Reason != "":
		return "not ready: " + out.Reason
	default:
		return fmt.Sprintf("not ready: %d", resp.StatusCode)
	}
}

// probeAddr is where to reach a member's HTTP API: its HTTP address, with
// the host of its cluster address when the HTTP one binds every interface.
func probeAddr(m raftnode.Member) string {
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
