package catalog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/fsm"
)

// listFiles returns every object under loc, sorted.
func (n *node) listFiles(t *testing.T, loc string) []string {
	t.Helper()
	var out []string
	require.NoError(t, n.objects.List(context.Background(), strings.TrimSuffix(loc, "/")+"/", func(uri string) error {
		out = append(out, uri)
		return nil
	}))
	sort.Strings(out)
	return out
}

func withLocation(name, loc string) map[string]any {
	b := withName(name)
	b["location"] = loc
	return b
}

// The report, as a user would try it: register a table on another
// live table's metadata, then purge the first. Refused now, so the purge
// destroys nothing of a live table.
func TestRegisterOnAnotherTablesMetadataIsRefused(t *testing.T) {
	forEachWarehouse(t, func(t *testing.T, wh warehouse) {
		nodes := startCluster(t, wh, 3)
		n := follower(t, nodes)
		require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"ns"}}).status)
		r := n.do(t, "POST", "/v1/floe/namespaces/ns/tables", withName("a"))
		require.Equal(t, 200, r.status, "%s", r.body)
		r = n.do(t, "POST", "/v1/floe/namespaces/ns/tables/a", map[string]any{
			"requirements": []any{},
			"updates":      []any{map[string]any{"action": "set-properties", "updates": map[string]string{"k": "v"}}},
		})
		require.Equal(t, 200, r.status, "%s", r.body)
		metaLoc := r.json(t)["metadata-location"].(string)
		loc := r.json(t)["metadata"].(map[string]any)["location"].(string)

		before, files := n.state(t), n.listFiles(t, loc)
		r = n.do(t, "POST", "/v1/floe/namespaces/ns/register", map[string]any{"name": "b", "metadata-location": metaLoc})
		require.Equal(t, 409, r.status, "%s", r.body)
		assert.Equal(t, "AlreadyExistsException", r.errorType(t))
		assert.Contains(t, string(r.body), "ns.a", "the answer names the owning table")
		assert.Equal(t, before, n.state(t))
		assert.Equal(t, files, n.listFiles(t, loc), "nothing written")

		// Python clients spell it True.
		r = n.do(t, "DELETE", "/v1/floe/namespaces/ns/tables/a?purgeRequested=True", nil)
		require.Equal(t, 204, r.status, "%s", r.body)
		assert.Empty(t, n.listFiles(t, loc))
		assert.Equal(t, 404, n.do(t, "GET", "/v1/floe/namespaces/ns/tables/b", nil).status)
	})
}

func TestOverlappingLocationsAreRefused(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"ns"}}).status)
	r := n.do(t, "POST", "/v1/floe/namespaces/ns/tables", withLocation("a", n.warehouse+"/shared/a"))
	require.Equal(t, 200, r.status, "%s", r.body)
	aFiles := n.listFiles(t, n.warehouse+"/shared/a")

	before := n.state(t)
	for _, loc := range []string{
		n.warehouse + "/shared/a",       // equal
		n.warehouse + "/shared/a/",      // equal, trailing slash
		n.warehouse + "/shared/a/inner", // inside
		n.warehouse + "/shared",         // around
		strings.Replace(n.warehouse, "file:///", "file:/", 1) + "/shared/a", // another spelling
	} {
		for _, stage := range []bool{false, true} {
			body := withLocation("n", loc)
			body["stage-create"] = stage
			r := n.do(t, "POST", "/v1/floe/namespaces/ns/tables", body)
			assert.Equal(t, 409, r.status, "%s (staged %v): %s", loc, stage, r.body)
			assert.Equal(t, "AlreadyExistsException", r.errorType(t))
		}
	}
	assert.Equal(t, before, n.state(t))
	assert.Equal(t, aFiles, n.listFiles(t, n.warehouse+"/shared"), "no metadata file written for a refused create")

	// Segment-aware: a sibling whose name extends a's is fine.
	r = n.do(t, "POST", "/v1/floe/namespaces/ns/tables", withLocation("ab", n.warehouse+"/shared/ab"))
	require.Equal(t, 200, r.status, "%s", r.body)

	// set-location onto another table's location is a failed commit.
	before = n.state(t)
	r = n.do(t, "POST", "/v1/floe/namespaces/ns/tables/ab", map[string]any{
		"requirements": []any{},
		"updates":      []any{map[string]any{"action": "set-location", "location": n.warehouse + "/shared/a/x"}},
	})
	assert.Equal(t, 409, r.status, "%s", r.body)
	assert.Equal(t, "CommitFailedException", r.errorType(t))
	assert.Equal(t, before, n.state(t))
	assert.Equal(t, aFiles, n.listFiles(t, n.warehouse+"/shared/a"))

	// Outside the allowed locations (the warehouse by default): 400.
	r = n.do(t, "POST", "/v1/floe/namespaces/ns/tables", withLocation("out", "file:///elsewhere/out"))
	assert.Equal(t, 400, r.status, "%s", r.body)

	// A namespace level with a slash would land its default location
	// inside a table's (x.y's): refused when the namespace is created.
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"x"}}).status)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/x/tables", withName("y")).status)
	r = n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"x/y"}})
	assert.Equal(t, 400, r.status, "%s", r.body)
}

