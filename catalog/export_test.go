package catalog

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
