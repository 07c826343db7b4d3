package deploy_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// envRequirePromtool, when "1" (set by .ci/run), turns a missing promtool
// into a test failure instead of a skip.
const envRequirePromtool = "FLOE_REQUIRE_PROMTOOL"

func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv(envRequirePromtool) == "1" {
			t.Fatalf("promtool not found on PATH and %s=1 (Debian: apt-get install prometheus)", envRequirePromtool)
		}
		t.Skipf("promtool not found on PATH, skipping (Debian: apt-get install prometheus; %s=1 makes this a failure)", envRequirePromtool)
	}
	return p
}

func runPromtool(t *testing.T, bin string, args ...string) {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
	t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
}

// TestPromtool runs `promtool check rules deploy/prometheus/*.yml`, the
// rules' unit tests, `promtool check config` on the example configuration,
// and checks the syntax of every dashboard query by handing them to
// `promtool check rules` as recording rules.
func TestPromtool(t *testing.T) {
	bin := promtool(t)

	t.Run("check rules", func(t *testing.T) {
		files, err := filepath.Glob("prometheus/*.yml")
		require.NoError(t, err)
		require.NotEmpty(t, files)
		runPromtool(t, bin, append([]string{"check", "rules"}, files...)...)
	})

	t.Run("test rules", func(t *testing.T) {
		files, err := filepath.Glob("prometheus/tests/*.yml")
		require.NoError(t, err)
		require.NotEmpty(t, files)
		runPromtool(t, bin, append([]string{"test", "rules"}, files...)...)
	})

	t.Run("check config", func(t *testing.T) {
		runPromtool(t, bin, "check", "config", "prometheus/config/prometheus.yml")
	})

	t.Run("dashboard queries", func(t *testing.T) {
		queries := dashboardQueries(t)
		exprs := make([]string, 0, len(queries))
		for q := range queries {
			if labelValues.MatchString(q) {
				continue // Grafana's, not PromQL
			}
			exprs = append(exprs, q)
		}
		sort.Strings(exprs)
		type rule struct {
			Record string `yaml:"record"`
			Expr   string `yaml:"expr"`
		}
		var rules []rule
		for i, q := range exprs {
			e, err := expandGrafanaVars(q)
			require.NoError(t, err, queries[q])
			rules = append(rules, rule{Record: fmt.Sprintf("dashboard:query_%d", i), Expr: e})
		}
		doc := map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}}
		raw, err := yaml.Marshal(doc)
		require.NoError(t, err)
		path := filepath.Join(t.TempDir(), "dashboard-queries.yml")
		require.NoError(t, os.WriteFile(path, raw, 0o644))
		runPromtool(t, bin, "check", "rules", path)
	})
}

var grafanaVarRE = regexp.MustCompile(`\$(?:\{(\w+)\}|(\w+))`)

// expandGrafanaVars replaces the dashboard's template variables with
// values Prometheus accepts, so that promtool can parse the query.
func expandGrafanaVars(q string) (string, error) {
	values := map[string]string{
		"__rate_interval": "1m",
		"__interval":      "1m",
		"__range":         "1h",
		"job":             "floe",
		"instance":        ".+",
	}
	var err error
	out := grafanaVarRE.ReplaceAllStringFunc(q, func(m string) string {
		sub := grafanaVarRE.FindStringSubmatch(m)
		name := sub[1] + sub[2]
		v, ok := values[name]
		if !ok && err == nil {
			err = fmt.Errorf("unknown dashboard variable $%s in %s", name, q)
		}
		return v
	})
	return out, err
}
