package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/internal/testenv"
)

// writeConfig writes a configuration file with mode 0600 and returns its
// path.
func writeConfig(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "floe.yaml")
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

// TestConfigFilePrecedence: command line > environment > configuration file
// > default, each layer seen winning over the ones below it.
func TestConfigFilePrecedence(t *testing.T) {
	path := writeConfig(t, `
# every layer sets prefix; the file alone sets http-addr
http-addr: 127.0.0.1:9100
prefix: from-file
log-level: debug
max-body-bytes: 1000
s3-path-style: true
join: [a:1, "b:2"]
bootstrap-expect: 2
snapshot-interval: 30s
`)
	env := []string{
		"FLOE_PREFIX=from-env",
		"FLOE_LOG_LEVEL=warn",
	}
	c, err := parseConfig([]string{"--config", path, "--prefix=from-flag", "--max-body-bytes=3000"}, env, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, path, c.Config)
	assert.Equal(t, "from-flag", c.Prefix, "the command line wins over the environment and the file")
	assert.Equal(t, int64(3000), c.MaxBodyBytes, "the command line wins over the file")
	assert.Equal(t, "warn", c.LogLevel, "the environment wins over the file")
	assert.Equal(t, "127.0.0.1:9100", c.HTTPAddr, "the file wins over the default")
	assert.True(t, c.S3PathStyle)
	assert.Equal(t, "a:1,b:2", c.Join, "a YAML list joins with commas")
	assert.Equal(t, 2, c.BootstrapExpect)
	assert.Equal(t, 30*time.Second, c.SnapshotInterval)
	assert.Equal(t, "127.0.0.1:8182", c.ClusterAddr, "neither sets it: the default")

	// An empty environment variable still counts as set, as without a file.
	c, err = parseConfig([]string{"--config", path}, []string{"FLOE_JOIN="}, io.Discard)
	require.ErrorContains(t, err, "--bootstrap-expect 2 needs --join")

	// FLOE_CONFIG names the file when --config does not.
	c, err = parseConfig(nil, []string{"FLOE_CONFIG=" + path}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "from-file", c.Prefix)
	assert.Equal(t, path, c.Config)

	// --config wins over FLOE_CONFIG.
	other := writeConfig(t, "prefix: other-file\n")
	c, err = parseConfig([]string{"--config=" + other}, []string{"FLOE_CONFIG=" + path}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "other-file", c.Prefix)
	assert.Equal(t, "127.0.0.1:8181", c.HTTPAddr)
}

// TestConfigFileSetsEveryFlag writes every flag but --config with its
// default into a file, typed as the file wants it: each key is accepted and
// the result is the configuration without a file.
func TestConfigFileSetsEveryFlag(t *testing.T) {
	var lines []string
	var dummy config
	newFlagSet(&dummy).VisitAll(func(f *flag.Flag) {
		if f.Name == configFlag {
			return
		}
		v := f.DefValue
		switch f.Value.(flag.Getter).Get().(type) {
		case string, time.Duration:
			v = fmt.Sprintf("%q", v)
		}
		lines = append(lines, f.Name+": "+v)
	})
	require.Greater(t, len(lines), 50)
	path := writeConfig(t, strings.Join(lines, "\n")+"\n")
	withFile, err := parseConfig([]string{"--config", path}, nil, io.Discard)
	require.NoError(t, err)
	without, err := parseConfig(nil, nil, io.Discard)
	require.NoError(t, err)
	withFile.Config = ""
	assert.Equal(t, without, withFile)
}

func TestConfigFileEmpty(t *testing.T) {
	for _, content := range []string{"", "# only a comment\n", "---\n", "~\n"} {
		c, err := parseConfig([]string{"--config", writeConfig(t, content)}, nil, io.Discard)
		require.NoError(t, err, "%q", content)
		assert.Equal(t, "127.0.0.1:8181", c.HTTPAddr)
	}
}