// A table moved by set-location keeps the location it left: its snapshots
// may still reference files there, so a table registered from its old
// metadata file (or created there) would share them, and purging that
// table would delete them.
func TestMovedTableKeepsTheLocationItLeft(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"ns"}}).status)
	r := n.do(t, "POST", "/v1/floe/namespaces/ns/tables", withName("x"))
	require.Equal(t, 200, r.status, "%s", r.body)
	first := r.json(t)["metadata-location"].(string)
	old := r.json(t)["metadata"].(map[string]any)["location"].(string)
	r = n.do(t, "POST", "/v1/floe/namespaces/ns/tables/x", map[string]any{
		"requirements": []any{},
		"updates":      []any{map[string]any{"action": "set-location", "location": old + "2"}},
	})
	require.Equal(t, 200, r.status, "%s", r.body)

	before, files := n.state(t), n.listFiles(t, old)
	r = n.do(t, "POST", "/v1/floe/namespaces/ns/register", map[string]any{"name": "c", "metadata-location": first})
	require.Equal(t, 409, r.status, "%s", r.body)
	assert.Equal(t, "AlreadyExistsException", r.errorType(t))
	assert.Contains(t, string(r.body), "ns.x")
	r = n.do(t, "POST", "/v1/floe/namespaces/ns/tables", withLocation("t", old))
	require.Equal(t, 409, r.status, "%s", r.body)
	assert.Equal(t, before, n.state(t))
	assert.Equal(t, files, n.listFiles(t, old), "nothing written")

	// Moving back is the table's own business; dropping it frees both.
	r = n.do(t, "POST", "/v1/floe/namespaces/ns/tables/x", map[string]any{
		"requirements": []any{},
		"updates":      []any{map[string]any{"action": "set-location", "location": old}},
	})
	require.Equal(t, 200, r.status, "%s", r.body)
	require.Equal(t, 204, n.do(t, "DELETE", "/v1/floe/namespaces/ns/tables/x", nil).status)
	r = n.do(t, "POST", "/v1/floe/namespaces/ns/register", map[string]any{"name": "c", "metadata-location": first})
	require.Equal(t, 200, r.status, "a dropped table owns nothing: %s", r.body)
	r = n.do(t, "POST", "/v1/floe/namespaces/ns/tables", withLocation("t", old+"2"))
	require.Equal(t, 200, r.status, "%s", r.body)
}

// A moved table dropped without purge and registered again (the usual way
// to move a table between names or catalogs) still owns the place it
// left: its snapshots and metadata log point there. Before, the register
// freed it, a table registered from the old metadata file took it, and
// purging that table deleted the live one's files.
func TestRegisteredTableAdoptsThePlaceItLeft(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"ns"}}).status)
	r := n.do(t, "POST", "/v1/namespaces/ns/tables", withName("x"))
	require.Equal(t, 200, r.status, "%s", r.body)
	old := r.json(t)["metadata"].(map[string]any)["location"].(string)
	// Its data path stays in the place it leaves (a value it has is not
	// judged again when it moves).
	r = n.do(t, "POST", "/v1/namespaces/ns/tables/x", setProp("write.data.path", old+"/data"))
	require.Equal(t, 200, r.status, "%s", r.body)
	first := r.json(t)["metadata-location"].(string)
	r = n.do(t, "POST", "/v1/namespaces/ns/tables/x", map[string]any{
		"requirements": []any{},
		"updates":      []any{map[string]any{"action": "set-location", "location": old + "-moved"}},
	})
	require.Equal(t, 200, r.status, "%s", r.body)
	current := r.json(t)["metadata-location"].(string)
	require.Equal(t, 204, n.do(t, "DELETE", "/v1/namespaces/ns/tables/x", nil).status)
	r = n.do(t, "POST", "/v1/namespaces/ns/register", map[string]any{"name": "x", "metadata-location": current})
	require.Equal(t, 200, r.status, "%s", r.body)

	before, files := n.state(t), n.listFiles(t, old)
	r = n.do(t, "POST", "/v1/namespaces/ns/register", map[string]any{"name": "c", "metadata-location": first})
	require.Equal(t, 409, r.status, "%s", r.body)
	assert.Contains(t, string(r.body), "ns.x")
	r = n.do(t, "POST", "/v1/namespaces/ns/tables", withLocation("t", old))
	require.Equal(t, 409, r.status, "%s", r.body)
	assert.Equal(t, before, n.state(t))
	assert.Equal(t, files, n.listFiles(t, old), "nothing written")

	// Dropped, it frees the place again.
	require.Equal(t, 204, n.do(t, "DELETE", "/v1/namespaces/ns/tables/x", nil).status)
	r = n.do(t, "POST", "/v1/namespaces/ns/register", map[string]any{"name": "c", "metadata-location": first})
	require.Equal(t, 200, r.status, "%s", r.body)
	// Registered again now, x cannot adopt c's location, and its data
	// path would write into c's: refused.
	r = n.do(t, "POST", "/v1/namespaces/ns/register", map[string]any{"name": "x", "metadata-location": current})
	require.Equal(t, 400, r.status, "%s", r.body)
	assert.Contains(t, string(r.body), "write.data.path")
	require.Equal(t, 204, n.do(t, "DELETE", "/v1/namespaces/ns/tables/c", nil).status)
	r = n.do(t, "POST", "/v1/namespaces/ns/tables", withLocation("t", old))
	require.Equal(t, 200, r.status, "%s", r.body)
}

// A format version 1 snapshot may name its manifests itself instead of a
// manifest list: a register adopts the place they lie in as it adopts a
// list's, so another table cannot take it (and its purge the files).
func TestRegisterAdoptsThePlaceOfEmbeddedManifests(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"ns"}}).status)
	r := n.do(t, "POST", "/v1/namespaces/ns/tables", withName("x"))
	require.Equal(t, 200, r.status, "%s", r.body)
	meta := r.json(t)["metadata"].(map[string]any)
	old := meta["location"].(string)
	require.Equal(t, 204, n.do(t, "DELETE", "/v1/namespaces/ns/tables/x", nil).status)

	m := maps.Clone(meta)
	m["format-version"] = 1
	m["location"] = old + "-moved"
	m["metadata-log"] = []any{}
	m["current-snapshot-id"] = 7
	m["snapshots"] = []any{map[string]any{"snapshot-id": 7, "timestamp-ms": meta["last-updated-ms"],
		"manifests": []any{old + "/metadata/embedded-7.avro"}, "summary": map[string]any{"operation": "append"}}}
	m["refs"] = map[string]any{"main": map[string]any{"snapshot-id": 7, "type": "branch"}}
	delete(m, "last-sequence-number")
	b, err := json.Marshal(m)
	require.NoError(t, err)
	file := old + "-moved/metadata/00001-x.metadata.json"
	require.NoError(t, n.objects.Write(context.Background(), file, b))
	// Served as stored: the spec's Snapshot requires a manifest list.
	r = n.doRaw(t, "POST", "/v1/namespaces/ns/register", map[string]any{"name": "x", "metadata-location": file})
	require.Equal(t, 200, r.status, "%s", r.body)

	r = n.do(t, "POST", "/v1/namespaces/ns/tables", withLocation("t", old))
	assert.Equal(t, 409, r.status, "the embedded manifests' place is x's: %s", r.body)
}

