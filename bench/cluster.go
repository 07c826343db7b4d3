package bench

import (
	"context"
	"log/slog"

	"github.com/floe-catalog/floe/internal/harness"
)

// Cluster is a floe cluster of real processes on loopback
// (internal/harness) with the driver's measurements as methods.
type Cluster struct {
	*harness.Cluster
}

// startCluster starts the cluster cc describes and waits until it is
// healthy (harness.StartCluster); the nodes' logs mark each start as
// floebench's. On error nothing is left running.
func startCluster(ctx context.Context, cc harness.ClusterConfig, log *slog.Logger) (*Cluster, error) {
	cc.Tool = "floebench"
	c, err := harness.StartCluster(ctx, cc, log)
	if err != nil {
		return nil, err
	}
	return &Cluster{Cluster: c}, nil
}

// resume starts every stopped node again with its command line and waits
// until the cluster is healthy.
func (c *Cluster) resume(ctx context.Context) error {
	if err := c.Start(); err != nil {
		return err
	}
	return c.WaitHealthy(ctx, harness.HealthyTimeout)
}
