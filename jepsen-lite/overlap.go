package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/iceberg-go/table"
)

// overlapNamespace holds the overlap workload's tables: its own tables,
// each at an explicit location of its own, and whatever an attempt creates
// or registers.
const overlapNamespace = "jepsen_overlap"

// Kinds of overlap attempt. Each but ovControl asks floe to let two tables
// share files, and each of those must be refused.
const (
	ovRegisterOther = "register-other" // register a new name on a live table's current metadata file: 409
	ovCreateEqual   = "create-equal"   // create at a live table's location (as is, with a trailing slash, or as s3a://): 409
	ovCreateInside  = "create-inside"  // create inside a live table's location: 409
	ovCreateAround  = "create-around"  // create at a directory holding a live table's location: 409
	ovStageCreate   = "stage-create"   // stage-create at, inside or around a live table's location: 409
	ovPurging       = "purging"        // create at, inside or around, or register on, a table being purged: 409
	ovSetLocation   = "set-location"   // commit set-location of an own table onto, into or around another table's location: 409
	ovRegisterStray = "register-stray" // register a metadata file copied outside the location it declares: 400
	ovCreateOutside = "create-outside" // create outside the warehouse (or at the warehouse root): 400
	ovControl       = "control"        // create an own table at a fresh location: must succeed
)

// overlapKinds are the attempts that must be refused.
var overlapKinds = []string{ovRegisterOther, ovCreateEqual, ovCreateInside, ovCreateAround, ovStageCreate,
	ovPurging, ovSetLocation, ovRegisterStray, ovCreateOutside}

// Whether an attempt with an unknown outcome took effect, as read after
// healing.
const (
	appliedYes        = "yes"
	appliedNo         = "no"
	appliedUnresolved = "unresolved"
)

// overlapAttempt is one request of the overlap workload, with what it aimed
// at and what floe answered.
type overlapAttempt struct {
	Client  int    `json:"client"`
	Kind    string `json:"kind"`
	Variant string `json:"variant,omitempty"` // e.g. equal/, s3a, metadata-dir, outside-warehouse
	// Table is the table the request would create or register, or, for
	// set-location, the client's own table it would move.
	Table            string `json:"table"`
	Location         string `json:"location,omitempty"`          // the location asked for
	MetadataLocation string `json:"metadata-location,omitempty"` // the metadata file a register names
	// Witness is the live table the attempt overlaps (for register-stray,
	// the table whose metadata file was copied). It was known to exist
	// when the attempt was chosen.
	Witness tableRef `json:"witness"`
	// WitnessPurging: the witness had just been dropped with an
	// asynchronous purge (answered 204); its purge job decides.
	WitnessPurging bool `json:"witness-purging,omitempty"`
	// Unconditional: the request is invalid whatever the other tables do
	// (a stray metadata file, a location outside the warehouse).
	Unconditional bool `json:"unconditional,omitempty"`

	Request  string   `json:"request"`
	Outcome  string   `json:"outcome"`
	Status   int      `json:"status,omitempty"`
	ErrType  string   `json:"error-type,omitempty"`
	Answer   string   `json:"answer,omitempty"`
	Tries    []string `json:"tries,omitempty"`
	Replayed bool     `json:"replayed,omitempty"`
	// Call and Return: ns since the run started; CallMs and ReturnMs: the
	// same instants as Unix milliseconds, comparable with the purge jobs'
	// timestamps (every process shares the machine's clock).
	Call     int64 `json:"call"`
	Return   int64 `json:"return"`
	CallMs   int64 `json:"call-ms"`
	ReturnMs int64 `json:"return-ms"`
	// MetadataMissing: a register was accepted, and right after the answer
	// its metadata file was not in the bucket.
	MetadataMissing bool `json:"metadata-missing,omitempty"`
	// Applied: for an unknown outcome, whether it took effect, read after
	// healing.
	Applied string `json:"applied,omitempty"`
	// Cleanup: what the client did after an accepted attempt so the run can
	// go on (a drop without purge: the files stay).
	Cleanup string `json:"cleanup,omitempty"`
}

