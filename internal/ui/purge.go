package ui

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/uuid"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/idempotency"
	"github.com/floe-catalog/floe/purge"
)

// formTokenField carries a random UUID each action form is rendered with;
// the action is proposed with it as its Idempotency-Key, so submitting the
// same form twice applies once.
const formTokenField = "form-token"

// purgePage is the purge queue, filtered by state, paginated.
type purgePage struct {
	State  string
	States []navItem
	Counts jobCounts
	Jobs   []jobRow
	Pager  pager
}

// jobRow is one purge job with its progress, and the forms of its actions
// when it is FAILED and not released.
type jobRow struct {
	ID string
	// Warehouse names the table's named warehouse; empty for the default
	// one. Table is the table's name within it.
	Warehouse    string
	Table        string
	Location     string
	State        string
	Released     bool
	ReleasedBy   string
	Attempts     int
	LastError    string
	LeaseNode    string
	Phase        string
	Deleted      int64
	Bytes        int64
	Skipped      int64
	SkippedOwned int64
	DroppedBy    string
	CreatedMs    int64
	UpdatedMs    int64
	// Actionable: FAILED and not released; the forms carry a token each.
	Actionable   bool
	RetryHref    string
	ReleaseHref  string
	RetryToken   string
	ReleaseToken string
}

// jobStates are the filters of the purge page, "" for every job.
var jobStates = []fsm.JobState{"", fsm.JobPending, fsm.JobRunning, fsm.JobFailed, fsm.JobSucceeded}

