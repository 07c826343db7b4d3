package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/mux"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/idempotency"
	"github.com/floe-catalog/floe/internal/auth"
	"github.com/floe-catalog/floe/internal/raftnode"
)

// PurgeStore is the replicated state the purge-jobs API reads and changes:
// a raftnode.Node (Propose forwards to the leader; Read is linearizable).
type PurgeStore interface {
	Propose(ctx context.Context, cmd fsm.Command) (fsm.Result, error)
	Read(ctx context.Context, fn func(*fsm.Reader) error) error
}

// Purge-jobs listing page sizes.
const (
	defaultPurgePageSize = 100
	maxPurgePageSize     = 1000
)

// anonymous names the operator when the API has no Principal function
// (authentication off).
const anonymous = auth.AnonymousPrincipal

// NewPurgeJobs returns the purge-jobs operator API of a server with the
// default Config but for now and logger (nil: time.Now, slog.Default): keys
// are honoured for idempotency.DefaultLifetime. See (*Server).PurgeJobs.
func NewPurgeJobs(store PurgeStore, now func() time.Time, logger *slog.Logger) http.Handler {
	return newServer(nil, nil, Config{Now: now, Logger: logger}).PurgeJobs(store)
}

// PurgeJobs returns the purge-jobs operator API, stamping with the
// server's clock and honouring keys for its idempotency lifetime:
//
//	GET  /management/v1/purge-jobs                list; filters state, warehouse,
//	                                              namespace (levels joined by "." or
//	                                              %1F), table; page-size, page-token
//	GET  /management/v1/purge-jobs/{id}           one job
//	POST /management/v1/purge-jobs/{id}/retry     FAILED → PENDING, attempts reset
//	POST /management/v1/purge-jobs/{id}/release   FAILED: drop its tombstones; the
//	                                              job stays, FAILED and released
//	GET  /management/v1/locations/conflicts       live tables whose locations are
//	                                              equal or nested (state written
//	                                              before locations were owned);
//	                                              page-size (default all)
//
// Reads are linearizable. Retry and release of a job in any other state
// answer 409; an unknown job 404. FileIO secrets are never shown.
func (s *Server) PurgeJobs(store PurgeStore) http.Handler {
	p := &purgeAPI{store: store, keys: s.keysOver(store), now: s.cfg.Now, log: s.log, srv: s}
	r := mux.NewRouter()
	r.Handle("/management/v1/purge-jobs", s.wrap(p.list)).Methods("GET", "HEAD")
	r.Handle("/management/v1/purge-jobs/{id}", s.wrap(p.get)).Methods("GET", "HEAD")
	r.Handle("/management/v1/purge-jobs/{id}/retry", s.wrap(p.retry)).Methods("POST")
	r.Handle("/management/v1/purge-jobs/{id}/release", s.wrap(p.release)).Methods("POST")
	r.Handle("/management/v1/locations/conflicts", s.wrap(p.conflicts)).Methods("GET", "HEAD")
	r.NotFoundHandler = s.wrap(func(w http.ResponseWriter, r *http.Request) error {
		return fmt.Errorf("%w: no such route %s %s", ErrNotFound, r.Method, r.URL.Path)
	})
	r.MethodNotAllowedHandler = s.methodNotAllowed(r)
	return r
}

type purgeAPI struct {
	srv   *Server
	store PurgeStore
	keys  *idempotency.Keys
	now   func() time.Time
	log   *slog.Logger
}

// PurgeJobView is a purge job as the operator API shows it.
type PurgeJobView struct {
	ID        string `json:"id"`
	Warehouse string `json:"warehouse"`
	// WarehouseName names the table's warehouse when it is not the
	// default one; Namespace is then the namespace within it.
	WarehouseName    string            `json:"warehouse-name,omitempty"`
	Namespace        []string          `json:"namespace"`
	Table            string            `json:"table"`
	TableUUID        string            `json:"table-uuid"`
	Location         string            `json:"location"`
	MetadataLocation string            `json:"metadata-location"`
	FileIO           map[string]string `json:"file-io"`
	State            string            `json:"state"`
	Released         bool              `json:"released"`
	ReleasedBy       string            `json:"released-by,omitempty"`
	Attempts         int               `json:"attempts"`
	LastError        string            `json:"last-error,omitempty"`
	Lease            *fsm.PurgeLease   `json:"lease,omitempty"`
	Progress         fsm.PurgeProgress `json:"progress"`
	// FirstPhase is the first purge phase with a file, as the drop found
	// it (0: not judged); a run starts there.
	FirstPhase  int    `json:"first-phase,omitempty"`
	NotBeforeMs int64  `json:"not-before-ms,omitempty"`
	DroppedBy   string `json:"dropped-by"`
	CreatedMs   int64  `json:"created-ms"`
	UpdatedMs   int64  `json:"updated-ms"`
}

// redacted lists FileIO property name fragments whose values are secrets.
var redacted = []string{"secret", "token", "password", "credential", "key-id"}