// A config file is read up to a bound: /dev/zero was read until memory
// ran out, ignoring signals.
func TestConfigFileIsBounded(t *testing.T) {
	big := writeConfig(t, "# "+strings.Repeat("x", maxConfigFileBytes)+"\n")
	for path, want := range map[string]string{"/dev/zero": "at most", t.TempDir(): "is a directory", big: "at most"} {
		_, err := parseConfig([]string{"--config", path}, nil, io.Discard)
		var ue usageError
		require.ErrorAs(t, err, &ue, path)
		assert.ErrorContains(t, err, want, path)
	}
}

func TestConfigFileRejects(t *testing.T) {
	for _, tc := range []struct {
		name, content string
		env           []string
		want          string // after "config file <path>"
	}{
		{name: "unknown key", content: "data-dir: /tmp/x\nhtp-addr: 127.0.0.1:1\n", want: `, line 2: htp-addr: unknown key (the keys are the flag names`},
		{name: "underscores", content: "http_addr: 127.0.0.1:1\n", want: ", line 1: http_addr: unknown key: did you mean http-addr?"},
		{name: "dashes", content: "--http-addr: 127.0.0.1:1\n", want: ", line 1: --http-addr: unknown key: did you mean http-addr?"},
		{name: "env name", content: "FLOE_HTTP_ADDR: 127.0.0.1:1\n", want: ", line 1: FLOE_HTTP_ADDR: unknown key: did you mean http-addr?"},
		{name: "nested", content: "s3:\n  endpoint: http://x\n", want: ", line 1: s3: unknown key"},
		{name: "mapping value", content: "\nhttp-addr:\n  host: a\n", want: ", line 2: http-addr: want a single value, got a mapping"},
		{name: "list value", content: "warehouse: [a, b]\n", want: ", line 1: warehouse: want a single value, got a list"},
		{name: "quoted integer", content: `max-body-bytes: "1024"` + "\n", want: `, line 1: max-body-bytes: want an integer, got the string "1024"`},
		{name: "string for integer", content: "max-body-bytes: lots\n", want: `, line 1: max-body-bytes: want an integer, got the string "lots"`},
		{name: "float for integer", content: "bootstrap-expect: 1.5\n", want: `, line 1: bootstrap-expect: want an integer, got the number 1.5`},
		{name: "yes for bool", content: "s3-path-style: yes\n", want: `, line 1: s3-path-style: want true or false, got the string "yes"`},
		{name: "bool as string", content: `idempotency: "false"` + "\n", want: `, line 1: idempotency: want true or false, got the string "false"`},
		{name: "negative uint", content: "snapshot-threshold: -1\n", want: `, line 1: snapshot-threshold: invalid value "-1"`},
		{name: "duration without unit", content: "snapshot-interval: 30\n", want: `, line 1: snapshot-interval: invalid value "30": time: missing unit in duration "30"`},
		{name: "duration as bool", content: "purge-retention: true\n", want: `, line 1: purge-retention: want a duration such as 30s`},
		{name: "no value", content: "warehouse:\n", want: `, line 1: warehouse: no value (write "" for an empty string`},
		{name: "repeated", content: "prefix: a\nlog-level: info\nprefix: b\n", want: ", line 3: prefix: repeated key (first at line 1)"},
		{name: "config key", content: "config: /etc/other.yaml\n", want: ", line 1: config: the configuration file cannot name another one"},
		{name: "list of mappings", content: "join:\n  - a:1\n  - {host: b}\n", want: ", line 1: join: want a list of strings, got a mapping in it (line 3)"},
		// The line is the library's (here that of the mapping around the
		// unclosed list).
		{name: "syntax", content: "prefix: a\nhttp-addr: [127.0.0.1\n", want: ": line 1: did not find expected ',' or ']'"},
		{name: "not a mapping", content: "- data-dir\n", want: ", line 1: want a mapping of flag names to values"},
		{name: "two documents", content: "prefix: a\n---\nprefix: b\n", want: ", line 2: a second YAML document"},
		// Checked by validate after merging: the note names the key and line.
		{name: "bad log format", content: "prefix: p\nlog-format: xml\n", want: `--log-format "xml": want text or json (set in config file `},
		{name: "advertise wildcard", content: "http-advertise: 0.0.0.0:8181\n", want: `--http-advertise "0.0.0.0:8181": want the host and port`},
		// A bad value is refused even where the environment overrides it.
		{name: "overridden", content: "max-body-bytes: lots\n", env: []string{"FLOE_MAX_BODY_BYTES=10"}, want: `, line 1: max-body-bytes: want an integer`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeConfig(t, tc.content)
			_, err := parseConfig([]string{"--config", path}, tc.env, io.Discard)
			var ue usageError
			require.ErrorAs(t, err, &ue)
			if strings.HasPrefix(tc.want, "--") {
				assert.ErrorContains(t, err, tc.want)
				assert.ErrorContains(t, err, path)
			} else {
				assert.ErrorContains(t, err, "config file "+path+tc.want)
			}
			assert.Equal(t, 2, exitCode(err, io.Discard))
		})
	}

	// A file that is no mapping (an environment file or a private key
	// given by mistake) is not repeated in the error: it is often all
	// secrets.
	for _, content := range []string{
		"FLOE_AUTH=on\nFLOE_AUTH_ROOT_TOKEN=SECRETXYZ123ROOTTOKEN\n",
		"-----BEGIN PRIVATE KEY-----\nSECRETXYZ123KEYBYTES\n-----END PRIVATE KEY-----\n",
	} {
		_, err := parseConfig([]string{"--config", writeConfig(t, content)}, nil, io.Discard)
		require.ErrorContains(t, err, "want a mapping of flag names to values (data-dir: /var/lib/floe), got a single value of")
		assert.NotContains(t, err.Error(), "SECRETXYZ123")
	}

	_, err := parseConfig([]string{"--config", filepath.Join(t.TempDir(), "missing.yaml")}, nil, io.Discard)
	assert.ErrorContains(t, err, "missing.yaml: no such file or directory")
	assert.Equal(t, 2, exitCode(err, io.Discard))

	// validate's error names where a file's value came from.
	path := writeConfig(t, "prefix: p\nauth: on\n")
	_, err = parseConfig([]string{"--config", path}, nil, io.Discard)
	assert.EqualError(t, err, "--auth=on needs --auth-root-token (FLOE_AUTH_ROOT_TOKEN) or --auth-oidc-issuer: otherwise nobody could ever be granted anything (set in config file "+path+": auth at line 2)")
	// Not when the value came from elsewhere.
	_, err = parseConfig([]string{"--config", path, "--auth=on"}, nil, io.Discard)
	assert.NotContains(t, err.Error(), "set in config file")
}

