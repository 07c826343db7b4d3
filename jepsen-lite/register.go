package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floe-catalog/floe/internal/harness"
)

// regNamespace holds the register workload's tables.
const regNamespace = "jepsen_reg"

// tableSchema is the schema every harness table is created with.
var tableSchema = json.RawMessage(`{"type":"struct","schema-id":0,"fields":[` +
	`{"id":1,"name":"id","type":"long","required":true},` +
	`{"id":2,"name":"name","type":"string","required":false}]}`)

// loadResult is the part of a LoadTableResult / CommitTableResponse the
// harness reads.
type loadResult struct {
	MetadataLocation string `json:"metadata-location"`
	Metadata         struct {
		TableUUID string `json:"table-uuid"`
		Location  string `json:"location"`
		LastSeq   int64  `json:"last-sequence-number"`
		Refs      map[string]struct {
			SnapshotID int64 `json:"snapshot-id"`
		} `json:"refs"`
		Snapshots []struct {
			SnapshotID int64             `json:"snapshot-id"`
			Summary    map[string]string `json:"summary"`
		} `json:"snapshots"`
	} `json:"metadata"`
}

func (l loadResult) main() int64 {
	if r, ok := l.Metadata.Refs["main"]; ok {
		return r.SnapshotID
	}
	return 0
}

// summaryKey is the snapshot summary property carrying the Idempotency-Key
// of the commit that added the snapshot; the idempotency checker counts it.
const summaryKey = "jepsen.idempotency-key"

// anomalies collects answers a correct catalog never gives this workload
// (422 for a retried key, 400, 404 for a table that exists...).
type anomalies struct {
	mu    sync.Mutex
	count int
	list  []string
}

func (a *anomalies) add(format string, args ...any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.count++
	if len(a.list) < 50 {
		a.list = append(a.list, fmt.Sprintf(format, args...))
	}
}

func (a *anomalies) result() checkResult {
	a.mu.Lock()
	defer a.mu.Unlock()
	res := checkResult{Name: "responses"}
	res.Violations = append(res.Violations, a.list...)
	if a.count > len(a.list) {
		res.Notes = append(res.Notes, fmt.Sprintf("%d more not listed", a.count-len(a.list)))
	}
	res.finish("every answer was one the protocol allows")
	return res
}

// registerWorkload: many tables, each a compare-and-set register over the
// snapshot id its main branch points at.
//
// A write reads the table (recorded as a read), then commits
//
//	requirements: assert-ref-snapshot-id main == <value read>
//	updates:      add-snapshot <fresh id> (summary carries the key),
//	              set-snapshot-ref main -> <fresh id>
//
// with an Idempotency-Key, through a random node, retrying an unknown
// outcome on other nodes with the same key and body. Snapshot ids are unique
// in the run, so every value is written at most once, and the final
// metadata lists every snapshot ever added with the key that added it.
// The manifest list each snapshot names is never written: nothing reads it.
//
// A table retires after maxWrites cas attempts (its metadata grows with
// every snapshot) and a fresh one takes its slot.
type registerWorkload struct {
	api       *api
	hist      *history
	anomalies *anomalies
	maxWrites int
	readShare float64
	// giveUpShare of the writes get one try only (see cas).
	giveUpShare float64
	// touchShare of the writes are touches (see cas): keyed commits that
	// change nothing, answered with the table as it is.
	touchShare float64

	nextID atomic.Int64

	mu     sync.Mutex
	slots  []*regSlot
	tables []string // every table created, in order

	ops, casOK, casFail, casUnknown, reads, touches atomic.Int64
}

type regSlot struct {
	idx      int
	mu       sync.Mutex
	table    string
	writes   int
	gen      int
	creating bool
}

func newRegisterWorkload(a *api, h *history, an *anomalies, slots, maxWrites int) *registerWorkload {
	w := &registerWorkload{api: a, hist: h, anomalies: an, maxWrites: maxWrites, readShare: 0.4, giveUpShare: 0.1, touchShare: 0.1}
	for i := range slots {
		w.slots = append(w.slots, &regSlot{idx: i})
	}
	return w
}

func tablePath(ns, table string) string {
	return "/v1/namespaces/" + url.PathEscape(ns) + "/tables/" + url.PathEscape(table)
}

// createNamespace creates ns, accepting "already exists". Up to 5 keyed
// mutations, each with its own retries.
func createNamespace(ctx context.Context, a *api, rng *rand.Rand, ns string) error {
	body, _ := json.Marshal(map[string]any{"namespace": []string{ns}})
	var last mutation
	for range 5 {
		last = a.mutate(ctx, rng, newKey(), http.MethodPost, "/v1/namespaces", body, nil)
		if last.definite && (last.last.status == http.StatusOK || last.last.status == http.StatusConflict) {
			return nil
		}
	}
	return fmt.Errorf("create namespace %s: %d %v %s", ns, last.last.status, last.last.err, truncate(string(last.last.body), 200))
}

