package main

// floe backup and floe restore: a backup file of the whole replicated state
// taken through any node's operator API (GET /management/v1/backup), and a
// new cluster seeded from one. See internal/backup.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	bolt "go.etcd.io/bbolt"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/backup"
	"github.com/floe-catalog/floe/internal/raftnode"
)

func init() {
	commands["backup"] = command{summary: "write a backup of the whole replicated state, taken through any node, to a file", run: runBackupCommand}
	commands["restore"] = command{summary: "seed a new cluster's first node from a backup file (offline)", run: runRestoreCommand}
}

// Exit codes of backup and restore.
const (
	backupExitOK     = 0
	backupExitFailed = 1
	backupExitUsage  = 2
)

// backupProgressEvery is how often floe backup reports progress on stderr.
const backupProgressEvery = time.Second

// backupSummary is what floe backup --json and floe restore --json print.
type backupSummary struct {
	File     string    `json:"file"`
	DataDir  string    `json:"data-dir,omitempty"`
	Bytes    int64     `json:"bytes"`
	Index    uint64    `json:"index"`
	NodeID   string    `json:"node-id"`
	Members  []string  `json:"members"`
	Created  time.Time `json:"created"`
	SHA256   string    `json:"sha256"`
	Duration float64   `json:"duration-seconds,omitempty"`
	// ClusterID is the identity of the cluster the backup was taken from
	// (absent when it had none yet, or the file predates identities).
	ClusterID string `json:"cluster-id,omitempty"`
	// NewClusterID (restore) is the identity the restored cluster got.
	NewClusterID string `json:"new-cluster-id,omitempty"`
	// StartNodeID and StartClusterAddr (restore) are the node ID and
	// cluster address to start the node on DataDir with. (NodeID is the
	// node the backup was taken on.)
	StartNodeID      string `json:"start-node-id,omitempty"`
	StartClusterAddr string `json:"start-cluster-address,omitempty"`
}

func summaryOf(file string, size int64, h backup.Header, sum string) backupSummary {
	return backupSummary{File: file, Bytes: size, Index: h.Index, NodeID: h.NodeID, Members: h.Members, Created: h.Created, SHA256: sum, ClusterID: h.ClusterID}
}

