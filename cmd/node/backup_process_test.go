package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/backup"
	"github.com/floe-catalog/floe/internal/testenv"
)

// runFloe runs the floe binary with args and returns its exit code, stdout
// and stderr.
func runFloe(t *testing.T, bin string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = cleanEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("floe %v: %v", args, err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// catalogState is a catalog as a list of namespaces and, per table
// ("ns.table"), its metadata location.
type catalogState struct {
	namespaces []string
	tables     map[string]string
}

// backupCatalog reads the catalog held in a backup file.
func backupCatalog(t *testing.T, file string) (backup.Header, catalogState) {
	t.Helper()
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	br, err := backup.NewReader(f)
	require.NoError(t, err)
	dbPath := filepath.Join(t.TempDir(), "fsm.db")
	out, err := os.Create(dbPath)
	require.NoError(t, err)
	_, err = io.Copy(out, br)
	require.NoError(t, err)
	require.NoError(t, out.Close())

	db, err := fsm.Open(dbPath, nil)
	require.NoError(t, err)
	defer db.Close()
	st := catalogState{tables: map[string]string{}}
	require.NoError(t, db.View(func(r *fsm.Reader) error {
		assert.Equal(t, br.Header().Index, r.AppliedIndex(), "the header's index is the copy's applied index")
		nss, _ := r.Namespaces(nil, "", 0)
		for _, ns := range nss {
			st.namespaces = append(st.namespaces, ns.Levels[0])
			tables, _ := r.Tables(ns.Levels, "", 0)
			for _, tb := range tables {
				st.tables[ns.Levels[0]+"."+tb.Name] = tb.MetadataLocation
			}
		}
		return nil
	}))
	return br.Header(), st
}

// nodeCatalog reads the catalog through one node's REST API, with
// linearizable reads: every namespace, its tables, and each table's
// metadata location as loadTable answers it.
func nodeCatalog(t *testing.T, c *testCluster, p *clusterProc) catalogState {
	t.Helper()
	st := catalogState{namespaces: c.listNamespaces(t, p), tables: map[string]string{}}
	for _, ns := range st.namespaces {
		code, body, err := c.do(p, http.MethodGet, "/v1/namespaces/"+url.PathEscape(ns)+"/tables?pageSize=1000", "")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, code, "list tables of %s on %s: %s", ns, p.id, body)
		var list struct {
			Identifiers []struct {
				Name string `json:"name"`
			} `json:"identifiers"`
		}
		require.NoError(t, json.Unmarshal(body, &list))
		for _, id := range list.Identifiers {
			code, body, err := c.do(p, http.MethodGet, "/v1/namespaces/"+url.PathEscape(ns)+"/tables/"+url.PathEscape(id.Name), "")
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, code, "load %s.%s on %s: %s", ns, id.Name, p.id, body)
			var load struct {
				MetadataLocation string `json:"metadata-location"`
			}
			require.NoError(t, json.Unmarshal(body, &load))
			st.tables[ns+"."+id.Name] = load.MetadataLocation
		}
	}
	return st
}

// ackLog records when each write was acknowledged.
type ackLog struct {
	mu        sync.Mutex
	acked     map[string]time.Time // "ns" or "ns.table" -> when the 200 arrived
	attempted map[string]bool
}

func (a *ackLog) attempt(key string) {
	a.mu.Lock()
	a.attempted[key] = true
	a.mu.Unlock()
}

func (a *ackLog) ack(key string) {
	now := time.Now()
	a.mu.Lock()
	a.acked[key] = now
	a.mu.Unlock()
}

// createTableBody is a table with an empty schema.
func createTableBody(name string) string {
	return fmt.Sprintf(`{"name":%q,"schema":{"type":"struct","fields":[]}}`, name)
}

