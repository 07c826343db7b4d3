package main

// The configuration file (--config, FLOE_CONFIG).
//
// It is YAML, one flat mapping whose keys are the flag names:
//
//	data-dir: /var/lib/floe
//	http-addr: 0.0.0.0:8181
//	join: [node1:8182, node2:8182]
//
// YAML rather than TOML because:
//   - go.yaml.in/yaml/v3 is already a dependency of the module, where TOML
//     would add one;
//   - its node tree gives the line of every key and value, so an unknown key
//     or a bad value is reported at its line, not only syntax errors;
//   - the deployments floe ships for (Kubernetes ConfigMaps, Compose) are
//     YAML already;
//   - yaml/v3 follows YAML 1.2's core schema, where yes, no, on and off are
//     strings: "auth: on" means what it says.
//
// Each value is checked against its flag's type (true or false for a
// switch, an integer for a count, a string or 0 for a duration, any scalar
// for a string, a list too for --join and --allowed-locations) and then
// parsed by the flag itself, exactly like a command-line value.

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// configFlag names the configuration file; it cannot be set in the file.
const configFlag = "config"

// secretFlags are the settings a configuration file's permissions matter for.
var secretFlags = []string{"s3-secret-access-key", "auth-root-token"}

// listFlags take comma-separated lists; in a file they may also be YAML lists.
var listFlags = []string{"join", "allowed-locations"}

// fileSetting is one key of a configuration file, its value as a flag
// value.
type fileSetting struct {
	name  string
	value string
	line  int
}

// configFile is a configuration file read and checked by readConfigFile.
type configFile struct {
	path     string
	perm     os.FileMode
	settings []fileSetting // in the file's order
	// applied holds the settings that took effect: neither the command
	// line nor the environment set their flag.
	applied map[string]fileSetting
}

// notice is a warning found while reading the configuration.
type notice struct {
	msg   string
	attrs []any
}

// logNotices logs the warnings parseConfig found.
func (c config) logNotices(logger *slog.Logger) {
	for _, n := range c.notices {
		logger.Warn(n.msg, n.attrs...)
	}
}

// readConfigFile reads the configuration file at path and checks every key
// and value against the flag set: an unknown key, a repeated one, a value
// of the wrong type or one its flag refuses is a usageError naming the file,
// the key and its line.
// maxConfigFileBytes bounds a config file: a few hundred settings fit in
// a few KiB.
const maxConfigFileBytes = 1 << 20

func readConfigFile(path string) (*configFile, error) {
	// Read up to a bound: --config /dev/zero (or a log file given by
	// mistake) was read until memory ran out. A pipe works
	// (--config <(envsubst < floe.yaml)).
	st, err := os.Stat(path)
	if err != nil {
		return nil, usagef("--config: %v", err)
	}
	if st.IsDir() {
		return nil, usagef("--config %s: is a directory", path)
	}
	fh, err := os.Open(path)
	if err != nil {
		return nil, usagef("--config: %v", err)
	}
	raw, err := io.ReadAll(io.LimitReader(fh, maxConfigFileBytes+1))
	fh.Close()
	if err != nil {
		return nil, usagef("--config: %v", err)
	}
	if len(raw) > maxConfigFileBytes {
		return nil, usagef("--config %s: more than %d bytes; a config file holds at most that", path, maxConfigFileBytes)
	}
	f := &configFile{path: path, perm: st.Mode().Perm(), applied: map[string]fileSetting{}}

	dec := yaml.NewDecoder(bytes.NewReader(raw))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return f, nil // empty
		}
		return nil, f.syntaxError(err)
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, f.syntaxError(err)
		}
		return nil, usagef("config file %s, line %d: a second YAML document; want a single mapping of flag names to values", path, next.Line)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return f, nil // comments only
		}
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
		return f, nil
	}
	if root.Kind != yaml.MappingNode {
		// Not the value itself: a file given by mistake (an environment
		// file, a private key) is often all secrets.
		return nil, usagef("config file %s, line %d: want a mapping of flag names to values (data-dir: /var/lib/floe), got %s", path, root.Line, describeKind(root))
	}

	var scratch config
	check := newFlagSet(&scratch)
	seen := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if v.Kind == yaml.AliasNode && v.Alias != nil {
			v = v.Alias
		}
		s := fileSetting{name: k.Value, line: k.Line}
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
			return nil, usagef("config file %s, line %d: key %s: want a flag name", path, k.Line, describe(k))
		}
		if s.name == configFlag {
			return nil, f.errorf(s, "the configuration file cannot name another one; --config goes on the command line or in %s", envName(configFlag))
		}
		fl := check.Lookup(s.name)
		if fl == nil {
			return nil, f.errorf(s, "unknown key%s", unknownKeyHint(check, s.name))
		}
		if first, ok := seen[s.name]; ok {
			return nil, f.errorf(s, "repeated key (first at line %d)", first)
		}
		seen[s.name] = s.line
		if s.value, err = flagText(fl, v); err != nil {
			return nil, f.errorf(s, "%v", err)
		}
		if err := check.Set(s.name, s.value); err != nil {
			if _, isDuration := fl.Value.(flag.Getter).Get().(time.Duration); isDuration {
				_, err = time.ParseDuration(s.value) // says why, where the flag says "parse error"
			}
			return nil, f.errorf(s, "invalid value %q: %v", s.value, unwrapParse(err))
		}
		f.settings = append(f.settings, s)
	}
	return f, nil
}

