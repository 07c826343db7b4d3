package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// floe purge wait polls the job every cliPollInterval, each poll bounded by
// cliPollTimeout; without a terminal it prints a progress line at least
// every cliProgressEvery.
var (
	cliPollInterval  = time.Second
	cliPollTimeout   = 15 * time.Second
	cliProgressEvery = 10 * time.Second
)

// cliJob is a purge job as the operator API shows it.
type cliJob struct {
	ID               string            `json:"id"`
	Warehouse        string            `json:"warehouse"`
	WarehouseName    string            `json:"warehouse-name"`
	Namespace        []string          `json:"namespace"`
	Table            string            `json:"table"`
	TableUUID        string            `json:"table-uuid"`
	Location         string            `json:"location"`
	MetadataLocation string            `json:"metadata-location"`
	FileIO           map[string]string `json:"file-io"`
	State            string            `json:"state"`
	Released         bool              `json:"released"`
	ReleasedBy       string            `json:"released-by"`
	Attempts         int               `json:"attempts"`
	LastError        string            `json:"last-error"`
	Lease            *struct {
		Node      string `json:"node"`
		Token     uint64 `json:"token"`
		ExpiresMs int64  `json:"expires-ms"`
	} `json:"lease"`
	Progress struct {
		Deleted      int64 `json:"files-deleted"`
		Bytes        int64 `json:"bytes-deleted"`
		Skipped      int64 `json:"files-skipped-outside"`
		SkippedOwned int64 `json:"files-skipped-owned"`
	} `json:"progress"`
	NotBeforeMs int64  `json:"not-before-ms"`
	DroppedBy   string `json:"dropped-by"`
	CreatedMs   int64  `json:"created-ms"`
	UpdatedMs   int64  `json:"updated-ms"`
}

// tableName is the job's table as namespace.table, after "warehouse:"
// for a named warehouse's table.
func (j cliJob) tableName() string {
	name := strings.Join(append(append([]string{}, j.Namespace...), j.Table), ".")
	if j.WarehouseName != "" {
		return j.WarehouseName + ":" + name
	}
	return name
}

// state is the job's state, with "(released)" for a released FAILED job.
func (j cliJob) state() string {
	if j.Released {
		return j.State + " (released)"
	}
	return j.State
}

func runPurgeCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runGroup(ctx, "purge", purgeLeaves(), args, stdout, stderr)
}