// createTable creates ns.name and reports whether it exists now. The name is
// never reused by the caller, so 409 can only mean an earlier try of this
// very call took effect.
func createTable(ctx context.Context, a *api, rng *rand.Rand, ns, name string, props map[string]string) (loadResult, bool) {
	body, _ := json.Marshal(map[string]any{"name": name, "schema": tableSchema, "properties": props})
	m := a.mutate(ctx, rng, newKey(), http.MethodPost, "/v1/namespaces/"+url.PathEscape(ns)+"/tables", body, nil)
	var lr loadResult
	if m.definite && m.last.status == http.StatusOK && json.Unmarshal(m.last.body, &lr) == nil {
		return lr, true
	}
	return lr, false
}

func (w *registerWorkload) setup(ctx context.Context, rng *rand.Rand) error {
	if err := createNamespace(ctx, w.api, rng, regNamespace); err != nil {
		return err
	}
	for _, s := range w.slots {
		name := fmt.Sprintf("r%d_0", s.idx)
		var ok bool
		for range 5 {
			if _, ok = createTable(ctx, w.api, rng, regNamespace, name, map[string]string{"jepsen": "register"}); ok {
				break
			}
			name = fmt.Sprintf("r%d_0x%d", s.idx, rng.IntN(1e6))
		}
		if !ok {
			return fmt.Errorf("create register table for slot %d: no success", s.idx)
		}
		s.table = name
		w.mu.Lock()
		w.tables = append(w.tables, name)
		w.mu.Unlock()
	}
	return nil
}

func (w *registerWorkload) allTables() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.tables...)
}

// run starts clients workers and returns when ctx ends and every worker has
// finished its operation in flight (bounded by the retry budget).
func (w *registerWorkload) run(ctx, opCtx context.Context, clients int, seed uint64, firstClient int) {
	var wg sync.WaitGroup
	for c := range clients {
		rng := rand.New(rand.NewPCG(seed, uint64(1000+c)))
		wg.Go(func() { w.worker(ctx, opCtx, firstClient+c, rng) })
	}
	wg.Wait()
}

// worker issues operations until ctx ends or it has issued a million. opCtx
// outlives ctx so an operation in flight can finish its retries.
func (w *registerWorkload) worker(ctx, opCtx context.Context, client int, rng *rand.Rand) {
	for range 1_000_000 {
		if ctx.Err() != nil {
			return
		}
		w.ops.Add(1)
		s := w.slots[rng.IntN(len(w.slots))]
		s.mu.Lock()
		table := s.table
		s.mu.Unlock()
		lr, rop := w.read(opCtx, rng, client, table, nil, false)
		if rop.Outcome != outcomeOK {
			// No leader, node down: do not spin on fast failures.
			time.Sleep(time.Duration(50+rng.IntN(100)) * time.Millisecond)
			continue
		}
		if rop.Value < 0 || rng.Float64() < w.readShare || ctx.Err() != nil {
			continue
		}
		if rng.Float64() < w.touchShare {
			w.cas(opCtx, rng, client, table, lr, rng.Float64() < w.giveUpShare, true)
			continue
		}
		w.cas(opCtx, rng, client, table, lr, rng.Float64() < w.giveUpShare, false)
		s.mu.Lock()
		s.writes++
		rotate := s.writes >= w.maxWrites && !s.creating
		if rotate {
			s.creating = true
			s.gen++
		}
		gen := s.gen
		s.mu.Unlock()
		if rotate {
			name := fmt.Sprintf("r%d_%d", s.idx, gen)
			_, created := createTable(opCtx, w.api, rng, regNamespace, name, map[string]string{"jepsen": "register"})
			s.mu.Lock()
			s.creating = false
			if created {
				s.table, s.writes = name, 0
			}
			s.mu.Unlock()
			if created {
				w.mu.Lock()
				w.tables = append(w.tables, name)
				w.mu.Unlock()
			}
		}
	}
}

// read loads table from n (a random node when nil) and records it. A read
// without an answer is recorded as unknown (the checker ignores it).
func (w *registerWorkload) read(ctx context.Context, rng *rand.Rand, client int, table string, n *harness.Node, final bool) (loadResult, regOp) {
	op := regOp{Client: client, Table: table, Kind: "read", Final: final, Call: w.hist.now()}
	var r reply
	if n == nil {
		r = w.api.read(ctx, rng, tablePath(regNamespace, table))
	} else {
		r = w.api.send(ctx, n, http.MethodGet, tablePath(regNamespace, table), nil, nil, readTimeout)
	}
	op.Return = w.hist.now()
	op.Status = r.status
	op.Nodes = []string{r.node}
	var lr loadResult
	switch {
	case r.status == http.StatusOK:
		if err := json.Unmarshal(r.body, &lr); err != nil {
			w.anomalies.add("read %s on %s: undecodable answer: %v", table, r.node, err)
			op.Outcome = outcomeUnknown
			break
		}
		op.Outcome, op.Value = outcomeOK, lr.main()
	case r.status == http.StatusNotFound:
		op.Outcome, op.Value = outcomeOK, -1 // a table that exists vanished
	case r.unknown():
		op.Outcome = outcomeUnknown
		if r.err != nil {
			op.Err = r.err.Error()
		}
	default:
		w.anomalies.add("read %s on %s: %d %s", table, r.node, r.status, truncate(string(r.body), 200))
		op.Outcome = outcomeUnknown
	}
	w.reads.Add(1)
	w.hist.addReg(op)
	return lr, op
}