func TestConfigFileSecretsPermissionWarning(t *testing.T) {
	for _, tc := range []struct {
		name    string
		content string
		mode    os.FileMode
		warn    bool
	}{
		{"secret, world-readable", "auth: on\nauth-root-token: " + testRootToken + "\n", 0o644, true},
		{"secret, group-readable", "s3-access-key-id: AK\ns3-secret-access-key: SK\n", 0o640, true},
		{"secret, owner only", "auth: on\nauth-root-token: " + testRootToken + "\n", 0o600, false},
		{"no secret, world-readable", "prefix: p\ns3-secret-access-key: \"\"\n", 0o644, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeConfig(t, tc.content)
			require.NoError(t, os.Chmod(path, tc.mode))
			c, err := parseConfig([]string{"--config", path}, nil, io.Discard)
			require.NoError(t, err)
			var logs bytes.Buffer
			c.logNotices(newLogger(c, &logs))
			if !tc.warn {
				assert.Empty(t, logs.String())
				return
			}
			lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
			require.Len(t, lines, 1, "one warning line")
			assert.Contains(t, lines[0], "level=WARN")
			assert.Contains(t, lines[0], "readable by group or others")
			assert.Contains(t, lines[0], "file="+path)
			assert.Contains(t, lines[0], fmt.Sprintf("mode=%04o", tc.mode))
			assert.NotContains(t, lines[0], testRootToken)
			assert.NotContains(t, lines[0], "SK")
		})
	}
}

