package catalog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/apache/iceberg-go/view"
	"github.com/google/uuid"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/idempotency"
	"github.com/floe-catalog/floe/internal/storage"
)

// Views are served like tables: the state machine keeps a pointer to each
// view's current metadata file, the catalog builds new metadata with
// iceberg-go's view package and writes the file before proposing, and the
// state machine swaps the pointer with a compare-and-set. A name in a
// namespace is a table or a view, never both; the state machine decides it.

// viewOps are the view operations; their domain outcomes are answered by
// viewOutcomeError.
var viewOps = map[string]bool{
	"listViews": true, "createView": true, "registerView": true, "loadView": true,
	"viewExists": true, "replaceView": true, "dropView": true, "renameView": true,
}

// viewMetadata is one parsed view metadata file.
type viewMetadata struct {
	location string
	raw      []byte
	meta     view.Metadata
}

type loadViewResult struct {
	MetadataLocation string          `json:"metadata-location"`
	Metadata         json.RawMessage `json:"metadata"`
}

func writeLoadViewResult(w http.ResponseWriter, vm *viewMetadata) {
	writeJSON(w, http.StatusOK, loadViewResult{MetadataLocation: vm.location, Metadata: vm.raw})
}

func notFoundView(format string, args ...any) error {
	return &apiError{status: http.StatusNotFound, typ: "NoSuchViewException", msg: fmt.Sprintf(format, args...)}
}

// viewOutcomeError turns a domain outcome of the view operation op (fresh
// from Apply, or stored under an Idempotency-Key) into op's answer.
func viewOutcomeError(op string, res fsm.Result) error {
	err := res.Err()
	if err == nil {
		return nil
	}
	switch res.Status {
	case fsm.StatusNoSuchView:
		return notFoundView("%s", res.Message)
	case fsm.StatusCommitFailed, fsm.StatusLocationInUse, fsm.StatusBeingPurged:
		if op == "replaceView" {
			return commitFailed("%s", res.Message)
		}
	}
	return err
}

// opOutcomeError is outcomeError for every operation, views included.
func opOutcomeError(op string, res fsm.Result) error {
	if viewOps[op] {
		return viewOutcomeError(op, res)
	}
	return outcomeError(op, res)
}

var errCorruptViewMetadata = errors.New("unreadable view metadata")

// readViewMetadata returns the view metadata file at loc, from the cache
// when it can; concurrent loads of one location that miss it share one
// read and parse, as a table's do (readMetadata).
func (s *Server) readViewMetadata(ctx context.Context, loc string) (*viewMetadata, error) {
	if vm, ok := s.cache.getView(loc); ok {
		s.metrics.cacheHits.Inc()
		return vm, nil
	}
	s.metrics.cacheMisses.Inc()
	return sharedRead(ctx, s, viewKeyPrefix, loc, s.readViewMetadataFile, s.cache.addView)
}

// readViewOf reads the metadata file of the view id, whose record is v,
// and refuses it when its view-uuid is not the record's: a file replaced
// outside the catalog by another view's (as checkTableUUID for tables).
func (s *Server) readViewOf(ctx context.Context, id fsm.Ident, v fsm.View) (*viewMetadata, error) {
	vm, err := s.readViewMetadata(ctx, v.MetadataLocation)
	if err != nil {
		return nil, err
	}
	// A record without a UUID, or with the nil one (a view registered so
	// before registers refused it), is not judged.
	if got := vm.meta.ViewUUID().String(); v.UUID != "" && v.UUID != uuid.Nil.String() && got != v.UUID {
		return nil, fmt.Errorf("%w: %s names view-uuid %s, but view %s is %s: the file was replaced outside the catalog",
			errCorruptViewMetadata, vm.location, got, id, v.UUID)
	}
	return vm, nil
}

// readViewMetadataFile reads and parses the view metadata file at loc
// from storage.
func (s *Server) readViewMetadataFile(ctx context.Context, loc string) (*viewMetadata, error) {
	raw, err := s.whOf(ctx).objects.Read(ctx, loc)
	if err != nil {
		return nil, fmt.Errorf("read view metadata %s: %w", loc, err)
	}
	// Bounded, as a table's: a small file must not inflate to exhaust
	// the node's memory on every load.
	if raw, err = storage.Ungzipped(raw); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errCorruptViewMetadata, loc, err)
	}
	meta, err := view.ParseMetadataBytes(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errCorruptViewMetadata, loc, err)
	}
	return &viewMetadata{location: loc, raw: raw, meta: meta}, nil
}

