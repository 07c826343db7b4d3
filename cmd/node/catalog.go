package main

import (
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floe-catalog/floe/catalog"
	"github.com/floe-catalog/floe/internal/raftnode"
	"github.com/floe-catalog/floe/internal/storage"
)

// newCatalogHandler builds the Iceberg REST catalog served under /v1/. The
// Raft node is its store (Propose and linearizable Read); objects holds the
// table files.
func newCatalogHandler(cfg config, logger *slog.Logger, reg prometheus.Registerer, node *raftnode.Node, objects *storage.Mux) (http.Handler, error) {
	srv, err := catalog.New(catalog.Config{
		Warehouse:    cfg.Warehouse,
		Prefix:       cfg.Prefix,
		Logger:       logger,
		Registerer:   reg,
		MaxBodyBytes: cfg.MaxBodyBytes,
	}, node, objects)
	if err != nil {
		return nil, err
	}
	return srv.Handler(), nil
}