// While a node's heartbeat says its binary predates body version 3, a
// commit that would move a table is a 503 that writes nothing: that node
// would stop at the entry. Once the node announces the feature, or has
// been silent past the window (removed from the cluster), it goes through.
func TestMovesWaitForEveryNodesBinary(t *testing.T) {
	ctx := context.Background()
	n := startNode(t, warehouses()[0])
	heartbeat := func(node string, features uint64, at time.Time) {
		t.Helper()
		res, err := n.raft.Propose(ctx, fsm.PurgeHeartbeat{Node: node, Slots: 1, Features: features, AtMs: at.UnixMilli()})
		require.NoError(t, err)
		require.NoError(t, res.Err())
	}
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"ns"}}).status)
	r := n.do(t, "POST", "/v1/namespaces/ns/tables", withName("x"))
	require.Equal(t, 200, r.status, "%s", r.body)
	first := r.json(t)["metadata-location"].(string)
	old := r.json(t)["metadata"].(map[string]any)["location"].(string)
	move := map[string]any{
		"requirements": []any{},
		"updates":      []any{map[string]any{"action": "set-location", "location": old + "2"}},
	}

	heartbeat("gone", fsm.PurgeFeatureFirstPhase, time.Now().Add(-time.Hour))
	heartbeat("n2", fsm.PurgeFeatureFirstPhase, time.Now())
	before, files := n.state(t), n.listFiles(t, old)
	r = n.do(t, "POST", "/v1/namespaces/ns/tables/x", move)
	require.Equal(t, 503, r.status, "%s", r.body)
	assert.Equal(t, "ServiceUnavailableException", r.errorType(t))
	assert.Contains(t, string(r.body), "n2")
	assert.NotContains(t, string(r.body), "gone", "a node silent past the window does not count")
	r = n.do(t, "POST", "/v1/namespaces/ns/register", map[string]any{"name": "x", "metadata-location": first, "overwrite": true})
	require.Equal(t, 503, r.status, "%s", r.body)
	assert.Equal(t, before, n.state(t))
	assert.Equal(t, files, n.listFiles(t, old), "nothing written")
	// Other commits and a plain register go on.
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/ns/tables/x", setProp("k", "v")).status)

	heartbeat("n2", fsm.PurgeFeaturesOfThisBinary, time.Now())
	r = n.do(t, "POST", "/v1/namespaces/ns/tables/x", move)
	require.Equal(t, 200, r.status, "%s", r.body)
}

func TestRegisteredMetadataMustLieInItsLocation(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"ns"}}).status)
	r := n.do(t, "POST", "/v1/floe/namespaces/ns/tables", withName("a"))
	require.Equal(t, 200, r.status, "%s", r.body)
	raw := r.json(t)["metadata"]
	// The same metadata copied under another directory of the warehouse:
	// it declares a's location, but lies outside it.
	stray := n.warehouse + "/stray/00000-x.metadata.json"
	b, err := json.Marshal(raw)
	require.NoError(t, err)
	require.NoError(t, n.objects.Write(context.Background(), stray, b))
	r = n.do(t, "POST", "/v1/floe/namespaces/ns/register", map[string]any{"name": "s", "metadata-location": stray})
	assert.Equal(t, 400, r.status, "%s", r.body)
	assert.Contains(t, string(r.body), "not inside the location")

	// Metadata whose write paths lead outside its location (into a's) is
	// refused as a create or commit setting them is.
	m := raw.(map[string]any)
	m["location"] = n.warehouse + "/ns/evil"
	m["properties"] = map[string]any{"write.data.path": n.warehouse + "/ns/a/data"}
	b, err = json.Marshal(m)
	require.NoError(t, err)
	evil := n.warehouse + "/ns/evil/metadata/00000-x.metadata.json"
	require.NoError(t, n.objects.Write(context.Background(), evil, b))
	before := n.state(t)
	r = n.do(t, "POST", "/v1/floe/namespaces/ns/register", map[string]any{"name": "evil", "metadata-location": evil})
	assert.Equal(t, 400, r.status, "%s", r.body)
	assert.Contains(t, string(r.body), "write.data.path")
	assert.Equal(t, before, n.state(t))
}

// A register adopts no place that holds the table's own location: the
// state machine cannot (a table's places never overlap), so a write path
// there would lie in a place the table does not own. A table registered
// at <ns>/p/r whose metadata log named <ns>/p/metadata/… was let write
// its data into <ns>/p/data, which another table then claimed, and the
// purge of that table deleted the registered one's data.
func TestRegisterAdoptsNoPlaceAroundItsLocation(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"ns"}}).status)
	r := n.do(t, "POST", "/v1/floe/namespaces/ns/tables", withName("a"))
	require.Equal(t, 200, r.status, "%s", r.body)
	m := r.json(t)["metadata"].(map[string]any)
	around := n.warehouse + "/ns/p"
	m["location"] = around + "/r"
	m["metadata-log"] = []any{map[string]any{"timestamp-ms": m["last-updated-ms"], "metadata-file": around + "/metadata/00000-old.metadata.json"}}
	m["properties"] = map[string]any{"write.data.path": around + "/data"}
	b, err := json.Marshal(m)
	require.NoError(t, err)
	file := around + "/r/metadata/00001-r.metadata.json"
	require.NoError(t, n.objects.Write(context.Background(), file, b))
	before := n.state(t)
	r = n.do(t, "POST", "/v1/floe/namespaces/ns/register", map[string]any{"name": "r", "metadata-location": file})
	assert.Equal(t, 400, r.status, "%s", r.body)
	assert.Contains(t, string(r.body), "write.data.path")
	assert.Equal(t, before, n.state(t))

	// Without the write path, it registers, and owns only its location.
	delete(m, "properties")
	b, err = json.Marshal(m)
	require.NoError(t, err)
	require.NoError(t, n.objects.Write(context.Background(), file, b))
	r = n.do(t, "POST", "/v1/floe/namespaces/ns/register", map[string]any{"name": "r", "metadata-location": file})
	require.Equal(t, 200, r.status, "%s", r.body)
	r = n.do(t, "POST", "/v1/floe/namespaces/ns/tables", withLocation("x", around+"/data"))
	assert.Equal(t, 200, r.status, "%s", r.body)
}