// TestBackupAndRestoreProcesses takes a backup through a follower of a
// three-node cluster while clients create namespaces and tables through
// every node, checks that every write acknowledged before the backup
// started is in it, restores it into a new three-node cluster (one restored
// node, two joiners with empty data directories) and checks that every
// node of the new cluster serves exactly the backup's catalog. A backup
// with one flipped byte is refused by floe restore, which writes nothing.
func TestBackupAndRestoreProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six processes")
	}
	bin := floeBinary(t)
	start := time.Now()
	c := startTestCluster(t)
	leader := c.awaitStable(t, 30*time.Second)
	var follower *clusterProc
	for _, p := range c.procs {
		if p != leader {
			follower = p
			break
		}
	}
	t.Logf("cluster formed in %s; leader %s, backup through %s", time.Since(start).Round(time.Millisecond), leader.id, follower.id)

	// Writers: each creates a namespace, then a table in it, through the
	// nodes in turn. Answers other than 200 leave the write unacknowledged.
	acks := &ackLog{acked: map[string]time.Time{}, attempted: map[string]bool{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				ns := fmt.Sprintf("w%d_%04d", w, seq)
				p := c.procs[(w+seq)%3]
				acks.attempt(ns)
				code, _, err := c.do(p, http.MethodPost, "/v1/namespaces", fmt.Sprintf(`{"namespace":[%q]}`, ns))
				if err != nil || code != http.StatusOK {
					continue
				}
				acks.ack(ns)
				p = c.procs[(w+seq+1)%3]
				acks.attempt(ns + ".t")
				code, _, err = c.do(p, http.MethodPost, "/v1/namespaces/"+ns+"/tables", createTableBody("t"))
				if err == nil && code == http.StatusOK {
					acks.ack(ns + ".t")
				}
			}
		}()
	}
	stopWriters := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopWriters()
	require.Eventually(t, func() bool {
		acks.mu.Lock()
		defer acks.mu.Unlock()
		return len(acks.acked) >= 30
	}, 20*time.Second, 10*time.Millisecond, "writes did not start")

	file := filepath.Join(t.TempDir(), "cluster.backup")
	// A link left at the temp file's name is replaced, never written
	// through.
	victim := filepath.Join(t.TempDir(), "victim")
	require.NoError(t, os.WriteFile(victim, []byte("keep"), 0o600))
	require.NoError(t, os.Symlink(victim, file+".tmp"))
	backupStart := time.Now()
	code, stdout, stderr := runFloe(t, bin, "backup", "--node", "http://"+follower.httpAddr, "--to", file, "--json")
	require.Equal(t, 0, code, "floe backup: stdout %s\nstderr %s", stdout, stderr)
	t.Logf("backup took %s; writers ran on", time.Since(backupStart).Round(time.Millisecond))
	time.Sleep(300 * time.Millisecond) // writes after the backup, which it must not need
	stopWriters()
	assert.Contains(t, stderr, "floe backup: ", "progress on stderr")
	_, err := os.Lstat(file + ".tmp")
	assert.True(t, errors.Is(err, os.ErrNotExist), "temp file left behind")
	kept, err := os.ReadFile(victim)
	require.NoError(t, err)
	assert.Equal(t, "keep", string(kept), "the link's target is untouched")

	var summary backupSummary
	require.NoError(t, json.Unmarshal([]byte(stdout), &summary), stdout)
	header, want := backupCatalog(t, file)
	assert.Equal(t, follower.id, summary.NodeID)
	assert.Equal(t, follower.id, header.NodeID)
	assert.Equal(t, []string{"node1", "node2", "node3"}, header.Members)
	assert.Equal(t, header.Index, summary.Index)
	info, err := os.Stat(file)
	require.NoError(t, err)
	assert.Equal(t, info.Size(), summary.Bytes)

	// Everything acknowledged before the backup started is in it; nothing
	// in it was never written.
	acks.mu.Lock()
	var before, missing, unknown []string
	for key, at := range acks.acked {
		if at.Before(backupStart) {
			before = append(before, key)
		}
	}
	inBackup := map[string]bool{}
	for _, ns := range want.namespaces {
		inBackup[ns] = true
	}
	for key := range want.tables {
		inBackup[key] = true
	}
	for _, key := range before {
		if !inBackup[key] {
			missing = append(missing, key)
		}
	}
	for key := range inBackup {
		if !acks.attempted[key] {
			unknown = append(unknown, key)
		}
	}
	total := len(acks.acked)
	acks.mu.Unlock()
	slices.Sort(missing)
	assert.Empty(t, missing, "writes acknowledged before the backup started are missing from it")
	assert.Empty(t, unknown, "the backup holds writes nobody made")
	t.Logf("%d writes acknowledged, %d before the backup started; the backup holds %d namespaces and %d tables at index %d",
		total, len(before), len(want.namespaces), len(want.tables), header.Index)
	require.NotEmpty(t, before)

	// The old cluster is done with; its CPU is the new one's.
	for _, p := range c.procs {
		p.kill(t)
	}

	// A flipped byte: refused, nothing written.
	raw, err := os.ReadFile(file)
	require.NoError(t, err)
	bad := bytes.Clone(raw)
	bad[len(bad)/2] ^= 0x20
	badFile := filepath.Join(t.TempDir(), "flipped.backup")
	require.NoError(t, os.WriteFile(badFile, bad, 0o600))
	emptyDir := t.TempDir()
	code, _, stderr = runFloe(t, bin, "restore", "--from", badFile, "--data-dir", emptyDir, "--node-id", "r1")
	assert.Equal(t, 1, code, "restore of a corrupt file: %s", stderr)
	assert.Contains(t, stderr, "not a usable backup")
	entries, err := os.ReadDir(emptyDir)
	require.NoError(t, err)
	assert.Empty(t, entries, "restore of a corrupt file wrote into the data dir")
	// Truncated: refused too.
	require.NoError(t, os.WriteFile(badFile, raw[:len(raw)-10], 0o600))
	code, _, stderr = runFloe(t, bin, "restore", "--from", badFile, "--data-dir", emptyDir, "--node-id", "r1")
	assert.Equal(t, 1, code, "restore of a truncated file: %s", stderr)
	assert.Contains(t, stderr, "truncated")
	// A wildcard address no node could advertise: a usage error, nothing
	// written.
	code, _, stderr = runFloe(t, bin, "restore", "--from", file, "--data-dir", emptyDir, "--node-id", "r1", "--cluster-addr", "0.0.0.0:9999")
	assert.Equal(t, 2, code, "restore for a wildcard address: %s", stderr)
	assert.Contains(t, stderr, "every interface")
	entries, err = os.ReadDir(emptyDir)
	require.NoError(t, err)
	assert.Empty(t, entries)
	// A data dir with state: refused.
	code, _, stderr = runFloe(t, bin, "restore", "--from", file, "--data-dir", flagValue(t, leader.args, "--data-dir"))
	assert.Equal(t, 1, code, "restore into a node's data dir: %s", stderr)
	assert.Contains(t, stderr, "already has state")

	// The new cluster: r1 restored, r2 and r3 join it with empty data dirs.
	root := t.TempDir()
	warehouse := flagValue(t, leader.args, "--warehouse")
	nc := &testCluster{bin: bin, client: &http.Client{Timeout: 5 * time.Second}}
	for i := 1; i <= 3; i++ {
		nc.procs = append(nc.procs, &clusterProc{id: fmt.Sprintf("r%d", i), httpAddr: freeAddr(t), clusterAddr: freeAddr(t), out: &testenv.LogBuffer{}})
	}
	first := nc.procs[0]
	code, stdout, stderr = runFloe(t, bin, "restore", "--from", file, "--data-dir", filepath.Join(root, first.id),
		"--node-id", first.id, "--cluster-addr", first.clusterAddr)
	require.Equal(t, 0, code, "floe restore: %s %s", stdout, stderr)
	assert.Contains(t, stderr, "floe restore: restoring: ", "progress on stderr")
	assert.Contains(t, stdout, "--join "+first.clusterAddr)
	newID := regexp.MustCompile(`The restored cluster's identity is (\S+):`).FindStringSubmatch(stdout)
	require.Len(t, newID, 2, "the new identity in: %s", stdout)
	// --json names the node to start, apart from the one the backup was
	// taken on, and the new identity apart from the backup's.
	code, stdout, stderr = runFloe(t, bin, "restore", "--from", file, "--data-dir", filepath.Join(root, "json"),
		"--node-id", "j1", "--cluster-addr", "127.0.0.1:1", "--json")
	require.Equal(t, 0, code, "floe restore --json: %s %s", stdout, stderr)
	var restored backupSummary
	require.NoError(t, json.Unmarshal([]byte(stdout), &restored), stdout)
	assert.Equal(t, follower.id, restored.NodeID)
	assert.Equal(t, "j1", restored.StartNodeID)
	assert.Equal(t, "127.0.0.1:1", restored.StartClusterAddr)
	assert.NotEmpty(t, restored.NewClusterID)
	assert.NotEqual(t, restored.ClusterID, restored.NewClusterID)
	for _, p := range nc.procs {
		p.args = []string{
			"--node-id", p.id,
			"--data-dir", filepath.Join(root, p.id),
			"--http-addr", p.httpAddr,
			"--cluster-addr", p.clusterAddr,
			"--warehouse", warehouse,
		}
		if p != first {
			p.args = append(p.args, "--join", first.clusterAddr)
		}
	}
	t.Cleanup(func() {
		for _, p := range nc.procs {
			if p.running() {
				p.kill(t)
			}
		}
	})
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range nc.procs {
				t.Logf("---- %s (http %s, cluster %s), last lines:\n%s", p.id, p.httpAddr, p.clusterAddr, p.tail(60))
			}
		}
	})
	first.start(t, bin)
	require.Eventually(t, func() bool { return nc.ready(first) }, 30*time.Second, 50*time.Millisecond, "restored node not ready")
	for _, p := range nc.procs[1:] {
		p.start(t, bin)
	}
	nc.awaitStable(t, 40*time.Second)
	require.Eventually(t, func() bool {
		st, err := nc.status(first)
		return err == nil && len(st.Members) == 3
	}, 20*time.Second, 100*time.Millisecond, "the joiners did not become members")
	// The restored cluster has an identity of its own, on every member.
	require.Eventually(t, func() bool {
		st, err := nc.status(first)
		if err != nil || st.ClusterID != newID[1] {
			return false
		}
		for _, m := range st.Members {
			if m.ClusterID != newID[1] {
				return false
			}
		}
		return true
	}, 20*time.Second, 100*time.Millisecond, "members' cluster id")
	if header.ClusterID != "" {
		assert.NotEqual(t, header.ClusterID, newID[1])
	}

	// Every node serves exactly the backup's catalog.
	for _, p := range nc.procs {
		got := nodeCatalog(t, nc, p)
		assert.Equal(t, want.namespaces, got.namespaces, "namespaces on %s", p.id)
		assert.Equal(t, want.tables, got.tables, "tables and metadata locations on %s", p.id)
	}
	// And takes writes, visible everywhere.
	createNamespace(t, nc, nc.procs[1], "after_restore")
	for _, p := range nc.procs {
		code, err := nc.headNamespace(p, "after_restore")
		require.NoError(t, err)
		assert.Equal(t, http.StatusNoContent, code, "HEAD after_restore on %s", p.id)
	}
	t.Logf("done in %s", time.Since(start).Round(time.Millisecond))
}

