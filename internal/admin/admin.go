// Package admin serves the operator API under /management/v1: cluster
// membership and leadership. Errors use the Iceberg error model, like the
// catalog API.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/gorilla/mux"
)

// Member is one server in the Raft configuration, as seen from the node
// answering, plus what that server reports about itself when reachable.
type Member struct {
	ID          string `json:"id"`
	ClusterAddr string `json:"cluster-address"`
	HTTPAddr    string `json:"http-address,omitempty"`
	Suffrage    string `json:"suffrage"`
	Leader      bool   `json:"leader"`
	Reachable   bool   `json:"reachable"`
	State       string `json:"state,omitempty"`
	Term        uint64 `json:"term,omitempty"`
	CommitIndex uint64 `json:"commit-index,omitempty"`
	// AppliedIndex is the member's state machine applied index.
	AppliedIndex uint64 `json:"applied-index,omitempty"`
	// LastContact is how long ago the member last heard from the leader
	// ("0s" on the leader itself), as the member reports it.
	LastContact string `json:"last-contact,omitempty"`
	Error       string `json:"error,omitempty"`
}

// Status is the cluster as seen from one node.
type Status struct {
	Self         string   `json:"self"`
	LeaderID     string   `json:"leader-id"`
	LeaderAddr   string   `json:"leader-address"`
	Term         uint64   `json:"term"`
	CommitIndex  uint64   `json:"commit-index"`
	AppliedIndex uint64   `json:"applied-index"`
	Members      []Member `json:"members"`
}

// Cluster is what the operator API needs from the node. Mutations run on the
// leader (the node forwards them); their errors wrap ErrBadRequest,
// ErrNotFound or ErrConflict for the operator's mistakes.
type Cluster interface {
	Status(ctx context.Context) (Status, error)
	AddVoter(ctx context.Context, id, addr string) error
	AddNonvoter(ctx context.Context, id, addr string) error
	Remove(ctx context.Context, id string) error
	TransferLeadership(ctx context.Context, id string) error
}

// Errors a Cluster returns for operator mistakes.
var (
	ErrBadRequest = errors.New("bad request")
	ErrNotFound   = errors.New("not found")
	ErrConflict   = errors.New("conflict")
	// ErrUnavailable means no leader could take the change; retry later.
	ErrUnavailable = errors.New("unavailable")
)

// Server is the operator API handler.
type Server struct {
	cluster Cluster
	log     *slog.Logger
	router  *mux.Router
}

// New returns the operator API.
func New(c Cluster, logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.Default()
	}
	s := &Server{cluster: c, log: logger}
	r := mux.NewRouter()
	r.Handle("/management/v1/cluster", s.wrap(s.status)).Methods("GET")
	r.Handle("/management/v1/cluster/voters", s.wrap(s.addVoter)).Methods("POST")
	r.Handle("/management/v1/cluster/non-voters", s.wrap(s.addNonvoter)).Methods("POST")
	r.Handle("/management/v1/cluster/members/{id}", s.wrap(s.remove)).Methods("DELETE")
	r.Handle("/management/v1/cluster/leadership-transfer", s.wrap(s.transfer)).Methods("POST")
	r.NotFoundHandler = s.wrap(func(w http.ResponseWriter, r *http.Request) error {
		return fmt.Errorf("%w: no such route %s %s", ErrNotFound, r.Method, r.URL.Path)
	})
	r.MethodNotAllowedHandler = s.wrap(func(w http.ResponseWriter, r *http.Request) error {
		return &statusError{http.StatusMethodNotAllowed, "MethodNotAllowedException", r.Method + " is not allowed on " + r.URL.Path}
	})
	s.router = r
	return s
}

// Handler serves /management/v1/….
func (s *Server) Handler() http.Handler { return s.router }

type statusError struct {
	status int
	typ    string
	msg    string
}

func (e *statusError) Error() string { return e.msg }

func (s *Server) wrap(h func(w http.ResponseWriter, r *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
		err := h(w, r)
		if err == nil {
			return
		}
		se := &statusError{http.StatusInternalServerError, "InternalServerError", err.Error()}
		var direct *statusError
		switch {
		case errors.As(err, &direct):
			se = direct
		case errors.Is(err, ErrBadRequest):
			se = &statusError{http.StatusBadRequest, "BadRequestException", err.Error()}
		case errors.Is(err, ErrNotFound):
			se = &statusError{http.StatusNotFound, "NotFoundException", err.Error()}
		case errors.Is(err, ErrConflict):
			se = &statusError{http.StatusConflict, "AlreadyExistsException", err.Error()}
		case errors.Is(err, ErrUnavailable):
			se = &statusError{http.StatusServiceUnavailable, "ServiceUnavailableException", err.Error()}
			w.Header().Set("Retry-After", "1")
		}
		if se.status >= 500 {
			s.log.Error("management request failed", "method", r.Method, "path", r.URL.Path, "error", err)
		}
		writeJSON(w, se.status, map[string]any{"error": map[string]any{"message": se.msg, "type": se.typ, "code": se.status}})
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) error {
	st, err := s.cluster.Status(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

type memberRequest struct {
	ID      string `json:"id"`
	Address string `json:"address"`
}

func decodeMember(r *http.Request) (memberRequest, error) {
	var req memberRequest
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return req, fmt.Errorf("%w: reading body: %v", ErrBadRequest, err)
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return req, fmt.Errorf("%w: malformed body: %v", ErrBadRequest, err)
	}
	if strings.TrimSpace(req.ID) == "" || strings.TrimSpace(req.Address) == "" {
		return req, fmt.Errorf("%w: id and address are required", ErrBadRequest)
	}
	return req, nil
}

func (s *Server) addVoter(w http.ResponseWriter, r *http.Request) error {
	req, err := decodeMember(r)
	if err != nil {
		return err
	}
	if err := s.cluster.AddVoter(r.Context(), req.ID, req.Address); err != nil {
		return err
	}
	s.log.Info("voter added", "id", req.ID, "address", req.Address)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) addNonvoter(w http.ResponseWriter, r *http.Request) error {
	req, err := decodeMember(r)
	if err != nil {
		return err
	}
	if err := s.cluster.AddNonvoter(r.Context(), req.ID, req.Address); err != nil {
		return err
	}
	s.log.Info("non-voter added", "id", req.ID, "address", req.Address)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) remove(w http.ResponseWriter, r *http.Request) error {
	id := mux.Vars(r)["id"]
	if err := s.cluster.Remove(r.Context(), id); err != nil {
		return err
	}
	s.log.Info("member removed", "id", id)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) transfer(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		ID string `json:"id"`
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return fmt.Errorf("%w: reading body: %v", ErrBadRequest, err)
	}
	if len(strings.TrimSpace(string(body))) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			return fmt.Errorf("%w: malformed body: %v", ErrBadRequest, err)
		}
	}
	if err := s.cluster.TransferLeadership(r.Context(), req.ID); err != nil {
		return err
	}
	s.log.Info("leadership transferred", "to", req.ID)
	w.WriteHeader(http.StatusNoContent)
	return nil
}