// writeViewMetadata writes meta as
// <viewLocation>/metadata/<version>-<uuid>.metadata.json, the way table
// metadata is written (writeMetadata): before the command that points at
// it is proposed; the caller deletes it if the command does not take
// effect.
func (s *Server) writeViewMetadata(ctx context.Context, meta view.Metadata, version int) (*viewMetadata, error) {
	raw, err := json.Marshal(meta)
	if err != nil {
		return nil, fmt.Errorf("encode view metadata: %w", err)
	}
	// As for a table (writeMetadata): a version no node could read back
	// would leave the view answering 500 to every load and commit.
	if len(raw) > storage.MaxReadBytes {
		return nil, badRequest("the new view metadata would be %d bytes, over the %d a node reads", len(raw), storage.MaxReadBytes)
	}
	if meta, err = view.ParseMetadataBytes(raw); err != nil {
		return nil, badRequest("the new view metadata would not be readable: %v", err)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	loc := fmt.Sprintf("%s/metadata/%05d-%s.metadata.json", strings.TrimSuffix(meta.Location(), "/"), version, id)
	if err := s.whOf(ctx).objects.Write(ctx, loc, raw); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errMetadataNotWritten, loc, err)
	}
	vm := &viewMetadata{location: loc, raw: raw, meta: meta}
	s.cache.addView(vm)
	return vm, nil
}

// checkViewOwner answers early, before any file is written, when loc is
// equal to, inside or around the location of a view other than id, or of
// a table being purged (a view may share a live table's location: see
// fsm/DESIGN.md). Advice, read linearizably: the state machine decides
// again.
func (s *Server) checkViewOwner(ctx context.Context, id fsm.Ident, loc string) error {
	return s.store.Read(ctx, func(rd *fsm.Reader) error { return rd.CheckViewClaim(id, loc) })
}

// checkNewVersions refuses versions added on top of base (nil: all of
// them) without the fields the spec requires of every view version.
func checkNewVersions(base, meta view.Metadata) error {
	known := map[int64]bool{}
	highest := int64(math.MinInt32)
	if base != nil {
		for _, v := range base.Versions() {
			known[v.VersionID] = true
			highest = max(highest, v.VersionID)
		}
	}
	for _, v := range meta.Versions() {
		if known[v.VersionID] {
			continue
		}
		// Java and iceberg-rust read version ids as 32-bit integers; the
		// builder's next id (the highest plus one) can pass the bound too,
		// and a version at the bound would leave no id for the next one
		// (the highest is kept however old).
		if v.VersionID < math.MinInt32 || v.VersionID > math.MaxInt32 {
			return badRequest("view version-id %d does not fit in 32 bits", v.VersionID)
		}
		if v.VersionID == math.MaxInt32 {
			return badRequest("view version-id %d would leave no id for a next version", v.VersionID)
		}
		// An id a client chose far above the view's highest (a create's,
		// a register's, or a commit's jump) stays below half the bound,
		// leaving the view about a billion later versions; the ids that
		// follow its highest (as Java's builder and this one number them)
		// may go on past it. The bound alone only moved the stuck point
		// down by one: a version at 2^31-2 made every later one refused.
		if bound := max(maxNewViewVersionID, highest+maxVersionsPerChange); v.VersionID > bound {
			return badRequest("view version-id %d is above %d: a view's later versions take ids above its highest, and 32-bit readers must have room for them", v.VersionID, bound)
		}
		if v.DefaultNamespace == nil {
			return badRequest("view version %d has no default-namespace (use [] for none)", v.VersionID)
		}
		for _, l := range v.DefaultNamespace {
			// Java's Namespace.of refuses a NUL byte, and Java parses
			// every version a view keeps: one such level makes the
			// whole view unloadable.
			if !utf8.ValidString(l) || strings.ContainsRune(l, 0) {
				return badRequest("view version %d: default-namespace level %q is not valid UTF-8 or holds a NUL byte", v.VersionID, l)
			}
		}
		if v.Summary == nil {
			return badRequest("view version %d has no summary", v.VersionID)
		}
	}
	return checkViewProperties(base, meta)
}

// propertyHistoryEntries is the view property that bounds the versions
// a view keeps.
const propertyHistoryEntries = "version.history.num-entries"

// checkViewProperties refuses a version.history.num-entries that is not
// a positive 32-bit integer, when it changes: iceberg-go falls back to its default
// for one, but Java's builder (PropertyUtil.propertyAsInt) throws on every
// later change of the view until the property is removed.
func checkViewProperties(base, meta view.Metadata) error {
	v, ok := meta.Properties()[propertyHistoryEntries]
	if !ok || (base != nil && base.Properties()[propertyHistoryEntries] == v) {
		return nil
	}
	if n, err := strconv.ParseInt(v, 10, 32); err != nil || n <= 0 {
		return badRequest("view property %s must be a positive integer, got %q", propertyHistoryEntries, v)
	}
	return nil
}