// A register that overwrites the same table adopts no more places than
// the table may own: the state machine skips those over the limit, so a
// write path in one would lie in a place the table does not own.
func TestRegisterAdoptsWithinTheLimit(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"ns"}}).status)
	m, here := movedNearTheLimit(t, n, "x", "q1", "q2")
	// q2 is the second place over what it owns: not adopted.
	m["properties"] = map[string]any{"write.data.path": n.warehouse + "/ns/q2/data"}
	b, err := json.Marshal(m)
	require.NoError(t, err)
	file := here + "/metadata/00099-again.metadata.json"
	require.NoError(t, n.objects.Write(context.Background(), file, b))
	before := n.state(t)
	r := n.do(t, "POST", "/v1/floe/namespaces/ns/register", map[string]any{"name": "x", "metadata-location": file, "overwrite": true})
	assert.Equal(t, 400, r.status, "%s", r.body)
	assert.Contains(t, string(r.body), "write.data.path")
	assert.Equal(t, before, n.state(t))
	// In q1, the one it can still adopt, the path is its own.
	m["properties"] = map[string]any{"write.data.path": n.warehouse + "/ns/q1/data"}
	b, err = json.Marshal(m)
	require.NoError(t, err)
	require.NoError(t, n.objects.Write(context.Background(), file, b))
	r = n.do(t, "POST", "/v1/floe/namespaces/ns/register", map[string]any{"name": "x", "metadata-location": file, "overwrite": true})
	require.Equal(t, 200, r.status, "%s", r.body)
	r = n.do(t, "POST", "/v1/floe/namespaces/ns/tables", withLocation("y", n.warehouse+"/ns/q1"))
	assert.Equal(t, 409, r.status, "q1 is x's: %s", r.body)

	// A place another table holds costs nothing (Apply skips it): the next
	// one is adopted, and may hold the write path.
	m, here = movedNearTheLimit(t, n, "w", "q3", "q4")
	r = n.do(t, "POST", "/v1/floe/namespaces/ns/tables", withLocation("held", n.warehouse+"/ns/q3"))
	require.Equal(t, 200, r.status, "%s", r.body)
	m["properties"] = map[string]any{"write.data.path": n.warehouse + "/ns/q4/data"}
	b, err = json.Marshal(m)
	require.NoError(t, err)
	file = here + "/metadata/00099-again.metadata.json"
	require.NoError(t, n.objects.Write(context.Background(), file, b))
	r = n.do(t, "POST", "/v1/floe/namespaces/ns/register", map[string]any{"name": "w", "metadata-location": file, "overwrite": true})
	require.Equal(t, 200, r.status, "%s", r.body)
	r = n.do(t, "POST", "/v1/floe/namespaces/ns/tables", withLocation("z", n.warehouse+"/ns/q4"))
	assert.Equal(t, 409, r.status, "q4 is w's: %s", r.body)
}

// movedNearTheLimit creates table ns.name, moves it until it owns one
// place short of the limit, and returns its metadata with a metadata log
// naming the places first (a register adopts at most the limit of the
// places it names, in the log's order), and its location.
func movedNearTheLimit(t *testing.T, n *node, name string, places ...string) (map[string]any, string) {
	t.Helper()
	r := n.do(t, "POST", "/v1/floe/namespaces/ns/tables", withName(name))
	require.Equal(t, 200, r.status, "%s", r.body)
	loc := r.json(t)["metadata"].(map[string]any)["location"].(string)
	for i := range fsm.MaxFormerLocations - 1 {
		r = n.do(t, "POST", "/v1/floe/namespaces/ns/tables/"+name, map[string]any{
			"requirements": []any{},
			"updates":      []any{map[string]any{"action": "set-location", "location": fmt.Sprintf("%s-m%d", loc, i)}},
		})
		require.Equal(t, 200, r.status, "%s", r.body)
	}
	m := r.json(t)["metadata"].(map[string]any)
	log := m["metadata-log"].([]any)
	at := log[0].(map[string]any)["timestamp-ms"]
	var named []any
	for _, q := range places {
		named = append(named, map[string]any{"timestamp-ms": at, "metadata-file": n.warehouse + "/ns/" + q + "/metadata/00000-old.metadata.json"})
	}
	m["metadata-log"] = append(named, log...)
	return m, m["location"].(string)
}

// A register adopts no namespace's directory: a metadata log naming
// <warehouse>/oq/metadata/… made the registered table claim oq's whole
// directory, so that oq's tables could not be created there (and its
// purge would delete files its manifests named there).
func TestRegisterAdoptsNoNamespaceDirectory(t *testing.T) {
	n := startNode(t, warehouses()[0])
	for _, ns := range []string{"rq", "oq"} {
		require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{ns}}).status)
	}
	r := n.do(t, "POST", "/v1/floe/namespaces/rq/tables", withName("t0"))
	require.Equal(t, 200, r.status, "%s", r.body)
	m := r.json(t)["metadata"].(map[string]any)
	m["location"] = n.warehouse + "/rq/x"
	m["table-uuid"] = "0f8e4c7a-1111-4222-8333-944455556666"
	m["metadata-log"] = []any{
		map[string]any{"timestamp-ms": 1, "metadata-file": n.warehouse + "/oq/metadata/00000-a.metadata.json"},
		map[string]any{"timestamp-ms": 2, "metadata-file": n.warehouse + "/metadata/00000-b.metadata.json"},
		map[string]any{"timestamp-ms": 3, "metadata-file": n.warehouse + "/elsewhere/metadata/00000-c.metadata.json"},
	}
	b, err := json.Marshal(m)
	require.NoError(t, err)
	loc := n.warehouse + "/rq/x/metadata/00001-b.metadata.json"
	require.NoError(t, n.objects.Write(context.Background(), loc, b))
	r = n.do(t, "POST", "/v1/floe/namespaces/rq/register", map[string]any{"name": "x", "metadata-location": loc})
	require.Equal(t, 200, r.status, "%s", r.body)

	r = n.do(t, "POST", "/v1/floe/namespaces/oq/tables", withName("t"))
	assert.Equal(t, 200, r.status, "oq's directory is not rq.x's: %s", r.body)
	// A place that is no namespace's directory is adopted as before.
	r = n.do(t, "POST", "/v1/floe/namespaces/rq/tables", withLocation("e", n.warehouse+"/elsewhere/e"))
	assert.Equal(t, 409, r.status, "%s", r.body)
}

