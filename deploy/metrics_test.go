package deploy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/floe-catalog/floe/internal/harness"
)

const (
	rulesFile     = "prometheus/floe-alerts.yml"
	dashboardFile = "grafana/floe-dashboard.json"
)

// external are the metrics the rules and the dashboard use that floe does
// not export, exempt from the existence check: Prometheus's own, and disk
// space from other exporters (floe does not export the free space of its
// data directory).
var external = map[string]string{
	"up":                                   "Prometheus: 1 when the last scrape of the target succeeded",
	"node_filesystem_avail_bytes":          "node_exporter",
	"node_filesystem_size_bytes":           "node_exporter",
	"kubelet_volume_stats_available_bytes": "kubelet",
	"kubelet_volume_stats_capacity_bytes":  "kubelet",
}

// A metric name inside PromQL is found by removing what can contain other
// identifiers (string literals, template variables, label matchers, ranges
// and subqueries, grouping clauses), then taking the identifiers that are
// neither keywords, nor functions or aggregations (followed by "("), nor
// part of a number or duration.
var (
	stringLitRE  = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	templateVar  = regexp.MustCompile(`\$\{?\w+\}?`)
	matcherRE    = regexp.MustCompile(`\{[^{}]*\}`)
	rangeRE      = regexp.MustCompile(`\[[^\[\]]*\]`)
	groupingRE   = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	identifierRE = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	labelValues  = regexp.MustCompile(`^\s*label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)`)
	floeNameRE   = regexp.MustCompile(`\bfloe_[a-z0-9_]+`)
)

var promqlKeywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"inf": true, "nan": true, "Inf": true, "NaN": true,
}

// metricNames returns the metric names a PromQL expression selects.
func metricNames(expr string) ([]string, error) {
	if strings.Contains(expr, "__name__") {
		return nil, fmt.Errorf("selects metrics by __name__, which this check cannot follow: %s", expr)
	}
	if m := labelValues.FindStringSubmatch(expr); m != nil { // Grafana's label_values(metric, label)
		return []string{m[1]}, nil
	}
	s := stringLitRE.ReplaceAllString(expr, `""`)
	s = templateVar.ReplaceAllString(s, "")
	s = matcherRE.ReplaceAllString(s, " ")
	for prev := ""; prev != s; {
		prev, s = s, rangeRE.ReplaceAllString(s, " ")
	}
	s = groupingRE.ReplaceAllString(s, " ")
	var names []string
	for _, loc := range identifierRE.FindAllStringIndex(s, -1) {
		id := s[loc[0]:loc[1]]
		if promqlKeywords[id] {
			continue
		}
		if loc[0] > 0 && strings.ContainsRune("0123456789.", rune(s[loc[0]-1])) {
			continue // 1e9, 5m
		}
		if rest := strings.TrimLeft(s[loc[1]:], " \t\n"); strings.HasPrefix(rest, "(") {
			continue // a function or an aggregation
		}
		if !slices.Contains(names, id) {
			names = append(names, id)
		}
	}
	return names, nil
}

func TestMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`sum by (job) (floe_raft_state{state="leader"}) < 1`: {"floe_raft_state"},
		`max by (job) (floe_raft_commit_index) - on (job) group_right floe_raft_applied_index > 100`: {
			"floe_raft_commit_index", "floe_raft_applied_index"},
		`deriv((max by (job) (a) - on (job) group_right b)[10m:1m]) > 0`: {"a", "b"},
		`histogram_quantile(0.99, sum by (le, op) (rate(floe_x_bucket{job="$job", status=~"[45].."}[$__rate_interval])))`: {
			"floe_x_bucket"},
		`delta(c[1h]) > 2 * 8192 and increase(d_count[1h] offset 5m) == 0`: {"c", "d_count"},
		`x{a="}"} / y < 1e9 or sum(z) without (instance)`:                  {"x", "y", "z"},
		`label_values(floe_raft_state{job="$job"}, instance)`:              {"floe_raft_state"},
		`rate(process_cpu_seconds_total{job="$job"}[5m])`:                  {"process_cpu_seconds_total"},
	} {
		got, err := metricNames(expr)
		require.NoError(t, err)
		assert.ElementsMatch(t, want, got, expr)
	}
	_, err := metricNames(`{__name__=~"floe_.*"}`)
	require.Error(t, err)
}

