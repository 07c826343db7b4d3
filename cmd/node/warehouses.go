package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/floe-catalog/floe/catalog"
	"github.com/floe-catalog/floe/internal/storage"
	"github.com/floe-catalog/floe/internal/vending"
	"github.com/floe-catalog/floe/purge"
)

// warehousesFlag names the setting that defines the named warehouses.
const warehousesFlag = "warehouses"

// warehouseSpec is one named warehouse of --warehouses: its storage root,
// its allowed locations, and its S3 settings where they differ from the
// node's own (--s3-*), which it inherits otherwise.
type warehouseSpec struct {
	Name              string   `json:"-"`
	Location          string   `json:"location"`
	AllowedLocations  []string `json:"allowed-locations,omitempty"`
	S3Endpoint        string   `json:"s3-endpoint,omitempty"`
	S3Region          string   `json:"s3-region,omitempty"`
	S3AccessKeyID     string   `json:"s3-access-key-id,omitempty"`
	S3SecretAccessKey string   `json:"s3-secret-access-key,omitempty"`
	S3PathStyle       *bool    `json:"s3-path-style,omitempty"`
}

// parseWarehouses reads --warehouses: NAME=URI pairs separated by commas
// (the warehouses inherit the node's S3 settings), or a JSON object mapping
// each name to its settings, which is what a configuration file's
// warehouses mapping becomes (warehousesText). Names are single path
// segments, distinct from each other and from --prefix; locations are
// apart from each other's and from the default warehouse's (def), so that
// no warehouse's default table locations fall in another's tree.
func parseWarehouses(v, prefix, def string) ([]warehouseSpec, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return nil, nil
	}
	var out []warehouseSpec
	if strings.HasPrefix(v, "{") {
		dec := json.NewDecoder(strings.NewReader(v))
		dec.DisallowUnknownFields()
		var m map[string]warehouseSpec
		if err := dec.Decode(&m); err != nil {
			return nil, usagef("--%s: %v", warehousesFlag, err)
		}
		for name, w := range m {
			w.Name = name
			out = append(out, w)
		}
		slices.SortFunc(out, func(a, b warehouseSpec) int { return strings.Compare(a.Name, b.Name) })
	} else {
		for item := range strings.SplitSeq(v, ",") {
			name, loc, ok := strings.Cut(strings.TrimSpace(item), "=")
			if !ok {
				return nil, usagef("--%s %q: want NAME=URI pairs separated by commas, or a JSON object", warehousesFlag, item)
			}
			out = append(out, warehouseSpec{Name: strings.TrimSpace(name), Location: strings.TrimSpace(loc)})
		}
	}
	seen := map[string]bool{prefix: true}
	for _, w := range out {
		if err := catalog.CheckPrefix(w.Name); err != nil {
			return nil, usagef("--%s: warehouse name %q: %v", warehousesFlag, w.Name, err)
		}
		if strings.Contains(w.Name, ":") {
			return nil, usagef("--%s: warehouse name %q: want no colons", warehousesFlag, w.Name)
		}
		if seen[w.Name] {
			return nil, usagef("--%s: warehouse %q is named twice, or is --prefix (the default warehouse's)", warehousesFlag, w.Name)
		}
		seen[w.Name] = true
		for _, loc := range append([]string{w.Location}, w.AllowedLocations...) {
			scheme, _, _, err := storage.ParseURI(loc)
			if err != nil {
				return nil, usagef("--%s: warehouse %s: location %q: %s", warehousesFlag, w.Name, redactURL(loc), redactIn(err.Error(), loc))
			}
			if (scheme != storage.SchemeFile && scheme != storage.SchemeS3) || !strings.Contains(loc, "://") {
				return nil, usagef("--%s: warehouse %s: location %q: want file:// or s3://", warehousesFlag, w.Name, redactURL(loc))
			}
		}
		if other, ok := overlapping(w, def, out); ok {
			return nil, usagef("--%s: warehouse %s: location %s is, lies in or holds %s", warehousesFlag, w.Name, w.Location, other)
		}
		if (w.S3AccessKeyID == "") != (w.S3SecretAccessKey == "") {
			return nil, usagef("--%s: warehouse %s: s3-access-key-id and s3-secret-access-key must be set together", warehousesFlag, w.Name)
		}
		if err := checkS3Endpoint(fmt.Sprintf("--%s: warehouse %s: s3-endpoint", warehousesFlag, w.Name), w.S3Endpoint); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// overlapping finds a location among def (the default warehouse's) and the
// other warehouses' that is w's, lies inside it or holds it.
func overlapping(w warehouseSpec, def string, all []warehouseSpec) (string, bool) {
	loc := w.Location
	same := func(a, b string) bool {
		return strings.TrimRight(a, "/") == strings.TrimRight(b, "/") || storage.IsWithin(a, b) || storage.IsWithin(b, a)
	}
	if same(loc, def) {
		return "the default warehouse's location " + def, true
	}
	for _, o := range all {
		if o.Name != w.Name && same(loc, o.Location) {
			return "warehouse " + o.Name + "'s location " + o.Location, true
		}
	}
	return "", false
}

// warehousesText turns a configuration file's warehouses mapping into the
// JSON form --warehouses takes.
func warehousesText(v *yaml.Node) (string, error) {
	var m map[string]map[string]any
	if err := v.Decode(&m); err != nil {
		return "", fmt.Errorf("want a mapping of warehouse names to their settings (location, allowed-locations, s3-endpoint, ...): %v", err)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return "", err
	}
	return strings.TrimSpace(b.String()), nil
}

// storageConfig is the storage configuration of warehouse w: its own S3
// settings, the node's where it has none.
func (w warehouseSpec) storageConfig(c config) storage.Config {
	sc := storage.Config{
		S3Endpoint: c.S3Endpoint, S3Region: c.S3Region,
		S3AccessKeyID: c.S3AccessKeyID, S3SecretAccessKey: c.S3SecretAccessKey,
		S3PathStyle: c.S3PathStyle, DeleteBatchSize: c.PurgeDeleteBatchSize,
	}
	if w.S3Endpoint != "" {
		sc.S3Endpoint = w.S3Endpoint
	}
	if w.S3Region != "" {
		sc.S3Region = w.S3Region
	}
	if w.S3AccessKeyID != "" {
		sc.S3AccessKeyID, sc.S3SecretAccessKey = w.S3AccessKeyID, w.S3SecretAccessKey
	}
	if w.S3PathStyle != nil {
		sc.S3PathStyle = *w.S3PathStyle
	}
	return sc
}

// namedWarehouse is a named warehouse's storage, built at start.
type namedWarehouse struct {
	spec    warehouseSpec
	objects *storage.Mux
}

// openWarehouses builds each named warehouse's storage.
func openWarehouses(c config) ([]namedWarehouse, error) {
	var out []namedWarehouse
	for _, w := range c.warehouses {
		m, err := storage.New(w.storageConfig(c))
		if err != nil {
			return nil, fmt.Errorf("warehouse %s: %w", w.Name, err)
		}
		out = append(out, namedWarehouse{spec: w, objects: m})
	}
	return out, nil
}

// catalogWarehouses returns the named warehouses as the catalog takes
// them, each with a credential vendor over its own storage settings when
// vending is on (newVendor builds one from a warehouse's storage).
func catalogWarehouses(named []namedWarehouse, newVendor func(string, *storage.Mux) (*vending.Vendor, error)) ([]catalog.Warehouse, error) {
	var out []catalog.Warehouse
	for _, w := range named {
		cw := catalog.Warehouse{Name: w.spec.Name, Location: w.spec.Location, AllowedLocations: w.spec.AllowedLocations, Objects: w.objects}
		if newVendor != nil {
			v, err := newVendor(w.spec.Name, w.objects)
			if err != nil {
				return nil, fmt.Errorf("warehouse %s: %w", w.spec.Name, err)
			}
			cw.Vendor = v
		}
		out = append(out, cw)
	}
	return out, nil
}

// purgeBases is the storage a purge job may need: the node's own, then
// each named warehouse's.
func purgeBases(c config, own *storage.Mux, named []namedWarehouse) []purge.Base {
	bases := []purge.Base{{Objects: own, FileIO: own.FileIOConfig(c.Warehouse)}}
	for _, w := range named {
		bases = append(bases, purge.Base{Warehouse: w.spec.Name, Objects: w.objects, FileIO: w.objects.FileIOConfig(w.spec.Location)})
	}
	return bases
}

// allowedEverywhere is every warehouse's allowed locations: what a purge
// worker may delete.
func (c config) allowedEverywhere() []string {
	out := c.allowedLocations()
	for _, w := range c.warehouses {
		if len(w.AllowedLocations) == 0 {
			out = append(out, w.Location)
		}
		out = append(out, w.AllowedLocations...)
	}
	return out
}