// Two nodes racing to create overlapping tables: exactly one wins.
func TestRacingOverlappingCreatesOneWins(t *testing.T) {
	nodes := startCluster(t, warehouses()[0], 3)
	require.Equal(t, 200, nodes[0].do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"ns"}}).status)
	for round := range 5 {
		outer := fmt.Sprintf("%s/race%d", nodes[0].warehouse, round)
		var (
			wg       sync.WaitGroup
			statuses [2]int
		)
		for i, body := range []map[string]any{
			withLocation(fmt.Sprintf("outer%d", round), outer),
			withLocation(fmt.Sprintf("inner%d", round), outer+"/inner"),
		} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				statuses[i] = nodes[i+1].do(t, "POST", "/v1/floe/namespaces/ns/tables", body).status
			}()
		}
		wg.Wait()
		sort.Ints(statuses[:])
		assert.Equal(t, [2]int{200, 409}, statuses, "round %d", round)
	}
}

func TestQueryBooleansAnyCase(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"ns"}}).status)
	for i, v := range []string{"True", "FALSE", "true", "false", "TRUE", ""} {
		name := fmt.Sprintf("t%d", i)
		require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/ns/tables", withName(name)).status)
		r := n.do(t, "DELETE", "/v1/namespaces/ns/tables/"+name+"?purgeRequested="+v+"&unknownParam=1", nil)
		assert.Equal(t, 204, r.status, "purgeRequested=%q: %s", v, r.body)
	}
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/ns/tables", withName("kept")).status)
	r := n.do(t, "DELETE", "/v1/namespaces/ns/tables/kept?purgeRequested=maybe", nil)
	assert.Equal(t, 400, r.status)
	assert.Equal(t, "BadRequestException", r.errorType(t))
	assert.Equal(t, 200, n.do(t, "GET", "/v1/namespaces/ns/tables/kept?snapshots=ALL", nil).status)
	assert.Equal(t, 200, n.do(t, "GET", "/v1/namespaces/ns/tables/kept?snapshots=", nil).status)
}

// A replayed Idempotency-Key answer is the first answer, for the outcomes
// the handlers used to rewrite on the first answer only.
func TestReplayEqualsFirstAnswer(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"ns"}}).status)
	require.Equal(t, 200, n.do(t, "POST", "/v1/floe/namespaces/ns/tables", withLocation("a", n.warehouse+"/a")).status)
	require.Equal(t, 200, n.do(t, "POST", "/v1/floe/namespaces/ns/tables", withLocation("b", n.warehouse+"/b")).status)

	i := 0
	for _, tc := range []struct {
		name, method, path string
		body               any
		status             int
		typ                string
	}{
		{"drop in a missing namespace", "DELETE", "/v1/floe/namespaces/missing/tables/t", nil, 404, "NoSuchTableException"},
		{"set-location onto another table", "POST", "/v1/floe/namespaces/ns/tables/b", map[string]any{
			"requirements": []any{},
			"updates":      []any{map[string]any{"action": "set-location", "location": n.warehouse + "/a/b"}},
		}, 409, "CommitFailedException"},
		{"create inside another table", "POST", "/v1/floe/namespaces/ns/tables", withLocation("c", n.warehouse+"/a/c"), 409, "AlreadyExistsException"},
	} {
		i++
		t.Run(tc.name, func(t *testing.T) {
			key := "0190b6a4-7a4c-7d3e-8f00-" + fmt.Sprintf("%012d", i)
			first := n.do(t, tc.method, tc.path, tc.body, "Idempotency-Key", key)
			again := n.do(t, tc.method, tc.path, tc.body, "Idempotency-Key", key)
			assert.Equal(t, tc.status, first.status, "%s", first.body)
			assert.Equal(t, tc.typ, first.errorType(t))
			assert.Equal(t, first.status, again.status)
			assert.JSONEq(t, string(first.body), string(again.body))
			assert.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
		})
	}
}

// Locations and namespaces the storage or the state machine cannot hold
// are refused with 400 and change nothing: never a 5xx, which a client
// would take for an unknown commit outcome.
func TestOverlongNamesAndLocationsAre400(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"ns"}}).status)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/ns/tables", withName("t")).status)
	before := n.state(t)
	long := strings.Repeat("a", 256)
	r := n.do(t, "POST", "/v1/namespaces/ns/tables", withLocation("x", n.warehouse+"/ns/"+long))
	assert.Equal(t, 400, r.status, "%s", r.body)
	r = n.do(t, "POST", "/v1/namespaces/ns/tables/t", map[string]any{
		"requirements": []any{},
		"updates":      []any{map[string]any{"action": "set-location", "location": n.warehouse + "/ns/" + long}},
	})
	assert.Equal(t, 400, r.status, "%s", r.body)
	assert.Equal(t, "BadRequestException", r.errorType(t))
	r = n.do(t, "POST", "/v1/namespaces/ns/tables", withLocation("y", n.warehouse+"/ns/"+strings.Repeat("b/", 600)))
	assert.Equal(t, 400, r.status, "%s", r.body)

	levels := make([]string, 20)
	for i := range levels {
		levels[i] = strings.Repeat("n", 250)
	}
	r = n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": levels})
	assert.Equal(t, 400, r.status, "%s", r.body)
	assert.Equal(t, before, n.state(t))
}

