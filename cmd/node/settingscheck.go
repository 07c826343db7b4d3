package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floe-catalog/floe/fsm"
)

// Every node of a cluster must have the same storage settings: the
// catalog's prefix, its default warehouse and allowed locations, and the
// named warehouses with theirs. A node started without them (the add-node
// example copied without the storage flags) or with others would create
// tables in its own warehouse and refuse commits to everyone else's, while
// reporting ready. Each node therefore carries a fingerprint of its
// settings in its purge heartbeats (fsm.PurgeHeartbeat.Settings), and
// settingsCheck compares its own with those of the other live nodes: when
// more than half of them agree on other settings, this node is the odd
// one out. It is then not ready (/readyz 503) and answers every catalog
// request 503, naming the fix, until it is restarted with the cluster's
// settings. When the nodes disagree among themselves without such a
// majority (each node on its own default file:// warehouse, or half of a
// rolling change done) nothing is refused.

// storageFingerprint returns the fingerprint of the storage settings in
// cfg: a hash, so that heartbeats stay small and carry nothing secret
// (credentials and endpoints are not part of it: a node may reach the same
// bucket through its own endpoint).
func storageFingerprint(cfg config) string {
	type wh struct {
		Name     string   `json:"name"`
		Location string   `json:"location"`
		Allowed  []string `json:"allowed"`
	}
	sorted := func(l []string) []string {
		l = slices.Clone(l)
		slices.Sort(l)
		return l
	}
	all := []wh{{Name: cfg.Prefix, Location: cfg.Warehouse, Allowed: sorted(cfg.allowedLocations())}}
	named := make([]wh, 0, len(cfg.warehouses))
	for _, w := range cfg.warehouses {
		named = append(named, wh{Name: w.Name, Location: w.Location, Allowed: sorted(w.AllowedLocations)})
	}
	slices.SortFunc(named, func(a, b wh) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	b, _ := json.Marshal(append(all, named...))
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// settingsOutlier reports whether mine differs from the settings more than
// half of the other live nodes announce: nodes other than self whose last
// heartbeat is at most window old at nowMs and that sent a fingerprint.
// live is how many such nodes there are, agree how many of them share the
// most common fingerprint.
func settingsOutlier(mine, self string, nodes []fsm.PurgeNode, nowMs int64, window time.Duration) (outlier bool, agree, live int) {
	counts := map[string]int{}
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
	return live > 0 && common != mine && 2*agree > live, agree, live
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
			Help: "1 while this node's storage settings (prefix, warehouses, allowed locations) differ from those more than half of the other live nodes share; it then refuses catalog requests.",
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
				msg := fmt.Sprintf("this node's storage settings (--prefix, --warehouse, --allowed-locations, --warehouses) "+
					"differ from those %d of the %d other live nodes share; restart it with the cluster's settings", agree, live)
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