func purgeLeaves() []cliLeaf {
	var state, namespace, table string
	return []cliLeaf{
		{
			group: "purge", name: "list",
			summary: "purge jobs, every page; --state, --namespace and --table filter them",
			about: `GET /management/v1/purge-jobs, following the page tokens. --json prints
{"jobs":[...],"next-page-token":null} with every page's jobs.`,
			timeout: defaultCLITimeout,
			flags: func(fs *flag.FlagSet) {
				fs.StringVar(&state, "state", "", "only jobs in this state: PENDING, RUNNING, SUCCEEDED or FAILED")
				fs.StringVar(&namespace, "namespace", "", "only jobs of tables in this namespace (levels joined by .)")
				fs.StringVar(&table, "table", "", "only jobs of tables with this name")
			},
			run: func(ctx context.Context, s *cliSession, _ []string) error {
				q := url.Values{}
				for k, v := range map[string]string{"state": state, "namespace": namespace, "table": table} {
					if v != "" {
						q.Set(k, v)
					}
				}
				return listJobs(ctx, s, q)
			},
		},
		{
			group: "purge", name: "show", args: "ID",
			summary: "one purge job: state, attempts, last error, lease, progress",
			about:   `GET /management/v1/purge-jobs/ID. An unknown job exits 1.`,
			minArgs: 1, maxArgs: 1, timeout: defaultCLITimeout,
			run: func(ctx context.Context, s *cliSession, args []string) error {
				raw, err := s.api.get(ctx, jobPath(args[0]))
				if err != nil {
					return err
				}
				return printJob(s, raw, nil)
			},
		},
		{
			group: "purge", name: "retry", args: "ID",
			summary: "put the FAILED job ID back to PENDING, its attempts reset",
			about:   `POST /management/v1/purge-jobs/ID/retry. A job that is not FAILED exits 1 (409).`,
			minArgs: 1, maxArgs: 1, timeout: defaultCLITimeout,
			run: func(ctx context.Context, s *cliSession, args []string) error {
				raw, err := s.api.change(ctx, "POST", jobPath(args[0])+"/retry", nil)
				if err != nil {
					return err
				}
				return printJob(s, raw, func(j cliJob) string { return fmt.Sprintf("retried purge job %s: now %s", j.ID, j.state()) })
			},
		},
		{
			group: "purge", name: "release", args: "ID",
			summary: "free the name and location of the FAILED job ID after a manual clean-up",
			about: `POST /management/v1/purge-jobs/ID/release. The job's tombstones are dropped;
it stays listed, FAILED and released. A job that is not FAILED exits 1 (409).`,
			minArgs: 1, maxArgs: 1, timeout: defaultCLITimeout,
			run: func(ctx context.Context, s *cliSession, args []string) error {
				raw, err := s.api.change(ctx, "POST", jobPath(args[0])+"/release", nil)
				if err != nil {
					return err
				}
				return printJob(s, raw, func(j cliJob) string { return fmt.Sprintf("released purge job %s: %s", j.ID, j.state()) })
			},
		},
		{
			group: "purge", name: "wait", args: "ID",
			summary: "wait until the job ID has SUCCEEDED (exit 0) or FAILED (exit 1); --timeout D",
			about: `Polls GET /management/v1/purge-jobs/ID every second, showing the files
deleted so far on stderr: a redrawn line on a terminal, else a line at each
change of state and every 10 seconds. While the node is unavailable it keeps
polling. --json prints the job's final JSON on stdout. Exits 3 when
--timeout passes first.`,
			minArgs: 1, maxArgs: 1,
			flags: func(fs *flag.FlagSet) {
				fs.Lookup("timeout").Usage = "how long to wait for the job; 0: no limit"
			},
			run: func(ctx context.Context, s *cliSession, args []string) error {
				return waitForJob(ctx, s, args[0])
			},
		},
	}
}

func jobPath(id string) string {
	return "/management/v1/purge-jobs/" + url.PathEscape(id)
}

// listJobs reads every page of the list and prints the jobs.
func listJobs(ctx context.Context, s *cliSession, q url.Values) error {
	jobs := []json.RawMessage{}
	for {
		path := "/management/v1/purge-jobs"
		if len(q) > 0 {
			path += "?" + q.Encode()
		}
		raw, err := s.api.get(ctx, path)
		if err != nil {
			return err
		}
		var page struct {
			Jobs *[]json.RawMessage `json:"jobs"`
			Next *string            `json:"next-page-token"`
		}
		if err := json.Unmarshal(raw, &page); err != nil {
			return fmt.Errorf("malformed answer from GET %s: %v", path, err)
		}
		if page.Jobs == nil {
			return fmt.Errorf("the answer to GET %s has no \"jobs\": is %s a floe node?", path, s.api.base)
		}
		jobs = append(jobs, *page.Jobs...)
		if page.Next == nil || *page.Next == "" {
			break
		}
		if *page.Next == q.Get("page-token") {
			return fmt.Errorf("GET %s answered its own page token again", path)
		}
		q.Set("page-token", *page.Next)
	}
	if s.opts.json {
		out, err := json.Marshal(map[string]any{"jobs": jobs, "next-page-token": nil})
		if err != nil {
			return err
		}
		printRaw(s.stdout, out)
		return nil
	}
	views := make([]cliJob, len(jobs))
	for i, raw := range jobs {
		var err error
		if views[i], err = decodeJob(raw); err != nil {
			return fmt.Errorf("in the list: %w", err)
		}
	}
	renderJobs(s.stdout, views)
	return nil
}

