package main

import (
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floe-catalog/floe/catalog"
	"github.com/floe-catalog/floe/internal/raftnode"
	"github.com/floe-catalog/floe/internal/storage"
	"github.com/floe-catalog/floe/internal/vending"
)

// newCatalogHandler builds the Iceberg REST catalog served under /v1/. The
// Raft node is its store (Propose and linearizable Read); objects holds the
// table files; purger runs the purge jobs of synchronous drops taken here.
func newCatalogHandler(cfg config, logger *slog.Logger, reg prometheus.Registerer, node *raftnode.Node, objects *storage.Mux, named []namedWarehouse, purger catalog.Purger, sec *security, stopping <-chan struct{}) (http.Handler, error) {
	// One vendor per warehouse, over the warehouse's own storage settings;
	// their metrics carry the warehouse's prefix.
	newVendor := func(name string, m *storage.Mux) (*vending.Vendor, error) {
		return vending.New(vending.Config{
			Mode: cfg.VendCredentials, AWS: m.AWSConfig(), STSEndpoint: cfg.VendSTSEndpoint,
			RoleARN: cfg.VendRoleARN, ExternalID: cfg.VendExternalID, Duration: cfg.VendDuration,
			Logger:     logger.With("component", "vending", "warehouse", name),
			Registerer: prometheus.WrapRegistererWith(prometheus.Labels{"warehouse": name}, reg),
		})
	}
	vendor, err := newVendor(cfg.Prefix, objects)
	if err != nil {
		return nil, err
	}
	var vendorOf func(string, *storage.Mux) (*vending.Vendor, error)
	if cfg.VendCredentials != vending.ModeOff {
		vendorOf = newVendor
	}
	warehouses, err := catalogWarehouses(named, vendorOf)
	if err != nil {
		return nil, err
	}
	catCfg := catalog.Config{
		Warehouse:           cfg.Warehouse,
		AllowedLocations:    cfg.allowedLocations(),
		Prefix:              cfg.Prefix,
		Warehouses:          warehouses,
		Logger:              logger,
		Registerer:          reg,
		MaxBodyBytes:        cfg.MaxBodyBytes,
		MetadataCacheBytes:  cfg.MetadataCacheBytes,
		IdempotencyLifetime: cfg.idempotencyLifetime,
		IdempotencyDisabled: !cfg.Idempotency,
		Purger:              purger,
		Stopping:            stopping,
		Auditor:             sec,
	}
	if cfg.MetadataCacheBytes == 0 {
		catCfg.MetadataCacheSize = -1 // no cache
	}
	if sec.on {
		catCfg.Authorizer = authorizer{sec}
	}
	switch cfg.VendCredentials {
	case vending.ModeStaticKeys:
		logger.Warn("--vend-credentials=static-keys: every client that asks (with authorization on, every principal " +
			"with write on the whole catalog) gets this node's own S3 keys, unscoped and unexpiring; " +
			"use it for development only, and --vend-credentials=sts in production")
		catCfg.Vendor = vendor
	case vending.ModeSTS:
		catCfg.Vendor = vendor
	}
	srv, err := catalog.New(catCfg, node, objects)
	if err != nil {
		return nil, err
	}
	// Expired Idempotency-Key records are pruned by the leader.
	node.OnLeadership(srv.PruneIdempotency)
	return srv.Handler(), nil
}