func (s *Server) purgeJobs(w http.ResponseWriter, r *http.Request) error {
	if err := s.requireAdmin(r, "the purge queue"); err != nil {
		return err
	}
	q := r.URL.Query()
	state := fsm.JobState(strings.ToUpper(q.Get("state")))
	if state != "" && !state.Valid() {
		return badRequest("state must be PENDING, RUNNING, SUCCEEDED or FAILED, got %q", q.Get("state"))
	}
	page, after := pageOf(r, "jobs")
	p := purgePage{State: string(state)}
	for _, st := range jobStates {
		label, href := string(st), "/ui/purge-jobs?"+url.Values{"state": {string(st)}}.Encode()
		if st == "" {
			label, href = "All", "/ui/purge-jobs"
		}
		p.States = append(p.States, navItem{Label: label, Href: href, Active: st == state})
	}
	var (
		jobs    []fsm.PurgeJob
		more    bool
		flashed bool
	)
	stale, err := s.read(r.Context(), func(rd *fsm.Reader) error {
		if after != "" {
			// A cursor is the id of the last job of a page: a job's, or
			// a UUID (the job may have been pruned since), as the
			// operator API's page-token. Anything else would list from
			// wherever it sorts.
			if _, ok := rd.PurgeJob(after); !ok && (len(after) != 36 || uuid.Validate(after) != nil) {
				return badRequest("jobs-after %q names no purge job: follow the page's Next link", after)
			}
		}
		jobs, more = rd.PurgeJobs(fsm.PurgeJobFilter{State: state, After: after}, s.cfg.PageSize)
		if id := q.Get("job"); id != "" {
			_, flashed = rd.PurgeJob(id)
		}
		counts, released := rd.PurgeJobCounts()
		p.Counts = jobCounts{
			Pending: counts[fsm.JobPending], Running: counts[fsm.JobRunning],
			Succeeded: counts[fsm.JobSucceeded], Failed: counts[fsm.JobFailed], Released: released,
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, j := range jobs {
		p.Jobs = append(p.Jobs, s.jobRow(j))
	}
	next := ""
	if more && len(jobs) > 0 {
		next = jobs[len(jobs)-1].ID
	}
	var fixed url.Values
	if state != "" {
		fixed = url.Values{"state": {string(state)}}
	}
	p.Pager = cursorPager("/ui/purge-jobs", fixed, "jobs", page, next)
	l := layout{Title: "Purge jobs", Stale: stale, Content: &p, Flash: flash(q, flashed)}
	s.renderWith(w, r, http.StatusOK, "purge", l, "purge")
	return nil
}

func (s *Server) jobRow(j fsm.PurgeJob) jobRow {
	wh, levels := fsm.SplitWarehouse(j.Ident.Namespace)
	row := jobRow{
		ID: j.ID, Warehouse: wh, Table: nsName(levels) + "." + j.Ident.Name, Location: j.Location,
		State: string(j.State), Released: j.Released, ReleasedBy: j.ReleasedBy, Attempts: j.Attempts, LastError: j.LastError,
		Phase: purge.PhaseName(j.Progress.Phase), Deleted: j.Progress.Deleted, Bytes: j.Progress.Bytes,
		Skipped: j.Progress.Skipped, SkippedOwned: j.Progress.SkippedOwned, DroppedBy: j.DroppedBy,
		CreatedMs: j.CreatedMs, UpdatedMs: j.UpdatedMs,
	}
	if j.State == fsm.JobSucceeded && j.LastError != "" {
		// The state machine keeps an earlier attempt's error once a
		// retry has succeeded: not the job's outcome.
		row.LastError = "(an earlier attempt) " + j.LastError
	}
	if j.Lease != nil {
		row.LeaseNode = j.Lease.Node
	}
	if j.State == fsm.JobFailed && !j.Released {
		row.Actionable = true
		base := "/ui/purge-jobs/" + url.PathEscape(j.ID)
		row.RetryHref, row.ReleaseHref = base+"/retry", base+"/release"
		row.RetryToken, row.ReleaseToken = newFormToken(), newFormToken()
	}
	return row
}

// newFormToken is a fresh Idempotency-Key for one rendered form.
func newFormToken() string {
	if u, err := uuid.NewV7(); err == nil {
		return u.String()
	}
	return uuid.NewString()
}

// flash is the note the purge page shows after an action redirected to it.
func flash(q url.Values, exists bool) string {
	job := q.Get("job")
	if job == "" || !exists {
		// Only a job that exists: a link of someone else's would show
		// its own words in the success note.
		return ""
	}
	switch q.Get("done") {
	case "retry":
		return "Purge job " + job + " retried: it is PENDING again and will run shortly."
	case "release":
		return "Purge job " + job + " released: its table name and location are free again; its files were not deleted."
	}
	return ""
}

// maxJobIDLen bounds a job id taken from a form's path: jobs are named by
// UUIDs (36 bytes).
const maxJobIDLen = 64

// purgeAction serves the Retry and Release forms: admin only, with the
// CSRF check. It serves the operator API's own request
// (POST /management/v1/purge-jobs/{id}/retry|release) through its handler,
// with the form's token as Idempotency-Key, then sends the browser back to
// the purge page (303).
func (s *Server) purgeAction(w http.ResponseWriter, r *http.Request) error {
	if err := checkForm(w, r); err != nil {
		return err
	}
	if err := s.requireAdmin(r, "the purge queue's actions"); err != nil {
		return err
	}
	action, id := r.PathValue("action"), r.PathValue("id")
	if action != "retry" && action != "release" {
		return notFound("There is no purge job action %q.", action)
	}
	if len(id) > maxJobIDLen {
		// No job has such an id (they are UUIDs); refused before it is
		// logged, twice, as a refusal would.
		return notFound("There is no purge job with an id of %d bytes.", len(id))
	}
	key := r.PostForm.Get(formTokenField)
	if _, _, err := idempotency.ParseKey(key); err != nil {
		return badRequest("the form has no valid %s; reload the page and try again", formTokenField)
	}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodPost,
		"/management/v1/purge-jobs/"+url.PathEscape(id)+"/"+action, http.NoBody)
	if err != nil {
		return badRequest("malformed job id %q", id)
	}
	req.Header.Set(idempotency.Header, key)
	rec := &recorder{header: http.Header{}}
	s.cfg.PurgeJobs.ServeHTTP(rec, req)
	if rec.status != http.StatusOK {
		s.log.Warn("purge job action from the status page refused", "action", action, "job_id", id,
			"by", s.actor(r), "status", rec.status, "error", apiMessage(rec.body.Bytes()))
		return &pageError{status: rec.status, msg: "Purge job " + id + ": " + action + " refused: " + apiMessage(rec.body.Bytes())}
	}
	s.log.Info("purge job "+pastTense(action)+" from the status page", "job_id", id, "by", s.actor(r),
		"replayed", rec.header.Get("Idempotent-Replayed") == "true", "remote", r.RemoteAddr)
	back := url.Values{"done": {action}, "job": {id}}
	if st := fsm.JobState(r.PostForm.Get("state")); st.Valid() {
		back.Set("state", string(st))
	}
	http.Redirect(w, r, "/ui/purge-jobs?"+back.Encode(), http.StatusSeeOther)
	return nil
}

func pastTense(action string) string {
	if action == "retry" {
		return "retried"
	}
	return "released"
}

// apiMessage is the message of an answer in the Iceberg error model, or
// the answer itself.
func apiMessage(body []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		return e.Error.Message
	}
	return strings.TrimSpace(string(body))
}

// recorder keeps the answer of a handler served in-process.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}