// expected is an answer a refusal may have.
type expected struct {
	status int
	typ    string // "" any type
}

var (
	ansExists       = expected{http.StatusConflict, "AlreadyExistsException"}
	ansCommitFailed = expected{http.StatusConflict, "CommitFailedException"}
	ansBadRequest   = expected{http.StatusBadRequest, "BadRequestException"}
)

// overlapWorkload: clients that try to make two tables share a location
// while the purge workload creates, fills and purges tables and the
// nemesis fires. Each client keeps two tables of its own (at locations
// o<c>/g<n>/t of the overlap namespace, created as controls that must
// succeed), appends to them, drops them with purge, and attempts, at
// random, every kind in overlapKinds against a live table of the purge
// workload or one of its own.
//
// A refusal is what must happen. An accepted attempt is judged by
// checkOverlap: a violation unless the table it overlapped may have been
// dropped (or its purge finished) before floe decided. An accepted attempt
// is undone at once with a drop without purge, so the run goes on.
type overlapWorkload struct {
	api       *api
	hist      *history
	s3        *s3Server
	purge     *purgeWorkload
	anomalies *anomalies
	warehouse string // s3://bucket/wh

	mu       sync.Mutex
	attempts []overlapAttempt

	tried, refused, accepted, unknown, skipped, ownCreated, ownDrops atomic.Int64
}

// ovClient is one overlap client: its own tables and its choices.
type ovClient struct {
	w   *overlapWorkload
	id  int
	rng *rand.Rand
	cat *keyedCatalog
	seq int
	own map[string]*table.Table
}

func (w *overlapWorkload) setup(ctx context.Context, rng *rand.Rand) error {
	return createNamespace(ctx, w.api, rng, overlapNamespace)
}

func (w *overlapWorkload) run(ctx, opCtx context.Context, clients int, seed uint64) {
	var wg sync.WaitGroup
	for c := range clients {
		rng := rand.New(rand.NewPCG(seed, uint64(4000+c)))
		wg.Go(func() { w.worker(ctx, opCtx, c, rng) })
	}
	wg.Wait()
}

func (w *overlapWorkload) record(a overlapAttempt) {
	switch {
	case a.Kind == ovControl:
	case a.Outcome == outcomeOK:
		w.accepted.Add(1)
	case a.Outcome == outcomeFail:
		w.refused.Add(1)
	default:
		w.unknown.Add(1)
	}
	if a.Kind != ovControl {
		w.tried.Add(1)
	}
	w.mu.Lock()
	w.attempts = append(w.attempts, a)
	w.mu.Unlock()
}

func (w *overlapWorkload) allAttempts() []overlapAttempt {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.attempts)
}

func (w *overlapWorkload) worker(ctx, opCtx context.Context, client int, rng *rand.Rand) {
	c := &ovClient{w: w, id: client, rng: rng, own: map[string]*table.Table{}}
	c.cat = &keyedCatalog{w: w.purge, rng: rng}
	kinds := slices.DeleteFunc(slices.Clone(overlapKinds), func(k string) bool { return k == ovPurging })
	for range 100_000 {
		if ctx.Err() != nil {
			return
		}
		switch p := rng.Float64(); {
		case len(c.own) < 2:
			c.createOwn(opCtx)
		case p < 0.08:
			c.appendOwn(opCtx)
		case p < 0.18:
			c.dropOwn(opCtx) // and, after an async drop, a purging attempt
		default:
			c.attempt(opCtx, kinds[rng.IntN(len(kinds))])
		}
		time.Sleep(time.Duration(50+rng.IntN(200)) * time.Millisecond)
	}
}

func (c *ovClient) next() int {
	c.seq++
	return c.seq
}