func (f *configFile) syntaxError(err error) error {
	return usagef("config file %s: %s", f.path, strings.TrimPrefix(err.Error(), "yaml: "))
}

// errorf is a usageError about one setting: file, line and key first.
func (f *configFile) errorf(s fileSetting, format string, args ...any) error {
	return usagef("config file %s, line %d: %s: %s", f.path, s.line, s.name, fmt.Sprintf(format, args...))
}

// unknownKeyHint suggests the flag a misspelt key may have meant: with
// dashes instead of underscores, without leading dashes, or the flag an
// environment variable name stands for.
func unknownKeyHint(fs *flag.FlagSet, key string) string {
	for _, guess := range []string{
		strings.TrimLeft(key, "-"),
		strings.ReplaceAll(key, "_", "-"),
		strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(key, "FLOE_"), "_", "-")),
	} {
		if guess != key && guess != configFlag && fs.Lookup(guess) != nil {
			return fmt.Sprintf(": did you mean %s? (keys are the flag names)", guess)
		}
	}
	return " (the keys are the flag names of floe --help, without the dashes)"
}

// flagText turns a YAML value into the text the flag fl parses, refusing
// values of the wrong YAML type: quoted numbers for a count, yes or 1 for a
// switch, a mapping anywhere (the file is flat).
func flagText(fl *flag.Flag, v *yaml.Node) (string, error) {
	tag := v.ShortTag()
	if v.Kind == yaml.ScalarNode && tag == "!!null" {
		return "", errors.New(`no value (write "" for an empty string, or leave the key out for the default)`)
	}
	var val any
	if g, ok := fl.Value.(flag.Getter); ok {
		val = g.Get()
	}
	if fl.Name == warehousesFlag && v.Kind == yaml.MappingNode {
		return warehousesText(v)
	}
	if _, ok := val.(string); ok && v.Kind == yaml.SequenceNode && slices.Contains(listFlags, fl.Name) {
		items := make([]string, 0, len(v.Content))
		for _, item := range v.Content {
			if item.Kind == yaml.AliasNode && item.Alias != nil {
				item = item.Alias
			}
			if item.Kind != yaml.ScalarNode || item.ShortTag() == "!!null" {
				return "", fmt.Errorf("want a list of strings, got %s in it (line %d)", describe(item), item.Line)
			}
			items = append(items, item.Value)
		}
		return strings.Join(items, ","), nil
	}
	if v.Kind != yaml.ScalarNode {
		return "", fmt.Errorf("want a single value, got %s (the file is flat: one key per flag)", describe(v))
	}
	var want string
	switch val.(type) {
	case bool:
		if tag != "!!bool" {
			want = "true or false"
		}
	case int, int64, uint, uint64:
		if tag != "!!int" {
			want = "an integer"
		}
	case float64:
		if tag != "!!int" && tag != "!!float" {
			want = "a number"
		}
	case time.Duration:
		if tag != "!!str" && tag != "!!int" {
			want = "a duration such as 30s, 2m or 1h30m"
		}
	}
	if want != "" {
		return "", fmt.Errorf("want %s, got %s", want, describe(v))
	}
	return v.Value, nil
}

// describeKind names a YAML value's kind and size, never its content.
func describeKind(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode {
		return fmt.Sprintf("a single value of %d bytes (its content is not shown)", len(n.Value))
	}
	return describe(n)
}

// describe names a YAML value for an error message.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.DocumentNode:
		return "a document"
	}
	switch n.ShortTag() {
	case "!!null":
		return "no value"
	case "!!str":
		return fmt.Sprintf("the string %q", n.Value)
	case "!!int":
		return "the integer " + n.Value
	case "!!float":
		return "the number " + n.Value
	case "!!bool":
		return "the boolean " + n.Value
	case "!!timestamp":
		return "the timestamp " + n.Value
	}
	return fmt.Sprintf("%s %q", n.ShortTag(), n.Value)
}

// notices warns once when the file holds a secret and others than its owner
// may read it.
func (f *configFile) notices() []notice {
	var secrets []string
	for _, s := range f.settings {
		if (slices.Contains(secretFlags, s.name) && s.value != "") || (s.name == warehousesFlag && strings.Contains(s.value, `"s3-secret-access-key"`)) {
			secrets = append(secrets, s.name)
		}
	}
	if len(secrets) == 0 || f.perm&0o044 == 0 || runtime.GOOS == "windows" {
		return nil
	}
	return []notice{{
		msg:   "configuration file holds secrets but is readable by group or others: make it readable by its owner only (chmod 600)",
		attrs: []any{"file", f.path, "mode", fmt.Sprintf("%04o", f.perm), "secrets", secrets},
	}}
}

var flagMentionRE = regexp.MustCompile(`--([a-z0-9][a-z0-9-]*)`)

// annotate adds to an error of validate where the values of the flags it
// names came from, when that was the configuration file: the key and its
// line. f may be nil (no file).
func (f *configFile) annotate(err error) error {
	if f == nil || len(f.applied) == 0 {
		return err
	}
	var from []string
	for _, m := range flagMentionRE.FindAllStringSubmatch(err.Error(), -1) {
		s, ok := f.applied[m[1]]
		if where := fmt.Sprintf("%s at line %d", s.name, s.line); ok && !slices.Contains(from, where) {
			from = append(from, where)
		}
	}
	if len(from) == 0 {
		return err
	}
	return usageError{fmt.Errorf("%w (set in config file %s: %s)", err, f.path, strings.Join(from, ", "))}
}