// runBackupCommand is floe backup --to FILE.
func runBackupCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("floe backup", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		node, token, ca, to string
		fromDataDir         string
		asJSON              bool
		timeout             time.Duration
	)
	fs.StringVar(&to, "to", "", "the backup file to write (written to a temporary file beside it, synced, then renamed); required")
	fs.StringVar(&node, "node", "", "URL of any node's HTTP API, http:// or https:// (env FLOE_NODE; default "+defaultNodeURL+")")
	fs.StringVar(&token, "token", "", "bearer token of a principal with the admin privilege, needed with --auth=on (env FLOE_TOKEN)")
	fs.StringVar(&ca, "ca", "", "PEM file of the CA that signs the node's HTTPS certificate (default: the system's roots)")
	fs.StringVar(&fromDataDir, "from-data-dir", "", "back up a STOPPED node's data directory instead of asking a running cluster: "+
		"the way out after losing quorum (the copy holds what that node had applied)")
	fs.BoolVar(&asJSON, "json", false, "print a JSON summary on stdout")
	fs.DurationVar(&timeout, "timeout", 0, "give up after this long; 0: no limit (until the node begins its answer, floe backup says every 10s that it is still waiting)")
	usage := func(w io.Writer) {
		fmt.Fprint(w, `Usage: floe backup --to FILE [flags]

Writes one consistent, point-in-time copy of the whole replicated state
(catalog, purge jobs, idempotency records, authentication state) to FILE,
taken through the node named by --node, which may be any member: the node
waits until it has applied every write acknowledged before the request,
then streams its state. The file carries a header (format version, the
cluster's member IDs, the log index the copy reflects, creation time, the
node's ID) and SHA-256 checksums; it is verified as it downloads and only
renamed to FILE once whole and sound, replacing an earlier backup or an
empty file of that name (any other file, a device, a pipe or a link, is
refused). Progress goes
to stderr.

Flags:
`)
		printFlags(w, fs)
		fmt.Fprint(w, "\nExit codes: 0 written, 1 failed (FILE is left as it was), 2 usage error, 3 the node could not be\nreached or stayed unavailable, or --timeout passed, 4 not authorized (401, 403), 130 interrupted.\n")
	}
	refuseRepeatedFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return backupExitOK
		}
		fmt.Fprintf(stderr, "floe backup: %v\nRun 'floe backup --help' for usage.\n", err)
		return backupExitUsage
	}
	if fs.NArg() > 0 || to == "" {
		msg := "--to FILE is required"
		if fs.NArg() > 0 {
			msg = fmt.Sprintf("unexpected argument %q", fs.Arg(0))
		}
		fmt.Fprintf(stderr, "floe backup: %s\nRun 'floe backup --help' for usage.\n", msg)
		return backupExitUsage
	}
	if to == "-" {
		// The file is verified whole before it is given its name; a
		// stream to standard output could not be taken back.
		fmt.Fprintf(stderr, "floe backup: --to - (standard output) is not supported: give the path of the file to write\nRun 'floe backup --help' for usage.\n")
		return backupExitUsage
	}
	// A directory cannot take the file's place: say so before the
	// download rather than fail at the rename after it.
	if fi, err := os.Stat(to); (err == nil && fi.IsDir()) || strings.HasSuffix(to, "/") || strings.HasSuffix(to, string(filepath.Separator)) {
		fmt.Fprintf(stderr, "floe backup: --to %s names a directory; give the path of the file to write, such as %s\nRun 'floe backup --help' for usage.\n",
			to, filepath.Join(to, "floe.backup"))
		return backupExitUsage
	}
	// The file is written beside FILE and renamed over it: that would
	// replace a device, a pipe or a link with a regular file.
	if fi, err := os.Lstat(to); err == nil && !fi.Mode().IsRegular() {
		fmt.Fprintf(stderr, "floe backup: --to %s exists and is not a regular file (%s); give the path of a regular file to write or replace\nRun 'floe backup --help' for usage.\n",
			to, fileKind(fi.Mode()))
		return backupExitUsage
	}
	// A backup replaces an earlier backup, or an empty file; never any
	// other file: --to data/fsm.db would replace the very state a backup
	// from a stopped node exists to save.
	if fi, err := os.Lstat(to); err == nil && fi.Size() > 0 && !backup.IsBackupFile(to) {
		fmt.Fprintf(stderr, "floe backup: --to %s exists and is not a floe backup; refusing to replace it: give a new path, or remove the file first\nRun 'floe backup --help' for usage.\n", to)
		return backupExitUsage
	}
	switch fi, err := os.Stat(filepath.Dir(to)); {
	case errors.Is(err, os.ErrNotExist):
		fmt.Fprintf(stderr, "floe backup: cannot write %s: directory %s does not exist; create it first\nRun 'floe backup --help' for usage.\n", to, filepath.Dir(to))
		return backupExitUsage
	case err == nil && !fi.IsDir():
		fmt.Fprintf(stderr, "floe backup: cannot write %s: %s is not a directory\nRun 'floe backup --help' for usage.\n", to, filepath.Dir(to))
		return backupExitUsage
	case err != nil:
		fmt.Fprintf(stderr, "floe backup: cannot write %s: %v\n", to, err)
		return backupExitFailed
	}
	if fromDataDir != "" {
		// An offline backup asks no node: flags that name one would be
		// silently ignored.
		var given []string
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "node" || f.Name == "token" || f.Name == "ca" {
				given = append(given, "--"+f.Name)
			}
		})
		if len(given) > 0 {
			fmt.Fprintf(stderr, "floe backup: --from-data-dir reads a stopped node's directory and asks no node; %s cannot be used with it\nRun 'floe backup --help' for usage.\n",
				strings.Join(given, ", "))
			return backupExitUsage
		}
	}
	if node == "" {
		node = os.Getenv("FLOE_NODE")
	}
	if node == "" {
		node = defaultNodeURL
	}
	if token == "" {
		token = os.Getenv("FLOE_TOKEN")
	}
	api, err := newAPIClient(node, token, ca)
	if err != nil {
		fmt.Fprintf(stderr, "floe backup: %v\nRun 'floe backup --help' for usage.\n", err)
		return backupExitUsage
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	start := time.Now()
	var sum backupSummary
	if fromDataDir != "" {
		sum, err = offlineBackup(ctx, fromDataDir, to, stderr)
	} else {
		sum, err = downloadBackup(ctx, api, to, stderr)
	}
	if err != nil {
		// As the other commands: 3 unreachable, unavailable or --timeout,
		// 4 not authorized, 130 interrupted.
		code := cliExitCode(ctx, err)
		if code == exitInterrupted {
			fmt.Fprintf(stderr, "floe backup: interrupted; no backup was written to %s\n", to)
			return code
		}
		fmt.Fprintf(stderr, "floe backup: %v\n", err)
		return code
	}
	sum.Duration = time.Since(start).Seconds()
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(sum)
		return backupExitOK
	}
	fmt.Fprintf(stdout, "wrote %s: %d bytes, log index %d, taken on %s at %s (members %s), sha256 %s\n",
		sum.File, sum.Bytes, sum.Index, sum.NodeID, sum.Created.Format(time.RFC3339), membersText(sum.Members), sum.SHA256)
	return backupExitOK
}