// maxVersionsPerChange bounds the view versions one commit adds, as
// maxSnapshotsPerChange does a table's snapshots: iceberg-go compares
// each added version with every one before it (reuse of an equal
// version), so 20,000 versions in one body took 34 s of CPU, and again on
// each retry after a lost compare-and-set.
const maxVersionsPerChange = 1000

// maxNewViewVersionID bounds the id of a view version a change adds (see
// checkNewVersions).
const maxNewViewVersionID = math.MaxInt32 / 2

// viewVersionRequired are the fields of a view version Java's
// ViewVersionParser requires and iceberg-go would silently set to 0 when
// absent (binding the version to schema 0, or to the epoch).
var viewVersionRequired = []string{"version-id", "schema-id", "timestamp-ms"}

// checkRawViewVersion refuses a view version, as sent, without a field of
// viewVersionRequired.
func checkRawViewVersion(raw json.RawMessage) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return badRequest("view-version must be a JSON object")
	}
	for _, k := range viewVersionRequired {
		if isAbsent(fields[k]) {
			return badRequest("view-version has no %s", k)
		}
	}
	return nil
}

// checkRegisteredViewFile refuses, in a view metadata file to register
// (raw, as stored), what Java's ViewMetadataParser requires and
// iceberg-go's parser fills in when it is missing: a version-log (each
// entry with a timestamp-ms and a 32-bit version-id), and in each version
// the fields of viewVersionRequired, a summary and representations. The
// file is served as it is, so a view registered without them could not be
// loaded by Java clients.
func checkRegisteredViewFile(raw []byte) error {
	var doc struct {
		Versions   []json.RawMessage `json:"versions"`
		VersionLog json.RawMessage   `json:"version-log"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return badRequest("view metadata: %v", err)
	}
	var log []map[string]json.RawMessage
	if err := json.Unmarshal(doc.VersionLog, &log); err != nil || log == nil {
		return badRequest("view metadata has no version-log")
	}
	for _, e := range log {
		for _, k := range []string{"timestamp-ms", "version-id"} {
			if isAbsent(e[k]) {
				return badRequest("a version-log entry of the view metadata has no %s", k)
			}
		}
		var id int64
		if err := json.Unmarshal(e["version-id"], &id); err != nil || id < math.MinInt32 || id > math.MaxInt32 {
			return badRequest("a version-log entry's version-id %s is not a 32-bit integer", clipped(string(e["version-id"])))
		}
	}
	for _, v := range doc.Versions {
		if err := checkRawViewVersion(v); err != nil {
			return err
		}
		var fields map[string]json.RawMessage
		_ = json.Unmarshal(v, &fields) // an object: checkRawViewVersion
		for _, k := range []string{"summary", "representations"} {
			if isAbsent(fields[k]) {
				return badRequest("view-version has no %s", k)
			}
		}
	}
	return nil
}

// checkRawViewUpdates applies checkRawViewVersion to each add-view-version
// of a commit's updates, as sent, and bounds their number.
func checkRawViewUpdates(raw json.RawMessage) error {
	var updates []struct {
		Action      string          `json:"action"`
		ViewVersion json.RawMessage `json:"view-version"`
		Schema      json.RawMessage `json:"schema"`
	}
	if err := json.Unmarshal(raw, &updates); err != nil {
		return badRequest("invalid view commit: %v", err)
	}
	added, schemas := 0, 0
	for _, u := range updates {
		if u.Action == view.UpdateAddSchema && !isJSONObject(u.Schema) {
			// iceberg-go would take a missing or null schema as a nil
			// one, and fail on it as on a bug.
			return badRequest("update %q requires field \"schema\", an object", u.Action)
		}
		if u.Action == view.UpdateAddSchema {
			if schemas++; schemas > maxSchemasPerChange {
				return badRequest("a view change may add at most %d schemas", maxSchemasPerChange)
			}
		}
		if u.Action != view.UpdateAddViewVersion {
			continue
		}
		if added++; added > maxVersionsPerChange {
			return badRequest("a view change may add at most %d versions", maxVersionsPerChange)
		}
		if err := checkRawViewVersion(u.ViewVersion); err != nil {
			return err
		}
	}
	return nil
}

// checkViewName answers early, read linearizably, when a new view at id
// would be refused: its namespace is missing (404), or a view or a table
// has its name (409). The state machine decides again when the command is
// applied.
func (s *Server) checkViewName(ctx context.Context, id fsm.Ident) error {
	return s.store.Read(ctx, func(rd *fsm.Reader) error {
		if _, ok := rd.Namespace(id.Namespace); !ok {
			return notFoundNamespace("namespace does not exist: %s", nsString(id.Namespace))
		}
		if _, ok := rd.View(id); ok {
			return &apiError{status: http.StatusConflict, typ: "AlreadyExistsException", msg: "view already exists: " + id.String()}
		}
		if _, ok := rd.Table(id); ok {
			return &apiError{status: http.StatusConflict, typ: "AlreadyExistsException", msg: "table already exists: " + id.String()}
		}
		return nil
	})
}

func viewVar(r *http.Request) (fsm.Ident, error) {
	levels, err := namespaceVar(r)
	if err != nil {
		return fsm.Ident{}, err
	}
	name, err := escapedVar(r, "view")
	if err != nil {
		return fsm.Ident{}, err
	}
	if err := validateName("view name", name); err != nil {
		return fsm.Ident{}, err
	}
	return fsm.Ident{Namespace: levels, Name: name}, nil
}

// lookupView reads one view entry (see read): 404 NoSuchView when it or
// its namespace is missing.
func (s *Server) lookupView(r *http.Request, id fsm.Ident) (fsm.View, error) {
	var v fsm.View
	err := s.read(r, func(rd *fsm.Reader) error {
		var ok bool
		if v, ok = rd.View(id); ok {
			return nil
		}
		if _, nsOK := rd.Namespace(id.Namespace); !nsOK {
			return notFoundView("view does not exist: %s (namespace %s does not exist)", id, nsString(id.Namespace))
		}
		return notFoundView("view does not exist: %s", id)
	})
	return v, err
}

func (s *Server) listViews(w http.ResponseWriter, r *http.Request) error {
	return s.listIdents(w, r, (*fsm.Reader).ViewNames)
}

type createViewRequest struct {
	Name        string          `json:"name"`
	Location    string          `json:"location"`
	Schema      *iceberg.Schema `json:"schema"`
	ViewVersion *view.Version   `json:"view-version"`
	Properties  stringMap       `json:"properties"`
}

func (s *Server) createView(w http.ResponseWriter, r *http.Request) error {
	levels, err := namespaceVar(r)
	if err != nil {
		return err
	}
	body, err := readJSONBody(r)
	if err != nil {
		return err
	}
	var req createViewRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return badRequest("malformed request body: %v", err)
	}
	if err := validateNewName("view name", req.Name); err != nil {
		return err
	}
	if req.Schema == nil {
		return badRequest("schema is required")
	}
	if req.ViewVersion == nil {
		return badRequest("view-version is required")
	}
	var rawVersion struct {
		ViewVersion json.RawMessage `json:"view-version"`
	}
	if err := json.Unmarshal(body, &rawVersion); err != nil {
		return badRequest("malformed request body: %v", err)
	}
	if err := checkRawViewVersion(rawVersion.ViewVersion); err != nil {
		return err
	}
	if err := validateProperties(req.Properties); err != nil {
		return err
	}
	id := fsm.Ident{Namespace: levels, Name: req.Name}
	setAuditTarget(r, id.String())
	if err := s.checkViewName(r.Context(), id); err != nil {
		return err
	}
	viewUUID, err := uuid.NewV7()
	if err != nil {
		return err
	}
	loc := strings.TrimSuffix(req.Location, "/")
	if loc == "" {
		if err := checkNewLocationSpelling(s.defaultLocation(r.Context(), id)); err != nil {
			return badRequest("view %s has no default location (%v): give the view a location", id, err)
		}
		if loc, err = s.newDefaultLocation(r.Context(), id, viewUUID, (*fsm.Reader).CheckViewClaim); err != nil {
			return err
		}
	}
	if err := checkNewLocationSpelling(loc); err != nil {
		return err
	}
	if err := s.checkLocation(r.Context(), loc); err != nil {
		return err
	}
	if err := s.checkScope(r.Context(), id.Namespace, loc); err != nil {
		return err
	}
	if err := s.checkViewOwner(r.Context(), id, loc); err != nil {
		return err
	}
	meta, err := newViewMetadata(req, loc, viewUUID)
	if err != nil {
		return err
	}
	if err := checkNewVersions(nil, meta); err != nil {
		return err
	}
	if err := checkNewSchemas(nil, meta.Schemas()); err != nil {
		return err
	}
	vm, err := s.writeViewMetadata(r.Context(), meta, 0)
	if err != nil {
		return err
	}
	res, err := s.store.Propose(r.Context(), fsm.CreateView{
		Ident: id, UUID: viewUUID.String(), Location: loc, LocationKey: fsm.LocationKey(loc),
		MetadataLocation: vm.location, AtMs: s.cfg.Now().UnixMilli(),
	})
	if err != nil {
		if !isOutcomeUnknown(err) {
			s.discard(r.Context(), vm.location)
		}
		return err
	}
	if err := viewOutcomeError("createView", res); err != nil {
		s.discard(r.Context(), vm.location)
		return err
	}
	writeLoadViewResult(w, vm)
	return nil
}

// newViewMetadata builds a new view's first metadata. The builder gives
// the version id 1 and the schema id it assigns to the schema, as the spec
// asks. A format-version property is stored as any other, as Java's view
// builder stores it: iceberg-go's constructor would take it for the
// view's format version (dropping "1", refusing "2").
func newViewMetadata(req createViewRequest, loc string, viewUUID uuid.UUID) (view.Metadata, error) {
	props := iceberg.Properties(req.Properties)
	formatVersion, hasFormatVersion := props[table.PropertyFormatVersion]
	if hasFormatVersion {
		props = maps.Clone(props)
		delete(props, table.PropertyFormatVersion)
	}
	meta, err := view.NewMetadataWithUUID(req.ViewVersion, req.Schema, loc, props, viewUUID)
	if err != nil {
		return nil, badRequest("invalid view definition: %v", err)
	}
	if !hasFormatVersion {
		return meta, nil
	}
	b, err := view.MetadataBuilderFromBase(meta)
	if err != nil {
		return nil, err
	}
	if meta, err = b.SetProperties(iceberg.Properties{table.PropertyFormatVersion: formatVersion}).Build(); err != nil {
		return nil, badRequest("invalid view definition: %v", err)
	}
	return meta, nil
}

func (s *Server) loadView(w http.ResponseWriter, r *http.Request) error {
	id, err := viewVar(r)
	if err != nil {
		return err
	}
	v, err := s.lookupView(r, id)
	if err != nil {
		return err
	}
	vm, err := s.readViewOf(r.Context(), id, v)
	if err != nil {
		return err
	}
	writeLoadViewResult(w, vm)
	return nil
}

func (s *Server) viewExists(w http.ResponseWriter, r *http.Request) error {
	id, err := viewVar(r)
	if err != nil {
		return err
	}
	if _, err := s.lookupView(r, id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

type commitViewRequest struct {
	Identifier   *tableIdentifier  `json:"identifier"`
	Requirements view.Requirements `json:"requirements"`
	Updates      view.Updates      `json:"updates"`
}

// decodeViewCommit parses a CommitViewRequest; a body that is not a JSON
// object, an unknown requirement or update type, or a field of the wrong
// type is a 400. Absent requirements or updates are empty lists, as Java's
// UpdateTableRequestParser (which views share) reads them.
func decodeViewCommit(raw json.RawMessage) (commitViewRequest, error) {
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		return commitViewRequest{}, badRequest("malformed view commit: want a JSON object")
	}
	var probe struct {
		Identifier   *tableIdentifier `json:"identifier"`
		Requirements json.RawMessage  `json:"requirements"`
		Updates      json.RawMessage  `json:"updates"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		return commitViewRequest{}, badRequest("malformed view commit: %v", err)
	}
	if isAbsent(probe.Requirements) && isAbsent(probe.Updates) {
		if err := checkOnlyKnownCommitFields(raw); err != nil {
			return commitViewRequest{}, err
		}
	}
	req := commitViewRequest{Identifier: probe.Identifier}
	if probe.Requirements != nil {
		if err := json.Unmarshal(probe.Requirements, &req.Requirements); err != nil {
			return commitViewRequest{}, badRequest("invalid view commit: %v", err)
		}
	}
	if probe.Updates != nil {
		if err := json.Unmarshal(probe.Updates, &req.Updates); err != nil {
			return commitViewRequest{}, badRequest("invalid view commit: %v", err)
		}
		if err := checkPropertyUpdates(probe.Updates); err != nil {
			return commitViewRequest{}, err
		}
		if err := checkRawViewUpdates(probe.Updates); err != nil {
			return commitViewRequest{}, err
		}
	}
	return req, nil
}

