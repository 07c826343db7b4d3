package main

import (
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/internal/storage"
	"github.com/floe-catalog/floe/purge"
)

// Named warehouses from the command line (NAME=URI pairs, or JSON) and
// from a configuration file (a mapping), and the mistakes each refuses.
func TestWarehousesSetting(t *testing.T) {
	c, err := parseConfig([]string{"--warehouses", "sales=s3://b/sales, ops=file:///srv/ops"}, nil, io.Discard)
	require.NoError(t, err)
	require.Len(t, c.warehouses, 2)
	assert.Equal(t, warehouseSpec{Name: "sales", Location: "s3://b/sales"}, c.warehouses[0])
	assert.Equal(t, warehouseSpec{Name: "ops", Location: "file:///srv/ops"}, c.warehouses[1])

	path := writeConfig(t, `
s3-endpoint: http://127.0.0.1:7070
s3-access-key-id: node-key
s3-secret-access-key: node-secret
warehouses:
  sales:
    location: s3://sales-bucket/wh
    allowed-locations: [s3://sales-bucket/wh, s3://sales-bucket/imports]
    s3-endpoint: http://127.0.0.1:7171
    s3-access-key-id: sales-key
    s3-secret-access-key: sales-secret
    s3-path-style: true
  ops:
    location: s3://ops-bucket
`)
	c, err = parseConfig([]string{"--config", path}, nil, io.Discard)
	require.NoError(t, err)
	require.Len(t, c.warehouses, 2)
	ops, sales := c.warehouses[0], c.warehouses[1]
	assert.Equal(t, "ops", ops.Name)
	assert.Equal(t, "sales", sales.Name)
	assert.Equal(t, []string{"s3://sales-bucket/wh", "s3://sales-bucket/imports"}, sales.AllowedLocations)
	sc := sales.storageConfig(c)
	assert.Equal(t, "http://127.0.0.1:7171", sc.S3Endpoint)
	assert.Equal(t, "sales-key", sc.S3AccessKeyID)
	assert.Equal(t, "sales-secret", sc.S3SecretAccessKey)
	assert.True(t, sc.S3PathStyle)
	oc := ops.storageConfig(c)
	assert.Equal(t, "http://127.0.0.1:7070", oc.S3Endpoint, "a warehouse without its own settings inherits the node's")
	assert.Equal(t, "node-key", oc.S3AccessKeyID)
	assert.False(t, oc.S3PathStyle)
	assert.NotContains(t, c.warehouseNames(), "sales-secret")
	assert.ElementsMatch(t, []string{"sales=s3://sales-bucket/wh", "ops=s3://ops-bucket"}, c.warehouseNames())
	assert.Equal(t, []string{c.Warehouse, "s3://ops-bucket", "s3://sales-bucket/wh", "s3://sales-bucket/imports"}, c.allowedEverywhere())

	for name, args := range map[string][]string{
		"no location":                              {"--warehouses", "sales"},
		"a bad location":                           {"--warehouses", "sales=http://x/y"},
		"a name with a slash":                      {"--warehouses", "a/b=s3://b/x"},
		"a name with a colon":                      {"--warehouses", "a:b=s3://b/x"},
		"a dot-dot name":                           {"--warehouses", `{"..":{"location":"s3://b/x"}}`},
		"a reserved name":                          {"--warehouses", "views=s3://b/x"},
		"the default's prefix":                     {"--warehouses", "floe=s3://b/x"},
		"a name twice":                             {"--warehouses", "a=s3://b/x,a=s3://b/y"},
		"an unknown JSON key":                      {"--warehouses", `{"a":{"location":"s3://b/x","bucket":"y"}}`},
		"a key id alone":                           {"--warehouses", `{"a":{"location":"s3://b/x","s3-access-key-id":"k"}}`},
		"a bad allowed location":                   {"--warehouses", `{"a":{"location":"s3://b/x","allowed-locations":["/tmp"]}}`},
		"malformed JSON":                           {"--warehouses", `{"a":`},
		"inside the default":                       {"--warehouse", "s3://b/wh", "--warehouses", "a=s3://b/wh/a"},
		"around the default":                       {"--warehouse", "s3://b/wh", "--warehouses", "a=s3://b"},
		"the default's location":                   {"--warehouse", "s3://b/wh", "--warehouses", "a=s3://b/wh/"},
		"inside another":                           {"--warehouses", "a=s3://b/x,c=s3://b/x/c"},
		"another's location":                       {"--warehouses", "a=s3://b/x,c=s3://b/x"},
		"credentials in an endpoint":               {"--warehouses", `{"a":{"location":"s3://b/x","s3-endpoint":"http://key:hidden-secret@127.0.0.1:9000"}}`},
		"credentials in the node's endpoint":       {"--s3-endpoint", "http://key:hidden-secret@127.0.0.1:9000"},
		"an unparseable endpoint with credentials": {"--s3-endpoint", "http://key:hidden-secret/with-slash@127.0.0.1:9000"},
	} {
		_, err := parseConfig(args, nil, io.Discard)
		var ue usageError
		assert.True(t, errors.As(err, &ue), "%s: %v", name, err)
		if err != nil {
			assert.NotContains(t, err.Error(), "hidden-secret", name)
		}
	}
	bad := writeConfig(t, "warehouses:\n  sales: s3://b/x\n")
	_, err = parseConfig([]string{"--config", bad}, nil, io.Discard)
	assert.ErrorContains(t, err, "warehouses")
}

// A purge job runs with its own warehouse's storage, even when warehouses
// share the node's endpoint and differ only in their keys: the bases the
// node gives the purge service carry each warehouse's name.
func TestPurgeStorageIsTheJobsWarehouses(t *testing.T) {
	path := writeConfig(t, `
warehouse: s3://node-bucket/wh
s3-endpoint: http://127.0.0.1:7070
s3-access-key-id: node-key
s3-secret-access-key: node-secret
warehouses:
  sales:
    location: s3://sales-bucket/wh
    s3-access-key-id: sales-key
    s3-secret-access-key: sales-secret
  ops:
    location: s3://ops-bucket/wh
`)
	c, err := parseConfig([]string{"--config", path}, nil, io.Discard)
	require.NoError(t, err)
	own, err := storage.New(storage.Config{S3Endpoint: c.S3Endpoint, S3Region: c.S3Region, S3AccessKeyID: c.S3AccessKeyID, S3SecretAccessKey: c.S3SecretAccessKey})
	require.NoError(t, err)
	named, err := openWarehouses(c)
	require.NoError(t, err)
	bases := purgeBases(c, own, named)
	get := purge.StorageFor(bases, 0)
	byName := map[string]*storage.Mux{"": own}
	for _, w := range named {
		byName[w.spec.Name] = w.objects
	}
	for _, wh := range []string{"", "sales", "ops"} {
		// What a drop in that warehouse records: its settings without
		// keys (the same for all three here).
		recorded := storage.WithoutSecrets(byName[wh].FileIOConfig(c.Warehouse))
		o, err := get(wh, recorded)
		require.NoError(t, err)
		assert.Same(t, byName[wh], o, "warehouse %q", wh)
	}
}
