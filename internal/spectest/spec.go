package spectest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"go.yaml.in/yaml/v3"
)

// SpecEnv names the environment variable that overrides the spec location.
const SpecEnv = "FLOE_SPEC"

// RequireEnv set to "1" makes a missing spec a test failure instead of a
// skip (CI sets it; a fresh clone with nothing beside it does not).
const RequireEnv = "FLOE_REQUIRE_SPEC"

// Required reports whether a missing spec must fail the tests.
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// MissingHint is the one line a test prints when it runs without the spec.
const MissingHint = "the Iceberg REST spec (rest-catalog-open-api.yaml) was not found: run `make spec` to download it, " +
	"or set FLOE_SPEC to its path, or put it at ../shared/spec/ beside the repository"

// The spec revision floe is checked against, and the file's digest: what
// `make spec` (.ci/fetch-spec.sh) downloads into CachedSpecPath.
const (
	PinnedRevision = "0e7a36d48ff83792bfeb72eaff2dd2d7fae60eb3"
	PinnedSHA256   = "9a160d49002a14e559ab4dcb5be9953b8880ca1544cf9773f05b1a720c3b35b7"
)

// CachedSpecPath is where `make spec` puts the pinned spec:
// $FLOE_TOOLS/spec/, default $HOME/.cache/floe-tools/spec/.
func CachedSpecPath() string {
	tools := os.Getenv("FLOE_TOOLS")
	if tools == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		tools = filepath.Join(home, ".cache", "floe-tools")
	}
	return filepath.Join(tools, "spec", "rest-catalog-open-api-"+PinnedRevision+".yaml")
}

// checkDigest reports whether the file at p is the pinned spec.
func checkDigest(p string) error {
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != PinnedSHA256 {
		return fmt.Errorf("spectest: %s has SHA-256 %s, not the pinned spec's %s; delete it and run make spec", p, got, PinnedSHA256)
	}
	return nil
}

// specRel is the location of the spec relative to the repository root.
var specRel = filepath.Join("..", "shared", "spec", "rest-catalog-open-api.yaml")