// printJob prints a job answer: its JSON with --json; else headline (when
// not nil) followed by the job's fields.
func printJob(s *cliSession, raw []byte, headline func(cliJob) string) error {
	if s.opts.json {
		printRaw(s.stdout, raw)
		return nil
	}
	j, err := decodeJob(raw)
	if err != nil {
		return err
	}
	if headline != nil {
		fmt.Fprintln(s.stdout, headline(j))
		fmt.Fprintln(s.stdout)
	}
	renderJob(s.stdout, j)
	return nil
}

// decodeJob reads a purge job from a node's answer; one without an id or
// a state is not a floe node's (a proxy's page, another service).
func decodeJob(raw []byte) (cliJob, error) {
	var j cliJob
	if err := json.Unmarshal(raw, &j); err != nil {
		return cliJob{}, fmt.Errorf("malformed purge job: %v", err)
	}
	if j.ID == "" || j.State == "" {
		return cliJob{}, errors.New("malformed purge job: it has no id or state (is --node a floe node?)")
	}
	return j, nil
}

// shownError is the job's last error as listed: the state machine keeps
// the error of an earlier attempt once a retry has SUCCEEDED, which read
// as if the job had failed.
func (j cliJob) shownError() string {
	if j.LastError != "" && j.State == "SUCCEEDED" {
		return "(an earlier attempt) " + j.LastError
	}
	return j.LastError
}

func renderJobs(w io.Writer, jobs []cliJob) {
	if len(jobs) == 0 {
		fmt.Fprintln(w, "no purge jobs")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tTABLE\tATTEMPTS\tFILES DELETED\tUPDATED\tLAST ERROR")
	for _, j := range jobs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", j.ID, j.state(), j.tableName(), j.Attempts, j.Progress.Deleted,
			msTime(j.UpdatedMs), dash(oneLine(j.shownError(), 60)))
	}
	_ = tw.Flush()
}

func renderJob(w io.Writer, j cliJob) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, dash(v)) }
	row("id", j.ID)
	row("state", j.state())
	row("table", j.tableName())
	row("table uuid", j.TableUUID)
	row("warehouse", j.Warehouse)
	row("location", j.Location)
	row("metadata location", j.MetadataLocation)
	row("attempts", fmt.Sprint(j.Attempts))
	row("last error", oneLine(j.shownError(), 0))
	if j.Lease != nil {
		row("lease", fmt.Sprintf("%s (token %d)", j.Lease.Node, j.Lease.Token))
	} else {
		row("lease", "")
	}
	row("files deleted", fmt.Sprint(j.Progress.Deleted))
	row("bytes deleted", humanBytes(j.Progress.Bytes))
	row("files skipped outside", fmt.Sprint(j.Progress.Skipped))
	row("files skipped owned", fmt.Sprint(j.Progress.SkippedOwned))
	if j.NotBeforeMs != 0 {
		row("not before", msTime(j.NotBeforeMs))
	}
	row("dropped by", j.DroppedBy)
	if j.Released {
		row("released by", j.ReleasedBy)
	}
	row("created", msTime(j.CreatedMs))
	row("updated", msTime(j.UpdatedMs))
	keys := make([]string, 0, len(j.FileIO))
	for k := range j.FileIO {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		row("file-io "+k, j.FileIO[k])
	}
	_ = tw.Flush()
}