// fileKind names what a non-regular file is, for messages.
func fileKind(m os.FileMode) string {
	switch {
	case m&os.ModeSymlink != 0:
		return "a symbolic link"
	case m&os.ModeDevice != 0:
		return "a device"
	case m&os.ModeNamedPipe != 0:
		return "a named pipe"
	case m&os.ModeSocket != 0:
		return "a socket"
	}
	return "not a regular file"
}

// openBackupTemp opens tmp, the temporary file a backup is written to
// before it is renamed over its target, locked for this run alone: a
// second backup to the same target while one runs is refused (the two
// wrote through each other's file, and one reported a backup the file did
// not hold), and one a killed run left is taken over and truncated, so
// that no run's leftovers pile up. A link there is removed, never written
// through; a directory, a pipe or a device is refused.
func openBackupTemp(tmp string) (*os.File, error) {
	for range 3 {
		var f *os.File
		fi, err := os.Lstat(tmp)
		if err == nil && fi.Mode()&os.ModeSymlink != 0 {
			err = syscall.ELOOP
		} else {
			f, err = os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|tempOpenFlags, 0o600)
		}
		if errors.Is(err, syscall.ELOOP) {
			if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		fi, err = f.Stat()
		if err == nil && !fi.Mode().IsRegular() {
			err = fmt.Errorf("%s exists and is %s", tmp, fileKind(fi.Mode()))
		}
		if err == nil {
			if ferr := lockTemp(f); ferr != nil {
				err = fmt.Errorf("another floe backup is writing to it (%s is locked)", tmp)
			}
		}
		if err != nil {
			f.Close()
			return nil, err
		}
		// The lock is on the file opened; the name must still be it (a
		// run that finished meanwhile renamed it over its target).
		if now, err := os.Lstat(tmp); err != nil || !os.SameFile(fi, now) {
			f.Close()
			continue
		}
		if err := f.Truncate(0); err != nil {
			f.Close()
			return nil, err
		}
		return f, nil
	}
	return nil, fmt.Errorf("%s keeps changing: is another backup to the same file running?", tmp)
}

