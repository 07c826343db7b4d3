package catalog

// SetReencodeMetadata turns the commit path's earlier encoding on or off
// (see reencodeMetadata), for BenchmarkCommitPath.
func SetReencodeMetadata(on bool) { reencodeMetadata.Store(on) }