// A rename keeps the location, so the old name's default location still
// belongs to the renamed table or view. A new object under the old name
// (Spark's "rename the live table away, create it again") gets a default
// location of its own, <default>-<its UUID>, instead of a 409 for a name
// that does not exist. A table named like a namespace holding tables
// likewise. A default location inside another table's stays refused, and
// a location being purged is never avoided.
func TestNewObjectUnderARenamedNameGetsItsOwnLocation(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"db"}}).status)
	location := func(r response) string {
		return r.json(t)["metadata"].(map[string]any)["location"].(string)
	}
	uuidOf := func(r response) string {
		m := r.json(t)["metadata"].(map[string]any)
		if u, ok := m["table-uuid"]; ok {
			return u.(string)
		}
		return m["view-uuid"].(string)
	}

	r := n.do(t, "POST", "/v1/namespaces/db/tables", withName("e2"))
	require.Equal(t, 200, r.status, "%s", r.body)
	assert.Equal(t, n.warehouse+"/db/e2", location(r))
	r = n.do(t, "POST", "/v1/tables/rename", map[string]any{
		"source": map[string]any{"namespace": []string{"db"}, "name": "e2"}, "destination": map[string]any{"namespace": []string{"db"}, "name": "e2_old"}})
	require.Equal(t, 204, r.status, "%s", r.body)
	for _, stage := range []bool{true, false} {
		body := withName("e2")
		body["stage-create"] = stage
		r = n.do(t, "POST", "/v1/namespaces/db/tables", body)
		require.Equal(t, 200, r.status, "staged %v: %s", stage, r.body)
		assert.Equal(t, n.warehouse+"/db/e2-"+uuidOf(r), location(r), "staged %v", stage)
	}
	r = n.do(t, "GET", "/v1/namespaces/db/tables/e2_old", nil)
	assert.Equal(t, n.warehouse+"/db/e2", location(r), "the renamed table keeps its location")

	// A staged create completed by a commit without set-location (the
	// catalog picks the location): the same, with the UUID the commit
	// assigns, or the one the catalog gives it.
	r = n.do(t, "POST", "/v1/namespaces/db/tables", withName("s1"))
	require.Equal(t, 200, r.status, "%s", r.body)
	require.Equal(t, 204, n.do(t, "POST", "/v1/tables/rename", map[string]any{
		"source": map[string]any{"namespace": []string{"db"}, "name": "s1"}, "destination": map[string]any{"namespace": []string{"db"}, "name": "s1_old"}}).status)
	const assigned = "01936f5e-0000-7000-8000-00000000beef"
	for _, uuidUpdate := range [][]any{{map[string]any{"action": "assign-uuid", "uuid": assigned}}, nil} {
		updates := append(uuidUpdate,
			map[string]any{"action": "upgrade-format-version", "format-version": 2},
			map[string]any{"action": "add-schema", "schema": tableBody["schema"]},
			map[string]any{"action": "set-current-schema", "schema-id": -1},
			map[string]any{"action": "add-spec", "spec": map[string]any{"spec-id": 0, "fields": []any{}}},
			map[string]any{"action": "set-default-spec", "spec-id": -1},
			map[string]any{"action": "add-sort-order", "sort-order": map[string]any{"order-id": 0, "fields": []any{}}},
			map[string]any{"action": "set-default-sort-order", "sort-order-id": -1})
		r = n.do(t, "POST", "/v1/namespaces/db/tables/s1", map[string]any{
			"requirements": []any{map[string]any{"type": "assert-create"}}, "updates": updates})
		require.Equal(t, 200, r.status, "%s", r.body)
		if uuidUpdate != nil {
			assert.Equal(t, assigned, uuidOf(r))
		}
		assert.Equal(t, n.warehouse+"/db/s1-"+uuidOf(r), location(r))
		require.Equal(t, 204, n.do(t, "DELETE", "/v1/namespaces/db/tables/s1", nil).status)
	}

	// Views: the same after a view rename.
	r = n.vdo(t, "POST", "/v1/namespaces/db/views", createViewBody("v2", "select 1", "db"))
	require.Equal(t, 200, r.status, "%s", r.body)
	require.Equal(t, 204, n.vdo(t, "POST", "/v1/views/rename", map[string]any{
		"source": map[string]any{"namespace": []string{"db"}, "name": "v2"}, "destination": map[string]any{"namespace": []string{"db"}, "name": "v2_old"}}).status)
	r = n.vdo(t, "POST", "/v1/namespaces/db/views", createViewBody("v2", "select 2", "db"))
	require.Equal(t, 200, r.status, "%s", r.body)
	assert.Equal(t, n.warehouse+"/db/v2-"+uuidOf(r), location(r))

	// A table named like a namespace that holds a table: the default
	// location would contain that table's.
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"db", "jv"}}).status)
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces/db%1Fjv/tables", withName("x")).status)
	r = n.do(t, "POST", "/v1/namespaces/db/tables", withName("jv"))
	require.Equal(t, 200, r.status, "%s", r.body)
	assert.Equal(t, n.warehouse+"/db/jv-"+uuidOf(r), location(r))

	// The other way round: the default location of a table in namespace
	// db.e2 lies inside that of db.e2_old (renamed from db.e2). Refused
	// as a 400 (a 409 reads as "exists" to every client), naming it.
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"db", "e2"}}).status)
	before := n.state(t)
	r = n.do(t, "POST", "/v1/namespaces/db%1Fe2/tables", withName("y"))
	assert.Equal(t, 400, r.status, "%s", r.body)
	assert.Contains(t, string(r.body), "db.e2_old")
	assert.Equal(t, before, n.state(t))

	// A location being purged is refused, not avoided.
	r = n.do(t, "DELETE", "/v1/namespaces/db/tables/e2_old?purgeRequested=true", nil, "X-Gravitino-Async-Purge", "true")
	require.Equal(t, 204, r.status, "%s", r.body)
	require.Equal(t, 204, n.do(t, "DELETE", "/v1/namespaces/db/tables/e2", nil).status)
	r = n.do(t, "POST", "/v1/namespaces/db/tables", withName("e2"))
	if r.status == 409 {
		assert.Contains(t, string(r.body), "purge")
	} else {
		// The purge finished first: the location is free again.
		require.Equal(t, 200, r.status, "%s", r.body)
		assert.Equal(t, n.warehouse+"/db/e2", location(r))
	}
}

