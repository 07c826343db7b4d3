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

	o, err := get(storage.WithoutSecrets(node))
	require.NoError(t, err)
	assert.Equal(t, base, o, "the node's own settings without credentials")
	o, err = get(node)
	require.NoError(t, err)
	assert.Equal(t, base, o, "an older job that still carries them")
	o, err = get(map[string]string{"s3.endpoint": "http://127.0.0.1:10", "s3.region": "r"})
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
		{Objects: sales, FileIO: map[string]string{"s3.endpoint": "http://127.0.0.2:9", "s3.access-key-id": "AK2", "s3.secret-access-key": "SK2"}},
	}, 10)
	o, err := get(map[string]string{"s3.endpoint": "http://127.0.0.2:9"})
	require.NoError(t, err)
	assert.Equal(t, sales, o)
	o, err = get(map[string]string{"s3.endpoint": "http://127.0.0.1:9"})
	require.NoError(t, err)
	assert.Equal(t, own, o)
	o, err = get(nil)
	require.NoError(t, err)
	assert.Equal(t, own, o, "local files: the node's own")
}