func (s *Server) replaceView(w http.ResponseWriter, r *http.Request) error {
	id, err := viewVar(r)
	if err != nil {
		return err
	}
	raw, err := readJSONBody(r)
	if err != nil {
		return err
	}
	req, err := decodeViewCommit(raw)
	if err != nil {
		return err
	}
	if req.Identifier != nil {
		bodyID, err := req.Identifier.ident(r.Context())
		if err != nil {
			return err
		}
		if bodyID.String() != id.String() {
			return badRequest("identifier %s in the body does not match the route's %s", bodyID, id)
		}
	}
	vm, err := s.commitView(r.Context(), id, req)
	if err != nil {
		return err
	}
	writeLoadViewResult(w, vm)
	return nil
}

// commitView applies a view commit: it builds the new metadata on the
// current one, writes the file and proposes a ReplaceView, a
// compare-and-set of the metadata pointer. When it loses to a concurrent
// commit it rebuilds on the newer metadata (requirements are checked
// again) up to CommitRetries times, then answers 409. The file of an
// attempt that lost is deleted; when the outcome is unknown it is kept,
// since the pointer may now reference it. Earlier metadata files are kept.
func (s *Server) commitView(ctx context.Context, id fsm.Ident, req commitViewRequest) (*viewMetadata, error) {
	unlock, timedOut, err := s.commits.lock(ctx, id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if timedOut {
		s.metrics.turnTimeouts.Inc()
	}
	for attempt := 0; ; attempt++ {
		cmd, after, err := s.prepareViewCommit(ctx, id, req)
		if err != nil {
			return nil, err
		}
		// Without a change nothing was written: after is the current
		// file, never to be discarded. Under an Idempotency-Key the
		// compare-and-set of that file onto itself is proposed all the
		// same, as for a table, so that the record keeps the answer.
		unchanged := cmd.MetadataLocation == cmd.ExpectedMetadataLocation
		if unchanged && !idempotency.InRun(ctx) {
			return after, nil
		}
		discard := func() {
			if !unchanged {
				s.discard(ctx, after.location)
			}
		}
		res, err := s.store.Propose(ctx, cmd)
		if err != nil {
			if !isOutcomeUnknown(err) {
				discard()
			}
			return nil, err
		}
		if err := res.Err(); err != nil {
			discard()
			if res.Status == fsm.StatusCommitFailed {
				if attempt < s.cfg.CommitRetries {
					s.metrics.commitRetries.Inc()
					if err := retryWait(ctx, attempt); err != nil {
						return nil, err
					}
					continue
				}
				return nil, &apiError{status: http.StatusConflict, typ: "CommitFailedException", contended: true,
					msg: fmt.Sprintf("gave up after %d attempts against concurrent commits: %v", attempt+1, err)}
			}
			return nil, viewOutcomeError("replaceView", res)
		}
		return after, nil
	}
}

// prepareViewCommit reads the view's pointer linearizably, builds the new
// metadata on the current file and writes it. It returns the command to
// propose and the file written; on error no file is left behind.
func (s *Server) prepareViewCommit(ctx context.Context, id fsm.Ident, req commitViewRequest) (fsm.ReplaceView, *viewMetadata, error) {
	var cur fsm.View
	err := s.store.Read(ctx, func(rd *fsm.Reader) error {
		var ok bool
		if cur, ok = rd.View(id); ok {
			return nil
		}
		if _, nsOK := rd.Namespace(id.Namespace); !nsOK {
			return notFoundView("view does not exist: %s (namespace %s does not exist)", id, nsString(id.Namespace))
		}
		return notFoundView("view does not exist: %s", id)
	})
	if err != nil {
		return fsm.ReplaceView{}, nil, err
	}
	before, err := s.readViewOf(ctx, id, cur)
	if err != nil {
		return fsm.ReplaceView{}, nil, err
	}
	for _, rq := range req.Requirements {
		if err := rq.Validate(before.meta); err != nil {
			return fsm.ReplaceView{}, nil, commitFailed("requirement failed for view %s: %v", id, err)
		}
	}
	// Nothing to change (no updates, or each a no-op: the version
	// already current, the same location or format version, an empty
	// set-properties, a version the view already has), as a table commit
	// without changes: no new metadata file, the current one is the
	// answer, as Java's reference catalog answers; the command, if
	// proposed, sets the pointer to the file it holds.
	unchanged := fsm.ReplaceView{
		Ident: id, ExpectedMetadataLocation: cur.MetadataLocation, ExpectedUUID: cur.UUID,
		MetadataLocation: cur.MetadataLocation, Location: cur.Location, LocationKey: fsm.LocationKey(cur.Location),
		AtMs: s.cfg.Now().UnixMilli(),
	}
	if len(req.Updates) == 0 {
		return unchanged, before, nil
	}
	builder, err := view.MetadataBuilderFromBase(before.meta)
	if err != nil {
		return fsm.ReplaceView{}, nil, err
	}
	if err := applyViewUpdates(builder, before.meta, req.Updates); err != nil {
		return fsm.ReplaceView{}, nil, refusedByState("cannot apply updates to view %s: %v", id, err)
	}
	if builder.Err() == nil && !builder.HasChanges() {
		return unchanged, before, nil
	}
	meta, err := builder.Build()
	if err != nil {
		return fsm.ReplaceView{}, nil, refusedByState("invalid metadata for view %s: %v", id, err)
	}
	if err := checkNewVersions(before.meta, meta); err != nil {
		return fsm.ReplaceView{}, nil, decidedByState(err)
	}
	if err := checkNewSchemas(before.meta.Schemas(), meta.Schemas()); err != nil {
		return fsm.ReplaceView{}, nil, decidedByState(err)
	}
	if meta.Location() != cur.Location {
		if err := checkNewLocationSpelling(meta.Location()); err != nil {
			return fsm.ReplaceView{}, nil, err
		}
		if err := s.checkLocation(ctx, meta.Location()); err != nil {
			return fsm.ReplaceView{}, nil, err
		}
		if err := s.checkScope(ctx, id.Namespace, meta.Location()); err != nil {
			return fsm.ReplaceView{}, nil, err
		}
		if err := s.checkViewOwner(ctx, id, meta.Location()); err != nil {
			return fsm.ReplaceView{}, nil, err
		}
	}
	after, err := s.writeViewMetadata(ctx, meta, max(metadataVersion(cur.MetadataLocation), 0)+1)
	if err != nil {
		return fsm.ReplaceView{}, nil, err
	}
	cmd := fsm.ReplaceView{
		Ident: id, ExpectedMetadataLocation: cur.MetadataLocation, ExpectedUUID: cur.UUID,
		MetadataLocation: after.location, Location: meta.Location(), LocationKey: fsm.LocationKey(meta.Location()),
		AtMs: s.cfg.Now().UnixMilli(),
	}
	return cmd, after, nil
}

// applyViewUpdates applies updates to builder (built from base) as the
// reference implementation's ViewMetadata.Builder does: an add-view-version
// of a version base already has (same schema, summary, representations and
// defaults) adds nothing and names that version, and a set-current-view-
// version of -1 right after it is refused, since nothing was added.
// iceberg-go would add the version a second time, which its own
// validation then refuses as a duplicate version-id.
func applyViewUpdates(builder *view.MetadataBuilder, base view.Metadata, updates view.Updates) error {
	reused := false // the last add-view-version added nothing
	for _, u := range updates {
		switch u.Action() {
		case view.UpdateAddViewVersion:
			if v := viewUpdateField(u).Version; v != nil && v.SchemaID != view.LastAddedID &&
				slices.ContainsFunc(base.Versions(), v.Equals) {
				reused = true
				continue
			}
			reused = false
		case view.UpdateSetCurrentViewVersion:
			if id := viewUpdateField(u).VersionID; reused && id != nil && *id == view.LastAddedID {
				return fmt.Errorf("%s: cannot set the last added view version: the version added is one the view already has, under its own id", u.Action())
			}
		case view.UpdateSetLocation:
			if loc, ok := trimmedSetLocation(u); ok {
				u = view.NewSetLocationUpdate(loc)
			}
		}
		if err := u.Apply(builder); err != nil {
			return fmt.Errorf("%s: %w", u.Action(), err)
		}
	}
	return nil
}

// viewUpdateField reads the version or version id a view update carries
// (iceberg-go's update types are unexported).
func viewUpdateField(u view.Update) (f struct {
	Version   *view.Version `json:"view-version"`
	VersionID *int64        `json:"view-version-id"`
}) {
	updateFields(u, &f)
	return f
}

// dropView removes the view's entry; its metadata files stay where they
// are, like the files of a table dropped without purge.
func (s *Server) dropView(w http.ResponseWriter, r *http.Request) error {
	id, err := viewVar(r)
	if err != nil {
		return err
	}
	res, err := s.store.Propose(r.Context(), fsm.DropView{Ident: id, AtMs: s.cfg.Now().UnixMilli()})
	if err != nil {
		return err
	}
	if err := viewOutcomeError("dropView", res); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) renameView(w http.ResponseWriter, r *http.Request) error {
	var req renameTableRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	if req.Source == nil || req.Destination == nil {
		return badRequest("source and destination are required")
	}
	from, err := req.Source.ident(r.Context())
	if err != nil {
		return err
	}
	to, err := req.Destination.ident(r.Context())
	if err != nil {
		return err
	}
	if err := validateNewDestination("view name", to); err != nil {
		return err
	}
	setAuditTarget(r, from.String()+" -> "+to.String())
	// Moving a view takes its content along: drop alone does not let a
	// principal read it (nor, once it is moved where the principal may
	// write, obtain credentials for its files).
	for _, priv := range []string{PrivDrop, PrivRead} {
		if err := s.authorize(r, priv, from.Namespace, func() error {
			return notFoundView("view does not exist: %s", from)
		}); err != nil {
			return err
		}
	}
	if err := s.authorize(r, PrivWrite, to.Namespace, func() error {
		return notFoundNamespace("namespace does not exist: %s", nsString(to.Namespace))
	}); err != nil {
		return err
	}
	if sameIdent(from, to) {
		// Onto its own name: nothing changes, as in Java's reference catalog.
		if _, err := s.lookupView(r, from); err != nil {
			return err
		}
		if err := s.recordUnchanged(r.Context()); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	res, err := s.store.Propose(r.Context(), fsm.RenameView{From: from, To: to, AtMs: s.cfg.Now().UnixMilli()})
	if err != nil {
		return err
	}
	if err := viewOutcomeError("renameView", res); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

type registerViewRequest struct {
	Name             string `json:"name"`
	MetadataLocation string `json:"metadata-location"`
}

func (s *Server) registerView(w http.ResponseWriter, r *http.Request) error {
	levels, err := namespaceVar(r)
	if err != nil {
		return err
	}
	var req registerViewRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	if err := validateNewName("view name", req.Name); err != nil {
		return err
	}
	if req.MetadataLocation == "" {
		return badRequest("metadata-location is required")
	}
	// Spelled as a new location must be: the answer hands it to clients
	// as the view's metadata-location, and one that drops what follows a
	// '?' or '#' (Java's S3URI) would read another file.
	if err := checkNewLocationSpelling(req.MetadataLocation); err != nil {
		return err
	}
	// Once the view moves on, only its file's name tells a purge in the
	// view's place that the file may be the view's (storage.MayBeViewMetadata):
	// a file named otherwise would be deleted as a table's.
	if !storage.MayBeViewMetadata(req.MetadataLocation) {
		return badRequest("metadata-location %q: a view's metadata file name must contain \".json\" (<version>-<uuid>.metadata.json, as clients write them)", req.MetadataLocation)
	}
	if err := s.checkLocation(r.Context(), req.MetadataLocation); err != nil {
		return err
	}
	if err := s.checkScope(r.Context(), levels, req.MetadataLocation); err != nil {
		return err
	}
	id := fsm.Ident{Namespace: levels, Name: req.Name}
	setAuditTarget(r, id.String())
	if err := s.checkViewName(r.Context(), id); err != nil {
		return err
	}
	// From storage, not the cache: a cached copy can outlive its file.
	s.cache.removeView(req.MetadataLocation)
	vm, err := s.readViewMetadataFile(r.Context(), req.MetadataLocation)
	if err != nil {
		return unreadableMetadataLocation(req.MetadataLocation, err)
	}
	// What a create or replace refuses, a register does too: the view
	// would be one that Java's client cannot load.
	if err := checkRegisteredViewFile(vm.raw); err != nil {
		return err
	}
	// iceberg-go's builder gives a view without a UUID (the nil one) a
	// new one at its next replace, while the record keeps the nil one:
	// the view would read as another's from then on.
	if vm.meta.ViewUUID() == uuid.Nil {
		return badRequest("view metadata %s has the nil view-uuid: a view needs a UUID of its own", req.MetadataLocation)
	}
	if err := checkNewVersions(nil, vm.meta); err != nil {
		return err
	}
	if err := checkNewSchemas(nil, vm.meta.Schemas()); err != nil {
		return err
	}
	if err := checkNewLocationSpelling(vm.meta.Location()); err != nil {
		return err
	}
	if err := s.checkLocation(r.Context(), vm.meta.Location()); err != nil {
		return err
	}
	if err := s.checkScope(r.Context(), levels, vm.meta.Location()); err != nil {
		return err
	}
	// The metadata file must be the view's own, inside the location its
	// metadata declares, as for a registered table.
	if !storage.IsWithin(vm.meta.Location(), vm.location) {
		return badRequest("metadata-location %s is not inside the location its metadata declares (%s)", vm.location, vm.meta.Location())
	}
	if err := s.checkViewOwner(r.Context(), id, vm.meta.Location()); err != nil {
		return err
	}
	// The file must still be there after that check: a purge that finished
	// just before it may have deleted the file after the first read.
	if _, err := s.whOf(r.Context()).objects.Read(r.Context(), vm.location); err != nil {
		return unreadableMetadataLocation(vm.location, err)
	}
	res, err := s.store.Propose(r.Context(), fsm.CreateView{
		Ident: id, UUID: vm.meta.ViewUUID().String(), Location: vm.meta.Location(),
		LocationKey: fsm.LocationKey(vm.meta.Location()), MetadataLocation: vm.location, AtMs: s.cfg.Now().UnixMilli(),
	})
	if err != nil {
		return err
	}
	if err := viewOutcomeError("registerView", res); err != nil {
		return err
	}
	writeLoadViewResult(w, vm)
	return nil
}

// isJSONObject reports whether raw is a JSON object (after white space).
func isJSONObject(raw json.RawMessage) bool {
	t := bytes.TrimLeft(raw, " \t\r\n")
	return len(t) > 0 && t[0] == '{'
}