// usedMetric is a metric name and where it is used.
type usedMetric struct{ name, where string }

// ruleMetrics returns the metrics the alerting rules select, plus the floe_*
// names their annotations mention.
func ruleMetrics(t *testing.T) []usedMetric {
	t.Helper()
	raw, err := os.ReadFile(rulesFile)
	require.NoError(t, err)
	var rf struct {
		Groups []struct {
			Name  string
			Rules []struct {
				Alert, Record, Expr string
				Annotations         map[string]string
			}
		}
	}
	require.NoError(t, yaml.Unmarshal(raw, &rf))
	require.NotEmpty(t, rf.Groups)
	var out []usedMetric
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			where := fmt.Sprintf("%s: alert %s%s", rulesFile, r.Alert, r.Record)
			names, err := metricNames(r.Expr)
			require.NoError(t, err, where)
			require.NotEmpty(t, names, where)
			for _, n := range names {
				out = append(out, usedMetric{n, where})
			}
			for _, text := range r.Annotations {
				for _, n := range floeNameRE.FindAllString(text, -1) {
					out = append(out, usedMetric{n, where + " (annotations)"})
				}
			}
		}
	}
	return out
}

// dashboardQueries returns every PromQL query of the dashboard (panel
// targets, in rows too, and templating variables) with where it is.
func dashboardQueries(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	type target struct{ Expr string }
	type panel struct {
		Title   string
		Type    string
		Targets []target
		Panels  []panel
	}
	var d struct {
		Title      string
		UID        string
		Panels     []panel
		Templating struct {
			List []struct {
				Name  string
				Type  string
				Query any
			}
		}
	}
	require.NoError(t, json.Unmarshal(raw, &d))
	require.NotEmpty(t, d.UID)
	out := map[string]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for i, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("%s: panel %q: target %d has no expression", dashboardFile, p.Title, i)
					continue
				}
				out[tg.Expr] = fmt.Sprintf("%s: panel %q", dashboardFile, p.Title)
			}
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no queries", dashboardFile, p.Title)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q := ""
		switch x := v.Query.(type) {
		case string:
			q = x
		case map[string]any:
			q, _ = x["query"].(string)
		}
		require.NotEmpty(t, q, "%s: variable %s", dashboardFile, v.Name)
		out[q] = fmt.Sprintf("%s: variable $%s", dashboardFile, v.Name)
	}
	require.NotEmpty(t, out)
	return out
}

func dashboardMetrics(t *testing.T) []usedMetric {
	t.Helper()
	var out []usedMetric
	for expr, where := range dashboardQueries(t) {
		names, err := metricNames(expr)
		require.NoError(t, err, where)
		require.NotEmpty(t, names, "%s: %s", where, expr)
		for _, n := range names {
			out = append(out, usedMetric{n, where})
		}
	}
	return out
}

// scrapeFamilies returns the metric families a node's /metrics exposes,
// name → type.
func scrapeFamilies(ctx context.Context, client *http.Client, baseURL string) (map[string]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/metrics: %s", baseURL, resp.Status)
	}
	fams := map[string]string{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			fams[f[2]] = f[3]
		}
	}
	return fams, sc.Err()
}

// exported reports whether a name a query uses is in the scraped families:
// a family's own name, or a histogram's or summary's _bucket, _sum or
// _count series.
func exported(fams map[string]string, name string) bool {
	if _, ok := fams[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if typ := fams[base]; typ == "histogram" || (typ == "summary" && suffix != "_bucket") {
				return true
			}
		}
	}
	return false
}

