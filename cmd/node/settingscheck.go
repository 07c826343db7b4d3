package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floe-catalog/floe/fsm"
)

// Every node of a cluster must serve the same default warehouse: the
// catalog's prefix and its --warehouse location. A node started without
// them (the add-node example copied without the storage flags) or with
// others would create tables in a warehouse of its own and refuse commits
// to everyone else's, while reporting ready. Each node therefore carries a
// fingerprint of the two in its purge heartbeats
// (fsm.PurgeHeartbeat.Settings), and settingsCheck counts the live nodes'
// fingerprints, its own included: when more than half of all live nodes
// share one other than this node's, this node is the odd one out. It is
// then not ready (/readyz 503) and answers every catalog request 503,
// naming the fix, until it is restarted with the cluster's settings.
// Without such a majority (nodes split evenly, each node on its own default
// file:// warehouse) nothing is refused, so a cluster never refuses on
// every node at once.
//
// Named warehouses and allowed locations are left out: they are added,
// widened and retired by a rolling restart (docs/operations.md), during
// which the nodes differ by design. Changing --warehouse or --prefix of a
// running cluster is not a rolling change: the first nodes restarted with
// the new value are refused until most nodes have it.

// storageFingerprint returns the fingerprint of the default warehouse in
// cfg: a hash, so that heartbeats stay small (credentials and endpoints
// are not part of it: a node may reach the same bucket through its own
// endpoint).
func storageFingerprint(cfg config) string {
	b, _ := json.Marshal([]string{cfg.Prefix, cfg.Warehouse})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// settingsOutlier reports whether more than half of all live nodes, this
// one (self, with mine) included, share a fingerprint other than mine. A
// node other than self is live when its last heartbeat is at most window
// old at nowMs and it sent a fingerprint (older binaries send none). live
// counts the live nodes, self included; agree how many share the most
// common fingerprint.
func settingsOutlier(mine, self string, nodes []fsm.PurgeNode, nowMs int64, window time.Duration) (outlier bool, agree, live int) {
	counts := map[string]int{mine: 1}
	live = 1
	for _, n := range nodes {
		if n.Node == self || n.Settings == "" || nowMs-n.AtMs > window.Milliseconds() {
			continue
		}
		live++
		counts[n.Settings]++
	}
	var common string
	for s, c := range counts {
		if c > agree || (c == agree && s < common) {
			common, agree = s, c
		}
	}
	return common != mine && 2*agree > live, agree, live
}

// settingsCheck runs the comparison every settingsCheckEvery.
type settingsCheck struct {
	mine   string
	self   string
	window time.Duration
	read   func(fn func(*fsm.Reader) error) error // the local replica
	log    *slog.Logger
	gauge  prometheus.Gauge
	// outlier holds the reason while this node's settings differ.
	outlier atomic.Pointer[string]
}

// settingsCheckEvery spaces the checks; the Error log repeats every
// settingsWarnEvery while the difference lasts.
const (
	settingsCheckEvery = 5 * time.Second
	settingsWarnEvery  = time.Minute
)

func newSettingsCheck(cfg config, self string, read func(fn func(*fsm.Reader) error) error, log *slog.Logger, reg prometheus.Registerer) *settingsCheck {
	c := &settingsCheck{
		mine: storageFingerprint(cfg), self: self, read: read, log: log,
		// A heartbeat goes every third of the timeout: a node silent for
		// twice the timeout is not counted.
		window: 2 * cfg.PurgeHeartbeatTimeout,
		gauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "floe_storage_settings_mismatch",
			Help: "1 while this node's default warehouse (prefix, location) differs from the one more than half of the live nodes share; it then refuses catalog requests.",
		}),
	}
	reg.MustRegister(c.gauge)
	return c
}

// run checks until ctx ends.
func (c *settingsCheck) run(ctx context.Context) {
	t := time.NewTicker(settingsCheckEvery)
	defer t.Stop()
	var warned time.Time
	for {
		var nodes []fsm.PurgeNode
		if err := c.read(func(r *fsm.Reader) error { nodes = r.PurgeNodes(); return nil }); err == nil {
			outlier, agree, live := settingsOutlier(c.mine, c.self, nodes, time.Now().UnixMilli(), c.window)
			if outlier {
				msg := fmt.Sprintf("this node's default warehouse (--prefix, --warehouse) differs from the one %d of the %d live nodes "+
					"share; restart it with the cluster's settings", agree, live)
				if c.outlier.Swap(&msg) == nil || time.Since(warned) >= settingsWarnEvery {
					warned = time.Now()
					c.log.Error("storage settings differ from the cluster's; refusing catalog requests", "agree", agree, "live", live,
						"fingerprint", c.mine)
				}
				c.gauge.Set(1)
			} else if c.outlier.Swap(nil) != nil {
				c.log.Info("storage settings match the cluster's again")
				c.gauge.Set(0)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// err is non-nil while this node's settings differ from the cluster's.
func (c *settingsCheck) err() error {
	if msg := c.outlier.Load(); msg != nil {
		return fmt.Errorf("%s", *msg)
	}
	return nil
}

// readiness wraps r: not ready while the settings differ.
func (c *settingsCheck) readiness(r readiness) readiness { return settingsReadiness{r, c} }

type settingsReadiness struct {
	r readiness
	c *settingsCheck
}

func (s settingsReadiness) Ready() error {
	if err := s.c.err(); err != nil {
		return err
	}
	return s.r.Ready()
}

// guard wraps the catalog's handler: 503 while the settings differ.
func (c *settingsCheck) guard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := c.err(); err != nil {
			w.Header().Set("Retry-After", "5")
			writeError(w, http.StatusServiceUnavailable, "ServiceUnavailableException", err.Error())
			return
		}
		h.ServeHTTP(w, r)
	})
}
