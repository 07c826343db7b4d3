package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var updateDocs = flag.Bool("update", false, "rewrite docs/configuration.md from the flag set")

const (
	configDocPath     = "../../docs/configuration.md"
	exampleConfigPath = "../../deploy/floe.yaml"
)

// TestConfigurationDocInStep renders docs/configuration.md from the flag set
// (newFlagSet) and the example file deploy/floe.yaml, and fails when the
// page differs. Regenerate it with
//
//	go test ./cmd/node -run TestConfigurationDocInStep -update
//
// or FLOE_UPDATE_DOCS=1 in the environment.
func TestConfigurationDocInStep(t *testing.T) {
	want := renderConfigDoc(t)
	if *updateDocs || os.Getenv("FLOE_UPDATE_DOCS") == "1" {
		require.NoError(t, os.WriteFile(configDocPath, []byte(want), 0o644))
		t.Logf("wrote %s", filepath.Clean(configDocPath))
		return
	}
	got, err := os.ReadFile(configDocPath)
	require.NoError(t, err)
	if string(got) != want {
		gotLines, wantLines := strings.Split(string(got), "\n"), strings.Split(want, "\n")
		line := 0
		for line < len(gotLines) && line < len(wantLines) && gotLines[line] == wantLines[line] {
			line++
		}
		at := func(lines []string) string {
			if line < len(lines) {
				return lines[line]
			}
			return "(end of file)"
		}
		t.Fatalf("docs/configuration.md is not in step with the flags of cmd/node/config.go or deploy/floe.yaml;\n"+
			"regenerate it: go test ./cmd/node -run TestConfigurationDocInStep -update (or FLOE_UPDATE_DOCS=1)\n"+
			"first difference at line %d:\n  have: %s\n  want: %s", line+1, at(gotLines), at(wantLines))
	}
}

// defaultNoteRE is the "(default: ...)" that ends the usage of a flag whose
// default depends on others.
var defaultNoteRE = regexp.MustCompile(`\s*\(default: ([^()]*)\)$`)

// mdCodeRE finds flag and environment variable names to set as code.
var mdCodeRE = regexp.MustCompile(`--[a-z0-9][a-z0-9-]*(=[a-z0-9-]+)?|\bFLOE_[A-Z0-9_]+\b`)

// mdText makes usage text safe in a Markdown table cell.
func mdText(s string) string {
	s = strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;").Replace(s)
	return mdCodeRE.ReplaceAllString(s, "`$0`")
}

// flagType names a flag's value type for the page.
func flagType(f *flag.Flag) string {
	switch v := f.Value.(flag.Getter).Get().(type) {
	case bool:
		return "boolean"
	case int, int64, uint, uint64:
		return "integer"
	case time.Duration:
		return "duration"
	case string:
		if f.Name == "join" || f.Name == "allowed-locations" {
			return "string or list"
		}
		if f.Name == warehousesFlag {
			return "string or mapping"
		}
		return "string"
	default:
		return fmt.Sprintf("%T", v)
	}
}

// renderConfigDoc renders docs/configuration.md.
func renderConfigDoc(t *testing.T) string {
	t.Helper()
	example, err := os.ReadFile(exampleConfigPath)
	require.NoError(t, err)
	var b strings.Builder
	b.WriteString(configDocHead)
	fmt.Fprintf(&b, "```yaml\n%s```\n", example)
	b.WriteString(configDocMiddle)
	b.WriteString("| key / flag | environment | type | default | description |\n")
	b.WriteString("| --- | --- | --- | --- | --- |\n")
	var c config
	newFlagSet(&c).VisitAll(func(f *flag.Flag) {
		_, usage := flag.UnquoteUsage(f)
		def := "none"
		if f.DefValue != "" {
			def = "`" + f.DefValue + "`"
		} else if m := defaultNoteRE.FindStringSubmatch(usage); m != nil {
			def = mdText(m[1])
			usage = usage[:len(usage)-len(m[0])]
		}
		key := "`" + f.Name + "`"
		if f.Name == configFlag {
			key += " (not in the file)"
		}
		fmt.Fprintf(&b, "| %s | `%s` | %s | %s | %s |\n", key, envName(f.Name), flagType(f), def, mdText(usage))
	})
	return b.String()
}

