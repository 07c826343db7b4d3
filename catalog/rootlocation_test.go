package catalog

import (
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/internal/storage"
)

// A warehouse or allowed location with an empty path segment would make
// every location below it one the catalog refuses: refused at start, with
// the reason, instead of a 400 on every create that blames the client.
func TestRootLocationsWithAnEmptySegmentAreRefused(t *testing.T) {
	objects, err := storage.New(storage.Config{})
	require.NoError(t, err)
	wh := "file://" + filepath.ToSlash(t.TempDir())
	for name, cfg := range map[string]Config{
		"warehouse":        {Warehouse: "s3://b//wh"},
		"warehouse's end":  {Warehouse: "s3://b/wh//"},
		"allowed location": {Warehouse: wh, AllowedLocations: []string{wh, "s3://b/x//y"}},
		"named warehouse":  {Warehouse: wh, Warehouses: []Warehouse{{Name: "w2", Location: "s3://b//w2"}}},
	} {
		cfg.Registerer = prometheus.NewRegistry()
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		_, err := New(cfg, nil, objects)
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), "empty path segment", name)
	}
	assert.NoError(t, checkRootLocation("s3://b/wh/"), "one trailing slash is fine")
	assert.NoError(t, checkRootLocation(wh))
	assert.NoError(t, checkRootLocation("s3://b/"), "a bucket root")
}
