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
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/idempotency"
	"github.com/floe-catalog/floe/internal/muxallow"
	"github.com/floe-catalog/floe/internal/raftnode"
)

// Cluster is what the operator API needs from the node (a raftnode.Node).
// Mutations run on the leader (the node forwards them); their errors wrap
// raftnode.ErrInvalidMember or raftnode.ErrNoSuchMember for the operator's
// mistakes and raftnode.ErrUnavailable when no leader could take them.
type Cluster interface {
	Status(ctx context.Context) (raftnode.Status, error)
	AddVoter(ctx context.Context, id, addr string) error
	AddNonvoter(ctx context.Context, id, addr string) error
	Remove(ctx context.Context, id string) error
	TransferLeadership(ctx context.Context, id string) error
}

var _ Cluster = (*raftnode.Node)(nil)

// Errors the operator API answers with: 400, 404, 409 and 503.
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
// entry; they run through idempotency.Keys.Once, which claims the key
// first.
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
	// Principal names the request's caller, for Idempotency-Key bindings
	// and the records of who changed what; nil: "anonymous".
	Principal func(*http.Request) string
	// Reauthorize checks again, for an answer that goes on after the
	// request was let in (the change feed), that its caller may still have
	// it: an error (the credential expired or was deleted, the admin
	// privilege revoked) ends the answer. An error wrapping ErrUnavailable
	// says the check could not be made now (no leader): the answer goes
	// on, and ends only if no check succeeds for reauthorizeGrace. nil:
	// never checked again (authentication off).
	Reauthorize func(*http.Request) error
}

// principal names who the request acts for.
func (s *Server) principal(r *http.Request) string {
	if s.cfg.Principal != nil {
		if p := s.cfg.Principal(r); p != "" {
			return p
		}
	}
	return anonymous
}

// Server is the operator API handler.
type Server struct {
	cluster Cluster
	// keys runs the keyed membership changes; nil without records.
	keys   *idempotency.Keys
	cfg    Config
	log    *slog.Logger
	router *mux.Router
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
	s := &Server{cluster: c, cfg: cfg, log: cfg.Logger}
	if records != nil {
		s.keys = s.keysOver(leaving(records))
	}
	return s
}

// keysOver returns the keyed-request flow over store, with the server's
// clock and idempotency lifetime.
func (s *Server) keysOver(store idempotency.Store) *idempotency.Keys {
	return idempotency.New(store, idempotency.Config{Lifetime: s.cfg.IdempotencyLifetime, Now: s.cfg.Now, Logger: s.log})
}

// leavingProposer is a store whose node can still propose after it removed
// itself from the cluster: raftnode.Node.ProposeAfterLeaving.
type leavingProposer interface {
	ProposeAfterLeaving(ctx context.Context, cmd fsm.Command) (fsm.Result, error)
}

// leavingStore proposes through ProposeAfterLeaving: the membership
// changes' keyed flow, so that the outcome of removing the node that took
// the request is recorded through the members it left, and a retry on
// another node is a replay.
type leavingStore struct {
	idempotency.Store
	p leavingProposer
}

// leaving returns store proposing through ProposeAfterLeaving when it can.
func leaving(store idempotency.Store) idempotency.Store {
	if lp, ok := store.(leavingProposer); ok {
		return leavingStore{Store: store, p: lp}
	}
	return store
}

func (l leavingStore) Propose(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
	return l.p.ProposeAfterLeaving(ctx, cmd)
}

// New returns the operator API. With records non-nil the membership
// mutations honour Idempotency-Key.
func New(c Cluster, records Records, cfg Config) *Server {
	s := newServer(c, records, cfg)
	r := mux.NewRouter()
	// HEAD beside GET (RFC 9110), but for the backup and the event
	// stream, which would be produced only to be thrown away.
	r.Handle("/management/v1/cluster", s.wrap(s.status)).Methods("GET", "HEAD")
	r.Handle("/management/v1/cluster/voters", s.wrap(s.membership("addVoter", s.addVoter))).Methods("POST")
	r.Handle("/management/v1/cluster/non-voters", s.wrap(s.membership("addNonvoter", s.addNonvoter))).Methods("POST")
	r.Handle("/management/v1/cluster/members/{id}", s.wrap(s.membership("removeMember", s.remove))).Methods("DELETE")
	r.Handle("/management/v1/cluster/leadership-transfer", s.wrap(s.membership("transferLeadership", s.transfer))).Methods("POST")
	r.NotFoundHandler = s.wrap(func(w http.ResponseWriter, r *http.Request) error {
		return fmt.Errorf("%w: no such route %s %s", ErrNotFound, r.Method, r.URL.Path)
	})
	r.MethodNotAllowedHandler = s.methodNotAllowed(r)
	s.router = r
	return s
}

// methodNotAllowed answers 405 with the Allow header of router's routes
// for the path.
func (s *Server) methodNotAllowed(router *mux.Router) http.Handler {
	return s.wrap(func(w http.ResponseWriter, r *http.Request) error {
		muxallow.Set(w, router, r)
		return &statusError{http.StatusMethodNotAllowed, "MethodNotAllowedException", r.Method + " is not allowed on " + r.URL.Path}
	})
}

// Handler serves /management/v1/….
func (s *Server) Handler() http.Handler { return s.router }

type statusError struct {
	status int
	typ    string
	msg    string
}

func (e *statusError) Error() string { return e.msg }

// maxBody bounds an operator API request's body.
const maxBody = 1 << 20

