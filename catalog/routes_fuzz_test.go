package catalog

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/storage"
)

// localStore is a Store over one state machine in the test process: every
// proposal is applied at once as the next log entry, and reads are local.
// It lets a fuzz target drive the real handlers and the real state machine
// without a Raft cluster.
type localStore struct {
	mu    sync.Mutex
	sm    *fsm.FSM
	index uint64
}

func (s *localStore) Propose(_ context.Context, cmd fsm.Command) (fsm.Result, error) {
	data, err := fsm.Encode(cmd)
	if err != nil {
		return fsm.Result{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.index++
	out := s.sm.ApplyBatch([]*raft.Log{{Index: s.index, Term: 1, Type: raft.LogCommand, Data: data}})
	res, ok := out[0].(fsm.Result)
	if !ok {
		return fsm.Result{}, fmt.Errorf("apply returned %T", out[0])
	}
	return res, nil
}

func (s *localStore) Read(_ context.Context, fn func(*fsm.Reader) error) error { return s.sm.View(fn) }

func (s *localStore) StaleRead(fn func(*fsm.Reader) error) error { return s.sm.View(fn) }

// fuzzRoute is a mutating route that takes a JSON body.
type fuzzRoute struct {
	name string
	path string
}

// fuzzRoutes are the routes FuzzRequestBody drives. They act on namespace
// db and table db.t, which the target keeps in place.
var fuzzRoutes = []fuzzRoute{
	{"createNamespace", "/v1/namespaces"},
	{"updateProperties", "/v1/namespaces/db/properties"},
	{"createTable", "/v1/namespaces/db/tables"},
	{"registerTable", "/v1/namespaces/db/register"},
	{"updateTable", "/v1/namespaces/db/tables/t"},
	{"renameTable", "/v1/tables/rename"},
	{"commitTransaction", "/v1/transactions/commit"},
}

const fuzzSchema = `{"type":"struct","schema-id":0,"fields":[{"id":1,"name":"id","type":"long","required":true},{"id":2,"name":"ts","type":"timestamptz","required":false},{"id":3,"name":"data","type":"string","required":false}]}`

// requestBodySeeds are request bodies from the Iceberg REST spec for each
// route (by index into fuzzRoutes), and malformed ones. {warehouse},
// {metadata} and {now-ms} stand for the warehouse URI, db.t's current
// metadata file and the current time in milliseconds.
var requestBodySeeds = []struct {
	route int
	body  string
}{
	{0, `{"namespace":["accounting"],"properties":{"owner":"Hank Bendickson"}}`},
	{0, `{"namespace":["db","inner"]}`},
	{0, `{"namespace":["db"]}`},
	{0, `{"namespace":[]}`},
	{0, `{"namespace":[""]}`},
	{0, `{"namespace":["a.b"]}`},
	{0, `{"namespace":["x"],"properties":{"":"v"}}`},
	{0, `{"namespace":"a"}`},
	{0, `{"namespace":[`},
	{0, ``},
	{1, `{"removals":["foo","bar"],"updates":{"owner":"Raoul"}}`},
	{1, `{"removals":["a"],"updates":{"a":"1"}}`},
	{1, `{"updates":{"":"1"}}`},
	{1, `{"removals":null,"updates":null}`},
	{2, `{"name":"t2","schema":` + fuzzSchema + `}`},
	{2, `{"name":"t3","location":"{warehouse}/db/custom","schema":` + fuzzSchema + `,"partition-spec":{"spec-id":0,"fields":[{"source-id":2,"field-id":1000,"name":"ts_day","transform":"day"}]},"write-order":{"order-id":1,"fields":[{"source-id":1,"transform":"identity","direction":"asc","null-order":"nulls-first"}]},"properties":{"format-version":"2"}}`},
	{2, `{"name":"staged","stage-create":true,"schema":` + fuzzSchema + `}`},
	{2, `{"name":"out","location":"file:///etc","schema":` + fuzzSchema + `}`},
	{2, `{"name":"dots","location":"{warehouse}/db/../../x","schema":` + fuzzSchema + `}`},
	{2, `{"name":"x","schema":{"type":"struct","fields":[{"id":1}]}}`},
	{2, `{"name":"x"}`},
	{3, `{"name":"again","metadata-location":"{metadata}"}`},
	{3, `{"name":"t","metadata-location":"{metadata}","overwrite":true}`},
	{3, `{"name":"r","metadata-location":"file:///etc/passwd"}`},
	{3, `{"name":"r","metadata-location":"{warehouse}/db/nope/metadata/00000-x.metadata.json"}`},
	{4, `{"requirements":[],"updates":[{"action":"set-properties","updates":{"owner":"ana"}}]}`},
	{4, `{"identifier":{"namespace":["db"],"name":"t"},"requirements":[{"type":"assert-current-schema-id","current-schema-id":0}],"updates":[{"action":"remove-properties","removals":["owner"]}]}`},
	{4, `{"requirements":[{"type":"assert-ref-snapshot-id","ref":"main","snapshot-id":null}],"updates":[{"action":"add-schema","schema":{"type":"struct","schema-id":1,"fields":[{"id":1,"name":"id","type":"long","required":true},{"id":4,"name":"extra","type":"int","required":false}]},"last-column-id":4},{"action":"set-current-schema","schema-id":-1}]}`},
	{4, `{"requirements":[],"updates":[{"action":"add-spec","spec":{"spec-id":1,"fields":[{"source-id":1,"field-id":1001,"name":"id_bucket","transform":"bucket[16]"}]}},{"action":"set-default-spec","spec-id":-1},{"action":"add-sort-order","sort-order":{"order-id":2,"fields":[{"source-id":1,"transform":"identity","direction":"desc","null-order":"nulls-last"}]}},{"action":"set-default-sort-order","sort-order-id":-1}]}`},
	{4, `{"requirements":[],"updates":[{"action":"set-location","location":"{warehouse}/db/moved"}]}`},
	{4, `{"requirements":[],"updates":[{"action":"set-location","location":"file:///elsewhere"}]}`},
	{4, `{"requirements":[],"updates":[{"action":"upgrade-format-version","format-version":2}]}`},
	{4, `{"requirements":[],"updates":[{"action":"add-snapshot","snapshot":{"snapshot-id":1,"sequence-number":1,"timestamp-ms":{now-ms},"manifest-list":"{warehouse}/db/t/metadata/snap-1.avro","summary":{"operation":"append"},"schema-id":0}},{"action":"set-snapshot-ref","ref-name":"main","type":"branch","snapshot-id":1}]}`},
	{4, `{"requirements":[],"updates":[{"action":"remove-snapshots","snapshot-ids":[1]},{"action":"remove-snapshot-ref","ref-name":"main"}]}`},
	{4, `{"requirements":[{"type":"assert-table-uuid","uuid":"00000000-0000-0000-0000-000000000001"}],"updates":[]}`},
	{4, `{"requirements":[{"type":"assert-create"}],"updates":[]}`},
	{4, `{"requirements":[],"updates":[{"action":"assign-uuid","uuid":"0190b2c4-8d3e-7a1b-9c2d-3e4f5a6b7c8d"}]}`},
	{4, `{"requirements":[],"updates":[{"action":"frobnicate"}]}`},
	{4, `{"updates":[]}`},
	{5, `{"source":{"namespace":["db"],"name":"t"},"destination":{"namespace":["db"],"name":"renamed"}}`},
	{5, `{"source":{"namespace":["db"],"name":"renamed"},"destination":{"namespace":["db"],"name":"t"}}`},
	{5, `{"source":{"namespace":["db"],"name":"t"},"destination":{"namespace":["nowhere"],"name":"t"}}`},
	{5, `{"destination":{"namespace":["db"],"name":"z"}}`},
	{6, `{"table-changes":[{"identifier":{"namespace":["db"],"name":"t"},"requirements":[],"updates":[{"action":"set-properties","updates":{"tx":"1"}}]}]}`},
	{6, `{"table-changes":[{"identifier":{"namespace":["db"],"name":"t"},"requirements":[],"updates":[]},{"identifier":{"namespace":["db"],"name":"missing"},"requirements":[],"updates":[]}]}`},
	{6, `{"table-changes":[{"identifier":{"namespace":["db"],"name":"t"},"requirements":[],"updates":[]},{"identifier":{"namespace":["db"],"name":"t"},"requirements":[],"updates":[]}]}`},
	{6, `{"table-changes":[{"requirements":[],"updates":[]}]}`},
	{6, `{"table-changes":[]}`},
}

// routeServer is a catalog server on a private warehouse and state machine.
type routeServer struct {
	srv       *Server
	store     *localStore
	warehouse string
	fixtures  int // how many fixture locations were used

	cached      string // state at cachedIndex
	cachedIndex uint64
}

func newRouteServer(f *testing.F) *routeServer {
	dir := f.TempDir()
	sm, err := fsm.Open(filepath.Join(dir, "fsm.db"), nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { sm.Close() })
	objects, err := storage.New(storage.Config{})
	if err != nil {
		f.Fatal(err)
	}
	rs := &routeServer{store: &localStore{sm: sm}, warehouse: "file://" + filepath.Join(dir, "warehouse")}
	rs.srv, err = New(Config{
		Warehouse: rs.warehouse, Registerer: prometheus.NewRegistry(), MaxBodyBytes: 1 << 20,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, rs.store, objects)
	if err != nil {
		f.Fatal(err)
	}
	return rs
}

func (rs *routeServer) do(method, path string, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	rs.srv.Handler().ServeHTTP(rec, req)
	return rec
}

// ensureFixtures (re)creates namespace db and table db.t, which earlier
// requests may have renamed away, and returns db.t's metadata location ("" if
// it could not be recreated). Each db.t gets a fresh top-level directory of
// the warehouse: the old one, renamed, keeps its location, and a fuzzed
// table may have claimed any directory below the warehouse.
func (rs *routeServer) ensureFixtures(t testing.TB) string {
	t.Helper()
	var meta string
	var hasNS bool
	read := func() {
		err := rs.store.Read(context.Background(), func(r *fsm.Reader) error {
			_, hasNS = r.Namespace([]string{"db"})
			tb, ok := r.Table(fsm.Ident{Namespace: []string{"db"}, Name: "t"})
			meta = ""
			if ok {
				meta = tb.MetadataLocation
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	read()
	if !hasNS {
		if rec := rs.do("POST", "/v1/namespaces", []byte(`{"namespace":["db"]}`)); rec.Code != http.StatusOK {
			t.Fatalf("create namespace db: %d %s", rec.Code, rec.Body)
		}
	}
	for attempt := 0; meta == "" && attempt < 3; attempt++ {
		rs.fixtures++
		loc := fmt.Sprintf("%s/fixture-%d/t", rs.warehouse, rs.fixtures)
		body := []byte(`{"name":"t","location":"` + loc + `","schema":` + fuzzSchema + `}`)
		if rec := rs.do("POST", "/v1/namespaces/db/tables", body); rec.Code == http.StatusOK {
			read()
		}
	}
	return meta
}

// state renders every namespace and table entry: what a refused request
// must leave as it was. The rendering is cached by applied index, since
// only an applied entry can change it.
func (rs *routeServer) state(t testing.TB) string {
	t.Helper()
	index := rs.store.sm.AppliedIndex()
	if rs.cached != "" && rs.cachedIndex == index {
		return rs.cached
	}
	var b bytes.Buffer
	err := rs.store.Read(context.Background(), func(r *fsm.Reader) error {
		var walk func(parent []string)
		walk = func(parent []string) {
			list, _ := r.Namespaces(parent, "", 0)
			for _, ns := range list {
				raw, _ := json.Marshal(ns)
				b.Write(raw)
				b.WriteByte('\n')
				walk(ns.Levels)
			}
		}
		walk(nil)
		return r.ForEachTable(func(tb fsm.Table) error {
			raw, _ := json.Marshal(tb)
			b.Write(raw)
			b.WriteByte('\n')
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	rs.cached, rs.cachedIndex = b.String(), index
	return rs.cached
}

// FuzzRequestBody sends fuzzed bodies to every mutating route of an
// in-process catalog server backed by a real state machine. Properties:
// no handler panics; no body gets a 5xx; every 4xx is in the Iceberg error
// model ({"error":{"message","type","code"}} with code equal to the status);
// and a 4xx leaves every namespace and table exactly as it was.
//
// One server serves the whole run; each call is judged by the state just
// before and just after it.
func FuzzRequestBody(f *testing.F) {
	for _, s := range requestBodySeeds {
		f.Add(uint8(s.route), []byte(s.body))
	}
	rs := newRouteServer(f)
	if rs.ensureFixtures(f) == "" {
		f.Fatal("cannot create table db.t")
	}

	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		rt := fuzzRoutes[int(route)%len(fuzzRoutes)]
		meta := rs.ensureFixtures(t)
		body = bytes.ReplaceAll(body, []byte("{warehouse}"), []byte(rs.warehouse))
		body = bytes.ReplaceAll(body, []byte("{metadata}"), []byte(meta))
		body = bytes.ReplaceAll(body, []byte("{now-ms}"), []byte(strconv.FormatInt(time.Now().UnixMilli(), 10)))

		before := rs.state(t)
		rec := rs.do("POST", rt.path, body)
		if rec.Code >= 500 {
			t.Fatalf("%s answered %d to %q:\n%s", rt.name, rec.Code, body, rec.Body)
		}
		if rec.Code < 400 {
			return
		}
		var e struct {
			Error *struct {
				Message string `json:"message"`
				Type    string `json:"type"`
				Code    int    `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == nil ||
			e.Error.Message == "" || e.Error.Type == "" || e.Error.Code != rec.Code {
			t.Fatalf("%s answered %d to %q outside the error model: %s", rt.name, rec.Code, body, rec.Body)
		}
		if after := rs.state(t); after != before {
			t.Fatalf("%s refused %q with %d but changed the catalog:\nbefore:\n%s\nafter:\n%s", rt.name, body, rec.Code, before, after)
		}
	})
}
