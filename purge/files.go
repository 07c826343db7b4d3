// Package purge deletes the files of dropped tables.
package purge

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/floe-catalog/floe/internal/storage"
)

// Reader reads whole objects.
type Reader interface {
	Read(ctx context.Context, uri string) ([]byte, error)
}

// ErrCorruptMetadata means the table's metadata (or a manifest) exists but
// cannot be parsed: retrying will not help.
var ErrCorruptMetadata = errors.New("purge: unreadable table metadata")

// Files is what a purge deletes, in the order it deletes them: the files
// reachable from the last metadata and inside the table's location, the
// root metadata file last so that an interrupted purge can be enumerated
// again. Outside counts the reachable files left alone because they are
// outside the table's location.
type Files struct {
	Delete  []string
	Outside []string
}

// Enumerate lists the files reachable from the metadata file at
// metadataLocation: data and delete files (unless gc.enabled=false),
// manifests (deduplicated), manifest lists, statistics and partition
// statistics files, previous metadata files, then the metadata file itself.
// A missing manifest list or manifest is skipped (an earlier, interrupted
// purge may have deleted it); a missing root metadata file yields no files.
func Enumerate(ctx context.Context, rd Reader, metadataLocation, location string) (Files, error) {
	var out Files
	raw, err := rd.Read(ctx, metadataLocation)
	if errors.Is(err, storage.ErrNotFound) {
		return out, nil
	}
	if err != nil {
		return out, err
	}
	meta, err := table.ParseMetadataBytes(raw)
	if err != nil {
		return out, fmt.Errorf("%w: %s: %v", ErrCorruptMetadata, metadataLocation, err)
	}
	gc := meta.Properties().GetBool("gc.enabled", true)
	seen := map[string]bool{}
	add := func(uri string) {
		if uri == "" || seen[uri] {
			return
		}
		seen[uri] = true
		if storage.IsWithin(location, uri) {
			out.Delete = append(out.Delete, uri)
		} else {
			out.Outside = append(out.Outside, uri)
		}
	}
	var lists, manifests []string
	for _, snap := range meta.Snapshots() {
		if snap.ManifestList == "" {
			continue
		}
		lists = append(lists, snap.ManifestList)
		data, err := rd.Read(ctx, snap.ManifestList)
		if errors.Is(err, storage.ErrNotFound) {
			continue
		}
		if err != nil {
			return out, err
		}
		mfs, err := iceberg.ReadManifestList(bytes.NewReader(data))
		if err != nil {
			return out, fmt.Errorf("%w: manifest list %s: %v", ErrCorruptMetadata, snap.ManifestList, err)
		}
		for _, mf := range mfs {
			if seen[mf.FilePath()] {
				continue
			}
			manifests = append(manifests, mf.FilePath())
			seen[mf.FilePath()] = true // manifests are added below, after their entries
			if !gc {
				continue
			}
			mdata, err := rd.Read(ctx, mf.FilePath())
			if errors.Is(err, storage.ErrNotFound) {
				continue
			}
			if err != nil {
				return out, err
			}
			entries, err := iceberg.ReadManifest(mf, bytes.NewReader(mdata), false)
			if err != nil {
				return out, fmt.Errorf("%w: manifest %s: %v", ErrCorruptMetadata, mf.FilePath(), err)
			}
			for _, e := range entries {
				add(e.DataFile().FilePath())
			}
		}
	}
	for _, m := range manifests {
		delete(seen, m)
		add(m)
	}
	for _, l := range lists {
		add(l)
	}
	for st := range meta.Statistics() {
		add(st.StatisticsPath)
	}
	for st := range meta.PartitionStatistics() {
		add(st.StatisticsPath)
	}
	for e := range meta.PreviousFiles() {
		add(e.MetadataFile)
	}
	delete(seen, metadataLocation)
	add(metadataLocation)
	return out, nil
}
