package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/floe-catalog/floe/internal/harness"
)

// readTimeout bounds one loadTable request.
const readTimeout = 5 * time.Second

// maxReadsPerClient bounds a client's loop independently of the clock.
const maxReadsPerClient = 50_000_000

// ReadResult is one read throughput measurement.
type ReadResult struct {
	Targets []string // node IDs the clients spread their requests over
	Clients int
	Elapsed time.Duration // from the start signal until the last client stopped
	OK      int           // 200 answers with the body fully read
	Errors  int
	// FirstError describes the first failed request (node, status, body or
	// transport error); empty when none failed.
	FirstError string
	P50, P99   time.Duration // latency of successful requests
	// ServerCPU and DriverCPU are the CPU time of the nodes and of the
	// driver (the clients) over the measurement, warm-up included;
	// LeaderCPU is the leader's share of ServerCPU.
	ServerCPU, DriverCPU, LeaderCPU time.Duration
	// Leader is the leader's node ID, LeaderCPUs how many CPUs it could
	// use (its pinned set, or every CPU).
	Leader     string
	LeaderCPUs int
	// Machine is how busy the whole machine was, warm-up included.
	Machine MachineLoad
}

// CPUPerRead is the nodes' CPU time per successful read.
func (r ReadResult) CPUPerRead() time.Duration {
	if r.OK == 0 {
		return 0
	}
	return r.ServerCPU / time.Duration(r.OK)
}

// LeaderBusy is the share of the leader's CPUs it used over the
// measurement: near 1 means the leader was saturated.
func (r ReadResult) LeaderBusy() float64 {
	if r.Elapsed <= 0 || r.LeaderCPUs <= 0 {
		return 0
	}
	return r.LeaderCPU.Seconds() / r.Elapsed.Seconds() / float64(r.LeaderCPUs)
}

// PerSecond is the rate of successful requests.
func (r ReadResult) PerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.OK) / r.Elapsed.Seconds()
}

// SetupTable creates namespace ns and table t with one long column through
// the given node, then checks that every node serves loadTable for it.
func (c *Cluster) SetupTable(ctx context.Context, cl *http.Client, via *harness.Node, ns, table string) error {
	if st, body, err := createNamespace(ctx, cl, via, ns); err != nil || st != http.StatusOK {
		return fmt.Errorf("create namespace %s via %s: status %d, body %s, error %v", ns, via.ID, st, body, err)
	}
	body := fmt.Sprintf(`{"name":%q,"schema":{"type":"struct","schema-id":0,"fields":[{"id":1,"name":"id","type":"long","required":true}]}}`, table)
	ctx2, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx2, http.MethodPost, via.BaseURL()+"/v1/namespaces/"+ns+"/tables", bytes.NewReader([]byte(body)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := cl.Do(req)
	if err != nil {
		return fmt.Errorf("create table %s.%s via %s: %w", ns, table, via.ID, err)
	}
	rb, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("create table %s.%s via %s: status %d, body %s", ns, table, via.ID, resp.StatusCode, truncate(string(rb), 300))
	}
	for _, n := range c.Nodes {
		if d, err := loadTable(ctx, cl, n, tablePath(ns, table)); err != nil {
			return fmt.Errorf("loadTable on %s after create: %w (took %s)", n.ID, err, d)
		}
	}
	return nil
}

func tablePath(ns, table string) string { return "/v1/namespaces/" + ns + "/tables/" + table }

// loadTable sends one GET for path to n and reads the whole body. Any answer
// other than 200 is an error naming the node, the status and the body.
func loadTable(ctx context.Context, cl *http.Client, n *harness.Node, path string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.BaseURL()+path, nil)
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	resp, err := cl.Do(req)
	if err != nil {
		return time.Since(t0), fmt.Errorf("GET %s on %s: %w", path, n.ID, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return time.Since(t0), fmt.Errorf("GET %s on %s: status %d, body %s", path, n.ID, resp.StatusCode, truncate(string(b), 300))
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return time.Since(t0), fmt.Errorf("GET %s on %s: reading body: %w", path, n.ID, err)
	}
	return time.Since(t0), nil
}

// Reads runs clients concurrent loops of loadTable(path) for duration. Each
// client has its own keep-alive HTTP client and sends its i-th request to
// targets[(client+i) % len(targets)]. Before the clock starts every client
// sends one request to every target (warming its connections); a failure
// there is an error. Failures during the measurement are counted, not fatal.
func Reads(ctx context.Context, targets []*harness.Node, path string, clients int, duration time.Duration) (ReadResult, error) {
	res := ReadResult{Clients: clients}
	for _, n := range targets {
		res.Targets = append(res.Targets, n.ID)
	}
	if len(targets) == 0 || clients < 1 || duration <= 0 {
		return res, fmt.Errorf("reads: %d targets, %d clients, duration %s", len(targets), clients, duration)
	}

	type clientResult struct {
		ok, errs int
		firstErr string
		lat      []time.Duration
		warmErr  error
	}
	results := make([]clientResult, clients)
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	var stopAt time.Time // written before start is closed, read after
	for i := range clients {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			cr := &results[i]
			cl := harness.NewHTTPClient(2, 0)
			defer cl.CloseIdleConnections()
			for _, n := range targets {
				if _, err := loadTable(ctx, cl, n, path); err != nil {
					cr.warmErr = err
					break
				}
			}
			ready.Done()
			<-start
			if cr.warmErr != nil {
				return
			}
			cr.lat = make([]time.Duration, 0, 4096)
			for j := 0; j < maxReadsPerClient; j++ {
				if ctx.Err() != nil || !time.Now().Before(stopAt) {
					return
				}
				n := targets[(i+j)%len(targets)]
				d, err := loadTable(ctx, cl, n, path)
				if err != nil {
					cr.errs++
					if cr.firstErr == "" {
						cr.firstErr = err.Error()
					}
					continue
				}
				cr.ok++
				cr.lat = append(cr.lat, d)
			}
		}()
	}
	ready.Wait()
	t0 := time.Now()
	stopAt = t0.Add(duration)
	close(start)
	done.Wait()
	res.Elapsed = time.Since(t0)

	var lat []time.Duration
	for _, cr := range results {
		if cr.warmErr != nil {
			return res, fmt.Errorf("reads warm-up: %w", cr.warmErr)
		}
		res.OK += cr.ok
		res.Errors += cr.errs
		if res.FirstError == "" {
			res.FirstError = cr.firstErr
		}
		lat = append(lat, cr.lat...)
	}
	res.P50, res.P99 = percentile(lat, 0.50), percentile(lat, 0.99)
	if err := ctx.Err(); err != nil {
		return res, err
	}
	return res, nil
}
