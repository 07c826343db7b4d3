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
// (a raftnode.Node): Propose goes through the Raft log, Read is
// linearizable. Membership changes are Raft configuration changes, not
// state machine commands, so their record cannot ride in the change's log
// entry; see runOnce for how a keyed change still runs once.
type Records interface {
	Propose(ctx context.Context, cmd fsm.Command) (fsm.Result, error)
	Read(ctx context.Context, fn func(*fsm.Reader) error) error
}

// Config configures the operator API.
type Config struct {
	// IdempotencyLifetime is how long an Idempotency-Key is honoured after
	// first use: the catalog's --idempotency-lifetime. Default
	// idempotency.DefaultLifetime.
	IdempotencyLifetime time.Duration
	// Now returns the time stamped into idempotency records. Default
	// time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// Server is the operator API handler.
type Server struct {
	cluster  Cluster
	records  Records
	now      func() time.Time
	lifetime time.Duration
	log      *slog.Logger
	router   *mux.Router
}

// newServer applies cfg's defaults; it serves no routes.
func newServer(c Cluster, records Records, cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.IdempotencyLifetime <= 0 {
		cfg.IdempotencyLifetime = idempotency.DefaultLifetime
	}
	return &Server{cluster: c, records: records, now: cfg.Now, lifetime: cfg.IdempotencyLifetime, log: cfg.Logger}
}

// New returns the operator API. With records non-nil the membership
// mutations honour Idempotency-Key.
func New(c Cluster, records Records, cfg Config) *Server {
	s := newServer(c, records, cfg)
	r := mux.NewRouter()
	r.Handle("/management/v1/cluster", s.wrap(s.status)).Methods("GET")
	r.Handle("/management/v1/cluster/voters", s.wrap(s.membership("addVoter", s.addVoter))).Methods("POST")
	r.Handle("/management/v1/cluster/non-voters", s.wrap(s.membership("addNonvoter", s.addNonvoter))).Methods("POST")
	r.Handle("/management/v1/cluster/members/{id}", s.wrap(s.membership("removeMember", s.remove))).Methods("DELETE")
	r.Handle("/management/v1/cluster/leadership-transfer", s.wrap(s.membership("transferLeadership", s.transfer))).Methods("POST")
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

// memberChange performs one validated membership change. Its error wraps
// the Cluster's sentinels.
type memberChange func(ctx context.Context) error

// membership serves a membership change: prepare validates the request
// (400 before anything else happens) and returns the change; a success
// answers 204. With an Idempotency-Key the change runs through runOnce.
func (s *Server) membership(op string, prepare func(r *http.Request) (memberChange, error)) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		raw := r.Header.Get(idempotency.Header)
		if raw == "" || s.records == nil {
			change, err := prepare(r)
			if err != nil {
				return err
			}
			if err := change(r.Context()); err != nil {
				return err
			}
			w.WriteHeader(http.StatusNoContent)
			return nil
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
		change, err := prepare(r)
		if err != nil {
			return err
		}
		b := idempotency.NewBinding(op, []string{mux.Vars(r)["id"]}, operatorPrincipal, body)
		binding := fsm.Binding{Operation: b.Operation, Route: b.Route, Principal: b.Principal, BodyDigest: b.BodyDigest}
		replayed, err := s.runOnce(r.Context(), op, key, binding, change)
		if err != nil {
			return err
		}
		if replayed {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
}

// Keyed membership changes. A change is claimed before it runs: a record
// under claimKey(key), proposed with fsm.RecordOutcome, whose Apply creates
// it only when no live record holds that key (a duplicate gets Replayed, a
// request with another binding StatusKeyReused). The log orders concurrent
// claims, on this node or any other, so exactly one request runs the
// change; the others wait for its outcome, stored under the key itself
// once the change succeeded, and replay it.
//
// The claim is a lease: it expires claimLifetime after it was taken. The
// request holding it gives the look-up and the change changeTimeout and the
// outcome's record recordTimeout, whether or not its client is still there; the rest
// of the lease absorbs clock skew between nodes (a lease's expiry is judged
// by the clock of the node proposing the next claim). If the node crashes
// after claiming, or the change fails, no outcome is stored: waiting
// duplicates and retries take the claim over once it expired and run the
// change again. For these operations that is harmless — adding a member
// that is already there is a no-op, a transfer moves leadership again, a
// second removal answers 404 — and it beats the alternative, a key stuck
// for its whole lifetime with no answer to give.
const (
	changeTimeout   = 20 * time.Second
	recordTimeout   = 5 * time.Second
	claimLifetime   = changeTimeout + recordTimeout + 5*time.Second
	claimKeyPrefix  = "membership-claim/"
	pollMinInterval = 10 * time.Millisecond
	pollMaxInterval = 250 * time.Millisecond
)

// claimKey is where the claim on key is recorded. Keys are UUIDs, so no
// client key can be a claim key.
func claimKey(key string) string { return claimKeyPrefix + key }

// keyState is what the state machine holds for a key: its outcome and its
// claim, each when present.
type keyState struct {
	outcome, claim         fsm.IdempotencyRecord
	hasOutcome, hasClaimed bool
}

func (s *Server) lookup(ctx context.Context, key string) (keyState, error) {
	var ks keyState
	err := s.records.Read(ctx, func(rd *fsm.Reader) error {
		ks.outcome, ks.hasOutcome = rd.IdempotencyRecord(key)
		ks.claim, ks.hasClaimed = rd.IdempotencyRecord(claimKey(key))
		return nil
	})
	if err != nil {
		return ks, fmt.Errorf("%w: reading Idempotency-Key %s: %v", ErrUnavailable, key, err)
	}
	return ks, nil
}

func keyReused(key string, rec fsm.IdempotencyRecord) error {
	return &statusError{http.StatusUnprocessableEntity, "UnprocessableEntityException",
		fmt.Sprintf("Idempotency-Key %s was already used for %s on another request", key, rec.Binding.Operation)}
}

// runOnce runs change for the first request with key and binding, and
// answers every other one with its outcome (replayed true): see the
// comment on claimLifetime. Only successes are stored.
//
// Errors: a 422 statusError when the key is bound to another request;
// ErrUnavailable when the records cannot be read or the claim cannot be
// proposed (nothing ran), or when ctx ends while another request holds the
// claim (the change may still happen; a retry gets its outcome); the
// change's own error when this request ran it and it failed (nothing is
// stored, and a retry runs the change again once the claim expired).
func (s *Server) runOnce(ctx context.Context, op, key string, b fsm.Binding, change memberChange) (replayed bool, err error) {
	wait := pollMinInterval
	for {
		at := s.now()
		ks, err := s.lookup(ctx, key)
		if err != nil {
			return false, err
		}
		if ks.hasOutcome && ks.outcome.Live(at.UnixMilli()) {
			if ks.outcome.Binding != b {
				return false, keyReused(key, ks.outcome)
			}
			return true, nil
		}
		if ks.hasClaimed && ks.claim.Live(at.UnixMilli()) {
			if ks.claim.Binding != b {
				return false, keyReused(key, ks.claim)
			}
		} else {
			res, err := s.records.Propose(ctx, fsm.RecordOutcome{
				Key: claimKey(key), Binding: b,
				AtMs: at.UnixMilli(), ExpiresMs: at.Add(claimLifetime).UnixMilli(),
			})
			if err != nil {
				return false, fmt.Errorf("%w: claiming Idempotency-Key %s: %v", ErrUnavailable, key, err)
			}
			if res.Status == fsm.StatusOK && !res.Replayed {
				return s.runClaimed(ctx, op, key, b, at, change)
			}
			// Another request claimed the key first: the next look-up
			// says whether it is a duplicate (wait) or another request
			// (422).
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, fmt.Errorf("%w: Idempotency-Key %s: the first request with it is still in progress (%v); retry to get its outcome",
				ErrUnavailable, key, context.Cause(ctx))
		case <-t.C:
		}
		wait = min(2*wait, pollMaxInterval)
	}
}

// runClaimed runs change for the request that holds the claim on key
// (taken at time at) and stores its success under key. The change and the
// record do not depend on ctx: duplicates wait for this outcome even if
// this request's client went away. A record that cannot be written is
// logged; the change happened, so the answer is still a success.
func (s *Server) runClaimed(ctx context.Context, op, key string, b fsm.Binding, at time.Time, change memberChange) (replayed bool, err error) {
	changeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), changeTimeout)
	defer cancel()
	// An earlier holder whose claim expired may have stored its outcome
	// after this request's look-up; the claim is in the log now, so this
	// read sees it.
	ks, err := s.lookup(changeCtx, key)
	if err != nil {
		return false, err
	}
	if ks.hasOutcome && ks.outcome.Live(at.UnixMilli()) {
		if ks.outcome.Binding != b {
			return false, keyReused(key, ks.outcome)
		}
		return true, nil
	}
	if err := change(changeCtx); err != nil {
		return false, err
	}
	recordCtx, cancelRecord := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancelRecord()
	res, err := s.records.Propose(recordCtx, fsm.RecordOutcome{
		Key: key, Binding: b,
		AtMs: at.UnixMilli(), ExpiresMs: at.Add(s.lifetime + idempotency.Grace).UnixMilli(),
		Result: fsm.Result{Status: fsm.StatusOK},
	})
	switch {
	case err != nil:
		s.log.Warn("could not record the Idempotency-Key of a membership change", "key", key, "op", op, "error", err)
	case res.Status == fsm.StatusKeyReused:
		s.log.Warn("the Idempotency-Key of a membership change was taken by another request meanwhile", "key", key, "op", op)
	case res.Replayed:
		// A holder whose claim expired finished first: answer as it did.
		return true, nil
	}
	return false, nil
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

func (s *Server) addVoter(r *http.Request) (memberChange, error) {
	req, err := decodeMember(r)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		if err := s.cluster.AddVoter(ctx, req.ID, req.Address); err != nil {
			return err
		}
		s.log.Info("voter added", "id", req.ID, "address", req.Address)
		return nil
	}, nil
}

func (s *Server) addNonvoter(r *http.Request) (memberChange, error) {
	req, err := decodeMember(r)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		if err := s.cluster.AddNonvoter(ctx, req.ID, req.Address); err != nil {
			return err
		}
		s.log.Info("non-voter added", "id", req.ID, "address", req.Address)
		return nil
	}, nil
}

func (s *Server) remove(r *http.Request) (memberChange, error) {
	id := mux.Vars(r)["id"]
	return func(ctx context.Context) error {
		if err := s.cluster.Remove(ctx, id); err != nil {
			return err
		}
		s.log.Info("member removed", "id", id)
		return nil
	}, nil
}

func (s *Server) transfer(r *http.Request) (memberChange, error) {
	var req struct {
		ID string `json:"id"`
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, fmt.Errorf("%w: reading body: %v", ErrBadRequest, err)
	}
	if len(strings.TrimSpace(string(body))) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, fmt.Errorf("%w: malformed body: %v", ErrBadRequest, err)
		}
	}
	return func(ctx context.Context) error {
		if err := s.cluster.TransferLeadership(ctx, req.ID); err != nil {
			return err
		}
		s.log.Info("leadership transferred", "to", req.ID)
		return nil
	}, nil
}
