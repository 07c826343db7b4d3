package purge

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/floe-catalog/floe/internal/storage"
)

// StorageFor returns a Config.Storage for a node whose own storage is base,
// configured as baseFileIO says (base.ClientConfig of the warehouse). Jobs
// capture the FileIO properties without credentials (storage.WithoutSecrets;
// jobs written by older releases may still carry them). A job whose
// properties, credentials aside, are the node's own (or empty: local files)
// uses base; any other set (the catalog was reconfigured since the drop)
// gets a storage.Mux built from them with the job's credentials if it has
// any, else this node's own, cached per distinct set.
func StorageFor(base Objects, baseFileIO map[string]string, deleteBatchSize int) func(map[string]string) (Objects, error) {
	var (
		mu    sync.Mutex
		built = map[string]Objects{}
	)
	public := storage.WithoutSecrets(baseFileIO)
	return func(props map[string]string) (Objects, error) {
		if len(props) == 0 || maps.Equal(storage.WithoutSecrets(props), public) {
			return base, nil
		}
		key := canonical(props)
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
			keyID, secret = baseFileIO["s3.access-key-id"], baseFileIO["s3.secret-access-key"]
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