// SpecPath returns the absolute path of the Iceberg REST OpenAPI spec.
//
// If FLOE_SPEC is set, it names the spec (relative paths are resolved against
// the working directory). Otherwise SpecPath walks up from the working
// directory to the first directory that holds a go.mod and has
// ../shared/spec/rest-catalog-open-api.yaml next to it, and failing that
// uses CachedSpecPath when `make spec` has filled it (its digest must be
// the pinned one).
func SpecPath() (string, error) {
	if p := os.Getenv(SpecEnv); p != "" {
		abs, err := filepath.Abs(p)
		if err != nil {
			return "", fmt.Errorf("spectest: %s=%q: %w", SpecEnv, p, err)
		}
		if _, err := os.Stat(abs); err != nil {
			return "", fmt.Errorf("spectest: %s=%q: %w", SpecEnv, p, err)
		}
		return abs, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("spectest: %w", err)
	}
	for dir := wd; ; {
		if isFile(filepath.Join(dir, "go.mod")) {
			if spec := filepath.Join(dir, specRel); isFile(spec) {
				return filepath.Clean(spec), nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	if cached := CachedSpecPath(); cached != "" && isFile(cached) {
		if err := checkDigest(cached); err != nil {
			return "", err
		}
		return cached, nil
	}
	return "", fmt.Errorf("spectest: no module root with %s found above %s (set %s to the spec file)", specRel, wd, SpecEnv)
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

var (
	loadOnce sync.Once
	loaded   *Validator
	errLoad  error
)

// Load returns the Validator for the spec found by SpecPath. The spec is
// loaded once per process (loading and validating it is slow); later calls
// return the same Validator, or the same error.
func Load() (*Validator, error) {
	loadOnce.Do(func() {
		var path string
		if path, errLoad = SpecPath(); errLoad == nil {
			loaded, errLoad = LoadFile(path)
		}
	})
	return loaded, errLoad
}

// LoadFile loads, validates and indexes the spec at path. Unlike Load it
// does not cache the result.
//
// Relaxations, in order of application (see the package documentation):
// response header references to parameter objects are rewritten to header
// objects, "nullable: true" becomes a "null" type, the servers are dropped,
// and if strict validation of the document fails it is validated again
// without example validation.
func LoadFile(path string) (*Validator, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("spectest: %w", err)
	}
	data, relaxed, err := relaxSpec(raw)
	if err != nil {
		return nil, fmt.Errorf("spectest: %s: %w", path, err)
	}

	loader := openapi3.NewLoader()
	// The Iceberg spec is self-contained today; allow relative file refs
	// anyway so a split-up copy of the spec keeps working.
	loader.IsExternalRefsAllowed = true
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("spectest: %w", err)
	}
	doc, err := loader.LoadFromDataWithPath(data, &url.URL{Path: filepath.ToSlash(abs)})
	if err != nil {
		return nil, fmt.Errorf("spectest: load %s: %w", path, err)
	}

	// Routing is by path only: the servers of the spec describe a
	// "{scheme}://{host}/{basePath}" template whose basePath default is "",
	// which kin-openapi rejects as a missing default, and a host matcher would
	// not match httptest servers on 127.0.0.1 anyway.
	if len(doc.Servers) > 0 {
		doc.Servers = nil
		relaxed = append(relaxed, "servers dropped: routing matches the request path on any host")
	}

	ctx := context.Background()
	if strictErr := doc.Validate(ctx); strictErr != nil {
		if err := doc.Validate(ctx, openapi3.DisableExamplesValidation()); err != nil {
			return nil, fmt.Errorf("spectest: invalid spec %s: %w", path, err)
		}
		relaxed = append(relaxed, "example validation disabled; strict validation failed with: "+firstLine(strictErr.Error()))
	}

	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("spectest: router for %s: %w", path, err)
	}
	return &Validator{path: abs, doc: doc, router: router, relaxed: relaxed}, nil
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}

// relaxSpec works around quirks of the Iceberg spec at the YAML level, so
// that kin-openapi loads it and validates responses as the spec intends. It
// returns the rewritten document and a description of each relaxation.
func relaxSpec(raw []byte) ([]byte, []string, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(raw, &root); err != nil {
		return nil, nil, err
	}
	if root.Kind != yaml.DocumentNode || len(root.Content) != 1 || root.Content[0].Kind != yaml.MappingNode {
		return nil, nil, errors.New("not a single YAML mapping document")
	}
	docNode := root.Content[0]

	var relaxed []string
	headerRelaxed, err := rewriteHeaderRefs(docNode)
	if err != nil {
		return nil, nil, err
	}
	relaxed = append(relaxed, headerRelaxed...)
	relaxed = append(relaxed, rewriteNullable(docNode)...)
	if len(relaxed) == 0 {
		return raw, nil, nil
	}

	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	if err := enc.Encode(&root); err != nil {
		return nil, nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, nil, err
	}
	return buf.Bytes(), relaxed, nil
}

// rewriteHeaderRefs rewrites "$ref: '#/components/parameters/X'" entries of
// response "headers" maps to "#/components/headers/X", adding a header
// object X (the parameter without name and in) to components.headers.
// kin-openapi refuses to load a header reference that does not point to a
// header object, and the Iceberg spec references the etag parameter from the
// headers of several responses.
func rewriteHeaderRefs(docNode *yaml.Node) ([]string, error) {
	components := mapValue(docNode, "components")
	params := mapValue(components, "parameters")
	if params == nil {
		return nil, nil
	}

	const paramPrefix = "#/components/parameters/"
	var refs []*yaml.Node
	walk(docNode, func(key string, n *yaml.Node) {
		if key != "headers" || n.Kind != yaml.MappingNode {
			return
		}
		for i := 1; i < len(n.Content); i += 2 {
			if ref := mapValue(n.Content[i], "$ref"); ref != nil && ref.Kind == yaml.ScalarNode && strings.HasPrefix(ref.Value, paramPrefix) {
				refs = append(refs, ref)
			}
		}
	})
	if len(refs) == 0 {
		return nil, nil
	}

	headers := mapValue(components, "headers")
	if headers == nil {
		headers = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		components.Content = append(components.Content, scalar("headers"), headers)
	}
	var relaxed []string
	seen := map[string]bool{}
	for _, ref := range refs {
		name := strings.TrimPrefix(ref.Value, paramPrefix)
		param := mapValue(params, name)
		if param == nil || param.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("header reference %s: no such parameter", ref.Value)
		}
		if mapValue(headers, name) == nil {
			header := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			for i := 0; i+1 < len(param.Content); i += 2 {
				switch param.Content[i].Value {
				case "name", "in", "allowEmptyValue":
					continue
				}
				header.Content = append(header.Content, param.Content[i], param.Content[i+1])
			}
			headers.Content = append(headers.Content, scalar(name), header)
		}
		ref.Value = "#/components/headers/" + name
		if !seen[name] {
			seen[name] = true
			relaxed = append(relaxed, fmt.Sprintf("response header $ref %s%s rewritten to #/components/headers/%s", paramPrefix, name, name))
		}
	}
	return relaxed, nil
}

