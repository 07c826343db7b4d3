// Package purge deletes the files of dropped tables: crash-safe, resumable,
// fenced purge jobs run by a worker pool on every node and leased by a
// scheduler on the leader. See DESIGN.md.
package purge

import (
	"context"
	"errors"
	"fmt"
	"path"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/floe-catalog/floe/internal/location"
	"github.com/floe-catalog/floe/internal/storage"
)

// Reader reads whole objects. A Reader that also implements Opener lets
// the walk stream manifests instead of reading them whole.
type Reader interface {
	Read(ctx context.Context, uri string) ([]byte, error)
}

// ErrCorruptMetadata means the table's metadata (or a manifest list or
// manifest) exists but cannot be parsed: retrying will not help.
var ErrCorruptMetadata = errors.New("purge: unreadable table metadata")

// The phases of a purge, in the order they run. A phase never deletes a
// file that an earlier phase still needs to read: data files are found
// through manifests, manifests through manifest lists, everything through
// the root metadata file, which goes last. That is what lets a checkpoint
// (phase, offset) be resumed by another node.
const (
	PhaseData          = iota // data and delete files (none when gc.enabled=false)
	PhaseManifests            // manifests, deduplicated
	PhaseManifestLists        // one per snapshot
	PhaseStatistics           // statistics and partition statistics files
	PhaseMetadataLog          // previous metadata files
	PhaseRoot                 // the metadata file the job names
	PhaseDone                 // nothing left
)

var phaseNames = [...]string{"data", "manifests", "manifest-lists", "statistics", "metadata-log", "root", "done"}

// PhaseName names a phase for logs.
func PhaseName(p int) string {
	if p >= 0 && p < len(phaseNames) {
		return phaseNames[p]
	}
	return fmt.Sprintf("phase-%d", p)
}

// FirstPhase is the first phase in which a walk of meta can find a file:
// PhaseData when the table has a snapshot, else the first of statistics,
// metadata log and root that names a file. It never answers later than the
// walk's first file, so a job whose checkpoint starts there skips only
// empty phases. A dropping node stamps it into the job (fsm.PurgeJob's
// FirstPhase) so that a worker need not record the phase of the first
// file it deletes.
func FirstPhase(meta table.Metadata) int {
	if len(meta.Snapshots()) > 0 {
		return PhaseData
	}
	for range meta.Statistics() {
		return PhaseStatistics
	}
	for range meta.PartitionStatistics() {
		return PhaseStatistics
	}
	for range meta.PreviousFiles() {
		return PhaseMetadataLog
	}
	return PhaseRoot
}

// Checkpoint is where a walk resumes: every file before Offset in Phase,
// and every file of earlier phases, has been dealt with.
type Checkpoint struct {
	Phase  int
	Offset int64
}

// File is one reachable file. Offset is its position within its phase in
// the walk's deterministic order; Size is 0 when the metadata does not say.
type File struct {
	Phase  int
	Offset int64
	URI    string
	Size   int64
	// Decoded is URI's other spelling on a local file system
	// (decodedLocalURI), "" when it has none or when that spelling names
	// a file the walk must not pass in this phase: the root metadata
	// file, or a manifest list or manifest read later (readLater). The
	// walk checked it as it checks URI; a purge deletes both.
	Decoded string
}

// ReadMetadata reads and parses a table metadata file. A missing file is an
// error wrapping storage.ErrNotFound; one that does not parse wraps
// ErrCorruptMetadata.
func ReadMetadata(ctx context.Context, rd Reader, metadataLocation string) (table.Metadata, error) {
	raw, err := rd.Read(ctx, metadataLocation)
	if err != nil {
		return nil, err
	}
	if raw, err = storage.Ungzipped(raw); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorruptMetadata, metadataLocation, err)
	}
	meta, err := table.ParseMetadataBytes(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorruptMetadata, metadataLocation, err)
	}
	return meta, nil
}

// Walker streams the files reachable from one table metadata file.
type Walker struct {
	Reader Reader
	// OnPhase, if set, is called whenever the walk enters a phase that has
	// at least one file, before that file is passed on. An error stops the
	// walk.
	OnPhase func(phase int) error
	// OnMissing, if set, is told of a manifest list (list true) or
	// manifest that no longer exists. Its error stops the walk; without
	// one (or without OnMissing) the walk skips it.
	OnMissing func(uri string, list bool) error
	// MayRead, if set, is asked before a manifest list or manifest is
	// read: one it refuses is not read but skipped, with its entries, and
	// told to OnNotRead. A table's metadata may name any path, and what a
	// walk reads should stay within what the node may touch.
	MayRead   func(uri string) bool
	OnNotRead func(uri string)
}

// mayRead reports whether the walk may read uri, telling OnNotRead when not.
func (w Walker) mayRead(uri string) bool {
	if w.MayRead == nil || w.MayRead(uri) {
		return true
	}
	if w.OnNotRead != nil {
		w.OnNotRead(uri)
	}
	return false
}

