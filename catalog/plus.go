package catalog

import (
	"context"
	"maps"
	"net/http"
	"net/url"
	"strings"

	"github.com/gorilla/mux"

	"github.com/floe-catalog/floe/fsm"
)

// A raw "+" in a path segment is ambiguous between clients. The Java client
// encodes namespace levels and table and view names with
// java.net.URLEncoder (RESTUtil.encodeString), which writes a space as "+"
// (and a "+" as "%2B"), and the reference server decodes "+" back to a
// space; Go's url.PathEscape and Rust's path encoding leave a "+" of a name
// as it is. resolvePlus settles it by what exists: a namespace, table or
// view variable holding a raw "+" is read as written when that names
// something that exists, else with every "+" as a space when that does,
// else as written (so a create, or a 404, names what the client wrote).
// When both exist, the name as written wins. A namespace the caller may
// not see counts as missing.
//
// A request from the Java client (its X-Client-Version header, which
// RESTSessionCatalog sets on every request, starts "Apache Iceberg ") is
// not guessed at: its raw "+" is always a space, whatever exists, since
// that client writes a "+" of a name as "%2B".
//
// The lookup is one read, paid only by requests with a raw "+" in those
// variables: as consistent as the request's own (a GET or HEAD asking for
// a stale read, with no leader, is answered from the local replica, as the
// read that follows will be), linearizable for a change. If it fails, so
// does the request, unless its route reads nothing (readsNothing): the
// name as written could answer a false 404 once the request's own read
// succeeds (a leader elected meanwhile).
func (s *Server) resolvePlus(r *http.Request) (*http.Request, error) {
	vars := mux.Vars(r)
	rawNS, rawName := vars["namespace"], vars["table"]
	nameVar := "table"
	if v, ok := vars["view"]; ok {
		rawName, nameVar = v, "view"
	}
	if !strings.Contains(rawNS, "+") && !strings.Contains(rawName, "+") {
		return r, nil
	}
	spaced := func(raw string) string { return strings.ReplaceAll(raw, "+", "%20") }
	if javaClient(r) {
		return withResolved(r, vars, nameVar, spaced(rawNS), spaced(rawName)), nil
	}
	read := s.store.Read
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		read = func(_ context.Context, fn func(*fsm.Reader) error) error { return s.read(r, fn) }
	}
	// A namespace spelling the caller may not see counts as missing, so
	// that which one is read never depends on, nor tells of, a namespace
	// hidden from the caller. Judged before the read: the authorizer may
	// read the grants itself.
	seen := map[string]bool{}
	if strings.Contains(rawNS, "+") {
		for _, raw := range []string{rawNS, spaced(rawNS)} {
			levels, err := parseNamespace(raw)
			if err != nil {
				continue
			}
			ok, err := s.visible(r, levelsIn(r.Context(), levels))
			if err != nil {
				return r, err
			}
			seen[raw] = ok
		}
	}
	ns, name := rawNS, rawName
	err := read(r.Context(), func(rd *fsm.Reader) error {
		exists := func(raw string) bool {
			levels, err := parseNamespace(raw)
			if err != nil || !seen[raw] {
				return false
			}
			_, ok := rd.Namespace(levelsIn(r.Context(), levels))
			return ok
		}
		if strings.Contains(rawNS, "+") && !exists(rawNS) && exists(spaced(rawNS)) {
			ns = spaced(rawNS)
		}
		if !strings.Contains(rawName, "+") {
			return nil
		}
		levels, err := parseNamespace(ns)
		if err != nil {
			return nil
		}
		levels = levelsIn(r.Context(), levels)
		has := func(raw string) bool {
			n, err := url.PathUnescape(raw)
			if err != nil {
				return false
			}
			id := fsm.Ident{Namespace: levels, Name: n}
			_, isTable := rd.Table(id)
			_, isView := rd.View(id)
			return isTable || isView
		}
		if !has(rawName) && has(spaced(rawName)) {
			name = spaced(rawName)
		}
		return nil
	})
	if err != nil {
		return r, err
	}
	return withResolved(r, vars, nameVar, ns, name), nil
}

// javaClientVersion starts the X-Client-Version header of every request the
// Java client sends (IcebergBuild.fullVersion: "Apache Iceberg 1.9.2 (commit
// ...)"); engines built on it (Spark, Flink, Trino) send it too.
const javaClientVersion = "Apache Iceberg "

// javaClient reports whether r comes from the Java client, which encodes
// path segments and query values with java.net.URLEncoder.
func javaClient(r *http.Request) bool {
	return strings.HasPrefix(r.Header.Get("X-Client-Version"), javaClientVersion)
}

// withResolved returns r with its namespace and name variables set to ns
// and name (escaped, as route variables are), keeping those the client
// wrote for varsAsWritten; r itself when nothing changed.
func withResolved(r *http.Request, vars map[string]string, nameVar, ns, name string) *http.Request {
	if ns == vars["namespace"] && name == vars[nameVar] {
		return r
	}
	out := maps.Clone(vars)
	out["namespace"] = ns
	if _, ok := vars[nameVar]; ok {
		out[nameVar] = name
	}
	r = mux.SetURLVars(r, out)
	return r.WithContext(context.WithValue(r.Context(), asWrittenKey{}, vars))
}

// asWrittenKey carries a request's route variables as the client wrote
// them, when resolvePlus read a '+' in them as a space.
type asWrittenKey struct{}

// varsAsWritten returns the request's route variables as the client wrote
// them, before resolvePlus. The 404 that hides a namespace from a caller
// names it so: naming the resolved spelling would tell that a name with a
// space exists.
func varsAsWritten(r *http.Request) map[string]string {
	if v, ok := r.Context().Value(asWrittenKey{}).(map[string]string); ok {
		return v
	}
	return mux.Vars(r)
}
