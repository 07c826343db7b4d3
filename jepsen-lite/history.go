package main

import (
	"encoding/json"
	"os"
	"sort"
	"sync"
	"time"
)

// Outcomes of an operation as the client saw it.
const (
	outcomeOK      = "ok"      // 2xx: applied
	outcomeFail    = "fail"    // 409 (or another definite 4xx): not applied
	outcomeUnknown = "unknown" // no definite answer after every retry: maybe applied
)

// regOp is one operation on a register table: a read of the snapshot id the
// table's main branch points at, or a compare-and-set of it (a commit that
// requires main == Old and adds snapshot New, setting main to it).
type regOp struct {
	Client  int    `json:"client"`
	Table   string `json:"table"`
	Kind    string `json:"kind"` // "read" or "cas"
	Old     int64  `json:"old,omitempty"`
	New     int64  `json:"new,omitempty"`
	Value   int64  `json:"value"` // read: main's snapshot id, 0 none, -1 table not found
	Outcome string `json:"outcome"`
	Status  int    `json:"status,omitempty"` // last HTTP status, 0 none
	Key     string `json:"key,omitempty"`    // Idempotency-Key of a cas
	// Touch: a cas of old onto old, a keyed commit with the requirement
	// and no updates: it changes nothing, so it adds no snapshot.
	Touch bool `json:"touch,omitempty"`
	// Call and Return are nanoseconds since the run started. For an unknown
	// outcome Return is when the client gave up; the checker treats the
	// operation as still open.
	Call     int64    `json:"call"`
	Return   int64    `json:"return"`
	Attempts int      `json:"attempts,omitempty"`
	Nodes    []string `json:"nodes,omitempty"`
	Replayed bool     `json:"replayed,omitempty"`
	Final    bool     `json:"final,omitempty"` // read after healing and the full restart
	Err      string   `json:"err,omitempty"`
}

// snapInfo is one snapshot of a register table: its id and the
// Idempotency-Key of the commit that added it (stamped into its summary).
type snapInfo struct {
	ID  int64  `json:"id"`
	Key string `json:"key"`
}

// tableState is a register table as one node reports it at the end.
type tableState struct {
	Node             string     `json:"node"`
	Table            string     `json:"table"`
	Found            bool       `json:"found"`
	MetadataLocation string     `json:"metadata-location,omitempty"`
	Current          int64      `json:"current"`
	Snapshots        []snapInfo `json:"snapshots,omitempty"`
}

// faultEvent is one nemesis action, for the summary and the visualisation.
type faultEvent struct {
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
	Start  int64  `json:"start"` // ns since run start
	End    int64  `json:"end"`
	Err    string `json:"err,omitempty"`
}

// history records everything the clients and the nemesis did.
type history struct {
	start time.Time

	mu     sync.Mutex
	reg    []regOp
	faults []faultEvent
}

func newHistory() *history { return &history{start: time.Now()} }

func (h *history) now() int64 { return int64(time.Since(h.start)) }

func (h *history) addReg(op regOp) {
	h.mu.Lock()
	h.reg = append(h.reg, op)
	h.mu.Unlock()
}

func (h *history) addFault(f faultEvent) {
	h.mu.Lock()
	h.faults = append(h.faults, f)
	h.mu.Unlock()
}

func (h *history) regOps() []regOp {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := append([]regOp(nil), h.reg...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Call < out[j].Call })
	return out
}

func (h *history) faultEvents() []faultEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]faultEvent(nil), h.faults...)
}

// save writes the history as JSON for later inspection.
func (h *history) save(path string, extra map[string]any) error {
	doc := map[string]any{"register": h.regOps(), "faults": h.faultEvents()}
	for k, v := range extra {
		doc[k] = v
	}
	b, err := json.MarshalIndent(doc, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
