package catalog

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/idempotency"
	"github.com/floe-catalog/floe/internal/storage"
)

type loadTableResult struct {
	// MetadataLocation is null for a staged create, which has no file
	// yet: the spec marks it optional, and PyIceberg before 0.8 requires
	// the key (its model's field has no default).
	MetadataLocation   *string             `json:"metadata-location"`
	Metadata           json.RawMessage     `json:"metadata"`
	Config             map[string]string   `json:"config,omitempty"`
	StorageCredentials []storageCredential `json:"storage-credentials,omitempty"`
}

// loadResult is the LoadTableResult for table id with metadata tm. Its
// config holds the storage settings a client needs and never a credential,
// unless the request asks for vended credentials and vending is configured
// (credentials); then the answer must not be cached. It fails only when
// credentials were asked for and cannot be obtained.
func (s *Server) loadResult(w http.ResponseWriter, r *http.Request, id fsm.Ident, tm *tableMetadata, staged bool) (loadTableResult, error) {
	vc, err := s.credentials(r, id, tm.meta.Location())
	if err != nil {
		return loadTableResult{}, err
	}
	return s.loadResultWith(w, r, id, tm, staged, vc), nil
}

// loadResultWith is loadResult with the credentials already obtained.
func (s *Server) loadResultWith(w http.ResponseWriter, r *http.Request, id fsm.Ident, tm *tableMetadata, staged bool, vc vendedCredentials) loadTableResult {
	res := loadTableResult{Metadata: tm.raw, Config: s.whOf(r.Context()).objects.ClientConfig(tm.meta.Location())}
	if !staged {
		res.MetadataLocation = &tm.location
		if _, tagged := w.Header()[etagHeader]; !tagged { // loadTable sets its mode's
			setETag(w, tm.location)
		}
	}
	s.addVendedCredentials(r, id, vc, &res)
	if len(res.StorageCredentials) > 0 {
		// Never revalidated: a 304 would let a client keep credentials
		// that may have expired, or that a later request did not ask for.
		w.Header().Set("Cache-Control", "no-store")
		delete(w.Header(), etagHeader)
	}
	return res
}

// writeLoadResult writes loadResult's answer with status 200.
func (s *Server) writeLoadResult(w http.ResponseWriter, r *http.Request, id fsm.Ident, tm *tableMetadata, staged bool) error {
	res, err := s.loadResult(w, r, id, tm, staged)
	if err != nil {
		return err
	}
	writeLoadTableResult(w, res)
	return nil
}