// Walk calls fn for every file reachable from meta (read from
// metadataLocation), phase by phase, starting at from and skipping what
// lies before it. It is lazy and streams: a manifest's entries are decoded
// one at a time as the manifest is read and passed on at once, so memory
// holds one Avro block of one manifest (plus that manifest's bytes when the
// Reader is not an Opener), the entries of one manifest list, the set
// of manifest paths already seen, and the sets of the table's manifest
// lists and manifests (readLater), however large the manifests. Nothing is
// deduplicated across phases or between manifests except manifests
// themselves, so a data file listed by two manifests is passed twice. The
// root metadata file is passed only in PhaseRoot, even if the metadata log
// names it too; a manifest list or manifest of the table only in its own
// phase, even if a manifest names it as a data file (readLater).
//
// fn's error, or the context's, stops the walk and is returned. A manifest
// list or manifest that cannot be parsed is an error wrapping
// ErrCorruptMetadata; a manifest is found corrupt only when the walk
// reaches the bad part, so fn may already have seen the entries before it.
// A missing manifest list or manifest is told to OnMissing and skipped
// unless OnMissing fails,
// as is one MayRead refuses (told to OnNotRead);
// any other storage error, including a streamed body that breaks off, is
// returned without ErrCorruptMetadata.
func (w Walker) Walk(ctx context.Context, meta table.Metadata, metadataLocation string, from Checkpoint, fn func(File) error) error {
	later, err := w.readLater(ctx, meta, from.Phase)
	if err != nil {
		return err
	}
	for phase := from.Phase; phase < PhaseDone; phase++ {
		skip := int64(0)
		if phase == from.Phase {
			skip = from.Offset
		}
		var (
			offset  int64
			entered bool
		)
		waits := func(uri string) bool {
			return (phase != PhaseRoot && sameObject(uri, metadataLocation)) || later.keeps(phase, uri)
		}
		emit := func(uri string, size int64) error {
			if uri == "" || waits(uri) {
				return nil
			}
			decoded, ok := decodedLocalURI(uri)
			if !ok || waits(decoded) {
				decoded = ""
			}
			off := offset
			offset++
			if off < skip {
				return nil
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			if !entered {
				entered = true
				if w.OnPhase != nil {
					if err := w.OnPhase(phase); err != nil {
						return err
					}
				}
			}
			return fn(File{Phase: phase, Offset: off, URI: uri, Size: size, Decoded: decoded})
		}
		if err := w.walkPhase(ctx, meta, metadataLocation, phase, emit); err != nil {
			return err
		}
	}
	return nil
}

// readLater holds the files a later phase of a walk reads, by object
// (objectKey): the manifest lists, read in the data and manifests
// phases, and the manifests, read in the data phase. A table's metadata
// may name one of them as a data file, or a manifest list as a manifest
// (a writer's mistake or a hostile one): passed on in an earlier phase,
// it was deleted before the walk read it, and the files it leads to were
// left while the job succeeded.
type readLater struct{ lists, manifests pathSet }

// mark records uri, in both of its spellings (see decodedLocalURI), in set.
func mark(set pathSet, uri string) {
	set.add(objectKey(uri))
	if dec, ok := decodedLocalURI(uri); ok {
		set.add(objectKey(dec))
	}
}

// keeps reports whether uri, met in phase, must wait for its own phase.
func (l readLater) keeps(phase int, uri string) bool {
	switch phase {
	case PhaseData:
		k := objectKey(uri)
		return l.lists.has(k) || l.manifests.has(k)
	case PhaseManifests:
		return l.lists.has(objectKey(uri))
	}
	return false
}

// objectKey names the object uri names, however its scheme is spelled
// (s3a:// for s3://, file:/x for file:///x); the key itself is taken as
// it is, trailing slash and all, as object stores do. An unparsable uri
// is its own key.
func objectKey(uri string) string {
	scheme, bucket, key, err := location.ParseURI(uri)
	if err != nil {
		return uri
	}
	return scheme + "://" + bucket + "/" + key
}

// readLater collects, for a walk from phase on, the files a later phase
// reads: the manifest lists from meta and, when the walk runs the data
// phase, the manifests (one more read of each list, told nothing of a
// list it cannot read: the walk itself tells that).
func (w Walker) readLater(ctx context.Context, meta table.Metadata, from int) (readLater, error) {
	var l readLater
	if from > PhaseManifests {
		return l, nil
	}
	l.lists = pathSet{}
	for _, snap := range meta.Snapshots() {
		if snap.ManifestList != "" {
			mark(l.lists, snap.ManifestList)
		}
	}
	if from > PhaseData || !meta.Properties().GetBool("gc.enabled", true) {
		return l, nil
	}
	quiet := w
	quiet.OnMissing, quiet.OnNotRead = nil, nil
	l.manifests = pathSet{}
	err := quiet.manifests(ctx, meta, func(mf iceberg.ManifestFile) error {
		mark(l.manifests, mf.FilePath())
		return nil
	})
	return l, err
}

// sameObject reports whether two URIs name the same object, also when
// spelled differently (s3a:// for s3://, file:/x for file:///x): a metadata
// log naming the root metadata file in another spelling must not have it
// deleted before the root phase.
func sameObject(a, b string) bool {
	if a == b {
		return true
	}
	return path.Base(a) == path.Base(b) && storage.IsWithin(a, b) && storage.IsWithin(b, a)
}

func (w Walker) walkPhase(ctx context.Context, meta table.Metadata, metadataLocation string, phase int, emit func(string, int64) error) error {
	switch phase {
	case PhaseData:
		if !meta.Properties().GetBool("gc.enabled", true) {
			// Data files may be shared with other tables: never delete them.
			return nil
		}
		return w.manifests(ctx, meta, func(mf iceberg.ManifestFile) error {
			return w.manifestEntries(ctx, mf, emit)
		})
	case PhaseManifests:
		return w.manifests(ctx, meta, func(mf iceberg.ManifestFile) error {
			return emit(mf.FilePath(), mf.Length())
		})
	case PhaseManifestLists:
		seen := map[string]bool{}
		for _, snap := range meta.Snapshots() {
			if snap.ManifestList == "" || seen[snap.ManifestList] {
				continue
			}
			seen[snap.ManifestList] = true
			if err := emit(snap.ManifestList, 0); err != nil {
				return err
			}
		}
	case PhaseStatistics:
		for st := range meta.Statistics() {
			if err := emit(st.StatisticsPath, st.FileSizeInBytes); err != nil {
				return err
			}
		}
		for st := range meta.PartitionStatistics() {
			if err := emit(st.StatisticsPath, st.FileSizeInBytes); err != nil {
				return err
			}
		}
	case PhaseMetadataLog:
		for e := range meta.PreviousFiles() {
			if err := emit(e.MetadataFile, 0); err != nil {
				return err
			}
		}
	case PhaseRoot:
		return emit(metadataLocation, 0)
	}
	return nil
}

// manifests calls fn once for every distinct manifest of every snapshot, in
// snapshot order then manifest-list order. A format version 1 snapshot
// without a manifest list names its manifests itself ("manifests"): they
// are data manifests, as Java's BaseSnapshot and iceberg-go's
// Snapshot.Manifests read them. A table of more than maxWalkManifests
// distinct manifests is corrupt metadata.
func (w Walker) manifests(ctx context.Context, meta table.Metadata, fn func(iceberg.ManifestFile) error) error {
	seenLists := map[string]bool{}
	seen := pathSet{}
	give := func(mf iceberg.ManifestFile) error {
		if !seen.add(mf.FilePath()) {
			return nil
		}
		if len(seen) > maxWalkManifests {
			return errTooManyManifests()
		}
		return fn(mf)
	}
	for _, snap := range meta.Snapshots() {
		if snap.ManifestList == "" {
			for _, uri := range snap.ManifestLocations {
				if uri == "" {
					continue
				}
				// As a list's (listManifests): the newest version, not
				// judged against the snapshot's; data, as format version
				// 1 has no other kind.
				if err := give(iceberg.NewManifestFile(3, uri, 0, 0, snap.SnapshotID).Build()); err != nil {
					return err
				}
			}
			continue
		}
		if seenLists[snap.ManifestList] {
			continue
		}
		seenLists[snap.ManifestList] = true
		if !w.mayRead(snap.ManifestList) {
			continue
		}
		// give's own errors pass unjudged: only the list's absence is
		// told to OnMissing.
		var giveErr error
		err := w.listManifests(ctx, snap.ManifestList, func(mf iceberg.ManifestFile) error {
			giveErr = give(mf)
			return giveErr
		})
		if giveErr != nil {
			return giveErr
		}
		if errors.Is(err, storage.ErrNotFound) {
			if err := w.missing(snap.ManifestList, true); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (w Walker) missing(uri string, list bool) error {
	if w.OnMissing != nil {
		return w.OnMissing(uri, list)
	}
	return nil
}

// Files is every file a purge of one table deals with, split by whether it
// lies inside the table's location.
type Files struct {
	Delete  []string
	Outside []string
}

// Enumerate lists, in walk order, every file reachable from the metadata
// file at metadataLocation (see Walker.Walk), split by location. It holds
// the whole list in memory: for tests and tools, not for the worker.
func Enumerate(ctx context.Context, rd Reader, metadataLocation, location string) (Files, error) {
	var out Files
	meta, err := ReadMetadata(ctx, rd, metadataLocation)
	if err != nil {
		return out, err
	}
	err = Walker{Reader: rd}.Walk(ctx, meta, metadataLocation, Checkpoint{}, func(f File) error {
		if storage.IsWithin(location, f.URI) {
			out.Delete = append(out.Delete, f.URI)
		} else {
			out.Outside = append(out.Outside, f.URI)
		}
		return nil
	})
	return out, err
}