const configDocHead = `# Configuration reference

<!-- Generated from the flags in cmd/node/config.go and deploy/floe.yaml by
     go test ./cmd/node -run TestConfigurationDocInStep -update
     (or FLOE_UPDATE_DOCS=1). Edit those, not this page. -->

A floe node reads its settings from three places: flags on the command
line, ` + "`FLOE_*`" + ` environment variables, and an optional YAML configuration
file. Every setting can be given in each of them under the same name:
` + "`--data-dir`" + ` on the command line is ` + "`FLOE_DATA_DIR`" + ` in the environment and
` + "`data-dir`" + ` in the file. ` + "`floe --help`" + ` prints the same list as the table below.
A ` + "`FLOE_*`" + ` variable that names no setting is ignored with a warning at start
that names it and the setting it may have meant (` + "`FLOE_NODE`" + ` and
` + "`FLOE_TOKEN`" + `, read by the operator commands, are not warned of).

## Precedence

For each setting, the first of these that sets it wins:

1. the command line (` + "`--http-addr 0.0.0.0:8181`" + `);
2. the environment (` + "`FLOE_HTTP_ADDR=0.0.0.0:8181`" + `; set but empty counts as set);
3. the configuration file (` + "`http-addr: 0.0.0.0:8181`" + `);
4. the default.

So a file can hold what every node shares, and each node's command line
or environment what differs (its ` + "`--node-id`" + `, say). Settings whose default
depends on others (` + "`--warehouse`" + `, ` + "`--node-id`" + `, ` + "`--http-advertise`" + `) are worked out
after all four are merged.

## The configuration file

` + "`--config FILE`" + ` (or ` + "`FLOE_CONFIG=FILE`" + `; the command line wins) names the file.
It cannot itself be set in the file. A relative path, in the file as on the
command line, is relative to the node's working directory.

The file is YAML: one flat mapping from keys, the flag names without the
dashes, to values. YAML because the module already depends on a YAML
library whose node tree carries the line of every key and value (so errors
name the line, not only syntax errors), because floe's deployments
(Kubernetes ConfigMaps, Compose) are YAML already, and because its YAML 1.2
core schema reads ` + "`yes`" + `, ` + "`no`" + `, ` + "`on`" + ` and ` + "`off`" + ` as strings (` + "`auth: on`" + ` means what
it says).

Values by type (the type column below):

- **string**: any scalar, quoted when YAML would read it otherwise
  (` + "`prefix: \"123\"`" + ` and ` + "`prefix: 123`" + ` are the same; ` + "`warehouse: \"\"`" + ` is empty;
  ` + "`warehouse:`" + ` with no value is an error). ` + "`join`" + ` and ` + "`allowed-locations`" + ` also
  take a YAML list (` + "`join: [node2:8182, node3:8182]`" + `), joined with commas.
- **integer**: an unquoted integer (` + "`max-body-bytes: 8388608`" + `).
- **boolean**: ` + "`true`" + ` or ` + "`false`" + `, unquoted.
- **duration**: a Go duration (` + "`30s`" + `, ` + "`2m`" + `, ` + "`1h30m`" + `) or ` + "`0`" + `.

Each value is then parsed and checked exactly like the same value on the
command line. An unknown key, a repeated key, a nested mapping, a value of
the wrong type or a value floe refuses stops the node before it starts, with
exit code 2 and a message naming the file, the line and the key:

` + "```" + `
floe: config file /etc/floe/floe.yaml, line 7: max-body-bytes: want an integer, got the string "8MB"
Run 'floe --help' for the flags.
` + "```" + `

Every key in the file is checked, even one that the environment or the
command line overrides. A value that is only refused once all settings are
merged (` + "`--auth=on`" + ` without a root token or an OIDC issuer, say) says which
keys of the file it came from.

### Secrets

` + "`s3-secret-access-key`" + ` and ` + "`auth-root-token`" + ` may be set in the file. A node
whose file holds either, and may be read by its group or by others, logs one
warning at start naming the file, its mode and the secret keys (never their
values): make the file readable by its owner only (` + "`chmod 600`" + `), the user
floe runs as. Secrets are never logged, wherever they come from. Where a
file must be shared, keep the secrets in the environment instead.

### Example

This is ` + "`deploy/floe.yaml`" + `:

`

const configDocMiddle = `
## The HTTP address published to the cluster

Each node publishes the address clients and other nodes reach its HTTP API
at: it is the ` + "`http-address`" + ` of each member in
` + "`GET /management/v1/cluster`" + `. It is ` + "`--http-advertise`" + ` when set, else
` + "`--http-addr`" + `. A node listening on every interface (` + "`--http-addr 0.0.0.0:8181`" + `,
` + "`:8181`" + ` or ` + "`[::]:8181`" + `) has no address to publish, so floe pairs the port of
` + "`--http-addr`" + ` with the host other nodes already reach it by: that of
` + "`--cluster-advertise`" + `, else of ` + "`--cluster-addr`" + `. In the Compose file and the
Kubernetes StatefulSet that is the node's stable DNS name (` + "`node1:8181`" + `).
Behind a port mapping, a load balancer or a proxy, set ` + "`--http-advertise`" + `.
An ` + "`--http-advertise`" + ` without a host or port, or on a wildcard address, is
refused.

## Settings

The key is the flag's name: ` + "`data-dir`" + ` in the file is ` + "`--data-dir`" + ` on the
command line.

`
