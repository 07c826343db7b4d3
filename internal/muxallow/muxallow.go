// Package muxallow sets the Allow header of a 405 answer from a gorilla/mux
// router's routes, for the HTTP APIs that answer 405 (RFC 9110, 15.5.6: a
// 405 must carry Allow).
package muxallow

import (
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/gorilla/mux"
)

// Set sets w's Allow header to the methods of router's routes whose path
// matches req's, whatever their method, sorted. It sets nothing when no
// route's path matches.
func Set(w http.ResponseWriter, router *mux.Router, req *http.Request) {
	var methods []string
	_ = router.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		var m mux.RouteMatch
		if !route.Match(req, &m) && !errors.Is(m.MatchErr, mux.ErrMethodMismatch) {
			return nil
		}
		ms, err := route.GetMethods()
		if err != nil {
			return nil
		}
		for _, method := range ms {
			if !slices.Contains(methods, method) {
				methods = append(methods, method)
			}
		}
		return nil
	})
	if len(methods) > 0 {
		slices.Sort(methods)
		w.Header().Set("Allow", strings.Join(methods, ", "))
	}
}