func (c *ovClient) ownNames(except string) []string {
	var names []string
	for n := range c.own {
		if n != except {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// witness picks a live table to aim at, other than the own table except:
// half the time one of the purge workload's (whose worker may drop it at
// any moment; the checker accounts for that), else one of the client's own
// (which only this client drops or moves, so it is live throughout).
func (c *ovClient) witness(except string) (tableRef, bool) {
	if c.rng.IntN(2) == 0 {
		if ref, ok := c.w.purge.pickLive(c.rng); ok {
			return ref, true
		}
	}
	if names := c.ownNames(except); len(names) > 0 {
		return refOf(c.own[names[c.rng.IntN(len(names))]]), true
	}
	return c.w.purge.pickLive(c.rng)
}

// equalLoc is loc spelt as is, with a trailing slash, or with the s3a
// scheme: all the same location.
func (c *ovClient) equalLoc(loc string) (variant, out string) {
	switch c.rng.IntN(3) {
	case 0:
		return "equal", loc
	case 1:
		return "equal/", loc + "/"
	default:
		if rest, ok := strings.CutPrefix(loc, "s3://"); ok {
			return "s3a", "s3a://" + rest
		}
		return "equal", loc
	}
}

func (c *ovClient) insideLoc(loc string, n int) (variant, out string) {
	switch c.rng.IntN(3) {
	case 0:
		return "metadata-dir", loc + "/metadata"
	case 1:
		return "data-dir", fmt.Sprintf("%s/data/x%d", loc, n)
	default:
		return "nested", fmt.Sprintf("%s/nested-%d-%d/deeper", loc, c.id, n)
	}
}

// ancestors lists the directories holding loc that lie strictly inside
// the warehouse and do not hold avoid (when set), nearest first.
func (c *ovClient) ancestors(loc, avoid string) []string {
	var out []string
	cur := strings.TrimRight(loc, "/")
	for {
		i := strings.LastIndexByte(cur, '/')
		if i < 0 {
			return out
		}
		cur = cur[:i]
		if !strings.HasPrefix(cur, c.w.warehouse+"/") {
			return out
		}
		if avoid != "" && (avoid == cur || strings.HasPrefix(avoid, cur+"/")) {
			continue
		}
		out = append(out, cur)
	}
}

// attempt makes one attempt of kind.
func (c *ovClient) attempt(ctx context.Context, kind string) {
	n := c.next()
	name := fmt.Sprintf("x%d_%d", c.id, n)
	switch kind {
	case ovRegisterOther:
		wit, ok := c.witness("")
		if !ok {
			c.w.skipped.Add(1)
			return
		}
		a := overlapAttempt{Kind: kind, Table: name, MetadataLocation: wit.MetadataLocation, Witness: wit}
		// 400: the metadata file is gone, which a purge that finished may
		// legitimately have done.
		c.register(ctx, a, ansExists, ansBadRequest)
	case ovCreateEqual, ovCreateInside, ovCreateAround, ovStageCreate:
		wit, ok := c.witness("")
		if !ok {
			c.w.skipped.Add(1)
			return
		}
		a := overlapAttempt{Kind: kind, Table: name, Witness: wit}
		shape := kind
		if kind == ovStageCreate {
			shape = []string{ovCreateEqual, ovCreateInside, ovCreateAround}[c.rng.IntN(3)]
		}
		switch shape {
		case ovCreateEqual:
			a.Variant, a.Location = c.equalLoc(wit.Location)
		case ovCreateInside:
			a.Variant, a.Location = c.insideLoc(wit.Location, n)
		default:
			anc := c.ancestors(wit.Location, "")
			if len(anc) == 0 {
				c.w.skipped.Add(1)
				return
			}
			a.Variant, a.Location = "around", anc[c.rng.IntN(len(anc))]
		}
		if kind == ovStageCreate {
			a.Variant = strings.TrimPrefix(shape, "create-") + ":" + a.Variant
		}
		want := []expected{ansExists}
		if a.Variant == "s3a" || strings.HasSuffix(a.Variant, ":s3a") {
			want = append(want, ansBadRequest)
		}
		c.create(ctx, a, kind == ovStageCreate, want...)
	case ovSetLocation:
		names := c.ownNames("")
		if len(names) == 0 {
			c.w.skipped.Add(1)
			return
		}
		mover := c.own[names[c.rng.IntN(len(names))]]
		mref := refOf(mover)
		wit, ok := c.witness(mref.Name)
		if !ok {
			c.w.skipped.Add(1)
			return
		}
		a := overlapAttempt{Kind: kind, Table: mref.Name, Witness: wit}
		want := []expected{ansCommitFailed}
		switch c.rng.IntN(3) {
		case 0:
			a.Variant, a.Location = c.equalLoc(wit.Location)
			if a.Variant == "s3a" {
				want = append(want, ansBadRequest)
			}
		case 1:
			a.Variant, a.Location = c.insideLoc(wit.Location, n)
		default:
			anc := c.ancestors(wit.Location, mref.Location)
			if len(anc) == 0 {
				a.Variant, a.Location = c.equalLoc(wit.Location)
				if a.Variant == "s3a" {
					want = append(want, ansBadRequest)
				}
			} else {
				a.Variant, a.Location = "around", anc[c.rng.IntN(len(anc))]
			}
		}
		c.setLocation(ctx, a, mref, want...)
	case ovRegisterStray:
		wit, ok := c.witness("")
		if !ok {
			c.w.skipped.Add(1)
			return
		}
		a := overlapAttempt{Kind: kind, Table: name, Witness: wit, Unconditional: true}
		file := fmt.Sprintf("00001-x%d-%d.metadata.json", c.id, n)
		switch c.rng.IntN(3) {
		case 0:
			a.Variant = "outside-tables"
			a.MetadataLocation = fmt.Sprintf("%s/%s/stray/%s", c.w.warehouse, overlapNamespace, file)
		case 1:
			// Inside another live table's location: the file would then be
			// that table's, and a purge of either would take it.
			other, ok := c.witness("")
			if !ok || other.UUID == wit.UUID || strings.HasPrefix(other.Location+"/", wit.Location+"/") || strings.HasPrefix(wit.Location+"/", other.Location+"/") {
				a.Variant = "outside-tables"
				a.MetadataLocation = fmt.Sprintf("%s/%s/stray/%s", c.w.warehouse, overlapNamespace, file)
				break
			}
			a.Variant = "in-other-table"
			a.MetadataLocation = other.Location + "/metadata/" + file
		default:
			a.Variant = "outside-warehouse"
			a.MetadataLocation = fmt.Sprintf("s3://%s/outside/%s", c.w.s3.Bucket, file)
		}
		if err := c.w.s3.copy(ctx, wit.MetadataLocation, a.MetadataLocation); err != nil {
			// The source is gone (purged) or S3 failed: nothing to try.
			c.w.skipped.Add(1)
			return
		}
		c.register(ctx, a, ansBadRequest)
	case ovCreateOutside:
		a := overlapAttempt{Kind: kind, Table: name, Unconditional: true}
		switch c.rng.IntN(3) {
		case 0:
			a.Variant, a.Location = "outside-warehouse", fmt.Sprintf("s3://%s/outside/x%d_%d", c.w.s3.Bucket, c.id, n)
		case 1:
			a.Variant, a.Location = "other-bucket", fmt.Sprintf("s3://%s-other/%s/x%d_%d", c.w.s3.Bucket, warehousePrefix, c.id, n)
		default:
			a.Variant, a.Location = "warehouse-root", c.w.warehouse
		}
		c.create(ctx, a, false, ansBadRequest)
	}
}

// send makes a's request as one keyed mutation (retried on other nodes
// while the outcome is unknown) and fills in the answer (cut short; the
// whole body is returned too).
func (c *ovClient) send(ctx context.Context, a overlapAttempt, method, path string, body []byte) (overlapAttempt, []byte) {
	a.Client = c.id
	a.Request = method + " " + path + " " + string(body)
	a.Call, a.CallMs = c.w.hist.now(), time.Now().UnixMilli()
	m := c.w.api.mutate(ctx, c.rng, newKey(), method, path, body, nil)
	a.Return, a.ReturnMs = c.w.hist.now(), time.Now().UnixMilli()
	a.Status, a.Tries, a.Replayed = m.last.status, m.tries, m.replayed
	a.Answer = truncate(string(m.last.body), 600)
	if m.last.status == 0 && m.last.err != nil {
		a.Answer = m.last.err.Error()
	}
	a.ErrType = errorType(m.last.body)
	switch {
	case !m.definite:
		a.Outcome = outcomeUnknown
	case m.last.status >= 200 && m.last.status < 300:
		a.Outcome = outcomeOK
	default:
		a.Outcome = outcomeFail
	}
	return a, m.last.body
}

// errorType is the "type" of an Iceberg REST error body, "" if none.
func errorType(body []byte) string {
	var e struct {
		Error struct {
			Type string `json:"type"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil {
		return ""
	}
	return e.Error.Type
}

// checkRefusal records, as a response anomaly, a refusal that is not one of
// the answers the attempt may get.
func (c *ovClient) checkRefusal(a overlapAttempt, want []expected) {
	if a.Outcome != outcomeFail {
		return
	}
	for _, e := range want {
		if a.Status == e.status && (e.typ == "" || a.ErrType == e.typ) {
			return
		}
	}
	c.w.anomalies.add("overlap %s (%s) %s: answered %d %s, expected %v: %s", a.Kind, a.Variant, a.Table, a.Status, a.ErrType, want, a.Answer)
}

func (c *ovClient) create(ctx context.Context, a overlapAttempt, stage bool, want ...expected) {
	req := map[string]any{"name": a.Table, "schema": tableSchema, "location": a.Location}
	if stage {
		req["stage-create"] = true
	}
	body, _ := json.Marshal(req)
	a, _ = c.send(ctx, a, http.MethodPost, "/v1/namespaces/"+overlapNamespace+"/tables", body)
	c.checkRefusal(a, want)
	if a.Outcome == outcomeOK && !stage {
		a.Cleanup = c.undo(ctx, a.Table)
	}
	c.w.record(a)
}

func (c *ovClient) register(ctx context.Context, a overlapAttempt, want ...expected) {
	body, _ := json.Marshal(map[string]any{"name": a.Table, "metadata-location": a.MetadataLocation})
	a, _ = c.send(ctx, a, http.MethodPost, "/v1/namespaces/"+overlapNamespace+"/register", body)
	c.checkRefusal(a, want)
	if a.Outcome == outcomeOK {
		// Nothing deletes a metadata file while a table may be using it,
		// so the one just registered must be in the bucket (floe serves
		// metadata from a cache: the bucket itself is asked).
		if ok, err := c.w.s3.exists(ctx, a.MetadataLocation); err == nil && !ok {
			a.MetadataMissing = true
		}
		a.Cleanup = c.undo(ctx, a.Table)
	}
	c.w.record(a)
}

// setLocation commits set-location on the own table mover. Whatever the
// answer but a refusal, the table leaves the client's own set: accepted, it
// is dropped (without purge); unknown, it is left alone so that after
// healing its location shows whether the commit took effect.
func (c *ovClient) setLocation(ctx context.Context, a overlapAttempt, mover tableRef, want ...expected) {
	body, _ := json.Marshal(map[string]any{
		"requirements": []any{map[string]any{"type": "assert-table-uuid", "uuid": mover.UUID}},
		"updates":      []any{map[string]any{"action": "set-location", "location": a.Location}},
	})
	a, _ = c.send(ctx, a, http.MethodPost, tablePath(overlapNamespace, mover.Name), body)
	c.checkRefusal(a, want)
	switch a.Outcome {
	case outcomeOK:
		delete(c.own, mover.Name)
		a.Cleanup = c.undo(ctx, mover.Name)
	case outcomeUnknown:
		delete(c.own, mover.Name)
	}
	c.w.record(a)
}

// undo drops ns.name without purge (its files stay where they are), so
// that an accepted attempt does not disturb the rest of the run.
func (c *ovClient) undo(ctx context.Context, name string) string {
	m := c.w.api.mutate(ctx, c.rng, newKey(), http.MethodDelete, tablePath(overlapNamespace, name), nil, nil)
	if !m.definite {
		return "drop without purge: outcome unknown"
	}
	return fmt.Sprintf("drop without purge: %d", m.last.status)
}

// createOwn creates an own table at a fresh location no table overlaps: a
// control, which must succeed.
func (c *ovClient) createOwn(ctx context.Context) {
	n := c.next()
	a := overlapAttempt{Kind: ovControl, Table: fmt.Sprintf("o%d_%d", c.id, n),
		Location: fmt.Sprintf("%s/%s/o%d/g%d/t", c.w.warehouse, overlapNamespace, c.id, n)}
	body, _ := json.Marshal(map[string]any{"name": a.Table, "schema": tableSchema, "location": a.Location})
	a, answer := c.send(ctx, a, http.MethodPost, "/v1/namespaces/"+overlapNamespace+"/tables", body)
	var tbl *table.Table
	switch a.Outcome {
	case outcomeOK:
		var pl purgeLoad
		if err := json.Unmarshal(answer, &pl); err == nil {
			tbl, _ = c.w.purge.incarnationFrom(overlapNamespace, a.Table, pl, c.cat)
		}
		if tbl == nil {
			c.w.anomalies.add("overlap control create %s: 2xx with an undecodable answer: %s", a.Table, a.Answer)
		}
	case outcomeUnknown:
		tbl, _, _ = c.w.purge.load(ctx, c.rng, overlapNamespace, a.Table, c.cat)
	default:
		if a.Status != http.StatusConflict {
			c.w.anomalies.add("overlap control create %s at %s: %d %s", a.Table, a.Location, a.Status, a.Answer)
		}
	}
	if tbl != nil {
		c.own[a.Table] = tbl
		c.w.ownCreated.Add(1)
	}
	c.w.record(a)
}

func (c *ovClient) appendOwn(ctx context.Context) {
	names := c.ownNames("")
	if len(names) == 0 {
		return
	}
	name := names[c.rng.IntN(len(names))]
	c.own[name] = c.w.purge.appendRows(ctx, c.rng, c.own[name])
}

// dropOwn drops an own table with purge (asynchronously seven times in
// ten). After an asynchronous drop answered 204 the table is being purged:
// the client at once aims a purging attempt at it.
func (c *ovClient) dropOwn(ctx context.Context) {
	names := c.ownNames("")
	if len(names) == 0 {
		return
	}
	name := names[c.rng.IntN(len(names))]
	ref := refOf(c.own[name])
	delete(c.own, name)
	async := c.rng.Float64() < 0.7
	c.w.ownDrops.Add(1)
	d, sent := c.w.purge.drop(ctx, c.rng, overlapNamespace, name, c.cat, async)
	if !sent || !async || d.Outcome != outcomeOK || d.UUID != ref.UUID {
		return
	}
	n := c.next()
	a := overlapAttempt{Kind: ovPurging, Table: fmt.Sprintf("x%d_%d", c.id, n), Witness: ref, WitnessPurging: true}
	switch c.rng.IntN(4) {
	case 0:
		a.Variant, a.Location = c.equalLoc(ref.Location)
	case 1:
		a.Variant, a.Location = c.insideLoc(ref.Location, n)
	case 2:
		// The directory g<n> holds this table alone.
		a.Variant, a.Location = "around", c.ancestors(ref.Location, "")[0]
	default:
		a.Variant, a.MetadataLocation = "register", ref.MetadataLocation
		c.register(ctx, a, ansExists, ansBadRequest)
		return
	}
	want := []expected{ansExists}
	if a.Variant == "s3a" {
		want = append(want, ansBadRequest)
	}
	c.create(ctx, a, false, want...)
}

// resolve reads, after healing, whether each attempt whose outcome stayed
// unknown took effect: the table it would create exists, or the own table
// it would move is at the new location.
func (w *overlapWorkload) resolve(ctx context.Context) {
	rng := rand.New(rand.NewPCG(11, 11))
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range w.attempts {
		a := &w.attempts[i]
		if a.Outcome != outcomeUnknown {
			continue
		}
		if a.Kind == ovStageCreate {
			a.Applied = appliedNo // a staged create changes nothing
			continue
		}
		var r reply
		for range 5 {
			if r = w.api.read(ctx, rng, tablePath(overlapNamespace, a.Table)); !r.unknown() {
				break
			}
			time.Sleep(300 * time.Millisecond)
		}
		var lr loadResult
		switch {
		case r.status == http.StatusNotFound:
			a.Applied = appliedNo
		case r.status != http.StatusOK || json.Unmarshal(r.body, &lr) != nil:
			a.Applied = appliedUnresolved
		case a.Kind != ovSetLocation:
			a.Applied = appliedYes
		case sameLocation(lr.Metadata.Location, a.Location):
			a.Applied = appliedYes
		default:
			a.Applied = appliedNo
		}
	}
}

// sameLocation compares two locations as floe does: s3a:// and s3n:// are
// s3://, and a trailing slash does not matter.
func sameLocation(a, b string) bool {
	norm := func(s string) string {
		for _, p := range []string{"s3a://", "s3n://"} {
			if rest, ok := strings.CutPrefix(s, p); ok {
				s = "s3://" + rest
			}
		}
		return strings.TrimRight(s, "/")
	}
	return norm(a) == norm(b)
}

// ---------------------------------------------------------------------------
// The overlap checker.

// squatterName finds the tables of the overlap namespace a refusal names.
var squatterName = regexp.MustCompile(regexp.QuoteMeta(overlapNamespace) + `\.(x\d+_\d+)`)

// witnessHeld reports whether a's witness provably held its location from
// before a was sent until floe decided it (until its answer; for an unknown
// outcome found applied, until the end of the run), and why. The witness
// was live when the attempt was chosen; a drop with purge removes the table
// and tombstones its location in one command, and the tombstone goes when
// the purge job succeeds (or a FAILED one is released). So the location was
// held throughout if no drop was sent before the answer, or if the purge
// job is still active or FAILED (unreleased), or if it finished after the
// answer arrived (its updated-ms is stamped by the finishing node before it
// proposes; every process shares the machine's clock).
func witnessHeld(a overlapAttempt, firstDrop map[string]int64, jobs map[string]purgeJob) (bool, string) {
	definite := a.Outcome == outcomeOK
	if !a.WitnessPurging {
		dropCall, dropped := firstDrop[a.Witness.UUID]
		switch {
		case !dropped:
			return true, "the witness was never dropped"
		case definite && dropCall >= a.Return:
			return true, fmt.Sprintf("the witness's first drop was sent %s after the answer", time.Duration(dropCall-a.Return))
		}
	}
	j, ok := jobs[a.Witness.UUID]
	switch {
	case !ok:
		return false, "its drop was sent before the answer and no purge job of it was found"
	case j.State == "PENDING" || j.State == "RUNNING" || (j.State == "FAILED" && !j.Released):
		return true, fmt.Sprintf("the witness's purge job %s is %s, so its location is still tombstoned", j.ID, j.State)
	case definite && j.UpdatedMs > a.ReturnMs:
		return true, fmt.Sprintf("the witness's purge job %s finished (%s) at %d ms, after the answer arrived at %d ms: the location was held (live, then tombstoned) until then",
			j.ID, j.State, j.UpdatedMs, a.ReturnMs)
	}
	return false, fmt.Sprintf("the witness's purge job %s finished (%s) at %d ms, before the answer", j.ID, j.State, j.UpdatedMs)
}

// checkOverlap judges every attempt:
//
//   - A refused attempt is what must happen.
//   - An attempt that took effect (2xx, or unknown and found applied after
//     healing) is a violation when it was invalid whatever the other tables
//     did (a stray metadata file, a location outside the warehouse), or when
//     the table it overlapped provably held its location, live or being
//     purged, until floe decided (witnessHeld). Otherwise the witness may
//     have been gone: reported as a note.
//   - A register accepted although its metadata file was not in the bucket
//     right after the answer is a violation whatever the witness did: the
//     new live table has lost its metadata file.
//   - A control (a create at a fresh location) refused is a violation
//     unless the refusal names a table an attempt may have made.
//
// With requireKinds, every kind in overlapKinds must have been attempted
// and answered at least once, so that the check cannot pass vacuously.
func checkOverlap(attempts []overlapAttempt, dropped []droppedTable, jobs []purgeJob, requireKinds bool) checkResult {
	res := checkResult{Name: "overlap"}
	firstDrop := map[string]int64{}
	for _, d := range dropped {
		if t, ok := firstDrop[d.UUID]; !ok || d.Call < t {
			firstDrop[d.UUID] = d.Call
		}
	}
	jobByUUID := map[string]purgeJob{}
	for _, j := range jobs {
		jobByUUID[j.TableUUID] = j
	}
	maybeMade := map[string]bool{}
	for _, a := range attempts {
		if a.Kind != ovControl && (a.Outcome == outcomeOK || a.Outcome == outcomeUnknown) {
			maybeMade[a.Table] = true
		}
	}
	answered := map[string]int{}
	refused, accepted, unknown, applied, inconclusive, controls := 0, 0, 0, 0, 0, 0
	for _, a := range attempts {
		if a.Kind == ovControl {
			controls++
			if a.Outcome != outcomeFail {
				continue
			}
			var named []string
			for _, m := range squatterName.FindAllStringSubmatch(a.Answer, -1) {
				if maybeMade[m[1]] {
					named = append(named, m[1])
				}
			}
			if len(named) > 0 {
				res.Notes = append(res.Notes, fmt.Sprintf("control create %s at %s refused because of %s, made by an attempt: %s",
					a.Table, a.Location, strings.Join(named, ", "), a.Answer))
				continue
			}
			res.fail("control create %s at %s, a fresh location no table overlaps, was refused: %d %s (request: %s)",
				a.Table, a.Location, a.Status, a.Answer, a.Request)
			continue
		}
		if a.Outcome != outcomeUnknown {
			answered[a.Kind]++
		}
		switch {
		case a.Outcome == outcomeFail:
			refused++
			continue
		case a.Outcome == outcomeUnknown:
			unknown++
			switch a.Applied {
			case appliedYes:
				applied++
			case appliedNo:
				continue
			default:
				res.Notes = append(res.Notes, fmt.Sprintf("%s %s: outcome unknown and not resolved after healing (request: %s)", a.Kind, a.Table, a.Request))
				continue
			}
		default:
			accepted++
		}
		took := fmt.Sprintf("answered %d", a.Status)
		if a.Outcome == outcomeUnknown {
			took = "outcome unknown (tries: " + strings.Join(a.Tries, ", ") + "), found applied after healing"
		}
		what := fmt.Sprintf("%s (%s) of %s overlapping %s.%s (uuid %s, location %s): %s; request: %s; answer: %s",
			a.Kind, a.Variant, a.Table, a.Witness.Namespace, a.Witness.Name, a.Witness.UUID, a.Witness.Location, took, a.Request, a.Answer)
		if a.MetadataMissing {
			// The table it made was live with its metadata file gone: the
			// file was deleted before floe accepted (a purge that had
			// finished), since nothing deletes a live table's files.
			res.fail("%s — the registered metadata file was not in the bucket right after the answer: floe made a live table whose metadata file is gone", what)
		}
		if a.Unconditional {
			res.fail("%s — invalid whatever the other tables do", what)
			continue
		}
		if held, why := witnessHeld(a, firstDrop, jobByUUID); held {
			res.fail("%s — %s", what, why)
		} else {
			inconclusive++
			res.Notes = append(res.Notes, fmt.Sprintf("accepted while the witness may have been gone (%s): %s", why, what))
		}
	}
	if requireKinds {
		var missing []string
		for _, k := range overlapKinds {
			if answered[k] == 0 {
				missing = append(missing, k)
			}
		}
		if len(missing) > 0 {
			res.fail("attempt kinds never answered: %s (--ci requires each at least once)", strings.Join(missing, ", "))
		}
	}
	res.finish(fmt.Sprintf("%d attempts refused, %d accepted (%d while the witness may have been gone), %d unknown (%d applied); %d controls",
		refused, accepted, inconclusive, unknown, applied, controls))
	return res
}