// writeLoadTableResult writes res with status 200: the body writeJSON
// writes, with res.Metadata (held compact and escaped as encoding/json
// writes it: encodedJSON, encodeMetadata) written as it is, between the
// encoded fields before and after it, rather than copied with them into
// one buffer. A slow client of a large table held such a copy for as
// long as it took to read it; a dozen of them, as many copies.
func writeLoadTableResult(w http.ResponseWriter, res loadTableResult) {
	doc := res.Metadata
	res.Metadata = json.RawMessage("null")
	b, err := json.Marshal(res)
	// The fields are encoded in order, and a quote inside a string is
	// escaped: the first `"metadata":null` is the field's.
	const field = `"metadata":`
	i := bytes.Index(b, []byte(field+"null"))
	if err != nil || i < 0 || reencodeMetadata.Load() {
		res.Metadata = doc
		writeJSON(w, http.StatusOK, res)
		return
	}
	head, tail := b[:i+len(field)], append(b[i+len(field+"null"):], '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(head)+len(doc)+len(tail)))
	w.WriteHeader(http.StatusOK)
	for _, part := range [][]byte{head, doc, tail} {
		if _, err := w.Write(part); err != nil {
			return
		}
	}
}

func tableVar(r *http.Request) (fsm.Ident, error) {
	levels, err := namespaceVar(r)
	if err != nil {
		return fsm.Ident{}, err
	}
	name, err := escapedVar(r, "table")
	if err != nil {
		return fsm.Ident{}, err
	}
	if err := validateName("table name", name); err != nil {
		return fsm.Ident{}, err
	}
	return fsm.Ident{Namespace: levels, Name: name}, nil
}

// lookupTable reads one table entry (see read): 404 NoSuchTable when it or
// its namespace is missing.
func (s *Server) lookupTable(r *http.Request, id fsm.Ident) (fsm.Table, error) {
	var t fsm.Table
	err := s.read(r, func(rd *fsm.Reader) error {
		var ok bool
		if t, ok = rd.Table(id); ok {
			return nil
		}
		if _, nsOK := rd.Namespace(id.Namespace); !nsOK {
			return notFoundTable("table does not exist: %s (namespace %s does not exist)", id, nsString(id.Namespace))
		}
		return notFoundTable("table does not exist: %s", id)
	})
	return t, err
}

type listTablesResponse struct {
	NextPageToken *string           `json:"next-page-token"`
	Identifiers   []tableIdentifier `json:"identifiers"`
}

type tableIdentifier struct {
	Namespace []string `json:"namespace"`
	Name      string   `json:"name"`
}

// ident validates id and returns its stored form in the warehouse the
// request whose context is ctx addresses.
func (id tableIdentifier) ident(ctx context.Context) (fsm.Ident, error) {
	if err := validateNamespace(id.Namespace); err != nil {
		return fsm.Ident{}, err
	}
	// Tables and views share the type: the field's name, not a kind.
	if err := validateName("identifier name", id.Name); err != nil {
		return fsm.Ident{}, err
	}
	return fsm.Ident{Namespace: levelsIn(ctx, id.Namespace), Name: id.Name}, nil
}

// checkBodyIdentifier accepts the optional identifier of an updateTable
// body when it names the route's table, or names it behind one extra
// leading namespace level. PyIceberg 0.5 and 0.6 send that shape: their
// tables' identifiers start with the client's catalog name, which they
// strip from the path but not from the body. Anything else is a 400, and
// the route alone decides which table a commit changes.
func checkBodyIdentifier(ctx context.Context, body tableIdentifier, route fsm.Ident) error {
	bodyID, err := body.ident(ctx)
	if err != nil {
		return err
	}
	if bodyID.String() == route.String() {
		return nil
	}
	if len(body.Namespace) > 1 {
		tail := tableIdentifier{Namespace: body.Namespace[1:], Name: body.Name}
		if id, err := tail.ident(ctx); err == nil && id.String() == route.String() {
			return nil
		}
	}
	return badRequest("identifier %s in the body does not match the route's %s", bodyID, route)
}

func (s *Server) listTables(w http.ResponseWriter, r *http.Request) error {
	return s.listIdents(w, r, (*fsm.Reader).TableNames)
}

// listIdents serves a paginated listing of the tables or views (list) of
// the namespace in the path: 404 NoSuchNamespace when it does not exist.
func (s *Server) listIdents(w http.ResponseWriter, r *http.Request, list func(rd *fsm.Reader, levels []string, after string, limit int) ([]string, bool)) error {
	levels, err := namespaceVar(r)
	if err != nil {
		return err
	}
	after, limit, err := page(r)
	if err != nil {
		return err
	}
	resp := listTablesResponse{Identifiers: []tableIdentifier{}}
	err = s.read(r, func(rd *fsm.Reader) error {
		if _, ok := rd.Namespace(levels); !ok {
			return notFoundNamespace("namespace does not exist: %s", nsString(levels))
		}
		names, more := list(rd, levels, after, limit)
		// Every identifier shares one namespace: the encoder only reads it.
		ns := external(levels)
		resp.Identifiers = make([]tableIdentifier, len(names))
		for i, name := range names {
			resp.Identifiers[i] = tableIdentifier{Namespace: ns, Name: name}
		}
		if len(names) > 0 {
			resp.NextPageToken = nextToken(more, names[len(names)-1])
		}
		return nil
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

type createTableRequest struct {
	Name          string                  `json:"name"`
	Location      string                  `json:"location"`
	Schema        *iceberg.Schema         `json:"schema"`
	PartitionSpec requestPartitionSpec    `json:"partition-spec"`
	WriteOrder    *table.UnboundSortOrder `json:"write-order"`
	StageCreate   bool                    `json:"stage-create"`
	Properties    stringMap               `json:"properties"`
}

// newTableUUID is the UUID of a table created by r: a new UUIDv7, but for
// a staged create under an Idempotency-Key a UUIDv5 derived from the key.
// A staged create stores nothing but its key's record, so its replay runs
// it again (replay); derived from the key, the UUID, and the default
// location made from it, are the first answer's.
func (s *Server) newTableUUID(r *http.Request, id fsm.Ident, staged bool) (uuid.UUID, error) {
	if staged && !s.cfg.IdempotencyDisabled {
		if key, _, err := idempotency.ParseKey(r.Header.Get(idempotency.Header)); err == nil {
			// With what the key is bound to besides the body: the same key
			// used again once its record expired, by someone else or for
			// another table, makes another UUID.
			name := strings.Join([]string{key, s.principalOf(r), s.whOf(r.Context()).name, id.String()}, "\x00")
			return uuid.NewSHA1(stagedTableSpace, []byte(name)), nil
		}
	}
	return uuid.NewV7()
}

// stagedTableSpace is the UUIDv5 name space of staged tables' UUIDs.
var stagedTableSpace = uuid.MustParse("6f2d1f0e-3c59-4f4e-9a53-2f1c5b7d0a41")

func (s *Server) createTable(w http.ResponseWriter, r *http.Request) error {
	levels, err := namespaceVar(r)
	if err != nil {
		return err
	}
	var req createTableRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	if err := validateNewName("table name", req.Name); err != nil {
		return err
	}
	if req.Schema == nil {
		return badRequest("schema is required")
	}
	if err := validateProperties(req.Properties); err != nil {
		return err
	}
	if req.PartitionSpec.spec != nil {
		for _, f := range req.PartitionSpec.spec.Fields() {
			if err := checkSourceIDs(f.Name, f.SourceIDs); err != nil {
				return err
			}
		}
	}
	if req.WriteOrder != nil {
		for i, f := range req.WriteOrder.Fields() {
			if err := checkSortSourceIDs(i, f.SourceIDs); err != nil {
				return err
			}
		}
	}
	id := fsm.Ident{Namespace: levels, Name: req.Name}
	setAuditTarget(r, id.String())
	err = s.store.Read(r.Context(), func(rd *fsm.Reader) error {
		if _, ok := rd.Namespace(levels); !ok {
			return notFoundNamespace("namespace does not exist: %s", nsString(levels))
		}
		if _, ok := rd.Table(id); ok {
			// An early answer for the common case; the state machine decides
			// again when the command is applied.
			return &apiError{status: http.StatusConflict, typ: "AlreadyExistsException", msg: "table already exists: " + id.String()}
		}
		if _, ok := rd.View(id); ok {
			// A staged create is answered from this read alone: without it,
			// a create transaction at a view's name would be refused only
			// at its final commit.
			return &apiError{status: http.StatusConflict, typ: "AlreadyExistsException", msg: "view already exists: " + id.String()}
		}
		return nil
	})
	if err != nil {
		return err
	}
	tableUUID, err := s.newTableUUID(r, id, req.StageCreate)
	if err != nil {
		return err
	}
	loc := strings.TrimSuffix(req.Location, "/")
	if loc == "" {
		if err := checkNewLocationSpelling(s.defaultLocation(r.Context(), id)); err != nil {
			return badRequest("table %s has no default location (%v): give the table a location", id, err)
		}
		if loc, err = s.newDefaultLocation(r.Context(), id, tableUUID, (*fsm.Reader).CheckClaim); err != nil {
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
	if err := s.checkOwner(r.Context(), id, loc); err != nil {
		return err
	}
	order := table.UnsortedSortOrder
	if req.WriteOrder != nil {
		order = req.WriteOrder.SortOrder
	}
	meta, err := table.NewMetadataWithUUID(req.Schema, req.PartitionSpec.spec, order, loc, s.storagePropertiesDropped(id, req.Properties), tableUUID)
	if err != nil {
		return badRequest("invalid table definition: %v", err)
	}
	if err := checkNewTableMetadata(nil, meta); err != nil {
		return err
	}
	if req.StageCreate {
		raw, err := encodeMetadata(meta)
		if err != nil {
			return err
		}
		// Nothing is written, but under an Idempotency-Key the answer is
		// recorded: the key is then bound to this request, and a retry is
		// a replay (which answers the same, see newTableUUID).
		if err := s.recordUnchanged(r.Context()); err != nil {
			return err
		}
		return s.writeLoadResult(w, r, id, &tableMetadata{raw: raw, meta: meta}, true)
	}
	vc, err := s.credentials(r, id, loc)
	if err != nil {
		return err
	}
	tm, err := s.writeMetadata(r.Context(), meta, 0)
	if err != nil {
		return err
	}
	res, err := s.store.Propose(r.Context(), fsm.CommitTables{
		Changes: []fsm.TableChange{{
			Kind: fsm.ChangeCreate, Ident: id, MetadataLocation: tm.location, Location: loc,
			LocationKey: fsm.LocationKey(loc), UUID: tableUUID.String(),
		}},
		AtMs: s.cfg.Now().UnixMilli(),
	})
	if err != nil {
		if !isOutcomeUnknown(err) {
			s.discard(r.Context(), tm.location)
		}
		return err
	}
	if err := res.Err(); err != nil {
		s.discard(r.Context(), tm.location)
		return err
	}
	writeLoadTableResult(w, s.loadResultWith(w, r, id, tm, false, vc))
	return nil
}

func (s *Server) loadTable(w http.ResponseWriter, r *http.Request) error {
	id, err := tableVar(r)
	if err != nil {
		return err
	}
	// Case-insensitive, as the reference server parses it.
	mode := strings.ToLower(r.URL.Query().Get("snapshots"))
	if mode != "" && mode != "all" && mode != "refs" {
		return badRequest("snapshots must be all or refs, got %q", r.URL.Query().Get("snapshots"))
	}
	t, err := s.lookupTable(r, id)
	if err != nil {
		return err
	}
	etag := etagFor(t.MetadataLocation, mode)
	w.Header()[etagHeader] = []string{etag}
	// A client asking for credentials gets them fresh, never a 304.
	vending := s.whOf(r.Context()).vendor != nil && wantsVendedCredentials(r)
	if inm := r.Header.Get("If-None-Match"); inm != "" && !vending && etagMatches(inm, etag) {
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	moved, tm, err := s.readTableMetadata(r.Context(), id, t)
	if err != nil {
		return err
	}
	if moved.MetadataLocation != t.MetadataLocation {
		w.Header()[etagHeader] = []string{etagFor(moved.MetadataLocation, mode)}
	}
	res, err := s.loadResult(w, r, id, tm, false)
	if err != nil {
		return err
	}
	if mode == "refs" {
		if res.Metadata, err = onlyReferencedSnapshots(tm); err != nil {
			return err
		}
	}
	writeLoadTableResult(w, res)
	return nil
}

// etagFor names one version of a loadTable answer: the metadata file is
// immutable, so its location (and the snapshots mode) determines the body.
// No mode and "all" give the same body, so the same tag.
func etagFor(metadataLocation, mode string) string {
	if mode == "" {
		mode = "all"
	}
	sum := sha256.Sum256([]byte(mode + "\x00" + metadataLocation))
	return `"` + hex.EncodeToString(sum[:16]) + `"`
}

// setETag tags a create, register or commit answer, whose metadata is the
// whole file at metadataLocation, as loadTable would tag that version
// (the spec's etag header on CreateTableResponse and CommitTableResponse):
// a client may send it as If-None-Match on its next load.
func setETag(w http.ResponseWriter, metadataLocation string) {
	if metadataLocation != "" {
		w.Header()[etagHeader] = []string{etagFor(metadataLocation, "all")}
	}
}

// etagHeader is the ETag header's name as sent, spelt as the spec and
// Java's client spell it: that client keeps response headers in a
// case-sensitive map under the names as they arrived and looks up "ETag",
// so Go's canonical "Etag" (what Header().Set writes) would never be
// found, and it would never send If-None-Match. Set it through the map,
// not Header().Set.
const etagHeader = "ETag"

func etagMatches(header, etag string) bool {
	for _, candidate := range strings.Split(header, ",") {
		c := strings.TrimPrefix(strings.TrimSpace(candidate), "W/")
		if c == etag || c == "*" {
			return true
		}
	}
	return false
}

// onlyReferencedSnapshots returns the metadata JSON with only the snapshots
// that a branch or tag points at (snapshots=refs).
func onlyReferencedSnapshots(tm *tableMetadata) (json.RawMessage, error) {
	keep := map[int64]bool{}
	for _, ref := range tm.meta.Refs() {
		keep[ref.SnapshotID] = true
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(tm.raw, &doc); err != nil {
		return nil, err
	}
	var snaps []json.RawMessage
	if raw, ok := doc["snapshots"]; ok {
		if err := json.Unmarshal(raw, &snaps); err != nil {
			return nil, err
		}
	}
	filtered := []json.RawMessage{}
	for _, sn := range snaps {
		var head struct {
			ID int64 `json:"snapshot-id"`
		}
		if err := json.Unmarshal(sn, &head); err != nil {
			return nil, err
		}
		if keep[head.ID] {
			filtered = append(filtered, sn)
		}
	}
	b, err := json.Marshal(filtered)
	if err != nil {
		return nil, err
	}
	doc["snapshots"] = b
	return json.Marshal(doc)
}

func (s *Server) tableExists(w http.ResponseWriter, r *http.Request) error {
	id, err := tableVar(r)
	if err != nil {
		return err
	}
	if _, err := s.lookupTable(r, id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

type commitTableRequest struct {
	Identifier   *tableIdentifier   `json:"identifier"`
	Requirements table.Requirements `json:"requirements"`
	Updates      table.Updates      `json:"updates"`
	// unnumberedSpecs holds, by position in Updates, the spec of each
	// add-spec update with a field that has no field-id (without the
	// nulls): numberAddedSpecs numbers them against the table.
	unnumberedSpecs map[int]json.RawMessage
}

type commitTableResponse struct {
	MetadataLocation string          `json:"metadata-location"`
	Metadata         json.RawMessage `json:"metadata"`
}

// decodeCommit parses a CommitTableRequest; an unknown requirement or update
// type, or a field of the wrong type, is a 400. The body is decoded once at
// the top level: requirements and updates are kept raw (absent: empty),
// then each decoded into its type.
func decodeCommit(raw json.RawMessage) (commitTableRequest, error) {
	var probe struct {
		Identifier   *tableIdentifier `json:"identifier"`
		Requirements json.RawMessage  `json:"requirements"`
		Updates      json.RawMessage  `json:"updates"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		return commitTableRequest{}, badRequest("malformed commit: %v", err)
	}
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		return commitTableRequest{}, badRequest("a commit must be a JSON object")
	}
	if isAbsent(probe.Requirements) && isAbsent(probe.Updates) {
		if err := checkOnlyKnownCommitFields(raw); err != nil {
			return commitTableRequest{}, err
		}
	}
	// Absent lists are empty, as Java's UpdateTableRequestParser reads
	// them (iceberg-js documents requirements as optional).
	if probe.Requirements == nil {
		probe.Requirements = json.RawMessage("[]")
	}
	if probe.Updates == nil {
		probe.Updates = json.RawMessage("[]")
	}
	req := commitTableRequest{Identifier: probe.Identifier}
	probe.Updates, req.unnumberedSpecs = addedSpecs(probe.Updates)
	reqs, err := nullMissingRefSnapshotIDs(probe.Requirements)
	if err != nil {
		return commitTableRequest{}, badRequest("invalid commit: %v", err)
	}
	if err := json.Unmarshal(reqs, &req.Requirements); err != nil {
		return commitTableRequest{}, badRequest("invalid commit: %v", err)
	}
	if err := json.Unmarshal(probe.Updates, &req.Updates); err != nil {
		return commitTableRequest{}, badRequest("invalid commit: %v", err)
	}
	if err := checkRefRetention(probe.Updates); err != nil {
		return commitTableRequest{}, err
	}
	if err := checkAddedSpecSources(probe.Updates); err != nil {
		return commitTableRequest{}, err
	}
	if err := checkSnapshotKeyIDs(probe.Updates); err != nil {
		return commitTableRequest{}, err
	}
	if err := checkPropertyUpdates(probe.Updates); err != nil {
		return commitTableRequest{}, err
	}
	return req, nil
}

// checkPropertyUpdates refuses a set-properties update whose updates are
// missing, null or hold a null value, and a remove-properties update whose
// removals are missing, null or hold a null name, as Java's parser does.
// iceberg-go, which decoded them already, reads a null as "": the table
// would get a property set to "" (or "" removed) and the commit succeed.
func checkPropertyUpdates(updates json.RawMessage) error {
	for _, raw := range updatesNaming(updates, "-properties") {
		var u struct {
			Action   string          `json:"action"`
			Updates  json.RawMessage `json:"updates"`
			Removals json.RawMessage `json:"removals"`
		}
		if json.Unmarshal(raw, &u) != nil {
			continue // iceberg-go accepted it: not one of these
		}
		switch u.Action {
		case "set-properties":
			var m stringMap
			if isAbsent(u.Updates) {
				return badRequest("set-properties has no updates: a map of property names to values")
			}
			if err := json.Unmarshal(u.Updates, &m); err != nil {
				return badRequest("set-properties: %v", err)
			}
		case "remove-properties":
			var names []*string
			if isAbsent(u.Removals) {
				return badRequest("remove-properties has no removals: a list of property names")
			}
			if err := json.Unmarshal(u.Removals, &names); err != nil {
				return badRequest("remove-properties: %v", err)
			}
			if slices.Contains(names, nil) {
				return badRequest("remove-properties: a removal is null: property names are strings")
			}
		}
	}
	return nil
}

// checkOnlyKnownCommitFields refuses a commit with neither requirements
// nor updates that carries other fields: a body such as {"properties":
// {...}}, which asks for a change in a shape the spec does not have, would
// otherwise be a commit of nothing, answered 200 with the table unchanged.
// Java's parser ignores unknown fields; with either list present, so does
// this one.
func checkOnlyKnownCommitFields(raw json.RawMessage) error {
	var fields map[string]json.RawMessage
	if json.Unmarshal(raw, &fields) != nil {
		return nil // decoded already; not an object is judged elsewhere
	}
	var unknown []string
	for k := range fields {
		switch k {
		case "identifier", "requirements", "updates":
		default:
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	return badRequest("a commit carries requirements and updates; this one has neither, and fields a commit does not define: %s", strings.Join(unknown, ", "))
}

// isAbsent reports whether a field decoded into raw was missing or null.
func isAbsent(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

// updatesNaming returns the raw updates of a commit's update list whose
// text contains needle, for checks that decode only those again (an
// append's add-snapshot, schemas and the like are not). None when the
// list does not mention needle at all, the common case, at the cost of
// one scan. iceberg-go has decoded the list already, so it splits.
func updatesNaming(updates json.RawMessage, needle string) []json.RawMessage {
	if !mayName(updates, needle) {
		return nil
	}
	var list []json.RawMessage
	if json.Unmarshal(updates, &list) != nil {
		return nil
	}
	out := list[:0]
	for _, raw := range list {
		if mayName(raw, needle) {
			out = append(out, raw)
		}
	}
	return out
}

// mayName reports whether the JSON text raw may hold needle as a key: it
// holds needle, or an escape (encoding/json decodes "key\u002did" as
// key-id, and so does every decoder after it).
func mayName(raw []byte, needle string) bool {
	return bytes.Contains(raw, []byte(needle)) || bytes.IndexByte(raw, '\\') >= 0
}

// checkSourceIDs refuses a partition field with several source columns
// (a multi-argument transform, format version 3): iceberg-go, which builds
// the metadata, would keep only the first and answer success.
func checkSourceIDs(field string, ids []int) error {
	if len(ids) > 1 {
		return badRequest("partition field %q has %d source-ids: multi-argument transforms are not supported (only the first source column would be kept)", field, len(ids))
	}
	return nil
}

// errSnapshotKeyID refuses a snapshot with a key-id (table spec v3: the
// encryption key of its manifest list): iceberg-go, which builds and
// writes the metadata, has no such field and drops it, so that the
// manifest list could no longer be decrypted; and every later commit
// would drop it from the snapshots a registered table has.
func errSnapshotKeyID(id any) error {
	return badRequest("snapshot %v has a key-id (an encrypted manifest list): encrypted snapshots are not supported, and the key-id would be lost", id)
}

// checkSnapshotKeyIDs refuses an add-snapshot update whose snapshot has a
// key-id (errSnapshotKeyID).
func checkSnapshotKeyIDs(updates json.RawMessage) error {
	for _, raw := range updatesNaming(updates, "key-id") {
		var u struct {
			Action   string                     `json:"action"`
			Snapshot map[string]json.RawMessage `json:"snapshot"`
		}
		if json.Unmarshal(raw, &u) != nil || u.Action != table.UpdateAddSnapshot {
			continue
		}
		if !isAbsent(u.Snapshot["key-id"]) {
			return errSnapshotKeyID(string(u.Snapshot["snapshot-id"]))
		}
	}
	return nil
}

// checkRegisteredSnapshots refuses metadata to register (raw) whose
// snapshots have a key-id (errSnapshotKeyID), or a summary other clients
// cannot parse (checkSnapshotSummary; a format version 1 file's snapshots
// may have none).
func checkRegisteredSnapshots(raw []byte) error {
	var doc struct {
		FormatVersion int                          `json:"format-version"`
		Snapshots     []map[string]json.RawMessage `json:"snapshots"`
	}
	if json.Unmarshal(raw, &doc) != nil {
		return nil
	}
	for _, snap := range doc.Snapshots {
		id := string(snap["snapshot-id"])
		if !isAbsent(snap["key-id"]) {
			return errSnapshotKeyID(id)
		}
		// As the file says, since it is served as stored: a summary that
		// iceberg-go reads as an overwrite may still name no operation.
		var summary map[string]json.RawMessage
		hasSummary := !isAbsent(snap["summary"])
		if hasSummary && json.Unmarshal(snap["summary"], &summary) != nil {
			return badRequest("snapshot %s: its summary is not a JSON object", id)
		}
		var op string
		if raw, ok := summary["operation"]; ok && json.Unmarshal(raw, &op) != nil {
			return badRequest("snapshot %s: its summary's operation is not a string", id)
		}
		// A format version 1 table written long ago may have snapshots
		// without a summary: every client's v1 parser reads them.
		if err := checkSnapshotSummary(id, hasSummary, doc.FormatVersion == 1, op); err != nil {
			return err
		}
	}
	return nil
}

// checkSortSourceIDs refuses a sort field (the i-th of its order) with
// several source columns: iceberg-go keeps only the first in a write
// order, and writes "source-ids" without "source-id" in an added one,
// which Java's SortOrderParser cannot read (it requires source-id), so
// that Java engines could no longer load the table.
func checkSortSourceIDs(i int, ids []int) error {
	if len(ids) > 1 {
		return badRequest("sort field %d has %d source-ids: multi-argument transforms are not supported in sort orders", i, len(ids))
	}
	return nil
}

// checkAddedSpecSources applies checkSourceIDs to the specs add-spec
// updates add, and checkSortSourceIDs to the orders add-sort-order
// updates add.
func checkAddedSpecSources(updates json.RawMessage) error {
	type field struct {
		Name      string `json:"name"`
		SourceIDs []int  `json:"source-ids"`
	}
	for _, raw := range updatesNaming(updates, "source-ids") {
		var u struct {
			Action string `json:"action"`
			Spec   struct {
				Fields []field `json:"fields"`
			} `json:"spec"`
			SortOrder struct {
				Fields []field `json:"fields"`
			} `json:"sort-order"`
		}
		if json.Unmarshal(raw, &u) != nil {
			continue
		}
		switch u.Action {
		case table.UpdateAddSpec:
			for _, f := range u.Spec.Fields {
				if err := checkSourceIDs(f.Name, f.SourceIDs); err != nil {
					return err
				}
			}
		case table.UpdateAddSortOrder:
			for i, f := range u.SortOrder.Fields {
				if err := checkSortSourceIDs(i, f.SourceIDs); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// requestPartitionSpec is the partition spec of a create-table request
// (nil when absent or null), decoded as specWithoutNullIDs reads it. It is
// unbound: its source ids refer to the request's schema, whose ids a
// client numbers as it likes (Spark numbers a new table's columns from 0);
// table.NewMetadataWithUUID binds it to that schema by name and assigns
// fresh ids, as it does the write order (table.UnboundSortOrder).
type requestPartitionSpec struct{ spec *iceberg.PartitionSpec }

func (p *requestPartitionSpec) UnmarshalJSON(b []byte) error {
	if isAbsent(b) {
		p.spec = nil
		return nil
	}
	var u iceberg.UnboundPartitionSpec
	if err := json.Unmarshal(specWithoutNullIDs(b), &u); err != nil {
		return err
	}
	p.spec = &u.PartitionSpec
	return nil
}

// specWithoutNullIDs returns the partition spec raw with a null spec-id,
// and a null field-id in any of its fields, left out: absent, as the
// reference parser reads an unbound spec's missing ids, to be assigned.
// iceberg-rust's unbound spec serialises both as null when unset (its
// builder's usual output); iceberg-go refuses the null. Anything that is
// not an object of that shape is returned as it is, for the parser to
// refuse.
func specWithoutNullIDs(raw json.RawMessage) json.RawMessage {
	if !bytes.Contains(raw, []byte("null")) {
		return raw
	}
	var spec map[string]json.RawMessage
	if json.Unmarshal(raw, &spec) != nil {
		return raw
	}
	changed := false
	if v, ok := spec["spec-id"]; ok && isAbsent(v) {
		delete(spec, "spec-id")
		changed = true
	}
	var fields []map[string]json.RawMessage
	if json.Unmarshal(spec["fields"], &fields) == nil {
		fieldsChanged := false
		for _, f := range fields {
			if v, ok := f["field-id"]; ok && isAbsent(v) {
				delete(f, "field-id")
				fieldsChanged = true
			}
		}
		if fieldsChanged {
			b, err := json.Marshal(fields)
			if err != nil {
				return raw
			}
			spec["fields"], changed = b, true
		}
	}
	if !changed {
		return raw
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return raw
	}
	return b
}

// addedSpecs applies specWithoutNullIDs to the spec of each add-spec
// update in the list updates, and returns, by position, those specs with a
// field that has no field-id: iceberg-go numbers such fields from 1000
// whatever the table holds, so that a new field would take the id of
// another in an earlier spec. numberAddedSpecs numbers them against the
// table instead.
func addedSpecs(updates json.RawMessage) (json.RawMessage, map[int]json.RawMessage) {
	if !mayName(updates, "add-spec") {
		return updates, nil
	}
	var list []map[string]json.RawMessage
	if json.Unmarshal(updates, &list) != nil {
		return updates, nil // not a list of objects: the parser says why
	}
	changed := false
	var unnumbered map[int]json.RawMessage
	for i, u := range list {
		var action string
		if json.Unmarshal(u["action"], &action) != nil || action != "add-spec" {
			continue
		}
		spec, ok := u["spec"]
		if !ok {
			continue
		}
		norm := specWithoutNullIDs(spec)
		if !bytes.Equal(norm, spec) {
			u["spec"], changed = norm, true
		}
		if hasUnnumberedField(norm) {
			if unnumbered == nil {
				unnumbered = map[int]json.RawMessage{}
			}
			unnumbered[i] = norm
		}
	}
	if !changed {
		return updates, unnumbered
	}
	b, err := json.Marshal(list)
	if err != nil {
		return updates, nil
	}
	return b, unnumbered
}

// specFields returns the fields of the partition spec raw, each as its
// keys; false when raw is not a spec object with a list of objects.
func specFields(raw json.RawMessage) (map[string]json.RawMessage, []map[string]json.RawMessage, bool) {
	var spec map[string]json.RawMessage
	if json.Unmarshal(raw, &spec) != nil {
		return nil, nil, false
	}
	var fields []map[string]json.RawMessage
	if json.Unmarshal(spec["fields"], &fields) != nil {
		return nil, nil, false
	}
	return spec, fields, true
}

func hasUnnumberedField(spec json.RawMessage) bool {
	_, fields, ok := specFields(spec)
	return ok && slices.ContainsFunc(fields, func(f map[string]json.RawMessage) bool {
		return f != nil && !hasFieldID(f)
	})
}

// hasFieldID reports whether the partition field f carries a field id:
// present and not 0, which iceberg-go, like an absent one, numbers itself.
func hasFieldID(f map[string]json.RawMessage) bool {
	v, ok := f["field-id"]
	if !ok {
		return false
	}
	var id int
	return json.Unmarshal(v, &id) != nil || id != 0 // not a number: the parser says why
}

// firstPartitionFieldID is the id of a table's first partition field.
const firstPartitionFieldID = 1000

// partitionFieldKey identifies a partition field across specs for id
// reuse: its source columns and its transform.
type partitionFieldKey struct {
	sources   string
	transform string
}

// fieldKey is the partitionFieldKey of a field as a request spells it.
func fieldKey(f map[string]json.RawMessage) partitionFieldKey {
	var field struct {
		SourceID  *int   `json:"source-id"`
		SourceIDs []int  `json:"source-ids"`
		Transform string `json:"transform"`
	}
	_ = json.Unmarshal(mustMarshal(f), &field) // a malformed field: the parser says why
	sources := field.SourceIDs
	if field.SourceID != nil {
		sources = []int{*field.SourceID}
	}
	k := partitionFieldKey{sources: fmt.Sprint(sources), transform: field.Transform}
	if t, err := iceberg.ParseTransform(field.Transform); err == nil {
		k.transform = t.String()
	}
	return k
}

// numberAddedSpecs returns req's updates with the fields of each spec in
// req.unnumberedSpecs given field ids as the reference implementation's
// spec evolution does from format version 2: the id of a field of the
// same source columns and transform in one of the table's specs (base; nil
// for a staged create) or in a spec added earlier in the commit, or else
// the next above the table's last-partition-id and every id in use. A
// field numbered by the client keeps its id; no id is given twice within
// a spec. Version 1 specs are left to iceberg-go, which numbers them by
// position, as that version requires. The updates are built anew from the
// table each time, so a commit retried on a newer version numbers against
// that version. A spec that does not decode once numbered is a 400.
func numberAddedSpecs(base table.Metadata, req commitTableRequest) (table.Updates, error) {
	if len(req.unnumberedSpecs) == 0 {
		return req.Updates, nil
	}
	ids := map[partitionFieldKey]int{}
	next := firstPartitionFieldID
	version := stagedFormatVersion(req.Updates)
	if base != nil {
		version = base.Version()
		for _, spec := range base.PartitionSpecs() {
			for _, f := range spec.Fields() {
				ids[partitionFieldKey{fmt.Sprint(f.SourceIDs), f.Transform.String()}] = f.FieldID
				next = max(next, f.FieldID+1)
			}
		}
		if last := base.LastPartitionSpecID(); last != nil {
			next = max(next, *last+1)
		}
	}
	// learn records the fields of a spec as it will be added.
	learn := func(fields []map[string]json.RawMessage) {
		for _, f := range fields {
			var id int
			if f != nil && json.Unmarshal(f["field-id"], &id) == nil && id != 0 {
				ids[fieldKey(f)] = id
				next = max(next, id+1)
			}
		}
	}
	out := slices.Clone(req.Updates)
	for i, u := range out {
		switch u.Action() {
		case table.UpdateUpgradeFormatVersion:
			var v struct {
				FormatVersion int `json:"format-version"`
			}
			if updateFields(u, &v) {
				version = max(version, v.FormatVersion)
			}
			continue
		case table.UpdateAddSpec:
		default:
			continue
		}
		raw, unnumbered := req.unnumberedSpecs[i]
		if !unnumbered {
			var added struct {
				Spec json.RawMessage `json:"spec"`
			}
			if updateFields(u, &added) {
				if _, fields, ok := specFields(added.Spec); ok {
					learn(fields)
				}
			}
			continue
		}
		spec, fields, ok := specFields(raw)
		if !ok || version < 2 {
			continue
		}
		used := map[int]bool{}
		for _, f := range fields {
			var id int
			if f != nil && hasFieldID(f) && json.Unmarshal(f["field-id"], &id) == nil {
				used[id] = true
				next = max(next, id+1)
			}
		}
		for _, f := range fields {
			if f == nil || hasFieldID(f) {
				continue
			}
			key := fieldKey(f)
			id, ok := ids[key]
			if !ok || used[id] {
				id, next = next, next+1
			}
			used[id] = true
			f["field-id"] = json.RawMessage(strconv.Itoa(id))
		}
		learn(fields)
		spec["fields"] = mustMarshal(fields)
		var numbered iceberg.UnboundPartitionSpec
		if err := json.Unmarshal(mustMarshal(spec), &numbered); err != nil {
			return nil, badRequest("invalid add-spec: %v", err)
		}
		out[i] = table.NewAddPartitionSpecUpdate(&numbered.PartitionSpec, false)
	}
	return out, nil
}

// mustMarshal marshals JSON values this package just unmarshalled (maps
// and lists of json.RawMessage), which cannot fail. Values of other
// packages (iceberg-go's updates) are marshalled with their errors
// checked instead.
func mustMarshal(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// assignedUUID is the UUID the last assign-uuid update among updates
// sets, if any.
func assignedUUID(updates table.Updates) (uuid.UUID, bool) {
	var (
		found bool
		last  uuid.UUID
	)
	for _, u := range updates {
		if u.Action() != table.UpdateAssignUUID {
			continue
		}
		var v struct {
			UUID uuid.UUID `json:"uuid"`
		}
		if updateFields(u, &v) {
			last, found = v.UUID, true
		}
	}
	return last, found
}

// checkRefRetention refuses a set-snapshot-ref whose retention the
// reference implementation's SnapshotRef builder refuses: a value not
// above 0, or a branch-only one on a tag. iceberg-go would drop such a
// value and answer success without it. null clears a value and passes.
func checkRefRetention(updates json.RawMessage) error {
	for _, raw := range updatesNaming(updates, "set-snapshot-ref") {
		var u struct {
			Action             string `json:"action"`
			RefName            string `json:"ref-name"`
			Type               string `json:"type"`
			MinSnapshotsToKeep *int64 `json:"min-snapshots-to-keep"`
			MaxSnapshotAgeMs   *int64 `json:"max-snapshot-age-ms"`
			MaxRefAgeMs        *int64 `json:"max-ref-age-ms"`
		}
		// iceberg-go decoded every set-snapshot-ref already; an update of
		// another action whose fields do not fit u is not one.
		if json.Unmarshal(raw, &u) != nil || u.Action != "set-snapshot-ref" {
			continue
		}
		for _, f := range []struct {
			v         *int64
			msg, name string
		}{
			{u.MinSnapshotsToKeep, "Min snapshots to keep must be greater than 0", "minSnapshotsToKeep"},
			{u.MaxSnapshotAgeMs, "Max snapshot age must be greater than 0 ms", "maxSnapshotAgeMs"},
			{u.MaxRefAgeMs, "Max reference age must be greater than 0", ""},
		} {
			switch {
			case f.v == nil:
			case f.name != "" && strings.EqualFold(u.Type, "tag"):
				return badRequest("ref %q: Tags do not support setting %s", u.RefName, f.name)
			case *f.v <= 0:
				return badRequest("ref %q: %s", u.RefName, f.msg)
			}
		}
	}
	return nil
}

// nullMissingRefSnapshotIDs gives every assert-ref-snapshot-id requirement
// without a snapshot-id an explicit null one ("the ref must not exist"), as
// the reference implementation reads it: serialisers that drop null fields
// send it so when a commit creates a branch. iceberg-go's parser insists on
// the field. Anything else is passed on unchanged, for that parser to judge.
func nullMissingRefSnapshotIDs(raw json.RawMessage) (json.RawMessage, error) {
	if !bytes.Contains(raw, []byte("assert-ref-snapshot-id")) {
		return raw, nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return raw, nil // not a list: the parser says why
	}
	changed := false
	for i, item := range list {
		var fields map[string]json.RawMessage
		if json.Unmarshal(item, &fields) != nil {
			continue
		}
		var typ string
		if json.Unmarshal(fields["type"], &typ) != nil || typ != "assert-ref-snapshot-id" {
			continue
		}
		if _, ok := fields["snapshot-id"]; ok {
			continue
		}
		fields["snapshot-id"] = json.RawMessage("null")
		b, err := json.Marshal(fields)
		if err != nil {
			return nil, err
		}
		list[i], changed = b, true
	}
	if !changed {
		return raw, nil
	}
	return json.Marshal(list)
}

func (s *Server) updateTable(w http.ResponseWriter, r *http.Request) error {
	id, err := tableVar(r)
	if err != nil {
		return err
	}
	raw, err := readJSONBody(r)
	if err != nil {
		return err
	}
	req, err := decodeCommit(raw)
	if err != nil {
		return err
	}
	if req.Identifier != nil {
		if err := checkBodyIdentifier(r.Context(), *req.Identifier, id); err != nil {
			return err
		}
	}
	out, err := s.commit(r.Context(), []pendingCommit{{id: id, req: req}})
	if err != nil {
		return err
	}
	writeCommitResult(w, out[0])
	return nil
}

// writeCommitResult answers a commit with the CommitTableResponse for tm, a
// metadata file this node has just written: its bytes (encodeMetadata's,
// compact and escaped as encoding/json writes them) go into the answer as
// they are, not copied and checked once more by an encoder. The body is
// the one writeJSON would write.
func writeCommitResult(w http.ResponseWriter, tm *tableMetadata) {
	setETag(w, tm.location)
	if reencodeMetadata.Load() {
		writeJSON(w, http.StatusOK, commitTableResponse{MetadataLocation: tm.location, Metadata: tm.raw})
		return
	}
	loc, _ := json.Marshal(tm.location) // never fails for a string
	const head, tail = `{"metadata-location":`, "}\n"
	start := append(append([]byte(head), loc...), `,"metadata":`...)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(start)+len(tm.raw)+len(tail)))
	w.WriteHeader(http.StatusOK)
	for _, part := range [][]byte{start, tm.raw, []byte(tail)} {
		if _, err := w.Write(part); err != nil {
			return
		}
	}
}

type commitTransactionRequest struct {
	TableChanges []json.RawMessage `json:"table-changes"`
}

func (s *Server) commitTransaction(w http.ResponseWriter, r *http.Request) error {
	var req commitTransactionRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	if len(req.TableChanges) == 0 {
		return badRequest("table-changes must not be empty")
	}
	pending := make([]pendingCommit, 0, len(req.TableChanges))
	seen := map[string]bool{}
	for i, raw := range req.TableChanges {
		c, err := decodeCommit(raw)
		if err != nil {
			return err
		}
		if c.Identifier == nil {
			return badRequest("table-changes[%d] has no identifier", i)
		}
		id, err := c.Identifier.ident(r.Context())
		if err != nil {
			return err
		}
		if err := s.authorize(r, PrivWrite, id.Namespace, func() error {
			return notFoundTable("table does not exist: %s", id)
		}); err != nil {
			return err
		}
		// By levels and name: the dotted form is one string for db."x.y"
		// and db.x."y", two tables.
		k := lockKey(id)
		if seen[k] {
			return badRequest("table %s appears more than once in the transaction", id)
		}
		seen[k] = true
		pending = append(pending, pendingCommit{id: id, req: c})
	}
	if _, err := s.commit(r.Context(), pending); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

type pendingCommit struct {
	id  fsm.Ident
	req commitTableRequest
}

// prepared is one table's new metadata, written and ready to propose.
type prepared struct {
	change fsm.TableChange
	before *tableMetadata // nil for a create
	after  *tableMetadata
	// unchanged: the updates changed nothing, so nothing was written and
	// after is before. The change, if any, is a compare-and-set of the
	// table's current metadata file onto itself.
	unchanged bool
	// skip: unchanged, and answered without a proposal (see prepareOne's
	// skipUnchanged).
	skip bool
}

// commit applies a commit to one or more tables atomically. It builds each
// table's new metadata on the current one, writes the files, and proposes
// one CommitTables. When the compare-and-set loses to a concurrent commit it
// rebuilds on the newer metadata (requirements are checked again) up to
// CommitRetries times, then answers 409. Files of attempts that lost are
// deleted; when the outcome is unknown they are kept, since the pointer may
// now reference them.
func (s *Server) commit(ctx context.Context, pending []pendingCommit) ([]*tableMetadata, error) {
	ids := make([]fsm.Ident, len(pending))
	for i, p := range pending {
		ids[i] = p.id
	}
	unlock, timedOut, err := s.commits.lock(ctx, ids...)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if timedOut {
		s.metrics.turnTimeouts.Inc()
	}
	for attempt := 0; ; attempt++ {
		preps, err := s.prepareCommit(ctx, pending)
		written := func() []string {
			var locs []string
			for _, p := range preps {
				if !p.unchanged {
					locs = append(locs, p.after.location)
				}
			}
			return locs
		}
		if err != nil {
			s.discard(ctx, written()...)
			return nil, err
		}
		if len(preps) == 1 && preps[0].skip {
			return []*tableMetadata{preps[0].after}, nil
		}
		changes := make([]fsm.TableChange, len(preps))
		for i, p := range preps {
			changes[i] = p.change
		}
		res, err := s.store.Propose(ctx, fsm.CommitTables{Changes: changes, AtMs: s.cfg.Now().UnixMilli()})
		if err != nil {
			if !isOutcomeUnknown(err) {
				s.discard(ctx, written()...)
			}
			return nil, err
		}
		if err := res.Err(); err != nil {
			s.discard(ctx, written()...)
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
			return nil, outcomeError("updateTable", res)
		}
		out := make([]*tableMetadata, len(preps))
		var expired []tableFiles
		for i, p := range preps {
			out[i] = p.after
			if p.before != nil && !p.unchanged {
				if files := expiredMetadataFiles(p.before.location, p.before.meta, p.after.meta); len(files) > 0 {
					expired = append(expired, tableFiles{p.change.Ident, files})
				}
			}
		}
		if len(expired) > 0 {
			s.discard(ctx, s.ownedOnly(ctx, expired)...)
		}
		return out, nil
	}
}

// prepareCommit reads the current pointers in one linearizable read, then
// builds and writes each table's new metadata. On error the files already
// written are in the returned slice so the caller can delete them.
func (s *Server) prepareCommit(ctx context.Context, pending []pendingCommit) ([]prepared, error) {
	current := make([]*fsm.Table, len(pending))
	err := s.store.Read(ctx, func(rd *fsm.Reader) error {
		for i, p := range pending {
			if t, ok := rd.Table(p.id); ok {
				current[i] = &t
			} else if _, ok := rd.Namespace(p.id.Namespace); !ok {
				return notFoundTable("table does not exist: %s (namespace %s does not exist)", p.id, nsString(p.id.Namespace))
			} else if !hasAssertCreate(p.req.Requirements) {
				// Before any table's file is written.
				return notFoundTable("table does not exist: %s", p.id)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var preps []prepared
	for i, p := range pending {
		// Under an Idempotency-Key the commit is proposed even when it
		// changes nothing: the proposal records the answer, so that a
		// retry gets it even after the table moved on.
		prep, err := s.prepareOne(ctx, p, current[i], len(pending) == 1 && !idempotency.InRun(ctx))
		if err != nil {
			return preps, err
		}
		preps = append(preps, prep)
	}
	return preps, nil
}

func hasAssertCreate(reqs table.Requirements) bool {
	return slices.ContainsFunc(reqs, func(r table.Requirement) bool { return r.GetType() == "assert-create" })
}

// prepareOne builds and writes one table's next metadata on cur (nil: a
// staged create being completed). A commit to an existing table whose
// updates change nothing (none, or each a no-op) writes nothing and is
// answered with the current metadata, as Java's reference catalog does.
// With skipUnchanged (a single-table commit without an Idempotency-Key) it
// is not proposed either: its requirements have been checked against a
// linearizable read. Otherwise its change is a compare-and-set of the
// current metadata file onto itself: in a transaction of several tables
// each table's compare-and-set is what makes it all-or-nothing, and under
// an Idempotency-Key the proposal records the answer. (A new file for a
// no-op would be written without the current one in its metadata log:
// iceberg-go logs the previous file only when something changed.)
func (s *Server) prepareOne(ctx context.Context, p pendingCommit, cur *fsm.Table, skipUnchanged bool) (prepared, error) {
	var (
		before  *tableMetadata
		base    table.Metadata
		builder *table.MetadataBuilder
		err     error
	)
	switch {
	case cur == nil && !hasAssertCreate(p.req.Requirements):
		return prepared{}, notFoundTable("table does not exist: %s", p.id)
	case cur == nil:
		// Completing a staged create: build from nothing, under a name
		// that must be fit for a new table (in a namespace that exists:
		// its levels are not judged again).
		if err := validateNewName("table name", p.id.Name); err != nil {
			return prepared{}, err
		}
		builder, err = table.NewMetadataBuilder(stagedFormatVersion(p.req.Updates))
	default:
		if *cur, before, err = s.readTableMetadata(ctx, p.id, *cur); err != nil {
			return prepared{}, fmt.Errorf("%w: %w", errBaseNotRead, err)
		}
		base = before.meta
		builder, err = table.MetadataBuilderFromBase(base, cur.MetadataLocation)
	}
	if err != nil {
		return prepared{}, err
	}
	if n := countUpdates(p.req.Updates, table.UpdateAddSnapshot); n > maxSnapshotsPerChange {
		// Building a change costs more than linearly in the snapshots it
		// adds (with a set-snapshot-ref each), so one request could hold
		// a CPU for seconds. An engine adds one snapshot per operation, a
		// handful per transaction.
		return prepared{}, badRequest("a change to %s may add at most %d snapshots, this one adds %d", p.id, maxSnapshotsPerChange, n)
	}
	// Each added schema, partition spec or sort order is compared with
	// every one the metadata has (reuse of an equal one): tens of
	// thousands in one body held a CPU for many seconds.
	for _, action := range []string{table.UpdateAddSchema, table.UpdateAddSpec, table.UpdateAddSortOrder} {
		if n := countUpdates(p.req.Updates, action); n > maxSchemasPerChange {
			return prepared{}, badRequest("a change to %s may add at most %d of %q, this one adds %d", p.id, maxSchemasPerChange, action, n)
		}
	}
	for _, req := range p.req.Requirements {
		if err := req.Validate(base); err != nil {
			return prepared{}, commitFailed("requirement failed for %s: %v", p.id, err)
		}
	}
	updates, err := numberAddedSpecs(base, p.req)
	if err != nil {
		return prepared{}, err
	}
	updates = withoutNoOpRefRemovals(base, withoutNoOpRemovals(base, withTrimmedLocations(updates)))
	updates = s.withoutStorageProperties(p.id, updates)
	for _, u := range updates {
		if err := u.Apply(builder); err != nil {
			return prepared{}, refusedByBuilder(err, "cannot apply %s to %s: %v", u.Action(), p.id, err)
		}
	}
	if cur != nil && !builder.HasChanges() {
		if skipUnchanged {
			return prepared{before: before, after: before, unchanged: true, skip: true}, nil
		}
		// The table's record as it is: nothing about it changes.
		return prepared{change: fsm.TableChange{
			Kind: fsm.ChangeUpdate, Ident: p.id, MetadataLocation: cur.MetadataLocation,
			Location: cur.Location, LocationKey: fsm.LocationKey(cur.Location), UUID: cur.UUID,
			SnapshotID:               currentSnapshotID(base),
			ExpectedMetadataLocation: cur.MetadataLocation, ExpectedUUID: cur.UUID,
		}, before: before, after: before, unchanged: true}, nil
	}
	if cur == nil {
		tableUUID, assigned := assignedUUID(p.req.Updates)
		if !assigned {
			tableUUID = uuid.Must(uuid.NewV7())
			if err := builder.SetUUID(tableUUID); err != nil {
				return prepared{}, err
			}
		}
		if !hasUpdate(p.req.Updates, table.UpdateSetLocation) {
			loc, err := s.newDefaultLocation(ctx, p.id, tableUUID, (*fsm.Reader).CheckClaim)
			if err != nil {
				return prepared{}, err
			}
			if err := builder.SetLoc(loc); err != nil {
				return prepared{}, err
			}
		}
	}
	meta, err := builder.Build()
	if err != nil {
		return prepared{}, refusedByBuilder(err, "invalid metadata for %s: %v", p.id, err)
	}
	if base != nil && base.TableUUID() != uuid.Nil && meta.TableUUID() != base.TableUUID() {
		return prepared{}, refusedByState("cannot reassign the uuid of %s (%s)", p.id, base.TableUUID())
	}
	if err := checkNewTableMetadata(base, meta); err != nil {
		return prepared{}, decidedByState(err)
	}
	if err := checkSnapshotTimes(base, meta, s.cfg.Now()); err != nil {
		return prepared{}, err
	}
	if err := s.checkLocation(ctx, meta.Location()); err != nil {
		return prepared{}, err
	}
	if err := s.checkScopeOf(ctx, p.id.Namespace, meta.Location(), cur == nil || meta.Location() != cur.Location); err != nil {
		return prepared{}, err
	}
	if cur == nil || meta.Location() != cur.Location {
		if err := checkNewLocationSpelling(meta.Location()); err != nil {
			return prepared{}, err
		}
		if cur != nil {
			if err := s.checkMovesEverywhere(); err != nil {
				return prepared{}, err
			}
		}
		if err := s.checkOwner(ctx, p.id, meta.Location()); err != nil {
			return prepared{}, err
		}
	}
	version := 0
	if before != nil {
		version = max(metadataVersion(before.location), 0) + 1
	}
	after, err := s.writeMetadata(ctx, meta, version)
	if err != nil {
		return prepared{}, err
	}
	ch := fsm.TableChange{
		Kind: fsm.ChangeCreate, Ident: p.id, MetadataLocation: after.location,
		Location: meta.Location(), LocationKey: fsm.LocationKey(meta.Location()), UUID: meta.TableUUID().String(),
		SnapshotID: currentSnapshotID(meta),
	}
	if cur != nil {
		ch.Kind = fsm.ChangeUpdate
		ch.ExpectedMetadataLocation = cur.MetadataLocation
		ch.ExpectedUUID = cur.UUID
		// The compare-and-set on cur's metadata location makes this exact.
		ch.Moves = cur.Location != ch.Location
	}
	return prepared{change: ch, before: before, after: after}, nil
}

// currentSnapshotID is the metadata's current snapshot, for the change
// feed; nil for a table without one.
func currentSnapshotID(meta table.Metadata) *int64 {
	if snap := meta.CurrentSnapshot(); snap != nil {
		id := snap.SnapshotID
		return &id
	}
	return nil
}

// defaultFormatVersion is the format version of a table whose staged
// create is completed without an upgrade-format-version update, as in
// Java's reference catalog (TableMetadata.buildFromEmpty).
const defaultFormatVersion = 2

// stagedFormatVersion is the version a staged create is built at: that of
// its first upgrade-format-version update, as Java's reference catalog
// does (CatalogHandlers.create), else defaultFormatVersion. An update
// that does not name a valid version is left for the builder to refuse.
func stagedFormatVersion(updates table.Updates) int {
	for _, u := range updates {
		if u.Action() != table.UpdateUpgradeFormatVersion {
			continue
		}
		var v struct {
			FormatVersion int `json:"format-version"`
		}
		if !updateFields(u, &v) || v.FormatVersion < 1 {
			break
		}
		return min(v.FormatVersion, defaultFormatVersion)
	}
	return defaultFormatVersion
}

func hasUpdate(updates table.Updates, action string) bool {
	return slices.ContainsFunc(updates, func(u table.Update) bool { return u.Action() == action })
}

func isOutcomeUnknown(err error) bool {
	if errors.Is(err, idempotency.ErrReplayed) {
		// A duplicate that raced the first request: Apply changed nothing,
		// so this request's metadata file is referenced by nothing.
		return false
	}
	ae := toAPIError(err, opCommit)
	return ae.typ == "CommitStateUnknownException"
}

func (s *Server) dropTable(w http.ResponseWriter, r *http.Request) error {
	id, err := tableVar(r)
	if err != nil {
		return err
	}
	purgeRequested, err := boolParam(r, "purgeRequested")
	if err != nil {
		return err
	}
	cmd := fsm.DropTable{Ident: id, AtMs: s.cfg.Now().UnixMilli()}
	var p Purger
	async := asyncPurgeRequested(r)
	if purgeRequested {
		// One entry removes the table, adds its purge job and the name and
		// location tombstones: there is never a dropped table without its job.
		if p, err = s.purger(); err != nil {
			return err
		}
		if cmd.Job, err = s.purgeSpec(r.Context(), p, async, s.principalOf(r)); err != nil {
			return err
		}
		s.stampFirstPhase(cmd.Job, id)
		cmd.Purge, cmd.JobInEvent = true, s.dropJobEvent()
	}
	res, err := s.store.Propose(r.Context(), cmd)
	if err != nil {
		return err
	}
	if err := outcomeError("dropTable", res); err != nil {
		return err
	}
	if purgeRequested {
		s.log.Info("table dropped with purge", "table", id.String(), "job_id", cmd.Job.ID, "async", async,
			"location", res.Tables[0].Location)
		if !async {
			if err := s.awaitPurge(r.Context(), p, cmd.Job.ID, res.Tables[0]); err != nil {
				return err
			}
		}
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) unregisterTable(w http.ResponseWriter, r *http.Request) error {
	id, err := tableVar(r)
	if err != nil {
		return err
	}
	// The answer is the table's metadata: drop alone does not let a
	// principal read it.
	if err := s.authorize(r, PrivRead, id.Namespace, func() error {
		return notFoundTable("table does not exist: %s", id)
	}); err != nil {
		return err
	}
	res, err := s.store.Propose(r.Context(), fsm.DropTable{Ident: id, AtMs: s.cfg.Now().UnixMilli()})
	if err != nil {
		return err
	}
	if err := outcomeError("unregisterTable", res); err != nil {
		return err
	}
	tm, err := s.readMetadata(r.Context(), res.Tables[0].MetadataLocation)
	if err != nil {
		// The table is unregistered already: never the 503 a storage
		// failure before a change gets, which clients resend.
		return &apiError{status: http.StatusInternalServerError, typ: "InternalServerError",
			msg: fmt.Sprintf("table %s was unregistered, but its metadata file %s could not be read: %v", id, res.Tables[0].MetadataLocation, err)}
	}
	writeJSON(w, http.StatusOK, commitTableResponse{MetadataLocation: tm.location, Metadata: tm.raw})
	return nil
}

type registerTableRequest struct {
	Name             string `json:"name"`
	MetadataLocation string `json:"metadata-location"`
	Overwrite        bool   `json:"overwrite"`
}

func (s *Server) registerTable(w http.ResponseWriter, r *http.Request) error {
	levels, err := namespaceVar(r)
	if err != nil {
		return err
	}
	var req registerTableRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	if err := validateNewName("table name", req.Name); err != nil {
		return err
	}
	if req.MetadataLocation == "" {
		return badRequest("metadata-location is required")
	}
	// An overwrite replaces the table of that name: it drops it, and
	// frees the places it held, which write alone does not allow.
	if req.Overwrite {
		if err := s.authorize(r, PrivDrop, levels, func() error {
			return notFoundNamespace("namespace does not exist: %s", nsString(levels))
		}); err != nil {
			return err
		}
	}
	// Spelled as a new location must be: the answer hands it to clients
	// as the table's metadata-location, and one that drops what follows a
	// '?' or '#' (Java's S3URI) would read another file.
	if err := checkNewLocationSpelling(req.MetadataLocation); err != nil {
		return err
	}
	if err := s.checkLocation(r.Context(), req.MetadataLocation); err != nil {
		return err
	}
	if err := s.checkScope(r.Context(), levels, req.MetadataLocation); err != nil {
		return err
	}
	// From storage, not the cache: a cached copy can outlive its file (a
	// purge on any node deletes the files of a dropped table).
	s.cache.remove(req.MetadataLocation)
	tm, err := s.readMetadataFile(r.Context(), req.MetadataLocation)
	if err != nil {
		return unreadableMetadataLocation(req.MetadataLocation, err)
	}
	if err := checkNewLocationSpelling(tm.meta.Location()); err != nil {
		return err
	}
	if err := s.checkLocation(r.Context(), tm.meta.Location()); err != nil {
		return err
	}
	if err := s.checkScope(r.Context(), levels, tm.meta.Location()); err != nil {
		return err
	}
	// Engines write where write.data.path and write.metadata.path say: as
	// at a create, they must lie inside the table's location, or a table
	// registered so would write into another table's; or inside a place
	// the table adopts that no other table holds (a table that moved,
	// dropped without purge and registered again, keeps writing there).
	id := fsm.Ident{Namespace: levels, Name: req.Name}
	adopts := s.placesOutside(r.Context(), levels, tm.meta)
	// Only the places the proposal carries, and the state machine will
	// adopt, may hold a write path: none while a node runs a release that
	// cannot adopt; of the others, those no other table holds nor a purge
	// deletes (Apply skips those without counting them), within what the
	// table may own.
	if old := s.nodesWithout(fsm.PurgeFeatureAdopts); len(old) > 0 && len(adopts) > 0 {
		s.log.Warn("registering without adopting the places the metadata points into: nodes run an older release; register the table again once every node is upgraded",
			"table", id.String(), "places", len(adopts), "nodes", strings.Join(old, ", "))
		adopts = nil
	}
	var unheld []fsm.FormerLocation
	for _, a := range adopts {
		if s.checkOwner(r.Context(), id, a.Location) == nil {
			unheld = append(unheld, a)
		}
	}
	adopted, err := s.adoptBudget(r.Context(), id, req.Overwrite, tm.meta, unheld)
	if err != nil {
		return err
	}
	free := make([]string, 0, len(adopted))
	for _, a := range adopted {
		free = append(free, a.Location)
	}
	if err := checkWritePaths(nil, tm.meta, free...); err != nil {
		return err
	}
	if err := checkStorageProperties(nil, tm.meta); err != nil {
		return err
	}
	if err := checkRegisteredSnapshots(tm.raw); err != nil {
		return err
	}
	// The metadata file must be the table's own: one inside another
	// table's location would make this table share (and a purge of
	// either destroy) the other's files.
	if !storage.IsWithin(tm.meta.Location(), tm.location) {
		return badRequest("metadata-location %s is not inside the location its metadata declares (%s)", tm.location, tm.meta.Location())
	}
	setAuditTarget(r, id.String())
	// A missing namespace is named first, as the reference implementation
	// does, before who owns the location (the state machine decides both
	// again when the registration applies).
	if err := s.store.Read(r.Context(), func(rd *fsm.Reader) error {
		if _, ok := rd.Namespace(id.Namespace); !ok {
			return notFoundNamespace("namespace does not exist: %s", nsString(id.Namespace))
		}
		return rd.CheckClaim(id, tm.meta.Location())
	}); err != nil {
		return err
	}
	// The file must still be there after that check. The location was
	// neither owned nor being purged then, so no purge can delete the file
	// between now and the commit (a table claiming the location first
	// would make the commit refuse); but a purge that finished just before
	// the check may have deleted it after the first read.
	if _, err := s.whOf(r.Context()).objects.Read(r.Context(), tm.location); err != nil {
		return unreadableMetadataLocation(tm.location, err)
	}
	if req.Overwrite {
		if err := s.checkMovesEverywhere(); err != nil {
			return err
		}
	}
	vc, err := s.credentials(r, id, tm.meta.Location())
	if err != nil {
		return err
	}
	_, err = s.apply(r.Context(), fsm.CommitTables{
		Changes: []fsm.TableChange{{
			Kind: fsm.ChangeRegister, Ident: id, MetadataLocation: tm.location,
			Location: tm.meta.Location(), LocationKey: fsm.LocationKey(tm.meta.Location()),
			UUID: tm.meta.TableUUID().String(), Overwrite: req.Overwrite, SnapshotID: currentSnapshotID(tm.meta),
			// An overwrite may move the table it replaces: keep the
			// location it leaves (body version 3) when it is the same table.
			Moves:  req.Overwrite,
			Adopts: adopts,
		}},
		AtMs: s.cfg.Now().UnixMilli(),
	})
	if err != nil {
		return err
	}
	s.cache.add(tm)
	writeLoadTableResult(w, s.loadResultWith(w, r, id, tm, false, vc))
	return nil
}

// placesOutside returns the places meta points into outside its own
// location, for a register to adopt (fsm.TableChange.Adopts): the table
// roots (the directory holding "metadata/") of its metadata log's files
// and its snapshots' manifest lists (or, in format version 1, embedded
// manifests), where a table that moved (set-location) left its files. Only places a new location could be are kept: strictly
// inside the allowed locations and spelled as a new location must be.
// Data files are not listed (that would read every manifest); they lie
// beside the manifest lists unless the table was written oddly. A place
// outside the namespace's scope (checkScope: a principal with write on one
// namespace only) is not adopted: adopting is claiming, and such a
// principal may not claim, get credentials for or purge another
// namespace's files by naming them in a metadata file it wrote.
func (s *Server) placesOutside(ctx context.Context, namespace []string, meta table.Metadata) []fsm.FormerLocation {
	own := fsm.LocationKey(meta.Location())
	var out []fsm.FormerLocation
	add := func(file string) {
		i := strings.LastIndex(file, "/metadata/")
		if i <= 0 || len(out) >= fsm.MaxFormerLocations {
			return
		}
		root := file[:i]
		key := fsm.LocationKey(root)
		// Never a place that holds the table's location, nor one inside
		// it: the state machine adopts neither (a table's places never
		// overlap), and a write path allowed for it would lie in a place
		// the table does not own, which another table could then claim.
		if key == "" || fsm.KeysOverlap(key, own) || storage.IsWithin(meta.Location(), root) || storage.IsWithin(root, meta.Location()) {
			return
		}
		for _, o := range out {
			if o.Key == key {
				return
			}
		}
		if checkNewLocationSpelling(root) != nil || s.checkLocation(ctx, root) != nil || s.checkScope(ctx, namespace, root) != nil {
			return
		}
		if s.isNamespaceDirectory(ctx, key) || s.isViewPlace(ctx, root) {
			return
		}
		out = append(out, fsm.FormerLocation{Location: root, Key: key})
	}
	for e := range meta.PreviousFiles() {
		add(e.MetadataFile)
	}
	for _, snap := range meta.Snapshots() {
		add(snap.ManifestList)
		// A format version 1 snapshot without a list names its manifests.
		for _, m := range snap.ManifestLocations {
			add(m)
		}
	}
	return out
}

// adoptBudget returns the first of adopts (places no other table holds)
// that the state machine can add to what the table at id will own: all of
// them but for a register that overwrites the same table (same UUID),
// which keeps the places it owns and may add the location it leaves,
// within fsm.MaxFormerLocations in all. Places it owns already are not
// counted (it keeps them anyway). The state machine skips an adoption
// over the limit without a word, so the catalog must not let a write
// path rely on one.
func (s *Server) adoptBudget(ctx context.Context, id fsm.Ident, overwrite bool, meta table.Metadata, adopts []fsm.FormerLocation) ([]fsm.FormerLocation, error) {
	if !overwrite || len(adopts) == 0 {
		return adopts, nil
	}
	cur, exists, err := s.tableRecord(ctx, id)
	if err != nil {
		return nil, err
	}
	if !exists || cur.UUID == "" || cur.UUID != meta.TableUUID().String() {
		return adopts, nil
	}
	owned := map[string]bool{fsm.LocationKey(cur.Location): true}
	for _, f := range cur.FormerLocations {
		owned[f.Key] = true
	}
	left := fsm.MaxFormerLocations - len(cur.FormerLocations)
	if fsm.LocationKey(meta.Location()) != fsm.LocationKey(cur.Location) {
		left-- // the location it leaves
	}
	var kept []fsm.FormerLocation
	for _, a := range adopts {
		if owned[a.Key] {
			kept = append(kept, a)
			continue
		}
		if left <= 0 {
			continue
		}
		left--
		kept = append(kept, a)
	}
	return kept, nil
}

// isNamespaceDirectory reports whether the place whose location key is
// key is a warehouse's root or the default directory of one of its
// namespaces (<warehouse>/<levels>): where the namespace's new tables go,
// and above every table of it, so never one table's place to adopt (a
// metadata log naming <warehouse>/other/metadata/… would otherwise have
// a register claim namespace other's directory). Its parents exist
// whenever a namespace does, so a directory above a namespace's is a
// namespace's too. A failed read counts as one: adopting is optional.
func (s *Server) isNamespaceDirectory(ctx context.Context, key string) bool {
	for _, w := range s.warehouses {
		whKey := fsm.LocationKey(w.location)
		if !strings.HasPrefix(key, whKey) {
			continue
		}
		rel := strings.Trim(strings.TrimPrefix(key, whKey), "/")
		if rel == "" {
			return true
		}
		levels := w.levels(strings.Split(rel, "/"))
		found := true
		if err := s.store.Read(ctx, func(rd *fsm.Reader) error {
			_, found = rd.Namespace(levels)
			return nil
		}); err != nil || found {
			return true
		}
	}
	return false
}

// isViewPlace reports whether a live view's location is equal to, inside
// or around root. Such a place holds the view's metadata files, which
// only their content tells from a table's: adopted, it would be purged
// with the table and covered by its vended credentials. A failed read
// counts as one: adopting is optional. (Apply does not check this; a view
// created there between this read and the register's commit is still
// protected by the purge guard, which reads such files before deleting.)
func (s *Server) isViewPlace(ctx context.Context, root string) bool {
	held := true
	if err := s.store.Read(ctx, func(rd *fsm.Reader) error {
		_, held = rd.ViewOverlapping(root)
		return nil
	}); err != nil {
		return true
	}
	return held
}

type renameTableRequest struct {
	Source      *tableIdentifier `json:"source"`
	Destination *tableIdentifier `json:"destination"`
}

func (s *Server) renameTable(w http.ResponseWriter, r *http.Request) error {
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
	if err := validateNewDestination("table name", to); err != nil {
		return err
	}
	setAuditTarget(r, from.String()+" -> "+to.String())
	// Moving a table takes its content along: drop alone does not let a
	// principal read it (nor, once it is moved where the principal may
	// write, obtain credentials for its files).
	for _, priv := range []string{PrivDrop, PrivRead} {
		if err := s.authorize(r, priv, from.Namespace, func() error {
			return notFoundTable("table does not exist: %s", from)
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
		// Renaming a table onto its own name changes nothing, as in Java's
		// reference catalog; only a missing table is an error.
		if _, err := s.lookupTable(r, from); err != nil {
			return err
		}
		if err := s.recordUnchanged(r.Context()); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	_, err = s.apply(r.Context(), fsm.RenameTable{From: from, To: to, AtMs: s.cfg.Now().UnixMilli()})
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

type reportMetricsRequest struct {
	ReportType string `json:"report-type"`
	TableName  string `json:"table-name"`
}

// reportMetrics accepts a client's metrics report, as Java's reference
// server does: whatever its report type (a type this release does not know
// is counted as "unknown"), and whether or not the table exists yet. Java
// reports the commits of a table staged in a create transaction before the
// transaction creates it (Spark's CREATE TABLE AS SELECT), and logs every
// refused report as a warning with its stack. So a report costs no read of
// the catalog. A body without a report-type is still a 400.
func (s *Server) reportMetrics(w http.ResponseWriter, r *http.Request) error {
	if _, err := tableVar(r); err != nil {
		return err
	}
	var req reportMetricsRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	switch req.ReportType {
	case "":
		return badRequest("report-type is required")
	case "scan-report", "commit-report":
	default:
		req.ReportType = "unknown"
	}
	s.metrics.metricsReports.WithLabelValues(req.ReportType).Inc()
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// maxSnapshotsPerChange bounds the snapshots one table's change adds.
const maxSnapshotsPerChange = 1000

// maxSchemasPerChange bounds the schemas (and, for a table, the partition
// specs and sort orders) one change of a table or view adds: iceberg-go
// compares each added one with every one the metadata has (reuse of an
// equal one), so tens of thousands in one body held a CPU for minutes and
// left a view every later commit of which took seconds. An engine adds
// one per change.
const maxSchemasPerChange = 100

// countUpdates counts the updates of the action.
func countUpdates(updates table.Updates, action string) int {
	n := 0
	for _, u := range updates {
		if u.Action() == action {
			n++
		}
	}
	return n
}

// withoutNoOpRemovals leaves out of updates a removal of snapshots,
// statistics, partition statistics or an encryption key that names only
// what base does not have, when no earlier update of the request could
// have added it. iceberg-go's builder records such a removal as a change,
// so it wrote a new metadata version, pushing real versions out of the
// metadata log (and, with write.metadata.delete-after-commit.enabled,
// deleting their files); Java's builder records no change, and the
// commit is answered with the current metadata.
func withoutNoOpRemovals(base table.Metadata, updates table.Updates) table.Updates {
	if base == nil {
		return updates
	}
	added := map[string]bool{}
	return withoutUpdates(updates, func(u table.Update) bool {
		var ids struct {
			SnapshotIDs []int64 `json:"snapshot-ids"`
			SnapshotID  *int64  `json:"snapshot-id"`
			KeyID       *string `json:"key-id"`
		}
		noop := false
		if add, ok := removalOf[u.Action()]; ok && !added[add] {
			if updateFields(u, &ids) {
				noop = !hasAny(base, u.Action(), ids.SnapshotIDs, ids.SnapshotID, ids.KeyID)
			}
		}
		added[u.Action()] = true
		return noop
	})
}

// withoutNoOpRefRemovals leaves out of updates a remove-snapshot-ref of a
// ref the table does not have when it applies: not in base, or removed
// by an earlier update of the request (directly, or with the snapshot it
// pointed to), and not set since. iceberg-go's builder refuses it (a 400
// a client does not retry); Java's builder records no change. Java
// clients send such removals with no requirement (an expiry that drops an
// aged ref, a DROP BRANCH or DROP TAG), so two of them racing on the same
// ref failed the second.
func withoutNoOpRefRemovals(base table.Metadata, updates table.Updates) table.Updates {
	if base == nil || !slices.ContainsFunc(updates, func(u table.Update) bool { return u.Action() == table.UpdateRemoveSnapshotRef }) {
		return updates
	}
	refs := map[string]int64{}
	for name, ref := range base.Refs() {
		refs[name] = ref.SnapshotID
	}
	return withoutUpdates(updates, func(u table.Update) bool {
		var f struct {
			RefName     string  `json:"ref-name"`
			SnapshotID  int64   `json:"snapshot-id"`
			SnapshotIDs []int64 `json:"snapshot-ids"`
		}
		noop := false
		if updateFields(u, &f) {
			switch u.Action() {
			case table.UpdateSetSnapshotRef:
				refs[f.RefName] = f.SnapshotID
			case table.UpdateRemoveSnapshots:
				for name, id := range refs {
					if slices.Contains(f.SnapshotIDs, id) {
						delete(refs, name)
					}
				}
			case table.UpdateRemoveSnapshotRef:
				_, ok := refs[f.RefName]
				noop = !ok
				delete(refs, f.RefName)
			}
		}
		return noop
	})
}

// withoutUpdates returns updates without those drop reports, called on
// each in order; updates itself when it drops none.
func withoutUpdates(updates table.Updates, drop func(table.Update) bool) table.Updates {
	var out table.Updates
	for i, u := range updates {
		if drop(u) {
			if out == nil {
				out = slices.Clone(updates[:i])
			}
			continue
		}
		if out != nil {
			out = append(out, u)
		}
	}
	if out == nil {
		return updates
	}
	return out
}

// removalOf maps each removal withoutNoOpRemovals judges to the update
// that adds what it removes.
var removalOf = map[string]string{
	table.UpdateRemoveSnapshots:           table.UpdateAddSnapshot,
	table.UpdateRemoveStatistics:          table.UpdateSetStatistics,
	table.UpdateRemovePartitionStatistics: table.UpdateSetPartitionStatistics,
	table.UpdateRemoveEncryptionKey:       table.UpdateAddEncryptionKey,
}

// hasAny reports whether base has something the removal action names.
func hasAny(base table.Metadata, action string, snapshotIDs []int64, snapshotID *int64, keyID *string) bool {
	switch action {
	case table.UpdateRemoveSnapshots:
		return slices.ContainsFunc(snapshotIDs, func(id int64) bool { return base.SnapshotByID(id) != nil })
	case table.UpdateRemoveStatistics:
		if snapshotID == nil {
			return true // malformed: the builder's to judge
		}
		for f := range base.Statistics() {
			if f.SnapshotID == *snapshotID {
				return true
			}
		}
	case table.UpdateRemovePartitionStatistics:
		if snapshotID == nil {
			return true
		}
		for f := range base.PartitionStatistics() {
			if f.SnapshotID == *snapshotID {
				return true
			}
		}
	case table.UpdateRemoveEncryptionKey:
		if keyID == nil {
			return true
		}
		for k := range base.EncryptionKeys() {
			if k.KeyID == *keyID {
				return true
			}
		}
	}
	return false
}

// withTrimmedLocations drops a trailing '/' from the location of each
// set-location update, as a create's location is trimmed: Java's builder
// does so too, and "s3://b/t/" for a table at "s3://b/t" would otherwise
// read as a move to another location.
func withTrimmedLocations(updates table.Updates) table.Updates {
	var out table.Updates
	for i, u := range updates {
		if u.Action() != table.UpdateSetLocation {
			continue
		}
		trimmed, ok := trimmedSetLocation(u)
		if !ok {
			continue
		}
		if out == nil {
			out = slices.Clone(updates)
		}
		out[i] = table.NewSetLocationUpdate(trimmed)
	}
	if out == nil {
		return updates
	}
	return out
}

// trimmedSetLocation returns the location of a set-location update (of a
// table or a view) without its trailing '/', when it has one to drop: a
// location is stored without it, so the same place with '/' is no move.
func trimmedSetLocation(u any) (string, bool) {
	var v struct {
		Location string `json:"location"`
	}
	if !updateFields(u, &v) {
		return "", false
	}
	trimmed := strings.TrimSuffix(v.Location, "/")
	if trimmed == v.Location || trimmed == "" || strings.HasSuffix(trimmed, ":") {
		return "", false
	}
	return trimmed, true
}

// storagePropertiesDropped returns props without its storage properties
// (isStorageProperty), logging the keys it drops. Flink's connector copies
// its catalog options (s3.endpoint, s3.access-key-id, io-impl) into the
// properties of every table it creates: refusing them would fail such
// creates, and keeping them would hand them to every other client.
func (s *Server) storagePropertiesDropped(id fsm.Ident, props map[string]string) iceberg.Properties {
	var dropped []string
	out := iceberg.Properties{}
	for k, v := range props {
		if isStorageProperty(k) {
			dropped = append(dropped, k)
			continue
		}
		out[k] = v
	}
	if len(dropped) > 0 {
		slices.Sort(dropped)
		s.log.Warn("table properties that say how clients reach storage are not kept: the catalog's answers say that", "table", id.String(), "properties", dropped)
	}
	if props == nil && len(out) == 0 {
		return nil
	}
	return out
}

// withoutStorageProperties takes the storage properties out of a change's
// set-properties updates (storagePropertiesDropped).
func (s *Server) withoutStorageProperties(id fsm.Ident, updates table.Updates) table.Updates {
	var out table.Updates
	for _, u := range updates {
		if u.Action() == table.UpdateSetProperties {
			var f struct {
				Updates map[string]string `json:"updates"`
			}
			if updateFields(u, &f) && slices.ContainsFunc(slices.Collect(maps.Keys(f.Updates)), isStorageProperty) {
				kept := s.storagePropertiesDropped(id, f.Updates)
				if len(kept) == 0 {
					continue
				}
				u = table.NewSetPropertiesUpdate(kept)
			}
		}
		out = append(out, u)
	}
	return out
}

// updateFields reads fields of an iceberg-go update (whose types are
// unexported) into v through its JSON form, and reports whether it could.
func updateFields(u any, v any) bool {
	b, err := json.Marshal(u)
	return err == nil && json.Unmarshal(b, v) == nil
}