// A registered table's metadata log may name any file inside its
// location, including the current metadata file of a view that shares it.
// A commit that expires such a log entry (write.metadata.delete-after-commit)
// leaves that file in place: only files no other table or view holds are
// the table's to delete.
func TestExpiredMetadataFilesOfOthersAreKept(t *testing.T) {
	n := startNode(t, warehouses()[0])
	ctx := context.Background()
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"ns"}}).status)
	shared := n.warehouse + "/ns/shared"
	vb := createViewBody("v", "select 1", "ns")
	vb["location"] = shared
	r := n.do(t, "POST", "/v1/namespaces/ns/views", vb)
	require.Equal(t, 200, r.status, "%s", r.body)
	viewMeta := r.json(t)["metadata-location"].(string)

	// A table's metadata, moved to the view's location, whose log names
	// the view's current metadata file and one file of its own.
	r = n.do(t, "POST", "/v1/namespaces/ns/tables", withName("src"))
	require.Equal(t, 200, r.status, "%s", r.body)
	md := r.json(t)["metadata"].(map[string]any)
	own := shared + "/metadata/00001-00000000-0000-0000-0000-000000000001.metadata.json"
	md["location"] = shared
	md["table-uuid"] = "00000000-0000-0000-0000-0000000000aa"
	md["properties"] = map[string]string{"write.metadata.delete-after-commit.enabled": "true", "write.metadata.previous-versions-max": "1"}
	md["metadata-log"] = []any{
		map[string]any{"metadata-file": viewMeta, "timestamp-ms": 1},
		map[string]any{"metadata-file": own, "timestamp-ms": 2},
	}
	b, err := json.Marshal(md)
	require.NoError(t, err)
	// In the view's place, only a table's metadata file is told from the
	// view's and deleted.
	require.NoError(t, n.objects.Write(ctx, own, b))
	reg := shared + "/metadata/00002-00000000-0000-0000-0000-000000000002.metadata.json"
	require.NoError(t, n.objects.Write(ctx, reg, b))
	r = n.do(t, "POST", "/v1/namespaces/ns/register", map[string]any{"name": "t", "metadata-location": reg})
	require.Equal(t, 200, r.status, "%s", r.body)

	r = n.do(t, "POST", "/v1/namespaces/ns/tables/t", map[string]any{
		"requirements": []any{},
		"updates":      []any{map[string]any{"action": "set-properties", "updates": map[string]string{"k": "v"}}},
	})
	require.Equal(t, 200, r.status, "%s", r.body)
	_, err = n.objects.Read(ctx, own)
	assert.Error(t, err, "the table's own expired file is deleted")
	_, err = n.objects.Read(ctx, viewMeta)
	assert.NoError(t, err, "the view's current metadata file is kept")
	assert.Equal(t, 200, n.do(t, "GET", "/v1/namespaces/ns/views/v", nil).status)
}

// A register's metadata-location is spelled as a new location must be:
// with "?x=1" it was stored and handed back, and Java's S3URI, which drops
// what follows '?', read another file.
func TestRegisterMetadataLocationSpelling(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"ns"}}).status)
	r := n.do(t, "POST", "/v1/floe/namespaces/ns/tables", withName("a"))
	require.Equal(t, 200, r.status, "%s", r.body)
	b, err := json.Marshal(r.json(t)["metadata"])
	require.NoError(t, err)
	loc := n.warehouse + "/ns/a/metadata/00009-x.metadata.json?x=1"
	require.NoError(t, n.objects.Write(context.Background(), loc, b))
	require.Equal(t, 204, n.do(t, "DELETE", "/v1/namespaces/ns/tables/a", nil).status)
	before := n.state(t)
	for _, path := range []string{"/v1/floe/namespaces/ns/register", "/v1/floe/namespaces/ns/register-view"} {
		r = n.do(t, "POST", path, map[string]any{"name": "a", "metadata-location": loc})
		assert.Equal(t, 400, r.status, "%s: %s", path, r.body)
		assert.Contains(t, string(r.body), `contains \"?\"`, path)
	}
	assert.Equal(t, before, n.state(t))
}

// A view's place is not a table's to adopt, and a table sharing a view's
// place does not delete the view's metadata files: a metadata log may name
// them. Adopted, the view's place was purged with the table and covered by
// its credentials, and no table could be created there.
func TestViewFilesAreNoTables(t *testing.T) {
	ctx := context.Background()
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"vq"}}).status)
	r := n.vdo(t, "POST", "/v1/namespaces/vq/views", createViewBody("sales", "select 1", "vq"))
	require.Equal(t, 200, r.status, "%s", r.body)
	viewFile := r.json(t)["metadata-location"].(string)
	viewLoc := r.json(t)["metadata"].(map[string]any)["location"].(string)
	r = n.vdo(t, "POST", "/v1/namespaces/vq/views/sales", addVersionBody("select 2", "vq"))
	require.Equal(t, 200, r.status, "%s", r.body)

	r = n.do(t, "POST", "/v1/floe/namespaces/vq/tables", withName("t0"))
	require.Equal(t, 200, r.status, "%s", r.body)
	template := r.json(t)["metadata"].(map[string]any)
	craft := func(loc string) string {
		m := maps.Clone(template)
		m["location"] = loc
		m["table-uuid"] = uuid.NewString()
		m["metadata-log"] = []any{map[string]any{"timestamp-ms": 1, "metadata-file": viewFile}}
		b, err := json.Marshal(m)
		require.NoError(t, err)
		file := loc + "/metadata/00001-" + uuid.NewString() + ".metadata.json"
		require.NoError(t, n.objects.Write(ctx, file, b))
		return file
	}

	// At a place of its own, the table does not adopt the view's.
	r = n.do(t, "POST", "/v1/floe/namespaces/vq/register", map[string]any{"name": "mine", "metadata-location": craft(n.warehouse + "/vq/mine")})
	require.Equal(t, 200, r.status, "%s", r.body)
	r = n.do(t, "POST", "/v1/floe/namespaces/vq/tables", withLocation("beside", viewLoc))
	assert.Equal(t, 200, r.status, "the view's place is not mine's: %s", r.body)

	// At the view's place, its expired metadata files go, but not the view's.
	require.Equal(t, 204, n.do(t, "DELETE", "/v1/floe/namespaces/vq/tables/beside", nil).status)
	own := craft(viewLoc)
	r = n.do(t, "POST", "/v1/floe/namespaces/vq/register", map[string]any{"name": "shared", "metadata-location": own})
	require.Equal(t, 200, r.status, "%s", r.body)
	for range 2 {
		r = n.do(t, "POST", "/v1/floe/namespaces/vq/tables/shared", map[string]any{"requirements": []any{}, "updates": []any{
			map[string]any{"action": "set-properties", "updates": map[string]string{
				"write.metadata.delete-after-commit.enabled": "true", "write.metadata.previous-versions-max": "1", "n": uuid.NewString()}},
		}})
		require.Equal(t, 200, r.status, "%s", r.body)
	}
	_, err := n.objects.Read(ctx, viewFile)
	assert.NoError(t, err, "the view's earlier metadata file is kept")
	_, err = n.objects.Read(ctx, own)
	assert.Error(t, err, "the table's own expired metadata file goes")
	assert.Equal(t, 200, n.vdo(t, "GET", "/v1/namespaces/vq/views/sales", nil).status)
}