// downloadBackup fetches a backup from the node into to.tmp, verifying it
// on the way, then syncs it and renames it to to. On failure the temp file
// is removed and to is untouched.
func downloadBackup(ctx context.Context, api *apiClient, to string, stderr io.Writer) (backupSummary, error) {
	fmt.Fprintf(stderr, "floe backup: asking %s for a backup\n", api.base)
	resp, err := requestBackup(ctx, api, stderr)
	if err != nil {
		return backupSummary{}, err
	}
	defer resp.Body.Close()
	return saveBackup(ctx, resp.Body, resp.ContentLength, to, stderr)
}

// saveBackup writes the backup file read from body (size bytes; -1 when
// unknown) into to.tmp, verifying it on the way, then syncs it and renames
// it to to. On failure the temp file is removed and to is untouched.
func saveBackup(ctx context.Context, body io.Reader, size int64, to string, stderr io.Writer) (backupSummary, error) {
	tmp := to + ".tmp"
	f, err := openBackupTemp(tmp)
	if err != nil {
		return backupSummary{}, fmt.Errorf("cannot write %s: %w", to, err)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()

	var got atomic.Int64
	stopProgress := reportProgress(stderr, &got, size)
	out := bufio.NewWriterSize(f, 1<<20)
	// Every byte read from the node goes to the file; the backup reader
	// checks them as they pass and returns io.EOF only after the file
	// checksum matched and the body ended.
	br, err := backup.NewReader(io.TeeReader(body, &countingWriter{w: out, n: &got}))
	if err == nil {
		_, err = io.Copy(io.Discard, br)
	}
	stopProgress()
	if err != nil {
		if ctx.Err() != nil {
			return backupSummary{}, fmt.Errorf("download stopped after %d bytes: %w", got.Load(), ctx.Err())
		}
		return backupSummary{}, fmt.Errorf("the download is not a sound backup after %d bytes (nothing was written to %s): %w", got.Load(), to, err)
	}
	if err := out.Flush(); err != nil {
		return backupSummary{}, err
	}
	if err := f.Sync(); err != nil {
		return backupSummary{}, err
	}
	if err := f.Close(); err != nil {
		return backupSummary{}, err
	}
	if err := os.Rename(tmp, to); err != nil {
		return backupSummary{}, err
	}
	ok = true
	if err := syncParent(to); err != nil {
		return backupSummary{}, fmt.Errorf("%s written, but syncing its directory failed: %w", to, err)
	}
	return summaryOf(to, got.Load(), br.Header(), br.Checksum()), nil
}

// offlineBackup writes a backup of the state machine in dataDir, a
// stopped node's data directory: the way out when the cluster has lost its
// quorum and no node can serve GET /management/v1/backup. The copy holds
// what that node had applied; entries it had only logged are not in it. It
// fails if the node is running (its state file is locked).
func offlineBackup(ctx context.Context, dataDir, to string, stderr io.Writer) (backupSummary, error) {
	path := filepath.Join(dataDir, "fsm.db")
	if _, err := os.Stat(path); err != nil {
		return backupSummary{}, fmt.Errorf("no state machine in %s: %w", dataDir, err)
	}
	f, err := fsm.Open(path, slog.New(slog.DiscardHandler))
	if errors.Is(err, bolt.ErrTimeout) {
		return backupSummary{}, fmt.Errorf("%s is locked: stop the node first, or back up through a running cluster with --node", path)
	}
	if err != nil {
		return backupSummary{}, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	pr, pw := io.Pipe()
	var size int64 = -1
	sized := make(chan struct{})
	go func() {
		err := f.View(func(r *fsm.Reader) error {
			// The cluster's identity is in the state; its members are in
			// the Raft log, which is not read here.
			h := backup.Header{Created: time.Now().UTC(), NodeID: "offline:" + dataDir, Members: []string{},
				ClusterID: r.ClusterID(), Index: r.AppliedIndex(), PayloadSize: r.Size()}
			if n, err := backup.Size(h); err == nil {
				size = n
			}
			close(sized)
			bw, err := backup.NewWriter(pw, h)
			if err != nil {
				return err
			}
			if _, err := r.WriteTo(bw); err != nil {
				return err
			}
			return bw.Close()
		})
		pw.CloseWithError(err)
	}()
	select {
	case <-sized:
	case <-ctx.Done():
		pr.CloseWithError(ctx.Err())
		return backupSummary{}, ctx.Err()
	}
	return saveBackup(ctx, pr, size, to, stderr)
}

// backupWaitReport is how often floe backup says it is still waiting for
// a node to begin its answer. The wait itself is not cut short: a node
// answers once its linearizable read is done, which on a follower that is
// catching up takes as long as it takes (--timeout bounds it).
var backupWaitReport = 10 * time.Second

// reportWaiting writes to w, every backupWaitReport until the returned
// stop is called, that target has not answered yet.
func reportWaiting(w io.Writer, target string) (stop func()) {
	start := time.Now()
	return every(backupWaitReport, func() {
		fmt.Fprintf(w, "floe backup: still waiting for %s to answer (%s)\n", target, time.Since(start).Round(time.Second))
	})
}

// every calls fn every d, from another goroutine, until the returned stop
// is called; stop returns once fn can no longer run.
func every(d time.Duration, fn func()) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fn()
			}
		}
	}()
	return func() { close(done); <-exited }
}

