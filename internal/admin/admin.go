// Package admin serves the operator API under /management/v1: cluster
// membership and leadership. Errors use the Iceberg error model, like the
// catalog API.
package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/idempotency"
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

// Records stores Idempotency-Key records in the replicated state machine
// (a raftnode.Node). Membership changes are Raft configuration changes, not
// state machine commands, so their record is written right after the change
// succeeds rather than by the same log entry: a crash between the two leaves
// a change without its record, and a retry then runs the change again —
// which for these operations is harmless (adding a member twice is a no-op,
// a transfer moves leadership again).
type Records interface {
	Propose(ctx context.Context, cmd fsm.Command) (fsm.Result, error)
	Read(ctx context.Context, fn func(*fsm.Reader) error) error
}

// Server is the operator API handler.
type Server struct {
	cluster Cluster
	records Records
	log     *slog.Logger
	router  *mux.Router
}

// New returns the operator API. With records non-nil the membership
// mutations honour Idempotency-Key.
func New(c Cluster, records Records, logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.Default()
	}
	s := &Server{cluster: c, records: records, log: logger}
	r := mux.NewRouter()
	r.Handle("/management/v1/cluster", s.wrap(s.status)).Methods("GET")
	r.Handle("/management/v1/cluster/voters", s.wrap(s.keyed("addVoter", s.addVoter))).Methods("POST")
	r.Handle("/management/v1/cluster/non-voters", s.wrap(s.keyed("addNonvoter", s.addNonvoter))).Methods("POST")
	r.Handle("/management/v1/cluster/members/{id}", s.wrap(s.keyed("removeMember", s.remove))).Methods("DELETE")
	r.Handle("/management/v1/cluster/leadership-transfer", s.wrap(s.keyed("transferLeadership", s.transfer))).Methods("POST")
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

// keyed answers a retried membership change (same Idempotency-Key, same
// request) with 204 instead of running it again, refuses a key reused for
// another request (422), and records the key once the change succeeded.
// Only successes are recorded; a failed change runs again on retry.
func (s *Server) keyed(op string, h func(w http.ResponseWriter, r *http.Request) error) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		raw := r.Header.Get(idempotency.Header)
		if raw == "" || s.records == nil {
			return h(w, r)
		}
		key, _, err := idempotency.ParseKey(raw)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrBadRequest, err)
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return fmt.Errorf("%w: reading body: %v", ErrBadRequest, err)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		b := idempotency.NewBinding(op, []string{mux.Vars(r)["id"]}, "anonymous", body)
		binding := fsm.Binding{Operation: b.Operation, Route: b.Route, Principal: b.Principal, BodyDigest: b.BodyDigest}
		now := time.Now()
		var rec fsm.IdempotencyRecord
		var found bool
		if err := s.records.Read(r.Context(), func(rd *fsm.Reader) error {
			rec, found = rd.IdempotencyRecord(key)
			return nil
		}); err != nil {
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		if found && rec.Live(now.UnixMilli()) {
			if rec.Binding != binding {
				return &statusError{http.StatusUnprocessableEntity, "UnprocessableEntityException",
					fmt.Sprintf("Idempotency-Key %s was already used for %s on another request", key, rec.Binding.Operation)}
			}
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(http.StatusNoContent)
			return nil
		}
		if err := h(w, r); err != nil {
			return err
		}
		_, err = s.records.Propose(context.WithoutCancel(r.Context()), fsm.RecordOutcome{
			Key: key, Binding: binding, AtMs: now.UnixMilli(),
			ExpiresMs: now.Add(idempotency.DefaultLifetime + idempotency.Grace).UnixMilli(),
		})
		if err != nil {
			s.log.Warn("could not record the Idempotency-Key of a membership change", "key", key, "op", op, "error", err)
		}
		return nil
	}
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