// readAllBody reads the request body whole. Errors wrap ErrBadRequest,
// or are the *http.MaxBytesError of a body over maxBody (413); one the
// connection cut is said so without the sockets' addresses.
func readAllBody(r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(r.Body)
	if err == nil {
		return body, nil
	}
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return nil, err
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return nil, fmt.Errorf("%w: the request body did not arrive in time", ErrBadRequest)
	}
	if _, ok := errors.AsType[*net.OpError](err); ok {
		return nil, fmt.Errorf("%w: the request body could not be read: the connection failed", ErrBadRequest)
	}
	return nil, fmt.Errorf("%w: reading body: %w", ErrBadRequest, err)
}

// onlyParams refuses a query parameter that is not one of known: a
// filter misspelt (stat=FAILED, pageSize=1) would otherwise be ignored,
// and the answer would list everything, or a page of another size, as if
// it were what was asked for.
func onlyParams(q url.Values, known ...string) error {
	for name := range q {
		if !slices.Contains(known, name) {
			return fmt.Errorf("%w: unknown query parameter %q: this endpoint takes %s", ErrBadRequest, name, strings.Join(known, ", "))
		}
	}
	return nil
}

func (s *Server) wrap(h func(w http.ResponseWriter, r *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		var err error
		if r.ContentLength > maxBody {
			// Refused before a byte is read: a client waiting for
			// "100 Continue" gets this answer instead, at once.
			err = &http.MaxBytesError{Limit: maxBody}
		} else if _, qerr := url.ParseQuery(r.URL.RawQuery); qerr != nil {
			// url.Values drops a malformed pair silently, so that a
			// filter such as "?state=%zz" would read as no filter at all.
			err = fmt.Errorf("%w: malformed query string: %v", ErrBadRequest, qerr)
		} else if n := len(r.Header.Values(idempotency.Header)); n > 1 {
			// Which key the client meant is unknown (as in the catalog).
			err = fmt.Errorf("%w: %s given %d times: send one", ErrBadRequest, idempotency.Header, n)
		} else if n == 1 && r.Header.Get(idempotency.Header) == "" {
			err = fmt.Errorf("%w: %s is empty: send a UUID, or no header", ErrBadRequest, idempotency.Header)
		} else {
			err = h(w, r)
		}
		if err == nil {
			return
		}
		se := &statusError{http.StatusInternalServerError, "InternalServerError", err.Error()}
		var direct *statusError
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &direct):
			se = direct
		case errors.As(err, &tooBig):
			se = &statusError{http.StatusRequestEntityTooLarge, "BadRequestException", fmt.Sprintf("request body over %d bytes", tooBig.Limit)}
		case errors.Is(err, ErrBadRequest), errors.Is(err, raftnode.ErrInvalidMember):
			se = &statusError{http.StatusBadRequest, "BadRequestException", err.Error()}
		case errors.Is(err, ErrNotFound), errors.Is(err, raftnode.ErrNoSuchMember):
			se = &statusError{http.StatusNotFound, "NotFoundException", err.Error()}
		case errors.Is(err, ErrConflict):
			se = &statusError{http.StatusConflict, "AlreadyExistsException", err.Error()}
		case errors.Is(err, fsm.ErrKeyReused):
			se = &statusError{http.StatusUnprocessableEntity, "UnprocessableEntityException", err.Error()}
		case errors.Is(err, raftnode.ErrUnknownOutcome):
			// The change may have taken effect: a 500, which no client
			// resends by itself as it would a 503.
			se = &statusError{http.StatusInternalServerError, "InternalServerError", "outcome unknown, read the state before retrying: " + err.Error()}
		case errors.Is(err, ErrUnavailable), errors.Is(err, raftnode.ErrUnavailable), errors.Is(err, idempotency.ErrUnavailable),
			errors.Is(err, raftnode.ErrNotAccepted), errors.Is(err, raftnode.ErrBehind),
			errors.Is(err, raftnode.ErrClockSkew):
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
// answers 204. With an Idempotency-Key the change runs through
// idempotency.Keys.Once, which claims the key through the log so that the
// change runs once however many duplicates arrive, on any node.
func (s *Server) membership(op string, prepare func(r *http.Request) (memberChange, error)) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		raw := r.Header.Get(idempotency.Header)
		if raw == "" || s.keys == nil {
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
		body, err := readAllBody(r)
		if err != nil {
			return err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		change, err := prepare(r)
		if err != nil {
			return err
		}
		replayed, err := s.keys.Once(r.Context(), s.keys.Bind(key, op, []string{mux.Vars(r)["id"]}, s.principal(r), body), change)
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

// decodeStrict decodes the JSON body into v: ErrBadRequest when it does
// not parse, holds a field v does not have (an operator who sends one
// believes it set something), or has data after the value.
// noFields reads and returns the body of a route that takes no fields:
// none, or an empty JSON object. An operator who sends more believes it
// set something.
func noFields(r *http.Request) ([]byte, error) {
	body, err := readAllBody(r)
	if err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(body)) > 0 {
		if err := decodeStrict(body, &struct{}{}); err != nil {
			return nil, fmt.Errorf("%w (this route takes no fields)", err)
		}
	}
	return body, nil
}

func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: malformed body: %v", ErrBadRequest, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: malformed body: data after the JSON value", ErrBadRequest)
	}
	return nil
}

func decodeMember(r *http.Request) (memberRequest, error) {
	var req memberRequest
	body, err := readAllBody(r)
	if err != nil {
		return req, err
	}
	if err := decodeStrict(body, &req); err != nil {
		return req, err
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
	body, err := readAllBody(r)
	if err != nil {
		return nil, err
	}
	if len(strings.TrimSpace(string(body))) > 0 {
		if err := decodeStrict(body, &req); err != nil {
			return nil, err
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