// requestBackup sends GET /management/v1/backup and returns a 200 answer,
// sending it again (up to cliAttempts times) while the node cannot be
// reached or answers 503, as during a leader election.
func requestBackup(ctx context.Context, api *apiClient, stderr io.Writer) (*http.Response, error) {
	target := api.base + "/management/v1/backup"
	wait := cliBackoff
	for attempt := 1; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("User-Agent", "floe-cli")
		if api.token != "" {
			req.Header.Set("Authorization", "Bearer "+api.token)
		}
		stopReport := reportWaiting(stderr, target)
		resp, err := api.http.Do(req)
		stopReport()
		var failure error
		retry := false
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return nil, fmt.Errorf("no answer from %s: %w", target, ctx.Err())
			}
			failure, retry = &cliFailure{code: exitUnavailable, msg: fmt.Sprintf("no answer from %s: %s", target, shortError(err))}, true
		case resp.StatusCode == http.StatusOK:
			return resp, nil
		default:
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
			resp.Body.Close()
			failure = errorOf(resp.StatusCode, body)
			retry = resp.StatusCode == http.StatusServiceUnavailable
		}
		if !retry || attempt >= cliAttempts {
			if attempt > 1 {
				return nil, fmt.Errorf("%w; gave up after %d attempts", failure, attempt)
			}
			return nil, failure
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", failure, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, cliMaxBackoff)
	}
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// reportProgress prints the bytes downloaded so far every
// backupProgressEvery, and once more when the returned stop is called.
// total is the expected size, -1 when unknown.
func reportProgress(w io.Writer, got *atomic.Int64, total int64) (stop func()) {
	line := func() {
		if total > 0 {
			fmt.Fprintf(w, "floe backup: %s of %s (%d%%)\n", humanBytes(got.Load()), humanBytes(total), got.Load()*100/total)
			return
		}
		fmt.Fprintf(w, "floe backup: %s\n", humanBytes(got.Load()))
	}
	stopEvery := every(backupProgressEvery, line)
	return func() {
		stopEvery()
		line()
	}
}