func viewOf(j fsm.PurgeJob) PurgeJobView {
	props := map[string]string{}
	for k, v := range j.FileIO {
		for _, frag := range redacted {
			if strings.Contains(strings.ToLower(k), frag) {
				v = "<redacted>"
				break
			}
		}
		props[k] = v
	}
	whName, ns := fsm.SplitWarehouse(j.Ident.Namespace)
	return PurgeJobView{
		ID: j.ID, Warehouse: j.Warehouse, WarehouseName: whName, Namespace: ns, Table: j.Ident.Name, TableUUID: j.TableUUID,
		Location: j.Location, MetadataLocation: j.MetadataLocation, FileIO: props, State: string(j.State),
		Released: j.Released, ReleasedBy: j.ReleasedBy, Attempts: j.Attempts, LastError: j.LastError, Lease: j.Lease,
		Progress: j.Progress, FirstPhase: j.FirstPhase, NotBeforeMs: j.NotBeforeMs, DroppedBy: j.DroppedBy, CreatedMs: j.CreatedMs, UpdatedMs: j.UpdatedMs,
	}
}

type purgeJobList struct {
	Jobs          []PurgeJobView `json:"jobs"`
	NextPageToken *string        `json:"next-page-token"`
}

// locationConflict is one pair of live tables with equal or nested
// locations: Outer's location is equal to or contains Inner's.
type locationConflict struct {
	Outer locatedTable `json:"outer"`
	Inner locatedTable `json:"inner"`
}

type locatedTable struct {
	Warehouse string   `json:"warehouse,omitempty"`
	Namespace []string `json:"namespace"`
	Name      string   `json:"name"`
	Location  string   `json:"location"`
}

type conflictList struct {
	Conflicts []locationConflict `json:"conflicts"`
	// Truncated: more pairs exist than page-size allowed.
	Truncated bool `json:"truncated"`
}