// A table's metadata file replaced outside the catalog by a copy of
// another table's: the table's loads and commits are refused, naming the
// file, and nothing is written. The commit took the other table's
// identity and location, and a purge of it then deleted that table's
// files.
func TestMetadataFileOfAnotherTableIsRefused(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"ns"}}).status)
	r := n.do(t, "POST", "/v1/floe/namespaces/ns/tables", withName("victim"))
	require.Equal(t, 200, r.status, "%s", r.body)
	victimMeta := r.json(t)["metadata-location"].(string)
	victimLoc := r.json(t)["metadata"].(map[string]any)["location"].(string)
	r = n.do(t, "POST", "/v1/floe/namespaces/ns/tables", withName("other"))
	require.Equal(t, 200, r.status, "%s", r.body)
	otherMeta := r.json(t)["metadata-location"].(string)

	doc, err := os.ReadFile(strings.TrimPrefix(victimMeta, "file://"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(strings.TrimPrefix(otherMeta, "file://"), doc, 0o644))
	n.restart() // a node that never cached the file as it was

	victimFiles := n.listFiles(t, victimLoc)
	r = n.do(t, "GET", "/v1/floe/namespaces/ns/tables/other", nil)
	require.Equal(t, 500, r.status, "%s", r.body)
	assert.Contains(t, string(r.body), "replaced outside the catalog")
	r = n.do(t, "POST", "/v1/floe/namespaces/ns/tables/other", map[string]any{
		"requirements": []any{},
		"updates":      []any{map[string]any{"action": "set-properties", "updates": map[string]string{"k": "v"}}},
	})
	require.Equal(t, 500, r.status, "%s", r.body)
	assert.Equal(t, "InternalServerError", r.errorType(t), "read before anything was proposed: not an unknown outcome")
	assert.Contains(t, string(r.body), otherMeta)
	r = n.do(t, "GET", "/v1/floe/namespaces/ns/tables/other", nil)
	assert.Contains(t, string(r.body), otherMeta, "the table still points at its file")
	assert.Equal(t, victimFiles, n.listFiles(t, victimLoc), "nothing written where the file points")
	require.Equal(t, 200, n.do(t, "GET", "/v1/floe/namespaces/ns/tables/victim", nil).status)
}

// The same for a view: a file replaced by a copy of another view's is
// refused at load and replace, and nothing is written.
func TestMetadataFileOfAnotherViewIsRefused(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"ns"}}).status)
	r := n.do(t, "POST", "/v1/floe/namespaces/ns/views", createViewBody("victim", "select 1", "ns"))
	require.Equal(t, 200, r.status, "%s", r.body)
	victimMeta := r.json(t)["metadata-location"].(string)
	victimLoc := r.json(t)["metadata"].(map[string]any)["location"].(string)
	r = n.do(t, "POST", "/v1/floe/namespaces/ns/views", createViewBody("other", "select 2", "ns"))
	require.Equal(t, 200, r.status, "%s", r.body)
	otherMeta := r.json(t)["metadata-location"].(string)

	doc, err := os.ReadFile(strings.TrimPrefix(victimMeta, "file://"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(strings.TrimPrefix(otherMeta, "file://"), doc, 0o644))
	n.restart()

	victimFiles := n.listFiles(t, victimLoc)
	r = n.vdo(t, "GET", "/v1/floe/namespaces/ns/views/other", nil)
	require.Equal(t, 500, r.status, "%s", r.body)
	assert.Contains(t, string(r.body), "replaced outside the catalog")
	r = n.vdo(t, "POST", "/v1/floe/namespaces/ns/views/other", addVersionBody("select 3", "ns"))
	require.Equal(t, 500, r.status, "%s", r.body)
	assert.Equal(t, "InternalServerError", r.errorType(t))
	assert.Equal(t, victimFiles, n.listFiles(t, victimLoc), "nothing written where the file points")
	require.Equal(t, 200, n.do(t, "GET", "/v1/floe/namespaces/ns/views/victim", nil).status)
}

// A commit whose base file cannot be read (here a directory stands where
// the file was) failed before anything was proposed: a plain 500 saying
// so, not CommitStateUnknown, which tells a client to keep the files it
// wrote because the commit may have happened.
func TestACommitWhoseBaseCannotBeReadSaysNothingWasApplied(t *testing.T) {
	n := startNode(t, warehouses()[0])
	require.Equal(t, 200, n.do(t, "POST", "/v1/namespaces", map[string]any{"namespace": []string{"ns"}}).status)
	r := n.do(t, "POST", "/v1/floe/namespaces/ns/tables", withName("t"))
	require.Equal(t, 200, r.status, "%s", r.body)
	meta := strings.TrimPrefix(r.json(t)["metadata-location"].(string), "file://")
	require.NoError(t, os.Remove(meta))
	require.NoError(t, os.Mkdir(meta, 0o755))
	n.restart()
	r = n.do(t, "POST", "/v1/floe/namespaces/ns/tables/t", map[string]any{
		"requirements": []any{},
		"updates":      []any{map[string]any{"action": "set-properties", "updates": map[string]string{"k": "v"}}},
	})
	require.Equal(t, 500, r.status, "%s", r.body)
	assert.Equal(t, "InternalServerError", r.errorType(t))
	assert.Contains(t, string(r.body), "nothing was applied")
}
