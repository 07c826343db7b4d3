package depgraph

import (
	"bufio"
	"bytes"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/floe-catalog/floe/"

// layers lists, for every package of the layered core, the packages of this
// module its non-test code may import. It is the graph at the top of
// README.md's "Code layout": change both together. Packages not listed
// (cmd/node, the test and benchmark tools) may import any of these.
var layers = map[string][]string{
	"internal/location": nil,
	"internal/replica":  nil,
	"internal/boltopen": nil,
	"internal/muxallow": nil,
	"internal/raftlog":  {"internal/boltopen"},
	"transport":         nil,
	"fsm":               {"internal/location", "internal/boltopen"},
	"idempotency":       {"fsm"},
	"internal/storage":  {"internal/location"},
	"purge":             {"fsm", "internal/storage", "internal/location"},
	"catalog":           {"fsm", "idempotency", "purge", "internal/replica", "internal/storage", "internal/location", "internal/muxallow"},
	"internal/raftnode": {"fsm", "internal/raftlog", "internal/replica", "transport", "internal/boltopen"},
	// Fault injection for in-process cluster tests: imported by tests only.
	"internal/raftnode/raftfault": nil,
	"internal/admin":              {"fsm", "idempotency", "internal/raftnode", "internal/auth", "internal/backup", "internal/muxallow"},
	"internal/backup":             {"internal/raftnode"},
	"internal/auth":               nil,
	"internal/vending":            {"internal/location"},
	"internal/vending/ststest":    nil,
	"internal/httpserve":          nil,
	"internal/ui":                 {"fsm", "idempotency", "internal/raftnode", "purge", "internal/storage"},
}

// testOnly are packages no non-test code may import.
var testOnly = []string{"internal/raftnode/raftfault", "internal/vending/ststest", "internal/fsmtest"}

// forbidden lists, for the seams the graph exists for, packages that must
// not be reached even indirectly: the Raft node knows nothing of HTTP, the
// catalog nothing of Raft, the state machine nothing of storage clients.
var forbidden = map[string][]string{
	"internal/raftnode": {"catalog", "internal/admin", "idempotency", "purge", "internal/storage"},
	"catalog":           {"internal/raftnode", "internal/raftlog", "transport", "internal/admin"},
	"fsm":               {"internal/storage", "idempotency", "catalog", "internal/raftnode"},
	"idempotency":       {"catalog", "internal/admin", "internal/raftnode"},
}

// httpPackages may not be imported by the Raft node's own code.
var httpPackages = []string{"net/http", "github.com/gorilla/mux"}

// imports runs go list over the module and returns each package's direct
// non-test imports, module packages relative to the module path.
func imports(t *testing.T) map[string][]string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH")
	}
	cmd := exec.Command(goTool, "list", "-e", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", module+"...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	graph := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || !strings.HasPrefix(fields[0], module) {
			continue
		}
		pkg := strings.TrimPrefix(fields[0], module)
		var deps []string
		for _, imp := range fields[1:] {
			if strings.HasPrefix(imp, module) {
				imp = strings.TrimPrefix(imp, module)
			}
			deps = append(deps, imp)
		}
		graph[pkg] = deps
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return graph
}

func inModule(graph map[string][]string, imp string) bool {
	_, ok := graph[imp]
	return ok
}

// reach returns every module package pkg imports, directly or not.
func reach(graph map[string][]string, pkg string) []string {
	seen := map[string]bool{}
	var walk func(string)
	walk = func(p string) {
		for _, d := range graph[p] {
			if inModule(graph, d) && !seen[d] {
				seen[d] = true
				walk(d)
			}
		}
	}
	walk(pkg)
	out := make([]string, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

func TestLayeredPackagesImportOnlyWhatTheGraphAllows(t *testing.T) {
	graph := imports(t)
	for pkg, allowed := range layers {
		deps, ok := graph[pkg]
		if !ok {
			t.Errorf("%s is in the graph but not in the module; update layers and README.md", pkg)
			continue
		}
		for _, d := range deps {
			if inModule(graph, d) && !slices.Contains(allowed, d) {
				t.Errorf("%s imports %s; the graph allows %v (README.md, Code layout)", pkg, d, allowed)
			}
		}
	}
}

func TestSeamsHoldTransitively(t *testing.T) {
	graph := imports(t)
	for pkg, bad := range forbidden {
		for _, d := range reach(graph, pkg) {
			if slices.Contains(bad, d) {
				t.Errorf("%s depends on %s, directly or not", pkg, d)
			}
		}
	}
}

func TestRaftNodeImportsNoHTTP(t *testing.T) {
	graph := imports(t)
	for _, pkg := range append([]string{"internal/raftnode"}, reach(graph, "internal/raftnode")...) {
		for _, d := range graph[pkg] {
			if slices.Contains(httpPackages, d) {
				t.Errorf("%s (the Raft node or below it) imports %s", pkg, d)
			}
		}
	}
}

func TestTestSupportIsImportedByTestsOnly(t *testing.T) {
	graph := imports(t)
	for pkg, deps := range graph {
		for _, d := range deps {
			if slices.Contains(testOnly, d) {
				t.Errorf("%s imports %s, which only tests may import", pkg, d)
			}
		}
	}
}