// conflicts lists live tables that share a location. Creates, registers
// and set-location refuse new overlaps, so the list only holds state
// written before that; purging one of such a pair never deletes a file
// inside the other's location (the purge worker skips and counts them).
func (p *purgeAPI) conflicts(w http.ResponseWriter, r *http.Request) error {
	if err := onlyParams(r.URL.Query(), "page-size"); err != nil {
		return err
	}
	if n := len(r.URL.Query()["page-size"]); n > 1 {
		return fmt.Errorf("%w: page-size given %d times: give it once", ErrBadRequest, n)
	}
	limit := 0
	if v := r.URL.Query().Get("page-size"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("%w: page-size must be a positive integer, got %q", ErrBadRequest, v)
		}
		limit = n
	}
	out := conflictList{Conflicts: []locationConflict{}}
	err := p.read(r.Context(), func(rd *fsm.Reader) error {
		list, more := rd.LocationConflicts(limit)
		out.Truncated = more
		for _, c := range list {
			out.Conflicts = append(out.Conflicts, locationConflict{
				Outer: located(c.Outer.Namespace, c.Outer.Name, c.Outer.Location),
				Inner: located(c.Inner.Namespace, c.Inner.Name, c.Inner.Location),
			})
		}
		return nil
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (p *purgeAPI) list(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	if err := onlyParams(q, "state", "warehouse", "warehouse-name", "namespace", "table", "page-size", "page-token"); err != nil {
		return err
	}
	for name, values := range q {
		if len(values) > 1 {
			// Which one the caller meant is unknown: a second state is
			// not an "or".
			return fmt.Errorf("%w: %s given %d times: give it once", ErrBadRequest, name, len(values))
		}
	}
	f := fsm.PurgeJobFilter{
		State:     fsm.JobState(strings.ToUpper(q.Get("state"))),
		Warehouse: q.Get("warehouse"),
		Table:     q.Get("table"),
		After:     q.Get("page-token"),
	}
	if f.State != "" && !f.State.Valid() {
		return fmt.Errorf("%w: state must be PENDING, RUNNING, SUCCEEDED or FAILED, got %q", ErrBadRequest, q.Get("state"))
	}
	if q.Has("warehouse-name") && q.Get("namespace") == "" {
		// It names whose namespace "namespace" is; alone it was ignored,
		// and the answer listed every warehouse's jobs.
		return fmt.Errorf("%w: warehouse-name says which warehouse's namespace the namespace parameter names: give namespace too (to filter by warehouse, give warehouse, its location)", ErrBadRequest)
	}
	if ns := q.Get("namespace"); ns != "" {
		levels := strings.FieldsFunc(ns, func(r rune) bool { return r == '.' || r == 0x1f })
		if len(levels) == 0 {
			return fmt.Errorf("%w: malformed namespace %q", ErrBadRequest, ns)
		}
		// warehouse-name: the namespace is one of that named
		// warehouse's; none: of the default warehouse.
		f.Namespace = fsm.InWarehouse(q.Get("warehouse-name"), levels)
	}
	limit := defaultPurgePageSize
	if v := q.Get("page-size"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPurgePageSize {
			return fmt.Errorf("%w: page-size must be 1 to %d, got %q", ErrBadRequest, maxPurgePageSize, v)
		}
		limit = n
	}
	out := purgeJobList{Jobs: []PurgeJobView{}}
	err := p.read(r.Context(), func(rd *fsm.Reader) error {
		if q.Has("page-token") {
			// A token is the id of the last job of a page: a job's, or a
			// UUID (the job may have been pruned since). Anything else
			// would list from wherever it sorts, not from a page's end.
			if _, ok := rd.PurgeJob(f.After); !ok && (len(f.After) != 36 || uuid.Validate(f.After) != nil) {
				return fmt.Errorf("%w: page-token %q is not one this API gave: pass the next-page-token of the previous page as it was", ErrBadRequest, f.After)
			}
		}
		jobs, more := rd.PurgeJobs(f, limit)
		for _, j := range jobs {
			out.Jobs = append(out.Jobs, viewOf(j))
		}
		if more && len(jobs) > 0 {
			next := jobs[len(jobs)-1].ID
			out.NextPageToken = &next
		}
		return nil
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func jobID(r *http.Request) (string, error) {
	// The router has decoded the path once already: decoding again would
	// read %2541 as the id "A".
	id := mux.Vars(r)["id"]
	if id == "" {
		return "", fmt.Errorf("%w: malformed job id", ErrBadRequest)
	}
	return id, nil
}

func (p *purgeAPI) get(w http.ResponseWriter, r *http.Request) error {
	id, err := jobID(r)
	if err != nil {
		return err
	}
	j, err := p.job(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, viewOf(j))
	return nil
}

func (p *purgeAPI) retry(w http.ResponseWriter, r *http.Request) error {
	return p.change(w, r, "retried", func(id string, atMs int64) fsm.Command {
		return fsm.RetryPurgeJob{JobID: id, By: p.srv.principal(r), AtMs: atMs}
	})
}

func (p *purgeAPI) release(w http.ResponseWriter, r *http.Request) error {
	return p.change(w, r, "released", func(id string, atMs int64) fsm.Command {
		return fsm.ReleasePurgeJob{JobID: id, By: p.srv.principal(r), AtMs: atMs}
	})
}

// change proposes a retry or release and answers with the job after it.
// With an Idempotency-Key it runs through idempotency.Keys.Run: the command
// is wrapped in fsm.Keyed, so the operator's retry of a retry or release
// takes effect once and gets the first answer; the record is written by the
// same log entry as the change. A malformed key is a 400.
func (p *purgeAPI) change(w http.ResponseWriter, r *http.Request, what string, cmd func(string, int64) fsm.Command) error {
	id, err := jobID(r)
	if err != nil {
		return err
	}
	body, err := noFields(r)
	if err != nil {
		return err
	}
	answer := func(ctx context.Context, res fsm.Result, replayed bool) error {
		if err := res.Err(); err != nil {
			switch {
			case errors.Is(err, fsm.ErrNoSuchJob):
				return fmt.Errorf("%w: %v", ErrNotFound, err)
			case errors.Is(err, fsm.ErrCommitFailed):
				return &statusError{http.StatusConflict, "ConflictException", err.Error()}
			}
			return err
		}
		if replayed {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		p.log.Info("purge job "+what+" by operator", "job_id", id, "by", p.srv.principal(r))
		j, err := p.job(ctx, id)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, viewOf(j))
		return nil
	}
	propose := func(ctx context.Context) error {
		res, err := idempotency.Propose(ctx, p.store, cmd(id, p.now().UnixMilli()))
		switch {
		case errors.Is(err, idempotency.ErrReplayed):
			return err // answered from the key's record
		case errors.Is(err, raftnode.ErrUnknownOutcome):
			return err // a 500: the change may have taken effect
		case err != nil:
			// Not a decision: no leader, or the answer was lost. The
			// operator reads the job and tries again.
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		return answer(ctx, res, false)
	}
	raw := r.Header.Get(idempotency.Header)
	if raw == "" {
		return propose(r.Context())
	}
	key, _, err := idempotency.ParseKey(raw)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	replay := func(ctx context.Context, res fsm.Result) error { return answer(ctx, res, true) }
	_, err = p.keys.Run(r.Context(), p.keys.Bind(key, "purge-job-"+what, []string{id}, p.srv.principal(r), body), propose, replay, nil)
	return err
}

func (p *purgeAPI) job(ctx context.Context, id string) (fsm.PurgeJob, error) {
	var (
		j  fsm.PurgeJob
		ok bool
	)
	if err := p.read(ctx, func(rd *fsm.Reader) error {
		j, ok = rd.PurgeJob(id)
		return nil
	}); err != nil {
		return j, err
	}
	if !ok {
		return j, fmt.Errorf("%w: purge job %s does not exist", ErrNotFound, id)
	}
	return j, nil
}

func (p *purgeAPI) read(ctx context.Context, fn func(*fsm.Reader) error) error {
	var inner error
	err := p.store.Read(ctx, func(rd *fsm.Reader) error {
		inner = fn(rd)
		return inner
	})
	if err != nil && !errors.Is(err, inner) {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return err
}

func located(levels []string, name, location string) locatedTable {
	wh, ns := fsm.SplitWarehouse(levels)
	return locatedTable{Warehouse: wh, Namespace: ns, Name: name, Location: location}
}