// rewriteNullable turns the OpenAPI 3.0 keyword "nullable: true", which the
// Iceberg spec still uses although it declares OpenAPI 3.1 (where JSON
// Schema 2020-12 ignores it), into the 3.1 form: "null" is added to the
// schema's type. Without this, responses that the spec explicitly allows to
// carry null (next-page-token on the last page, metadata-location of a
// staged table, properties of a namespace without property support) would
// be rejected. "nullable: false" is dropped as a no-op.
func rewriteNullable(docNode *yaml.Node) []string {
	var changed, unsupported int
	visit := func(n *yaml.Node) {
		if n.Kind != yaml.MappingNode {
			return
		}
		idx := -1
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k, v := n.Content[i], n.Content[i+1]; k.Value == "nullable" && v.Kind == yaml.ScalarNode && (v.Value == "true" || v.Value == "false") {
				idx = i
				break
			}
		}
		if idx < 0 {
			return
		}
		nullable := n.Content[idx+1].Value == "true"
		typ := mapValue(n, "type")
		switch {
		case !nullable:
		case typ != nil && typ.Kind == yaml.ScalarNode:
			*typ = yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Style: yaml.FlowStyle,
				Content: []*yaml.Node{scalar(typ.Value), scalar("null")}}
			changed++
		case typ != nil && typ.Kind == yaml.SequenceNode:
			if !slices.ContainsFunc(typ.Content, func(c *yaml.Node) bool { return c.Value == "null" }) {
				typ.Content = append(typ.Content, scalar("null"))
			}
			changed++
		default:
			// No type to extend (e.g. a $ref sibling): leave it alone.
			unsupported++
			return
		}
		n.Content = slices.Delete(n.Content, idx, idx+2)
	}
	visit(docNode)
	walk(docNode, func(_ string, n *yaml.Node) { visit(n) })
	if changed == 0 && unsupported == 0 {
		return nil
	}
	msg := fmt.Sprintf("OpenAPI 3.0 'nullable: true' turned into a \"null\" type on %d schemas", changed)
	if unsupported > 0 {
		msg += fmt.Sprintf(" (%d without a type left as they were)", unsupported)
	}
	return []string{msg}
}

func scalar(v string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v}
}

// mapValue returns the value of key in the mapping node n, or nil.
func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// walk calls fn for every value of every mapping below n, with its key.
func walk(n *yaml.Node, fn func(key string, n *yaml.Node)) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			fn(n.Content[i].Value, n.Content[i+1])
			walk(n.Content[i+1], fn)
		}
	case yaml.SequenceNode, yaml.DocumentNode:
		for _, c := range n.Content {
			walk(c, fn)
		}
	}
}

// routeErr describes a router error for messages.
func routeErr(err error) string {
	switch {
	case errors.Is(err, routers.ErrMethodNotAllowed):
		return "method not allowed"
	case errors.Is(err, routers.ErrPathNotFound):
		return "path not found"
	}
	return err.Error()
}