// TestBackupCommandUsage checks the usage errors of floe backup and floe
// restore: exit code 2, before anything is sent or written.
func TestBackupCommandUsage(t *testing.T) {
	bin := floeBinary(t)
	for _, args := range [][]string{
		{"backup"},
		{"backup", "--to", "x", "extra"},
		{"backup", "--to", "x", "--node", "ftp://host"},
		{"backup", "--to", t.TempDir()},
		{"backup", "--to", "-"},
		{"backup", "--to", filepath.Join(t.TempDir(), "new") + "/"},
		{"backup", "--to", filepath.Join(t.TempDir(), "b"), "--token", "token-from-a-crlf-file\r", "--node", "http://" + freeAddr(t)},
		{"restore", "--data-dir", t.TempDir()},
		{"restore", "--from", "x"},
		{"restore", "--from", "x", "--data-dir", t.TempDir(), "--cluster-addr", "nope"},
		// Addresses no node can listen on or be dialed at, and the node id
		// taken from one (a node's default) that no member may have.
		{"restore", "--from", "x", "--data-dir", t.TempDir(), "--cluster-addr", "127.0.0.1:99999"},
		{"restore", "--from", "x", "--data-dir", t.TempDir(), "--cluster-addr", "127.0.0.1:0"},
		{"restore", "--from", "x", "--data-dir", t.TempDir(), "--cluster-addr", "127.0.0.1:abc"},
		{"restore", "--from", "x", "--data-dir", t.TempDir(), "--node-id", "r1", "--cluster-addr", "a b:1"},
		{"restore", "--from", "x", "--data-dir", t.TempDir(), "--cluster-addr", "x\ty:5"},
		{"restore", "--from", "x", "--from", "y", "--data-dir", t.TempDir()},
		{"backup", "--to", filepath.Join(t.TempDir(), "a"), "--to", filepath.Join(t.TempDir(), "b")},
		{"restore", "--from", os.DevNull, "--data-dir", t.TempDir()},
	} {
		code, _, stderr := runFloe(t, bin, args...)
		assert.Equal(t, 2, code, "floe %s: %s", strings.Join(args, " "), stderr)
	}
	_, _, stderr := runFloe(t, bin, "backup", "--to", t.TempDir())
	assert.Contains(t, stderr, "names a directory")
	// A device, or a link, is never replaced by the backup file.
	link := filepath.Join(t.TempDir(), "link.backup")
	require.NoError(t, os.Symlink(filepath.Join(t.TempDir(), "target"), link))
	for _, to := range []string{os.DevNull, link} {
		code, _, stderr := runFloe(t, bin, "backup", "--to", to, "--node", "http://"+freeAddr(t), "--timeout", "2s")
		assert.Equal(t, 2, code, "%s: %s", to, stderr)
		assert.Contains(t, stderr, "is not a regular file", to)
	}
	fi, err := os.Lstat(os.DevNull)
	require.NoError(t, err)
	assert.NotZero(t, fi.Mode()&os.ModeDevice, "%s is still a device", os.DevNull)
	fi, err = os.Lstat(link)
	require.NoError(t, err)
	assert.NotZero(t, fi.Mode()&os.ModeSymlink, "the link is still a link")
	// A file that is not a backup (a node's own fsm.db, say) is never
	// replaced: offline or online.
	state := filepath.Join(t.TempDir(), "fsm.db")
	require.NoError(t, os.WriteFile(state, []byte("state machine"), 0o600))
	for _, args := range [][]string{{"--from-data-dir", filepath.Dir(state)}, {"--node", "http://" + freeAddr(t), "--timeout", "2s"}} {
		code, _, stderr := runFloe(t, bin, append([]string{"backup", "--to", state}, args...)...)
		assert.Equal(t, 2, code, "%s", stderr)
		assert.Contains(t, stderr, "is not a floe backup")
		kept, err := os.ReadFile(state)
		require.NoError(t, err)
		assert.Equal(t, "state machine", string(kept))
	}
	code, _, stderr := runFloe(t, bin, "backup", "--to", filepath.Join(t.TempDir(), "missing", "x.backup"))
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "does not exist")
	notDir := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(notDir, nil, 0o600))
	code, _, stderr = runFloe(t, bin, "backup", "--to", filepath.Join(notDir, "x.backup"))
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "is not a directory")
	// An offline backup asks no node: a flag naming one is refused, not
	// ignored.
	code, _, stderr = runFloe(t, bin, "backup", "--to", filepath.Join(t.TempDir(), "x.backup"), "--from-data-dir", t.TempDir(),
		"--node", "http://"+freeAddr(t))
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "--node cannot be used with it")
	code, stdout, _ := runFloe(t, bin, "backup", "--help")
	assert.Equal(t, 0, code)
	assert.Contains(t, stdout, "--to")
	// A node that is not there: unavailable (3, as for the other
	// commands), and no file.
	file := filepath.Join(t.TempDir(), "none.backup")
	code, _, stderr = runFloe(t, bin, "backup", "--node", "http://"+freeAddr(t), "--to", file, "--timeout", "2s")
	assert.Equal(t, 3, code, stderr)
	_, err = os.Stat(file)
	assert.True(t, errors.Is(err, os.ErrNotExist))
}