// TestRulesAndDashboardMetricsExist starts a real three-node cluster, makes
// it produce the metrics that appear only after an event (catalog requests,
// a command forwarded to the leader, an asynchronous purge job, a rejected
// cluster handshake), and checks that every metric the alerting rules and
// the dashboard name is exported by some node. The names in external are
// exempt (and must not be floe's).
func TestRulesAndDashboardMetricsExist(t *testing.T) {
	used := append(ruleMetrics(t), dashboardMetrics(t)...)
	need := map[string][]string{} // name → where used
	usedExternal := map[string]bool{}
	for _, u := range used {
		if _, ok := external[u.name]; ok {
			usedExternal[u.name] = true
			continue
		}
		if !slices.Contains(need[u.name], u.where) {
			need[u.name] = append(need[u.name], u.where)
		}
	}
	for name := range external {
		assert.False(t, strings.HasPrefix(name, "floe_"), "%s is floe's own metric: it must not be exempt", name)
		assert.True(t, usedExternal[name], "external metric %s is used nowhere; drop it from the list", name)
	}

	bin := floeBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := harness.StartCluster(ctx, harness.ClusterConfig{
		Bin:  bin,
		Dir:  t.TempDir(),
		Size: 3,
		// The leader's purge scheduler and the workers look for work every
		// quarter of this.
		Args: []string{"--purge-heartbeat-timeout", "1s"},
		Env:  cleanEnv(),
		Tool: "deploy-test",
	}, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			t.Logf("node logs:\n%s", c.LogTails(30))
		}
	})
	leader, err := c.Leader(ctx)
	require.NoError(t, err)
	follower := c.Nodes[(leader.Index+1)%len(c.Nodes)]
	client := harness.NewHTTPClient(4, 10*time.Second)

	// Through a follower, so that the commands are forwarded to the leader
	// (floe_raft_forwarded_commands_total, floe_transport_rpc_*).
	call := func(method, path, body string, headers ...string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, follower.BaseURL()+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		resp, err := client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		require.Less(t, resp.StatusCode, 300, "%s %s: %s", method, path, b)
	}
	call("POST", "/v1/namespaces", `{"namespace":["deploy"]}`)
	call("POST", "/v1/namespaces/deploy/tables",
		`{"name":"t","schema":{"type":"struct","schema-id":0,"fields":[{"id":1,"name":"id","type":"long","required":true}]}}`)
	call("GET", "/v1/namespaces/deploy/tables/t", "")
	// An asynchronous purge: the leader's scheduler leases the job to a
	// worker (floe_purge_lease_assignments_total, floe_purge_delete_batches_total).
	call("DELETE", "/v1/namespaces/deploy/tables/t?purgeRequested=true", "", "X-Gravitino-Async-Purge", "true")
	// A connection to the cluster port that speaks no known protocol
	// (floe_transport_handshakes_rejected_total{reason="unknown_protocol"}).
	conn, err := net.DialTimeout("tcp", follower.ClusterAddr, 5*time.Second)
	require.NoError(t, err)
	_, err = conn.Write([]byte("X"))
	require.NoError(t, err)
	_ = conn.Close()

	var missing []string
	var fams map[string]string
	err = harness.Poll(ctx, 60*time.Second, 100*time.Millisecond, func(ctx context.Context) error {
		fams = map[string]string{}
		for _, n := range c.Nodes {
			f, err := scrapeFamilies(ctx, client, n.BaseURL())
			if err != nil {
				return err
			}
			for k, v := range f {
				fams[k] = v
			}
		}
		missing = missing[:0]
		for name := range need {
			if !exported(fams, name) {
				missing = append(missing, name)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("%d metrics not exported yet", len(missing))
		}
		return nil
	})
	if err != nil {
		sort.Strings(missing)
		for _, name := range missing {
			t.Errorf("metric %s is not exported by any node; used in:\n  %s", name, strings.Join(need[name], "\n  "))
		}
		t.Fatalf("after creating and purging a table: %v", err)
	}
	// What the dashboard and the rules leave out, for whoever extends them.
	var unused []string
	for name := range fams {
		if !strings.HasPrefix(name, "floe_") {
			continue
		}
		seen := false
		for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
			_, ok := need[name+suffix]
			seen = seen || ok
		}
		if !seen {
			unused = append(unused, name)
		}
	}
	sort.Strings(unused)
	t.Logf("%d metrics checked; floe metrics used by neither the rules nor the dashboard: %v", len(need), unused)
}
