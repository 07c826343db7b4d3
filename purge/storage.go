package purge

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/floe-catalog/floe/internal/storage"
)

// Base is storage a node already has: its own, or a warehouse's, with the
// FileIO properties (Mux.FileIOConfig) it was built from.
type Base struct {
	// Warehouse names the warehouse: "" for the default one.
	Warehouse string
	Objects   Objects
	FileIO    map[string]string
}

// StorageFor returns a Config.Storage for a node whose own storage is
// bases[0], and whose other warehouses' storage are the rest. Jobs capture
// the FileIO properties without credentials (storage.WithoutSecrets; jobs
// written by older releases may still carry them), and name their table's
// warehouse. A job uses its warehouse's base, with that warehouse's
// credentials, when the base's properties, credentials aside, are the
// job's (or the job has none: local files): warehouses that share an
// endpoint and differ only in their keys are told apart by name. Failing
// that (the warehouse was removed or reconfigured since the drop), the
// first base whose properties are the job's; any other set gets a
// storage.Mux built from them with the job's credentials if it has any,
// else its warehouse's, else the first base's, cached per distinct set and
// warehouse. StorageFor panics without a base.
func StorageFor(bases []Base, deleteBatchSize int) func(warehouse string, fileIO map[string]string) (Objects, error) {
	if len(bases) == 0 {
		panic("purge: StorageFor needs a base")
	}
	var (
		mu    sync.Mutex
		built = map[string]Objects{}
	)
	publics := make([]map[string]string, len(bases))
	for i, b := range bases {
		publics[i] = storage.WithoutSecrets(b.FileIO)
	}
	return func(warehouse string, props map[string]string) (Objects, error) {
		own := -1
		for i, b := range bases {
			if b.Warehouse == warehouse {
				own = i
				break
			}
		}
		public := storage.WithoutSecrets(props)
		if own >= 0 && (len(props) == 0 || maps.Equal(public, publics[own])) {
			return bases[own].Objects, nil
		}
		if len(props) == 0 {
			return bases[0].Objects, nil
		}
		for i, p := range publics {
			if maps.Equal(public, p) {
				return bases[i].Objects, nil
			}
		}
		creds := bases[0].FileIO
		if own >= 0 {
			creds = bases[own].FileIO
		}
		key := warehouse + "\x00\x00" + canonical(props)
		mu.Lock()
		defer mu.Unlock()
		if o, ok := built[key]; ok {
			return o, nil
		}
		pathStyle, _ := strconv.ParseBool(props["s3.path-style-access"])
		if v, err := strconv.ParseBool(props["s3.force-virtual-addressing"]); err == nil && props["s3.path-style-access"] == "" {
			pathStyle = !v
		}
		keyID, secret := props["s3.access-key-id"], props["s3.secret-access-key"]
		if keyID == "" && secret == "" {
			keyID, secret = creds["s3.access-key-id"], creds["s3.secret-access-key"]
		}
		m, err := storage.New(storage.Config{
			S3Endpoint:        props["s3.endpoint"],
			S3Region:          props["s3.region"],
			S3AccessKeyID:     keyID,
			S3SecretAccessKey: secret,
			S3PathStyle:       pathStyle,
			DeleteBatchSize:   deleteBatchSize,
		})
		if err != nil {
			return nil, err
		}
		built[key] = m
		return m, nil
	}
}

func canonical(props map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(props)) {
		b.WriteString(k + "\x00" + props[k] + "\x00")
	}
	return b.String()
}

// The storage layer streams manifests to the walk (see Opener).
var _ Opener = (*storage.Mux)(nil)