// TestOfflineBackupAfterLosingQuorum is the operator guide's recovery from
// a lost quorum: the survivor's data directory is backed up offline and
// seeds a new cluster holding everything the survivor had applied.
func TestOfflineBackupAfterLosingQuorum(t *testing.T) {
	c := startTestCluster(t)
	c.awaitStable(t, 60*time.Second)
	survivor := c.procs[0]
	for i := range 5 {
		createNamespace(t, c, c.procs[i%3], fmt.Sprintf("kept_%d", i))
	}
	// Every node has applied them before the quorum goes.
	require.Eventually(t, func() bool {
		code, err := c.headNamespace(survivor, "kept_4")
		return err == nil && code == http.StatusNoContent
	}, 10*time.Second, 20*time.Millisecond)
	bin := c.bin
	dir := flagValue(t, survivor.args, "--data-dir")
	file := filepath.Join(t.TempDir(), "offline.floebackup")

	// While the node runs its state is locked: refused, nothing written.
	code, _, stderr := runFloe(t, bin, "backup", "--from-data-dir", dir, "--to", file)
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stderr, "stop the node first")
	assert.NoFileExists(t, file)

	for _, p := range c.procs {
		p.kill(t)
	}
	before, err := os.ReadFile(filepath.Join(dir, "fsm.db"))
	require.NoError(t, err)
	code, stdout, stderr := runFloe(t, bin, "backup", "--from-data-dir", dir, "--to", file, "--json")
	require.Equal(t, 0, code, "floe backup --from-data-dir: %s %s", stdout, stderr)
	after, err := os.ReadFile(filepath.Join(dir, "fsm.db"))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(before, after), "the backup wrote to the state it copied")
	var summary struct {
		ClusterID string `json:"cluster-id"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &summary), stdout)
	assert.NotEmpty(t, summary.ClusterID, "the header names the cluster, as an online backup's does: %s", stdout)

	newDir := filepath.Join(t.TempDir(), "r1")
	p := &clusterProc{id: "r1", httpAddr: freeAddr(t), clusterAddr: freeAddr(t), out: &testenv.LogBuffer{}}
	code, stdout, stderr = runFloe(t, bin, "restore", "--from", file, "--data-dir", newDir, "--node-id", p.id, "--cluster-addr", p.clusterAddr)
	require.Equal(t, 0, code, "floe restore: %s %s", stdout, stderr)
	p.args = []string{"--node-id", p.id, "--data-dir", newDir, "--http-addr", p.httpAddr, "--cluster-addr", p.clusterAddr,
		"--warehouse", flagValue(t, survivor.args, "--warehouse")}
	nc := &testCluster{bin: bin, client: c.client, procs: []*clusterProc{p}}
	t.Cleanup(func() {
		if p.running() {
			p.kill(t)
		}
	})
	p.start(t, bin)
	require.Eventually(t, func() bool { return nc.ready(p) }, 30*time.Second, 50*time.Millisecond, "restored node not ready:\n%s", p.tail(40))
	for i := range 5 {
		code, err := nc.headNamespace(p, fmt.Sprintf("kept_%d", i))
		require.NoError(t, err)
		assert.Equal(t, http.StatusNoContent, code, "kept_%d", i)
	}
	createNamespace(t, nc, p, "after_recovery")
}