// TestExampleConfigFile: deploy/floe.yaml is a valid configuration.
func TestExampleConfigFile(t *testing.T) {
	path := filepath.Join("..", "..", "deploy", "floe.yaml")
	c, err := parseConfig([]string{"--config", path}, nil, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "node1", c.NodeID)
	assert.Equal(t, "0.0.0.0:8181", c.HTTPAddr)
	assert.Equal(t, "node1:8181", c.HTTPAdvertise, "derived from cluster-advertise")
	assert.Equal(t, []string{"node2:8182", "node3:8182"}, c.joinAddrs())
	assert.Equal(t, 3, c.BootstrapExpect)
	assert.Equal(t, "s3://lake/warehouse", c.Warehouse)
	assert.Empty(t, c.notices)
}

func TestHTTPAdvertise(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  []string
		want string
	}{
		{want: "127.0.0.1:8181"},
		{args: []string{"--http-addr=10.0.0.5:9000"}, want: "10.0.0.5:9000"},
		{args: []string{"--http-addr=localhost:9000"}, want: "localhost:9000"},
		{args: []string{"--http-addr=0.0.0.0:9000", "--cluster-addr=10.0.0.5:8182"}, want: "10.0.0.5:9000"},
		{args: []string{"--http-addr=:9000", "--cluster-addr=0.0.0.0:8182", "--cluster-advertise=node1:8182"}, want: "node1:9000"},
		{args: []string{"--http-addr=[::]:9000", "--cluster-addr=[fd00::5]:8182"}, want: "[fd00::5]:9000"},
		{args: []string{"--http-addr=0.0.0.0:9000", "--http-advertise=floe.example.com:443"}, want: "floe.example.com:443"},
		{args: []string{"--http-advertise=node1:8181"}, want: "node1:8181"},
		{env: []string{"FLOE_HTTP_ADDR=0.0.0.0:9000", "FLOE_HTTP_ADVERTISE=lb:80"}, want: "lb:80"},
	} {
		t.Run(strings.Join(append(tc.args, tc.env...), " "), func(t *testing.T) {
			c, err := parseConfig(tc.args, tc.env, io.Discard)
			require.NoError(t, err)
			assert.Equal(t, tc.want, c.HTTPAdvertise)
		})
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--http-advertise=nope"}, `--http-advertise "nope": want host:port`},
		{[]string{"--http-advertise=0.0.0.0:8181"}, "not a wildcard"},
		{[]string{"--http-advertise=:8181"}, "not a wildcard"},
		{[]string{"--http-advertise=node1:0"}, "not a wildcard"},
		{[]string{"--http-addr=0.0.0.0:9000", "--cluster-addr=0.0.0.0:8182", "--cluster-advertise=0.0.0.0:8182"}, "--http-addr \"0.0.0.0:9000\" listens on every interface: set --http-advertise"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, err := parseConfig(tc.args, nil, io.Discard)
			var ue usageError
			require.ErrorAs(t, err, &ue)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

// TestBinaryConfigFileErrorsExit2 runs the real binary with bad
// configuration files: exit code 2, the file, key and line on stderr.
func TestBinaryConfigFileErrorsExit2(t *testing.T) {
	bin := floeBinary(t)
	for _, tc := range []struct {
		name, content string
		viaEnv        bool
		want          string
	}{
		{name: "unknown key", content: "prefix: p\nhttp-adr: 127.0.0.1:1\n", want: ", line 2: http-adr: unknown key"},
		{name: "wrong type", content: "max-body-bytes: lots\n", viaEnv: true, want: `, line 1: max-body-bytes: want an integer, got the string "lots"`},
		{name: "bad value", content: "\n\nvend-duration: 1m\n", want: "--vend-duration must be between 15m0s and 12h0m0s, got 1m0s (set in config file "},
		{name: "syntax", content: "prefix: [\n", want: ": line 1: did not find expected node content"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeConfig(t, tc.content)
			args := []string{"--data-dir", t.TempDir()}
			env := cleanEnv()
			if tc.viaEnv {
				env = append(env, "FLOE_CONFIG="+path)
			} else {
				args = append(args, "--config", path)
			}
			cmd := exec.Command(bin, args...)
			cmd.Env = env
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee)
			assert.Equal(t, 2, ee.ExitCode())
			assert.Contains(t, stderr.String(), path)
			if strings.HasPrefix(tc.want, "--") {
				assert.Contains(t, stderr.String(), tc.want)
			} else {
				assert.Contains(t, stderr.String(), "config file "+path+tc.want)
			}
			assert.Contains(t, stderr.String(), "--help")
			assert.Empty(t, stdout.String())
		})
	}
}