// cas writes a fresh snapshot id over the value cur shows. With oneTry the
// client gives up after one unanswered try, like a client that crashed: the
// operation stays unknown, and floe may still apply it. A touch sends the
// same requirements without updates, as iceberg-js sends a commit that
// changes nothing with a key: a cas of the value onto itself, answered 200
// with the table as it is when the value still holds, else 409.
func (w *registerWorkload) cas(ctx context.Context, rng *rand.Rand, client int, table string, cur loadResult, oneTry, touch bool) {
	old := cur.main()
	id := w.nextID.Add(1)
	if touch {
		id = old
		w.touches.Add(1)
	}
	key := newKey()
	var oldRef any // JSON null asserts that main does not exist yet
	snap := map[string]any{
		"snapshot-id":     id,
		"sequence-number": cur.Metadata.LastSeq + 1,
		"timestamp-ms":    time.Now().UnixMilli(),
		"manifest-list":   fmt.Sprintf("%s/metadata/snap-%d-jepsen-never-written.avro", cur.Metadata.Location, id),
		"summary":         map[string]string{"operation": "append", summaryKey: key},
		"schema-id":       0,
	}
	if old != 0 {
		oldRef = old
		snap["parent-snapshot-id"] = old
	}
	updates := []any{
		map[string]any{"action": "add-snapshot", "snapshot": snap},
		map[string]any{"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": id},
	}
	if touch {
		updates = []any{}
	}
	body, _ := json.Marshal(map[string]any{
		"requirements": []any{
			map[string]any{"type": "assert-table-uuid", "uuid": cur.Metadata.TableUUID},
			map[string]any{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": oldRef},
		},
		"updates": updates,
	})
	op := regOp{Client: client, Table: table, Kind: "cas", Old: old, New: id, Key: key, Touch: touch, Call: w.hist.now()}
	tries := mutateAttempts
	if oneTry {
		tries = 1
	}
	m := w.api.mutateN(ctx, rng, tries, key, http.MethodPost, tablePath(regNamespace, table), body, nil)
	op.Return = w.hist.now()
	op.Status, op.Attempts, op.Nodes, op.Replayed = m.last.status, m.attempts, m.nodes, m.replayed
	if m.last.err != nil {
		op.Err = m.last.err.Error()
	}
	switch st := m.last.status; {
	case !m.definite:
		op.Outcome = outcomeUnknown
		w.casUnknown.Add(1)
	case st == http.StatusOK:
		op.Outcome = outcomeOK
		w.casOK.Add(1)
		var lr loadResult
		if err := json.Unmarshal(m.last.body, &lr); err != nil || lr.main() != id {
			w.anomalies.add("cas %s key %s: 200 but the answer's main is %d, not %d (%v)", table, key, lr.main(), id, err)
		}
	case st == http.StatusConflict:
		op.Outcome = outcomeFail
		w.casFail.Add(1)
	default:
		// 404 for a table that exists, 422 for a retry with the same key
		// and body, 400: none is allowed. The outcome is judged unknown.
		w.anomalies.add("cas %s key %s on %v: %d %s", table, key, m.nodes, st, truncate(string(m.last.body), 200))
		op.Outcome = outcomeUnknown
		w.casUnknown.Add(1)
	}
	w.hist.addReg(op)
}

// finalStates reads every register table from every node (after the full
// restart), records those reads in the history, and returns the tables'
// states. A node that does not answer is retried a few times.
func (w *registerWorkload) finalStates(ctx context.Context, nodes []*harness.Node, firstClient int) []tableState {
	rng := rand.New(rand.NewPCG(7, 7))
	var out []tableState
	for _, t := range w.allTables() {
		for i, n := range nodes {
			st := tableState{Node: n.ID, Table: t}
			for range 5 {
				lr, op := w.read(ctx, rng, firstClient+i, t, n, true)
				if op.Outcome == outcomeOK && op.Value >= 0 {
					st.Found = true
					st.MetadataLocation = lr.MetadataLocation
					st.Current = lr.main()
					for _, s := range lr.Metadata.Snapshots {
						st.Snapshots = append(st.Snapshots, snapInfo{ID: s.SnapshotID, Key: s.Summary[summaryKey]})
					}
					break
				}
				if op.Outcome == outcomeOK {
					break // 404: answered, the table is not there
				}
				time.Sleep(500 * time.Millisecond)
			}
			out = append(out, st)
		}
	}
	return out
}
