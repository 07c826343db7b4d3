// Package deploy_test checks the files under deploy/ against the floe binary
// built from this tree:
//
//   - the Kubernetes manifest, Docker Compose file, systemd unit and its
//     environment file, and the Dockerfile use only flags and FLOE_*
//     variables that `floe --help` lists, with values of the right type, and
//     agree with themselves (replicas, --bootstrap-expect, --join, ports,
//     probes, volumes);
//   - every metric the Prometheus alerting rules and the Grafana dashboard
//     name is exported by a real three-node cluster (metrics_test.go);
//   - promtool accepts the rules, their unit tests, the example Prometheus
//     configuration and the dashboard's queries, when promtool is installed
//     (promtool_test.go).
package deploy_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/internal/harness"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string

	flagsOnce sync.Once
	flagsVal  *floeFlags
	flagsErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// floeBinary builds ./cmd/node once per test run.
func floeBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "floe-deploy-bin-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "floe")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/node")
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build ./cmd/node: %v\n%s", err, out)
		}
	})
	require.NoError(t, binErr)
	return binPath
}

// cleanEnv is the environment for the floe processes the tests start:
// without the caller's FLOE_* and AWS_* settings.
func cleanEnv() []string { return harness.EnvWithout("FLOE_", "AWS_") }

// floeFlags is what `floe --help` says about the flags.
type floeFlags struct {
	types map[string]string // flag name → "string", "int", "uint", "duration", "bool", ...
	envs  map[string]string // FLOE_* twin → flag name
}

var (
	helpFlagRE = regexp.MustCompile(`^  --([a-z0-9][a-z0-9-]*)(?: (\S+))?$`)
	helpEnvRE  = regexp.MustCompile(`^\s+\tenv (FLOE_[A-Z0-9_]+)`)
)

// flags runs `floe --help` once and parses it: each flag line
// ("  --name type") is followed by its usage and a line naming its
// environment twin ("\tenv FLOE_NAME; default ...").
func flags(t *testing.T) *floeFlags {
	t.Helper()
	bin := floeBinary(t)
	flagsOnce.Do(func() {
		cmd := exec.Command(bin, "--help")
		cmd.Env = cleanEnv()
		out, err := cmd.Output()
		if err != nil {
			flagsErr = fmt.Errorf("floe --help: %w", err)
			return
		}
		f := &floeFlags{types: map[string]string{}, envs: map[string]string{}}
		current := ""
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			line := sc.Text()
			if m := helpFlagRE.FindStringSubmatch(line); m != nil {
				current = m[1]
				typ := m[2]
				if typ == "" {
					typ = "bool"
				}
				f.types[current] = typ
				continue
			}
			if m := helpEnvRE.FindStringSubmatch(line); m != nil && current != "" {
				want := "FLOE_" + strings.ToUpper(strings.ReplaceAll(current, "-", "_"))
				if m[1] != want {
					flagsErr = fmt.Errorf("floe --help: --%s has env %s, want %s", current, m[1], want)
					return
				}
				f.envs[m[1]] = current
				current = ""
			}
		}
		if len(f.types) < 10 || len(f.envs) != len(f.types) {
			flagsErr = fmt.Errorf("floe --help: parsed %d flags and %d environment variables; the format changed?\n%s", len(f.types), len(f.envs), out)
			return
		}
		flagsVal = f
	})
	require.NoError(t, flagsErr)
	return flagsVal
}

// checkArgs checks a floe command line (without the program name): every
// element is a known flag or a flag's value, and floe's own parser accepts
// them. It runs `floe <args> --help`: the flag package parses and sets every
// flag before --help, so an unknown flag or a malformed value fails with
// exit status 2 while valid ones end in the usage text and status 0. Values
// that Kubernetes or a shell would substitute ($(VAR), ${VAR}) stay as they
// are, which only matters for non-string flags (none here).
func checkArgs(t *testing.T, where string, args []string) {
	t.Helper()
	f := flags(t)
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			t.Errorf("%s: %q is not a flag (floe takes flags only)", where, a)
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		typ, ok := f.types[name]
		if !ok {
			t.Errorf("%s: unknown flag --%s (see floe --help)", where, name)
			continue
		}
		if typ != "bool" && !hasValue {
			i++ // the value
		}
	}
	cmd := exec.Command(floeBinary(t), append(append([]string{}, args...), "--help")...)
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("%s: floe rejects the command line %q: %v\n%s", where, args, err, out)
	}
}

// checkEnv checks FLOE_* variables set in a deployment file: each is the
// twin of a flag, and its value parses as that flag's type. Values with a
// substitution (${VAR}, $(VAR)) are not checked.
func checkEnv(t *testing.T, where string, env map[string]string) {
	t.Helper()
	f := flags(t)
	for k, v := range env {
		if !strings.HasPrefix(k, "FLOE_") {
			continue
		}
		name, ok := f.envs[k]
		if !ok {
			t.Errorf("%s: %s is not the environment twin of any flag (see floe --help)", where, k)
			continue
		}
		if strings.Contains(v, "$") {
			continue
		}
		if err := parseAs(f.types[name], v); err != nil {
			t.Errorf("%s: %s=%q: not a valid %s for --%s: %v", where, k, v, f.types[name], name, err)
		}
	}
}

func parseAs(typ, v string) error {
	var err error
	switch typ {
	case "bool":
		_, err = strconv.ParseBool(v)
	case "int":
		_, err = strconv.ParseInt(v, 0, 64)
	case "uint":
		_, err = strconv.ParseUint(v, 0, 64)
	case "duration":
		_, err = time.ParseDuration(v)
	}
	return err
}

var floeEnvMentionRE = regexp.MustCompile(`\bFLOE_[A-Z0-9_]+`)

// checkEnvMentions checks every FLOE_* name in a file, comments included
// (commented-out examples are meant to be uncommented), against the flags'
// twins.
func checkEnvMentions(t *testing.T, path string) {
	t.Helper()
	f := flags(t)
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	for _, name := range floeEnvMentionRE.FindAllString(string(raw), -1) {
		if _, ok := f.envs[name]; !ok {
			t.Errorf("%s mentions %s, which is not the environment twin of any flag (see floe --help)", path, name)
		}
	}
}

func TestFlagsParsed(t *testing.T) {
	f := flags(t)
	for _, name := range []string{"node-id", "data-dir", "http-addr", "cluster-addr", "join", "bootstrap-expect"} {
		require.Contains(t, f.types, name)
	}
	require.Equal(t, "int", f.types["bootstrap-expect"])
	require.Equal(t, "bool", f.types["s3-path-style"])
	require.Equal(t, "data-dir", f.envs["FLOE_DATA_DIR"])
}

// TestCheckArgsRejects makes sure checkArgs would notice a bad command line.
func TestCheckArgsRejects(t *testing.T) {
	bin := floeBinary(t)
	for _, args := range [][]string{
		{"--no-such-flag", "x"},
		{"--bootstrap-expect", "three"},
	} {
		cmd := exec.Command(bin, append(args, "--help")...)
		cmd.Env = cleanEnv()
		err := cmd.Run()
		var ee *exec.ExitError
		require.True(t, errors.As(err, &ee), "floe %q --help: %v", args, err)
		require.Equal(t, 2, ee.ExitCode(), "floe %q --help", args)
	}
	cmd := exec.Command(bin, "--bootstrap-expect=3", "--s3-path-style", "--join", "a:1,b:2", "--help")
	cmd.Env = cleanEnv()
	require.NoError(t, cmd.Run())
}
