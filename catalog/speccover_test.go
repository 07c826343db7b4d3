package catalog_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/internal/spectest"
)

// advertised holds the endpoints /v1/config lists, as
// TestEveryOperationOfTheSpecIsServedOrRefused found them; TestMain then
// checks that the package's tests exercised each one.
var advertised struct {
	sync.Mutex
	endpoints []string
}

// alwaysServed are operations of the spec that are not catalog endpoints.
var alwaysServed = map[string]bool{"getConfig": true, "getToken": true}

// TestEveryOperationOfTheSpecIsServedOrRefused walks the spec: an operation
// /v1/config advertises is served (TestMain checks that this package's tests
// sent it and validated its answers against the spec); any other is
// refused with the spec's error, 406 UnsupportedOperationException, the
// 404 a lookup of something that does not exist gets, or 501, with a
// status the operation lists.
func TestEveryOperationOfTheSpecIsServedOrRefused(t *testing.T) {
	v, err := spectest.Load()
	if err != nil {
		if spectest.Required() {
			t.Fatal(err)
		}
		t.Skip(spectest.MissingHint)
	}
	n := startNode(t, warehouses()[0])
	var cfg struct {
		Endpoints []string `json:"endpoints"`
	}
	r := n.do(t, "GET", "/v1/config", nil)
	require.Equal(t, http.StatusOK, r.status)
	require.NoError(t, json.Unmarshal(r.body, &cfg))
	advertised.Lock()
	advertised.endpoints = cfg.Endpoints
	advertised.Unlock()

	specOps := map[string]bool{}
	for _, op := range v.SpecOperations() {
		ep := op.Method + " " + op.Path
		specOps[ep] = true
		if alwaysServed[op.ID] || slices.Contains(cfg.Endpoints, ep) {
			continue
		}
		t.Run(op.ID, func(t *testing.T) {
			path := strings.NewReplacer("{prefix}", "floe", "{namespace}", "ns", "{table}", "t", "{view}", "v",
				"{plan-id}", "p1").Replace(op.Path)
			var body any
			if op.Method == "POST" || op.Method == "PUT" {
				body = map[string]any{}
			}
			res := n.doRaw(t, op.Method, path, body)
			assert.Contains(t, []int{http.StatusNotAcceptable, http.StatusNotFound, http.StatusNotImplemented}, res.status,
				"%s %s is not advertised, so it must be refused: %s", op.Method, path, res.body)
			assert.True(t, op.Lists(res.status), "%s answered %d, which %s does not list (%v): %s",
				path, res.status, op.ID, op.Responses, res.body)
			if op.Method != "HEAD" {
				typ := res.errorType(t)
				if res.status == http.StatusNotAcceptable {
					assert.Equal(t, "UnsupportedOperationException", typ)
				}
			}
		})
	}
	for _, ep := range cfg.Endpoints {
		assert.True(t, specOps[ep], "advertised endpoint %q is not an operation of the spec", ep)
	}

	// README's "Spec coverage" table lists every operation, served or not,
	// as the router does.
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	rows := map[string]string{} // "METHOD path" → served column
	for _, line := range strings.Split(string(readme), "\n") {
		m := readmeRow.FindStringSubmatch(line)
		if m != nil {
			rows[m[2]] = m[3]
		}
	}
	for _, op := range v.SpecOperations() {
		ep := op.Method + " " + op.Path
		served, listed := rows[ep]
		if !assert.True(t, listed, "README's spec coverage table lacks %s (%s)", op.ID, ep) {
			continue
		}
		switch {
		case op.ID == "getToken":
			// Served beside the catalog (cmd/node): real tokens with
			// --auth=on, a token that authorizes nothing with it off.
			assert.Equal(t, "yes", served, ep)
		case alwaysServed[op.ID] || slices.Contains(cfg.Endpoints, ep):
			assert.Equal(t, "yes", served, "README says %s is not served, but it is", ep)
		default:
			assert.Equal(t, "no", served, "README says %s is served, but it is not", ep)
		}
		delete(rows, ep)
	}
	assert.Empty(t, rows, "README lists operations the spec does not have")
}

// readmeRow matches a row of README's spec coverage table:
// | `operationId` | `METHOD path` | served |.
var readmeRow = regexp.MustCompile("^\\| `([A-Za-z]+)` \\| `([A-Z]+ [^`]+)` \\| (.+?) \\|$")

// checkExercised reports the advertised operations no test of the package
// sent and validated. It runs only after a full run of the package's tests
// with the spec present.
func checkExercised() error {
	v, err := spectest.Load()
	if err != nil {
		return nil
	}
	advertised.Lock()
	eps := advertised.endpoints
	advertised.Unlock()
	if len(eps) == 0 {
		return nil
	}
	ids := map[string]string{}
	for _, op := range v.SpecOperations() {
		ids[op.Method+" "+op.Path] = op.ID
	}
	seen := v.Operations()
	var missing []string
	for _, ep := range eps {
		if id := ids[ep]; id != "" && seen[id] == 0 {
			missing = append(missing, ep+" ("+id+")")
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("advertised operations no test sent and validated against the spec: %s", strings.Join(missing, ", "))
	}
	return nil
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	// Enforced where every test runs (CI: the spec and the S3 server are
	// required there), on a full run of the package.
	if code == 0 && spectest.Required() && !testing.Short() && flag.Lookup("test.run").Value.String() == "" {
		if err := checkExercised(); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL:", err)
			code = 1
		}
	}
	os.Exit(code)
}
