package catalog

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gorilla/mux"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/idempotency"
)

const maxPageSize = 1000

type configResponse struct {
	Defaults               map[string]string `json:"defaults"`
	Overrides              map[string]string `json:"overrides"`
	Endpoints              []string          `json:"endpoints"`
	NamespaceSeparator     string            `json:"namespace-separator"`
	IdempotencyKeyLifetime string            `json:"idempotency-key-lifetime,omitempty"`
}

func (s *Server) getConfig(w http.ResponseWriter, r *http.Request) error {
	// Clients pass their warehouse property as configured: a warehouse's
	// name, or its location (a trailing slash names the same warehouse).
	// None: the default warehouse.
	wh := s.warehouses[0]
	if v := r.URL.Query().Get("warehouse"); v != "" {
		var ok bool
		if wh, ok = s.warehouseNamed(v); !ok {
			return &apiError{status: http.StatusNotFound, typ: "NoSuchWarehouseException",
				msg: fmt.Sprintf("unknown warehouse %q%s", v, s.servedHint())}
		}
	}
	var endpoints []string
	for _, rt := range s.catalogRoutes() {
		endpoints = append(endpoints, rt.method+" /v1/{prefix}"+rt.path)
	}
	resp := configResponse{
		Defaults: map[string]string{},
		// The spec makes the separator a config override, and that is
		// where clients read it (Java's ResourcePaths, PyIceberg,
		// iceberg-go); the top-level field stays as floe first answered.
		Overrides: map[string]string{"prefix": wh.prefix, "warehouse": wh.location,
			"namespace-separator": nsSeparatorEncoded},
		Endpoints:          endpoints,
		NamespaceSeparator: nsSeparatorEncoded,
	}
	if !s.cfg.IdempotencyDisabled {
		resp.IdempotencyKeyLifetime = idempotency.FormatLifetime(s.cfg.IdempotencyLifetime)
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// page parses pageToken and pageSize. The token is the last name returned,
// base64url-encoded; it stays valid across changes because listing resumes
// after that name rather than at an offset. As the spec's PageToken says,
// a request without a pageToken parameter gets every result in one answer,
// whatever its pageSize: a client that sends a size but does not follow
// tokens would otherwise see only the first page. Paging starts with an
// empty pageToken (Java sends one); pageSize is still checked.
func page(r *http.Request) (after string, limit int, err error) {
	q := r.URL.Query()
	defer func() {
		if err == nil && !q.Has("pageToken") {
			limit = 0
		}
	}()
	if tok := q.Get("pageToken"); tok != "" {
		// A token this catalog issued decodes to a name: UTF-8 that
		// validateName accepts. Anything else was not issued here.
		b, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil || !utf8.Valid(b) || validateName("", string(b)) != nil {
			return "", 0, badRequest("malformed pageToken %s: pass the next-page-token of the previous page as it was", clipped(tok))
		}
		after = string(b)
	}
	if ps := q.Get("pageSize"); ps != "" {
		n, err := strconv.Atoi(ps)
		if errors.Is(err, strconv.ErrRange) && ps[0] != '-' {
			// A positive integer past the int range: as large as any.
			n, err = maxPageSize, nil
		}
		if err != nil || n < 1 {
			return "", 0, badRequest("pageSize must be a positive integer, got %s", clipped(ps))
		}
		limit = min(n, maxPageSize)
	}
	return after, limit, nil
}

func nextToken(more bool, last string) *string {
	if !more {
		return nil
	}
	t := base64.RawURLEncoding.EncodeToString([]byte(last))
	return &t
}

// filteredChunk is the fewest namespaces listNamespaces reads at a time when
// it filters them by what the caller may see.
const filteredChunk = 100

type listNamespacesResponse struct {
	NextPageToken *string    `json:"next-page-token"`
	Namespaces    [][]string `json:"namespaces"`
}

func (s *Server) listNamespaces(w http.ResponseWriter, r *http.Request) error {
	after, limit, err := page(r)
	if err != nil {
		return err
	}
	// parent is the stored levels of the namespace listed: the warehouse's
	// root when the request names none.
	wh := s.whOf(r.Context())
	parent := wh.root()
	if p := r.URL.Query().Get("parent"); p != "" {
		levels, err := splitNamespace(p)
		if err != nil {
			return err
		}
		parent = wh.levels(levels)
		if parent, err = s.parentAsWritten(r, parent); err != nil {
			return err
		}
		if alt, ok := doubleEncodedLevels(p); ok {
			if parent, err = s.existingSpelling(r, parent, wh.levels(alt)); err != nil {
				return err
			}
		}
	}
	top := wh.isRoot(parent)
	if !top {
		if ok, err := s.visible(r, parent); err != nil {
			return err
		} else if !ok {
			markDenied(r)
			return notFoundNamespace("namespace does not exist: %s", nsString(parent))
		}
	}
	// Only what the principal may see. Grants are read between reads of
	// the state, never inside one (a read inside a read can deadlock
	// against a snapshot restore). A page is filled from as many reads as
	// it takes, and its token names the last namespace shown, never one
	// the principal may not see; it is given only when a namespace the
	// principal may see follows (found by reading on), so that neither a
	// token nor an empty last page tells that hidden ones exist.
	resp := listNamespacesResponse{Namespaces: [][]string{}}
	cursor := after
	full := false
	// With an authorizer, read at least filteredChunk at a time: a small
	// page among many hidden namespaces would otherwise take a read each.
	chunk := limit
	if s.cfg.Authorizer != nil && limit > 0 {
		chunk = max(limit, filteredChunk)
	}
	for {
		var (
			list [][]string
			more bool
		)
		err = s.read(r, func(rd *fsm.Reader) error {
			if !top {
				if _, ok := rd.Namespace(parent); !ok {
					return notFoundNamespace("namespace does not exist: %s", nsString(parent))
				}
			}
			list, more = rd.NamespaceLevels(parent, cursor, chunk)
			return nil
		})
		if err != nil {
			return err
		}
		for i, levels := range list {
			ok, err := s.visible(r, levels)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			if full {
				shown := resp.Namespaces[len(resp.Namespaces)-1]
				resp.NextPageToken = nextToken(true, shown[len(shown)-1])
				writeJSON(w, http.StatusOK, resp)
				return nil
			}
			resp.Namespaces = append(resp.Namespaces, external(levels))
			if limit > 0 && len(resp.Namespaces) == limit {
				if s.cfg.Authorizer == nil {
					// Everything is visible: what follows is known.
					resp.NextPageToken = nextToken(more || i < len(list)-1, levels[len(levels)-1])
					writeJSON(w, http.StatusOK, resp)
					return nil
				}
				full = true
			}
		}
		if !more || len(list) == 0 {
			break
		}
		last := list[len(list)-1]
		cursor = last[len(last)-1]
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

type namespaceBody struct {
	Namespace  []string  `json:"namespace"`
	Properties stringMap `json:"properties"`
}

func (s *Server) createNamespace(w http.ResponseWriter, r *http.Request) error {
	var req namespaceBody
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	if err := validateNamespace(req.Namespace); err != nil {
		return err
	}
	// The new level only: a parent named so before stays usable.
	if err := validateNewName("namespace level", req.Namespace[len(req.Namespace)-1]); err != nil {
		return err
	}
	if err := validateProperties(req.Properties); err != nil {
		return err
	}
	setAuditTarget(r, nsString(req.Namespace))
	levels := levelsIn(r.Context(), req.Namespace)
	parent := levels[:len(levels)-1]
	if err := s.authorize(r, PrivWrite, parent, func() error {
		// The spec lists no 404 for createNamespace.
		return badRequest("parent namespace does not exist: %s", nsString(parent))
	}); err != nil {
		return err
	}
	res, err := s.store.Propose(r.Context(), fsm.CreateNamespace{
		Namespace: levels, Properties: req.Properties, AtMs: s.cfg.Now().UnixMilli(),
	})
	if err != nil {
		return err
	}
	if err := outcomeError("createNamespace", res); err != nil {
		return err
	}
	if req.Properties == nil {
		req.Properties = map[string]string{}
	}
	writeJSON(w, http.StatusOK, req)
	return nil
}

func validateProperties(props map[string]string) error {
	for k := range props {
		if k == "" {
			return badRequest("property keys must not be empty")
		}
	}
	return checkPropertiesSize(props)
}

// maxNamespacePropertyBytes bounds a namespace's properties, keys and
// values together. They live in the replicated state: every node holds
// them, each update rewrites them whole in one log entry, and a few
// namespaces of megabytes made applies take seconds and the cluster
// lose its leader.
const maxNamespacePropertyBytes = 1 << 20

// checkPropertiesSize refuses properties over maxNamespacePropertyBytes
// (the bound of a namespace's, and of those a table or view is created
// with).
func checkPropertiesSize(props map[string]string) error {
	n := 0
	for k, v := range props {
		n += len(k) + len(v)
	}
	if n > maxNamespacePropertyBytes {
		return badRequest("properties may hold at most %d bytes (keys and values), these would hold %d", maxNamespacePropertyBytes, n)
	}
	return nil
}

// namespaceVar returns the stored levels of the namespace in the path, in
// the warehouse the request addresses.
func namespaceVar(r *http.Request) ([]string, error) {
	levels, err := parseNamespace(mux.Vars(r)["namespace"])
	if err != nil {
		return nil, err
	}
	return levelsIn(r.Context(), levels), nil
}

func (s *Server) loadNamespace(w http.ResponseWriter, r *http.Request) error {
	levels, err := namespaceVar(r)
	if err != nil {
		return err
	}
	var ns fsm.Namespace
	err = s.read(r, func(rd *fsm.Reader) error {
		var ok bool
		if ns, ok = rd.Namespace(levels); !ok {
			return notFoundNamespace("namespace does not exist: %s", nsString(levels))
		}
		return nil
	})
	if err != nil {
		return err
	}
	if ns.Properties == nil {
		ns.Properties = map[string]string{}
	}
	writeJSON(w, http.StatusOK, namespaceBody{Namespace: external(ns.Levels), Properties: ns.Properties})
	return nil
}

func (s *Server) namespaceExists(w http.ResponseWriter, r *http.Request) error {
	levels, err := namespaceVar(r)
	if err != nil {
		return err
	}
	err = s.read(r, func(rd *fsm.Reader) error {
		if _, ok := rd.Namespace(levels); !ok {
			return notFoundNamespace("namespace does not exist: %s", nsString(levels))
		}
		return nil
	})
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) dropNamespace(w http.ResponseWriter, r *http.Request) error {
	levels, err := namespaceVar(r)
	if err != nil {
		return err
	}
	_, err = s.apply(r.Context(), fsm.DropNamespace{Namespace: levels, AtMs: s.cfg.Now().UnixMilli()})
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

type updatePropertiesRequest struct {
	Removals []string  `json:"removals"`
	Updates  stringMap `json:"updates"`
}

func (s *Server) updateProperties(w http.ResponseWriter, r *http.Request) error {
	levels, err := namespaceVar(r)
	if err != nil {
		return err
	}
	body, err := readJSONBody(r)
	if err != nil {
		return err
	}
	var req updatePropertiesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return badRequest("malformed request body: %v", err)
	}
	if err := checkPropertiesUpdateShape(body); err != nil {
		return err
	}
	if err := validateProperties(req.Updates); err != nil {
		return err
	}
	for _, k := range req.Removals {
		if _, ok := req.Updates[k]; ok {
			return unprocessable("property %q is both set and removed", k)
		}
	}
	// A key removed twice is removed once, as Java's reference server reads
	// the removals as a set: it is not also reported missing.
	seen := make(map[string]bool, len(req.Removals))
	req.Removals = slices.DeleteFunc(req.Removals, func(k string) bool {
		dup := seen[k]
		seen[k] = true
		return dup
	})
	// The bound holds for the properties as they would be. Two updates
	// racing may each pass against the same state and together exceed it,
	// by at most what one body can carry.
	if len(req.Updates) > 0 {
		var merged map[string]string
		err := s.store.Read(r.Context(), func(rd *fsm.Reader) error {
			ns, _ := rd.Namespace(levels)
			merged = maps.Clone(ns.Properties)
			return nil
		})
		if err != nil {
			return err
		}
		if merged == nil {
			merged = map[string]string{}
		}
		for _, k := range req.Removals {
			delete(merged, k)
		}
		maps.Copy(merged, req.Updates)
		if err := checkPropertiesSize(merged); err != nil {
			return err
		}
	}
	res, err := s.apply(r.Context(), fsm.UpdateNamespace{
		Namespace: levels, Set: req.Updates, Remove: req.Removals, AtMs: s.cfg.Now().UnixMilli(),
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res.Properties)
	return nil
}

// escapedVar returns a route variable decoded from its escaped form.
func escapedVar(r *http.Request, name string) (string, error) {
	v, err := url.PathUnescape(mux.Vars(r)[name])
	if err != nil {
		return "", badRequest("malformed %s %q: %v", name, mux.Vars(r)[name], err)
	}
	return v, nil
}

// parentAsWritten settles a raw "+" in the parent query parameter as
// resolvePlus settles one in a path: form decoding reads it as a space
// (Java's URLEncoder writes a space so), but PyIceberg before 0.10 puts the
// parent in the query unencoded, a "+" of a name included. When the
// namespace so decoded does not exist and the one with each raw "+" kept
// does, that one is meant. One read as consistent as the listing's (a stale
// one when asked for), only for a raw "+", and never for the Java client,
// whose "+" is always a space (javaClient).
func (s *Server) parentAsWritten(r *http.Request, decoded []string) ([]string, error) {
	raw, ok := rawQueryValue(r.URL.RawQuery, "parent")
	if !ok || !strings.Contains(raw, "+") || javaClient(r) {
		return decoded, nil
	}
	literal, err := url.PathUnescape(raw)
	if err != nil {
		return decoded, nil
	}
	levels, err := splitNamespace(literal)
	if err != nil {
		return decoded, nil
	}
	return s.existingSpelling(r, decoded, s.whOf(r.Context()).levels(levels))
}

// existingSpelling returns alt when the namespace decoded does not exist
// and alt does; else decoded. A spelling the caller may not see counts as
// missing (as in resolvePlus). One read as consistent as the listing's.
func (s *Server) existingSpelling(r *http.Request, decoded, alt []string) ([]string, error) {
	var err error
	var seen [2]bool
	for i, l := range [][]string{decoded, alt} {
		if seen[i], err = s.visible(r, l); err != nil {
			return decoded, err
		}
	}
	if !seen[1] {
		return decoded, nil
	}
	err = s.read(r, func(rd *fsm.Reader) error {
		if _, ok := rd.Namespace(decoded); ok && seen[0] {
			return nil
		}
		if _, ok := rd.Namespace(alt); ok {
			decoded = alt
		}
		return nil
	})
	return decoded, err
}

// doubleEncodedLevels reads a parent that Java 1.7.0 encoded twice: it
// joined the levels with the text "%1F" and then escaped the value, so
// that one decoding leaves "demo%1Fsub" (its reference server split on
// that text; 1.7.1 reverted the change). ok is false when parent holds a
// real unit separator or no "%1F". New names cannot hold "%1F"
// (validateNewName); an older one that does is still listed as written
// when it exists (existingSpelling).
func doubleEncodedLevels(parent string) (levels []string, ok bool) {
	if strings.Contains(parent, unitSeparator) {
		return nil, false
	}
	joined := strings.NewReplacer("%1F", unitSeparator, "%1f", unitSeparator).Replace(parent)
	if joined == parent {
		return nil, false
	}
	levels, err := splitNamespace(joined)
	return levels, err == nil
}

// rawQueryValue returns the first value of name in a raw query string, as
// sent (not decoded).
func rawQueryValue(rawQuery, name string) (string, bool) {
	for kv := range strings.SplitSeq(rawQuery, "&") {
		if k, v, _ := strings.Cut(kv, "="); k == name {
			return v, true
		}
	}
	return "", false
}

// checkPropertiesUpdateShape refuses a properties update that is not a
// JSON object, or that has neither updates nor removals but other fields:
// {"update": {...}} (a misspelling) would otherwise be answered 200 with
// nothing changed. An empty object is a valid request that changes
// nothing; with either list present, other fields are ignored, as Java's
// parser ignores them.
func checkPropertiesUpdateShape(body []byte) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		return badRequest("a properties update is a JSON object with updates and removals")
	}
	_, updates := fields["updates"]
	_, removals := fields["removals"]
	if updates || removals || len(fields) == 0 {
		return nil
	}
	unknown := slices.Sorted(maps.Keys(fields))
	return badRequest("a properties update carries updates and removals; this one has neither, and fields it does not define: %s", strings.Join(unknown, ", "))
}