// syncParent fsyncs the directory holding path, so that a rename into it
// survives a crash.
func syncParent(path string) error {
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// runRestoreCommand is floe restore --from FILE --data-dir DIR.
func runRestoreCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("floe restore", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		from, dataDir, nodeID, clusterAddr string
		asJSON                             bool
	)
	fs.StringVar(&from, "from", "", "the backup file to restore; required")
	fs.StringVar(&dataDir, "data-dir", "", "data directory of the new cluster's first node; it must hold no node state; required")
	fs.StringVar(&nodeID, "node-id", "", "the --node-id that node will start with (default: --cluster-addr, as for a node)")
	fs.StringVar(&clusterAddr, "cluster-addr", defaultClusterAddr, "the cluster address that node will advertise: its --cluster-advertise if it has one, else its --cluster-addr")
	fs.BoolVar(&asJSON, "json", false, "print a JSON summary on stdout")
	usage := func(w io.Writer) {
		fmt.Fprint(w, `Usage: floe restore --from FILE --data-dir DIR [--node-id ID] [--cluster-addr HOST:PORT]

Seeds a NEW cluster from a backup file written by floe backup. Run it with
no node running on DIR. It verifies the whole file first and refuses a
file that is truncated or altered anywhere, writing nothing. It refuses a
data directory that already holds a node's state. Then it installs the
backup's state in DIR as the node's Raft snapshot, with a configuration of
that node alone, and gives the new cluster an identity of its own: nodes
of the cluster the backup came from are refused by it, and its access
tokens are not accepted (the backup's signing keys are dropped; the new
leader makes its own). Static tokens and OAuth client secrets carry over.

Next steps:
  1. Start the node on DIR with the --node-id and cluster address given
     here (it refuses to start under others), and with the storage flags
     of the backup's cluster (--warehouse, --allowed-locations, S3
     settings): the backup holds where each table's files are, not the
     flags. It leads a cluster of one holding the backup's state; the log
     goes on after the backup's index.
  2. Start every other node with an EMPTY data directory and --join naming
     the first node's cluster address. They join as voters and receive the
     state from the leader.

The restored cluster uses the same table files as the backup's cluster:
while both run, a purge or expired metadata deleted on one removes files
the other uses. Keep one of them read-only or stopped.

Flags:
`)
		printFlags(w, fs)
		fmt.Fprint(w, "\nExit codes: 0 restored, 1 refused or failed (DIR is left as it was), 2 usage error,\n130 interrupted (nothing restored).\n")
	}
	refuseRepeatedFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return backupExitOK
		}
		fmt.Fprintf(stderr, "floe restore: %v\nRun 'floe restore --help' for usage.\n", err)
		return backupExitUsage
	}
	var problem string
	switch {
	case fs.NArg() > 0:
		problem = fmt.Sprintf("unexpected argument %q", fs.Arg(0))
	case from == "":
		problem = "--from FILE is required"
	case dataDir == "":
		problem = "--data-dir DIR is required"
	}
	if problem == "" {
		if nodeID == "" {
			nodeID = clusterAddr // a node's default --node-id
		}
		if err := raftnode.CheckClusterAddr(clusterAddr); err != nil {
			// The seeded node is the cluster's one voter at this address:
			// one no node can listen on or be dialed at is refused now,
			// not when the first node started on the directory is.
			problem = fmt.Sprintf("--cluster-addr: %v", err)
		} else if host, _, _ := net.SplitHostPort(clusterAddr); wildcardHost(host) {
			// A node started on the directory advertises an address the
			// others can dial; a wildcard is none, and a node that
			// listens on every interface is started with
			// --cluster-advertise, which is what to give here.
			problem = fmt.Sprintf("--cluster-addr %q listens on every interface and names no address to dial: give the address the node will advertise (its --cluster-advertise)", clusterAddr)
		} else if err := raftnode.CheckMemberID(nodeID); err != nil {
			problem = fmt.Sprintf("--node-id: %v", err)
		}
	}
	if problem != "" {
		fmt.Fprintf(stderr, "floe restore: %s\nRun 'floe restore --help' for usage.\n", problem)
		return backupExitUsage
	}
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		fmt.Fprintf(stderr, "floe restore: --data-dir %q: %v\n", dataDir, err)
		return backupExitUsage
	}
	dataDir = abs

	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	newID, err := uuid.NewV7()
	if err != nil {
		fmt.Fprintf(stderr, "floe restore: %v\n", err)
		return backupExitFailed
	}
	var total int64
	if st, err := os.Stat(from); err == nil {
		if !st.Mode().IsRegular() {
			// A pipe or a device: opening one may wait forever for a
			// writer, and it cannot be read twice (verify, then restore).
			fmt.Fprintf(stderr, "floe restore: --from %s is not a regular file; give the backup file itself\n", from)
			return backupExitUsage
		}
		total = st.Size()
	}
	var (
		mu   sync.Mutex
		step string
		read atomic.Int64
	)
	line := func() {
		mu.Lock()
		s := step
		mu.Unlock()
		if s == "" {
			return
		}
		if total > 0 {
			fmt.Fprintf(stderr, "floe restore: %s: %s of %s (%d%%)\n", s, humanBytes(read.Load()), humanBytes(total), read.Load()*100/total)
			return
		}
		fmt.Fprintf(stderr, "floe restore: %s: %s\n", s, humanBytes(read.Load()))
	}
	stopProgress := every(backupProgressEvery, line)
	h, sum, err := backup.Restore(from, backup.RestoreConfig{
		DataDir: dataDir, NodeID: nodeID, Address: clusterAddr, ClusterID: newID.String(), Logger: logger, Context: ctx,
		Progress: func(s string, n int64) {
			mu.Lock()
			step = s
			mu.Unlock()
			read.Store(n)
		},
	})
	stopProgress()
	if err == nil {
		line()
	}
	if err != nil {
		switch {
		case ctx.Err() != nil:
			fmt.Fprintf(stderr, "floe restore: interrupted; nothing was restored into %s\n", dataDir)
			return exitInterrupted
		case errors.Is(err, raftnode.ErrHasState):
			fmt.Fprintf(stderr, "floe restore: refusing to restore into %s: %v\nRestore into a new, empty data directory.\n", dataDir, err)
		case errors.Is(err, backup.ErrNotBackup), errors.Is(err, backup.ErrVersion),
			errors.Is(err, backup.ErrTruncated), errors.Is(err, backup.ErrCorrupt):
			fmt.Fprintf(stderr, "floe restore: %s is not a usable backup, nothing was written: %v\n", from, err)
		default:
			fmt.Fprintf(stderr, "floe restore: %v\n", err)
		}
		return backupExitFailed
	}
	st, err := os.Stat(from)
	var size int64
	if err == nil {
		size = st.Size()
	}
	if asJSON {
		s := summaryOf(from, size, h, sum)
		s.DataDir = dataDir
		s.NewClusterID = newID.String()
		s.StartNodeID, s.StartClusterAddr = nodeID, clusterAddr
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(s)
		return backupExitOK
	}
	source := ""
	if h.ClusterID != "" {
		source = ", cluster " + h.ClusterID
	}
	fmt.Fprintf(stdout, `restored %s into %s: log index %d, taken on %s at %s (members %s%s)
The restored cluster's identity is %s: nodes of the backup's cluster are refused by it.
Next: start the node on %s with --node-id %s and cluster address %s,
and the backup's cluster's --warehouse, --allowed-locations and S3 settings;
then start each other node with an empty data directory and --join %s.
Both clusters now point at the same table files: keep one read-only or stopped.
`, from, dataDir, h.Index, h.NodeID, h.Created.Format(time.RFC3339), membersText(h.Members), source,
		newID, dataDir, nodeID, clusterAddr, clusterAddr)
	return backupExitOK
}

// membersText lists a backup's members for its summary line: an offline
// backup does not read the Raft log, which holds them.
func membersText(members []string) string {
	if len(members) == 0 {
		return "not recorded: an offline backup"
	}
	return strings.Join(members, ",")
}
