package purge

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/internal/storage"
)

type nopObjects struct{}

func (nopObjects) Read(context.Context, string) ([]byte, error)  { return nil, nil }
func (nopObjects) Delete(context.Context, []string) (int, error) { return 0, nil }

// A job's FileIO properties carry no credentials; the node's own storage
// serves every job whose other settings match the node's, and a job for
// other settings gets a client with the node's credentials.
func TestStorageForIgnoresCredentials(t *testing.T) {
	base := nopObjects{}
	node := map[string]string{"s3.endpoint": "http://127.0.0.1:9", "s3.region": "r", "s3.access-key-id": "AK", "s3.secret-access-key": "SK"}
	get := StorageFor([]Base{{Objects: base, FileIO: node}}, 10)

	o, err := get("", storage.WithoutSecrets(node))
	require.NoError(t, err)
	assert.Equal(t, base, o, "the node's own settings without credentials")
	o, err = get("", node)
	require.NoError(t, err)
	assert.Equal(t, base, o, "an older job that still carries them")
	o, err = get("", map[string]string{"s3.endpoint": "http://127.0.0.1:10", "s3.region": "r"})
	require.NoError(t, err)
	assert.NotEqual(t, base, o, "other settings: a client of their own")
	assert.Empty(t, storage.WithoutSecrets(map[string]string{"s3.secret-access-key": "x", "s3.session-token": "y", "S3.Access-Key-Id": "z"}))
}

type namedObjects struct {
	nopObjects
	name string
}

// With several warehouses, a job goes to the storage of the warehouse whose
// settings it recorded, with that warehouse's credentials.
func TestStorageForPicksTheWarehouse(t *testing.T) {
	own, sales := namedObjects{name: "own"}, namedObjects{name: "sales"}
	get := StorageFor([]Base{
		{Objects: own, FileIO: map[string]string{"s3.endpoint": "http://127.0.0.1:9", "s3.access-key-id": "AK", "s3.secret-access-key": "SK"}},
		{Warehouse: "sales", Objects: sales, FileIO: map[string]string{"s3.endpoint": "http://127.0.0.2:9", "s3.access-key-id": "AK2", "s3.secret-access-key": "SK2"}},
	}, 10)
	o, err := get("sales", map[string]string{"s3.endpoint": "http://127.0.0.2:9"})
	require.NoError(t, err)
	assert.Equal(t, sales, o)
	o, err = get("", map[string]string{"s3.endpoint": "http://127.0.0.1:9"})
	require.NoError(t, err)
	assert.Equal(t, own, o)
	o, err = get("", nil)
	require.NoError(t, err)
	assert.Equal(t, own, o, "local files: the node's own")
	o, err = get("sales", nil)
	require.NoError(t, err)
	assert.Equal(t, sales, o, "local files of a named warehouse: its own")
	o, err = get("gone", map[string]string{"s3.endpoint": "http://127.0.0.2:9"})
	require.NoError(t, err)
	assert.Equal(t, sales, o, "a warehouse removed since the drop: the one with its settings")
}

// Warehouses on one endpoint that differ only in their keys: a job uses
// its own warehouse's storage (its keys), never the first with the same
// settings.
func TestStorageForTellsWarehousesOnOneEndpointApart(t *testing.T) {
	own, sales, ops := namedObjects{name: "own"}, namedObjects{name: "sales"}, namedObjects{name: "ops"}
	at := func(keyID string) map[string]string {
		return map[string]string{"s3.endpoint": "http://127.0.0.1:9", "s3.region": "r", "s3.access-key-id": keyID, "s3.secret-access-key": keyID + "-secret"}
	}
	get := StorageFor([]Base{
		{Objects: own, FileIO: at("AK")},
		{Warehouse: "sales", Objects: sales, FileIO: at("AK-SALES")},
		{Warehouse: "ops", Objects: ops, FileIO: at("AK-OPS")},
	}, 10)
	for wh, want := range map[string]namedObjects{"": own, "sales": sales, "ops": ops} {
		o, err := get(wh, storage.WithoutSecrets(at("AK")))
		require.NoError(t, err)
		assert.Equal(t, want, o, "warehouse %q", wh)
	}
}