// TestBinaryConfigFile runs the real binary from a configuration file that
// binds HTTP on every interface, advertises another address, and holds the
// root token while readable by others: the advertised address is what GET
// /management/v1/cluster shows, one line warns about the file, and the
// command line and the environment win over the file.
func TestBinaryConfigFile(t *testing.T) {
	bin := floeBinary(t)
	httpAddr, clusterAddr := freeAddr(t), freeAddr(t)
	_, httpPort, err := net.SplitHostPort(httpAddr)
	require.NoError(t, err)
	advertise := "floe-test.example:" + httpPort
	path := writeConfig(t, fmt.Sprintf(`
data-dir: %s
http-addr: 0.0.0.0:%s
http-advertise: %s
cluster-addr: 127.0.0.1:1
auth: on
auth-root-token: %s
log-level: debug
`, filepath.Join(t.TempDir(), "from-file"), httpPort, advertise, testRootToken))
	require.NoError(t, os.Chmod(path, 0o644))
	dataDir := filepath.Join(t.TempDir(), "data")

	cmd := exec.Command(bin, "--config", path, "--cluster-addr", clusterAddr)
	cmd.Env = append(cleanEnv(), "FLOE_DATA_DIR="+dataDir, "FLOE_LOG_LEVEL=info")
	var output testenv.LogBuffer
	cmd.Stdout, cmd.Stderr = &output, &output
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	defer func() {
		if t.Failed() {
			t.Logf("floe output:\n%s", output.String())
		}
	}()

	client := &http.Client{Timeout: 5 * time.Second}
	base := "http://" + httpAddr // 127.0.0.1: one of every interface
	var members []struct {
		ID          string `json:"id"`
		ClusterAddr string `json:"cluster-address"`
		HTTPAddr    string `json:"http-address"`
	}
	require.Eventually(t, func() bool {
		select {
		case <-exited:
			return true
		default:
		}
		req, _ := http.NewRequest(http.MethodGet, base+"/management/v1/cluster", nil)
		req.Header.Set("Authorization", "Bearer "+testRootToken)
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var st struct {
			Members json.RawMessage `json:"members"`
		}
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&st) != nil {
			return false
		}
		return json.Unmarshal(st.Members, &members) == nil && len(members) == 1
	}, 30*time.Second, 50*time.Millisecond, "GET /management/v1/cluster never answered")
	select {
	case <-exited:
		t.Fatal("floe exited early")
	default:
	}
	assert.Equal(t, advertise, members[0].HTTPAddr, "the advertised HTTP address is published")
	assert.Equal(t, clusterAddr, members[0].ClusterAddr, "the command line wins over the file")

	logs := output.String()
	assert.Equal(t, 1, strings.Count(logs, "readable by group or others"), "one warning about the file")
	assert.NotContains(t, logs, testRootToken)
	assert.NotContains(t, logs, "level=DEBUG", "the environment wins over the file")
	assert.Contains(t, logs, "http_advertise="+advertise)
	assert.FileExists(t, filepath.Join(dataDir, "raft.db"), "the environment wins over the file")
}

