package catalog

import (
	"net/http"

	"github.com/floe-catalog/floe/fsm"
)

// Functions: the spec lets a client list and load a namespace's functions
// but gives no operation that creates one, so a catalog holds only those
// put there some other way. floe has no other way: it stores no functions.
// listFunctions answers a namespace's (empty) list and loadFunction the
// spec's 404 NoSuchFunctionException, each after the checks every
// namespace route makes (a valid path, the read privilege, the namespace
// existing, read linearizably like any other read), so that a client
// asking gets the truth rather than a 404 for the route, which a client
// reads as "no such namespace".

// listFunctionsResponse is the spec's ListFunctionsResponse: identifiers
// are CatalogObjectIdentifiers (the namespace's levels, then the name);
// there is never one, nor a next page.
type listFunctionsResponse struct {
	Identifiers [][]string `json:"identifiers"`
}

func (s *Server) listFunctions(w http.ResponseWriter, r *http.Request) error {
	levels, err := namespaceVar(r)
	if err != nil {
		return err
	}
	if _, _, err := page(r); err != nil {
		return err
	}
	if err := s.read(r, func(rd *fsm.Reader) error {
		if _, ok := rd.Namespace(levels); !ok {
			return notFoundNamespace("namespace does not exist: %s", nsString(levels))
		}
		return nil
	}); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, listFunctionsResponse{Identifiers: [][]string{}})
	return nil
}

func (s *Server) loadFunction(w http.ResponseWriter, r *http.Request) error {
	levels, err := namespaceVar(r)
	if err != nil {
		return err
	}
	name, err := escapedVar(r, "function")
	if err != nil {
		return err
	}
	if err := validateName("function name", name); err != nil {
		return err
	}
	id := fsm.Ident{Namespace: levels, Name: name}
	return s.read(r, func(rd *fsm.Reader) error {
		if _, ok := rd.Namespace(levels); !ok {
			return notFoundNamespace("namespace does not exist: %s", nsString(levels))
		}
		return &apiError{status: http.StatusNotFound, typ: "NoSuchFunctionException",
			msg: "function does not exist: " + id.String() + " (this catalog stores no functions)"}
	})
}
