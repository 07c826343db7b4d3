package storage_test

import (
	"testing"

	"github.com/floe-catalog/floe/internal/storage"
)

// The contract holds with each local write synced on its own too (the
// default groups concurrent writes: TestLocalContract).
func TestLocalContractSyncEachWrite(t *testing.T) {
	m := newLocal(t, storage.Config{LocalSyncEachWrite: true})
	testContract(t, m, "file://"+t.TempDir())
}