// TestSecretsOnCommandLineWarn: a secret given as a flag draws one warning
// naming the flag, never the secret; from the environment it draws none.
func TestSecretsOnCommandLineWarn(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		env   []string
		flags string
	}{
		{name: "root token flag", args: []string{"--auth=on", "--auth-root-token=" + testRootToken}, flags: "[auth-root-token]"},
		{name: "s3 secret flag", args: []string{"--s3-access-key-id=AK", "--s3-secret-access-key=SKSECRET"}, flags: "[s3-secret-access-key]"},
		{name: "warehouse secret flag", args: []string{`--warehouses={"w2":{"location":"file:///tmp/w2","s3-access-key-id":"AK","s3-secret-access-key":"SKSECRET"}}`}, flags: "[warehouses]"},
		{name: "environment", args: []string{"--auth=on"}, env: []string{"FLOE_AUTH_ROOT_TOKEN=" + testRootToken, "FLOE_S3_ACCESS_KEY_ID=AK", "FLOE_S3_SECRET_ACCESS_KEY=SKSECRET"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseConfig(tc.args, tc.env, io.Discard)
			require.NoError(t, err)
			var logs bytes.Buffer
			c.logNotices(newLogger(c, &logs))
			if tc.flags == "" {
				assert.Empty(t, logs.String())
				return
			}
			lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
			require.Len(t, lines, 1, "one warning line")
			assert.Contains(t, lines[0], "level=WARN")
			assert.Contains(t, lines[0], "secrets given on the command line")
			assert.Contains(t, lines[0], "flags="+tc.flags)
			assert.NotContains(t, lines[0], testRootToken)
			assert.NotContains(t, lines[0], "SKSECRET")
		})
	}
}

// TestMistypedCommand: a first word that is no command is named as such,
// with the commands there are; a stray word after flags is an argument.
func TestMistypedCommand(t *testing.T) {
	_, err := parseConfig([]string{"stauts"}, nil, io.Discard)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `unknown command "stauts"`)
	assert.Contains(t, err.Error(), "status")
	_, err = parseConfig([]string{"--data-dir", t.TempDir(), "extra"}, nil, io.Discard)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `unexpected argument "extra"`)
}

// TestUnknownEnvironmentWarned: a FLOE_* variable that is no setting's
// twin is named in a warning, with the setting it may have meant; the
// operator commands' variables and the settings' own are not.
func TestUnknownEnvironmentWarned(t *testing.T) {
	c, err := parseConfig(nil, []string{
		"FLOE_WAREHOSE=s3://lake/w", "FLOE_LOG_LEVEL=info", "FLOE_NODE=127.0.0.1:8181",
		"FLOE_TOKEN=x", "FLOE_SOMETHING_ELSE_ENTIRELY=1", "OTHER_WAREHOSE=1",
	}, io.Discard)
	require.NoError(t, err)
	var logs bytes.Buffer
	c.logNotices(newLogger(c, &logs))
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	require.Len(t, lines, 2, logs.String())
	assert.Contains(t, lines[0], "variable=FLOE_SOMETHING_ELSE_ENTIRELY")
	assert.NotContains(t, lines[0], "did_you_mean")
	assert.Contains(t, lines[1], "variable=FLOE_WAREHOSE")
	assert.Contains(t, lines[1], "did_you_mean=FLOE_WAREHOUSE")
	assert.Contains(t, lines[1], "level=WARN")
}

// TestClusterInsecure: with --auth=on, a cluster port on loopback or
// behind mutual TLS needs nothing more; elsewhere --cluster-insecure lets
// the node start, with a warning that says what it means.
func TestClusterInsecure(t *testing.T) {
	base := []string{"--auth=on"}
	env := []string{"FLOE_AUTH_ROOT_TOKEN=" + testRootToken}
	for _, addr := range []string{"127.0.0.1:8182", "[::1]:8182", "localhost:8182"} {
		c, err := parseConfig(append(base, "--cluster-addr="+addr), env, io.Discard)
		require.NoError(t, err, addr)
		assert.Empty(t, c.notices, addr)
	}
	c, err := parseConfig(append(base, "--cluster-addr=0.0.0.0:8182", "--cluster-advertise=10.1.2.3:8182", "--cluster-insecure"), env, io.Discard)
	require.NoError(t, err)
	var logs bytes.Buffer
	c.logNotices(newLogger(c, &logs))
	assert.Contains(t, logs.String(), "without mutual TLS")
	assert.Contains(t, logs.String(), "level=WARN")
	_, err = parseConfig([]string{"--cluster-addr=0.0.0.0:8182", "--cluster-advertise=10.1.2.3:8182"}, nil, io.Discard)
	assert.NoError(t, err, "without authentication the cluster port guards nothing the client API does not give away")
}
