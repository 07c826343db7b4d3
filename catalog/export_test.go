package catalog

import (
	"context"
	"time"

	"github.com/floe-catalog/floe/fsm"
)

// SetReencodeMetadata turns the commit path's earlier encoding on or off
// (see reencodeMetadata), for BenchmarkCommitPath.
func SetReencodeMetadata(on bool) { reencodeMetadata.Store(on) }

// SetSkipWriteParse turns writeMetadata's parse of a new version off or
// on (see skipWriteParse), for BenchmarkCommitPath.
func SetSkipWriteParse(on bool) { skipWriteParse.Store(on) }

// Bounds on what one change may add, for the tests of their refusals.
const (
	MaxNewViewVersionID = maxNewViewVersionID
	MaxSchemasPerChange = maxSchemasPerChange
)

// ReadTableMetadata is readTableMetadata for the default warehouse's table
// ns.name, given the metadata location read a moment before; it returns
// the location of the file it read.
func (s *Server) ReadTableMetadata(ctx context.Context, ns []string, name, metadataLocation string) (string, error) {
	_, tm, err := s.readTableMetadata(ctx, fsm.Ident{Namespace: ns, Name: name}, fsm.Table{MetadataLocation: metadataLocation})
	if err != nil {
		return "", err
	}
	return tm.location, nil
}

// ForgetMetadata drops the metadata file at loc from the node's cache.
func (s *Server) ForgetMetadata(loc string) { s.cache.remove(loc) }

// SetAwaitReadFailures sets how long a synchronous purge's reads of its job
// may fail in a row before it answers, and returns a func restoring it.
func SetAwaitReadFailures(d time.Duration) (restore func()) {
	old := awaitReadFailures
	awaitReadFailures = d
	return func() { awaitReadFailures = old }
}