// waitForJob polls the job until it SUCCEEDED or FAILED, or ctx ends.
func waitForJob(ctx context.Context, s *cliSession, id string) error {
	p := &cliProgress{w: s.stderr, terminal: isTerminal(s.stderr), id: id, start: time.Now()}
	defer p.end()
	state, trouble := "unknown", ""
	for {
		pollCtx, cancel := context.WithTimeout(ctx, cliPollTimeout)
		raw, err := s.api.get(pollCtx, jobPath(id))
		cancel()
		if ctx.Err() != nil {
			return waitEnded(ctx, id, state, s.opts.timeout)
		}
		switch {
		case err == nil:
			trouble = ""
			j, err := decodeJob(raw)
			if err != nil {
				return err
			}
			state = j.State
			p.show(j)
			switch j.State {
			case "SUCCEEDED":
				p.end()
				if s.opts.json {
					printRaw(s.stdout, raw)
				} else {
					fmt.Fprintf(s.stdout, "purge job %s SUCCEEDED: %d files deleted (%s)\n", id, j.Progress.Deleted, humanBytes(j.Progress.Bytes))
				}
				return nil
			case "FAILED":
				p.end()
				if s.opts.json {
					printRaw(s.stdout, raw)
				}
				msg := fmt.Sprintf("purge job %s FAILED after %d attempts", id, j.Attempts)
				if j.LastError != "" {
					msg += ": " + j.LastError
				}
				if !j.Released {
					msg += fmt.Sprintf("\nretry it with 'floe purge retry %s', or clean up by hand and 'floe purge release %s'", id, id)
				}
				return &cliFailure{code: exitFailed, msg: msg}
			}
		case isUnavailable(err):
			// The node may be restarting, or the cluster electing a
			// leader: keep waiting.
			if msg := err.Error(); msg != trouble {
				p.note(fmt.Sprintf("floe purge wait: still waiting, the node is unavailable: %s", msg))
				trouble = msg
			}
		default:
			return err
		}
		select {
		case <-ctx.Done():
			return waitEnded(ctx, id, state, s.opts.timeout)
		case <-time.After(cliPollInterval):
		}
	}
}

// waitEnded is the error of a wait whose context ended first.
func waitEnded(ctx context.Context, id, state string, timeout time.Duration) error {
	if errors.Is(ctx.Err(), context.Canceled) {
		return context.Canceled
	}
	return &cliFailure{code: exitUnavailable, msg: fmt.Sprintf("purge job %s is still %s after --timeout %s", id, state, timeout)}
}

// cliProgress shows a waited-for job's progress on stderr: one redrawn line
// on a terminal, else a line per change of state and every
// cliProgressEvery.
type cliProgress struct {
	w        io.Writer
	terminal bool
	id       string
	start    time.Time

	drawn     bool // a redrawn line is showing, without its newline
	frame     int
	lastState string
	lastLine  time.Time
}

var spinnerFrames = []string{"|", "/", "-", `\`}

func (p *cliProgress) show(j cliJob) {
	line := fmt.Sprintf("purge job %s: %s, %d files deleted (%s), %s", p.id, j.State, j.Progress.Deleted,
		humanBytes(j.Progress.Bytes), time.Since(p.start).Round(time.Second))
	if j.Attempts > 1 {
		line += fmt.Sprintf(", attempt %d", j.Attempts)
	}
	if p.terminal {
		fmt.Fprintf(p.w, "\r\033[K%s %s", spinnerFrames[p.frame%len(spinnerFrames)], line)
		p.frame++
		p.drawn = true
		return
	}
	if j.State != p.lastState || time.Since(p.lastLine) >= cliProgressEvery {
		fmt.Fprintln(p.w, line)
		p.lastState, p.lastLine = j.State, time.Now()
	}
}

// note prints a line of its own.
func (p *cliProgress) note(msg string) {
	p.end()
	fmt.Fprintln(p.w, msg)
}

// end finishes a redrawn line.
func (p *cliProgress) end() {
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// humanBytes is n in B, KiB, MiB, ...
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// msTime is a Unix millisecond time in local time; "-" for 0.
func msTime(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).Local().Format("2006-01-02 15:04:05")
}

// oneLine puts s on one line, cut to max runes (0: no limit).
func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); max > 0 && len(r) > max {
		return string(r[:max-3]) + "..."
	}
	return s
}
