package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agnivade/levenshtein"
	"github.com/floe-catalog/floe/catalog"
	"github.com/floe-catalog/floe/idempotency"
	"github.com/floe-catalog/floe/internal/auth"
	"github.com/floe-catalog/floe/internal/httpserve"
	"github.com/floe-catalog/floe/internal/raftnode"
	"github.com/floe-catalog/floe/internal/storage"
	"github.com/floe-catalog/floe/internal/vending"
	"github.com/floe-catalog/floe/purge"
	"github.com/floe-catalog/floe/transport"
)

// config is the node's effective configuration.
type config struct {
	// Config is the configuration file (--config), "" for none.
	Config   string
	NodeID   string
	DataDir  string
	HTTPAddr string
	// HTTPAdvertise is --http-advertise; validate fills it in when unset
	// (see httpAdvertise).
	HTTPAdvertise    string
	ClusterAddr      string
	Warehouse        string
	AllowedLocations string
	// Warehouses is --warehouses; validate parses it into warehouses.
	Warehouses           string
	warehouses           []warehouseSpec
	S3Endpoint           string
	S3Region             string
	S3AccessKeyID        string
	S3SecretAccessKey    string
	S3PathStyle          bool
	LogLevel             string
	LogFormat            string
	Prefix               string
	MaxBodyBytes         int64
	MetadataCacheBytes   int64
	Join                 string
	ClusterAdvertise     string
	BootstrapExpect      int
	RejoinAsNonvoter     bool
	TLSCert              string
	TLSKey               string
	TLSCA                string
	ClusterInsecure      bool
	SnapshotThreshold    uint64
	SnapshotInterval     time.Duration
	RaftHeartbeatTimeout time.Duration

	// The client HTTP server (package httpserve).
	HTTPTLSCert           string
	HTTPTLSKey            string
	HTTPMaxHeaderBytes    int
	HTTPReadHeaderTimeout time.Duration
	HTTPReadTimeout       time.Duration
	HTTPWriteTimeout      time.Duration
	HTTPWriteStall        time.Duration
	HTTPIdleTimeout       time.Duration
	HTTPMaxInFlight       int

	// Authentication, authorization and audit (package auth).
	Auth                   string
	AuthRootToken          string
	AuthAudience           string
	AuthTokenTTL           time.Duration
	AuthMaxTokenTTL        time.Duration
	AuthKeyRotation        time.Duration
	AuthOIDCIssuer         string
	AuthOIDCAudience       string
	AuthOIDCJWKSURL        string
	AuthOIDCPrincipalClaim string
	AuthOIDCRolesClaim     string
	AuditLog               string

	// Credential vending (package vending).
	VendCredentials string
	VendSTSEndpoint string
	VendRoleARN     string
	VendExternalID  string
	VendDuration    time.Duration

	// Purge jobs (package purge).
	PurgeWorkerThreads    int
	PurgeDeleteThreads    int
	PurgeDeleteBatchSize  int
	PurgeHeartbeatTimeout time.Duration
	PurgeMaxAttempts      int
	PurgeRetention        time.Duration

	// Idempotency-Key (package idempotency).
	Idempotency         bool
	IdempotencyLifetime string
	// idempotencyLifetime is IdempotencyLifetime parsed by validate.
	idempotencyLifetime time.Duration

	// notices are warnings about the configuration found while parsing
	// it, logged once the logger exists (see logNotices).
	notices []notice
}

// joinAddrs splits --join.
func (c config) joinAddrs() []string {
	var out []string
	for _, a := range strings.Split(c.Join, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// allowedLocations returns --allowed-locations as a list; the warehouse
// alone when it is empty.
func (c config) allowedLocations() []string {
	var out []string
	for _, l := range strings.Split(c.AllowedLocations, ",") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	if len(out) == 0 && c.Warehouse != "" {
		out = []string{c.Warehouse}
	}
	return out
}

// warehouseNames lists the named warehouses and their locations, for the
// start-up log (their settings may hold secrets).
func (c config) warehouseNames() []string {
	var out []string
	for _, w := range c.warehouses {
		out = append(out, w.Name+"="+w.Location)
	}
	return out
}

// resolveExisting resolves symbolic links in the longest existing prefix
// of the absolute path p, keeping the rest as it is.
func resolveExisting(p string) string {
	rest := ""
	for dir := p; ; {
		if r, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return p
		}
		rest = filepath.Join(filepath.Base(dir), rest)
		dir = parent
	}
}

// tls returns the cluster TLS files, nil when TLS is off.
func (c config) tls() *transport.TLSFiles {
	if c.TLSCert == "" {
		return nil
	}
	return &transport.TLSFiles{CertFile: c.TLSCert, KeyFile: c.TLSKey, CAFile: c.TLSCA}
}

// commandFlagsFirst returns a hint for args that put a command's flags
// before the command (floe --json status), "" when no later argument is a
// command: a node takes flags only, so the command was parsed as one.
func commandFlagsFirst(args []string) string {
	for i, a := range args {
		if _, ok := commands[a]; ok && i > 0 {
			rest := append(append([]string{a}, args[i+1:]...), args[:i]...)
			return fmt.Sprintf("a command's flags go after it: floe %s", strings.Join(rest, " "))
		}
	}
	return ""
}

// usageError is a bad flag or environment value: exit code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// envName is the environment twin of a flag: --data-dir ↔ FLOE_DATA_DIR.
func envName(flagName string) string {
	return "FLOE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

const (
	defaultDataDir = "./floe-data"
	// maxHTTPHeaderBytes bounds --http-max-header-bytes (1 GiB: far above
	// any request line and headers a client sends).
	maxHTTPHeaderBytes = 1 << 30
	// maxPurgeHeartbeatTimeout bounds --purge-heartbeat-timeout: a node
	// silent for a day has its jobs reassigned at the latest, and the
	// multiples of it the purge computes stay far from overflowing.
	maxPurgeHeartbeatTimeout = 24 * time.Hour
	defaultHTTPAddr          = "127.0.0.1:8181"
	defaultClusterAddr       = "127.0.0.1:8182"
	defaultPrefix            = "floe"
	defaultMaxBodyBytes      = 8 << 20
	// defaultMetadataCacheBytes is catalog.Config's default, spelled out
	// so that --help shows it.
	defaultMetadataCacheBytes = 128 << 20
)

func newFlagSet(c *config) *flag.FlagSet {
	fs := flag.NewFlagSet("floe", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors and usage are printed by parseConfig
	fs.StringVar(&c.Config, configFlag, "", "YAML configuration file mapping these flag names to values (data-dir: /var/lib/floe); the environment and the command line win over it")
	fs.StringVar(&c.NodeID, "node-id", "", "Raft server ID of this node: at most 255 bytes, neither . nor .., without spaces, control characters or '/' (default: the cluster address)")
	fs.StringVar(&c.DataDir, "data-dir", defaultDataDir, "directory for the state machine (fsm.db), the Raft log (raft.db) and snapshots/")
	fs.StringVar(&c.HTTPAddr, "http-addr", defaultHTTPAddr, "address the HTTP API (/v1/...), the operator API (/management/...), /healthz, /readyz and /metrics listen on")
	fs.StringVar(&c.HTTPAdvertise, "http-advertise", "", "HTTP address (host:port) clients and other nodes use to reach this node, published to the cluster (GET /management/v1/cluster); needed when it differs from --http-addr (a port mapping, a proxy) (default: --http-addr; when --http-addr listens on every interface, the host of --cluster-advertise, else of --cluster-addr, with the port of --http-addr)")
	fs.StringVar(&c.ClusterAddr, "cluster-addr", defaultClusterAddr, "address Raft binds and advertises to the other nodes")
	fs.StringVar(&c.Warehouse, "warehouse", "", "root URI of table data and metadata: file:///abs/path or s3://bucket/prefix (default: file://<abs data-dir>/warehouse)")
	fs.StringVar(&c.AllowedLocations, "allowed-locations", "", "comma-separated URI prefixes every table location must lie strictly inside, checked at create, register and set-location and by the purge worker (default: the warehouse)")
	fs.StringVar(&c.Warehouses, warehousesFlag, "", "named warehouses served beside the default one (--warehouse, --prefix), each under its own prefix (GET /v1/config?warehouse=NAME): NAME=URI pairs separated by commas, sharing this node's S3 settings; or, in a configuration file, a mapping of each name to its location, allowed-locations, s3-endpoint, s3-region, s3-access-key-id, s3-secret-access-key and s3-path-style (a JSON object on the command line); the same on every node")
	fs.StringVar(&c.S3Endpoint, "s3-endpoint", "", "S3 API endpoint URL for S3-compatible servers (default: AWS)")
	fs.StringVar(&c.S3Region, "s3-region", "", "S3 signing region (default: the AWS SDK's, else us-east-1)")
	fs.StringVar(&c.S3AccessKeyID, "s3-access-key-id", "", "S3 access key ID; set with --s3-secret-access-key (default: the AWS SDK's credential chain)")
	fs.StringVar(&c.S3SecretAccessKey, "s3-secret-access-key", "", "S3 secret access key; never logged, and never in the Raft log or snapshots (each node uses its own)")
	fs.BoolVar(&c.S3PathStyle, "s3-path-style", false, "address S3 buckets as <endpoint>/<bucket> (most S3-compatible servers need it)")
	fs.StringVar(&c.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&c.Prefix, "prefix", defaultPrefix, "catalog prefix advertised in /v1/config")
	fs.Int64Var(&c.MaxBodyBytes, "max-body-bytes", defaultMaxBodyBytes, "largest request body accepted, in bytes")
	fs.Int64Var(&c.MetadataCacheBytes, "metadata-cache-bytes", defaultMetadataCacheBytes, "bytes of table metadata documents kept parsed in memory (their parsed objects take a few times as much again); a document over a quarter of it is read from storage on every load; 0: no cache")
	fs.StringVar(&c.ClusterAdvertise, "cluster-advertise", "", "cluster address other nodes dial to reach this one, when it differs from --cluster-addr (NAT, a proxy, a bind on every interface) (default: --cluster-addr)")
	fs.StringVar(&c.Join, "join", "", "comma-separated cluster addresses of other nodes to join (host:port,...); ignored once this node has Raft state")
	fs.IntVar(&c.BootstrapExpect, "bootstrap-expect", 0, "form a new cluster once this many nodes (this one and the --join nodes, none with state) are reachable; 0: join an existing cluster when --join is set, else bootstrap a cluster of one")
	fs.BoolVar(&c.RejoinAsNonvoter, "rejoin-as-nonvoter", false, "with --join: a node without Raft state whose --node-id is a voter (it lost its data directory) rejoins as a non-voter for an operator to promote, instead of being refused")
	fs.StringVar(&c.TLSCert, "tls-cert", "", "PEM certificate for mutual TLS on the cluster port (with --tls-key and --tls-ca)")
	fs.StringVar(&c.TLSKey, "tls-key", "", "PEM private key for --tls-cert")
	fs.StringVar(&c.TLSCA, "tls-ca", "", "PEM CA bundle that signs every node's certificate")
	fs.BoolVar(&c.ClusterInsecure, "cluster-insecure", false, "with --auth=on: serve the cluster port without mutual TLS on an address other than loopback. Anyone who reaches that port can change anything in the catalog, grants included, so only where no one but the nodes can reach it")
	fs.Uint64Var(&c.SnapshotThreshold, "snapshot-threshold", raftnode.DefaultSnapshotThreshold, "log entries since the last snapshot that trigger a new one")
	fs.DurationVar(&c.SnapshotInterval, "snapshot-interval", raftnode.DefaultSnapshotInterval, "how often to check whether a snapshot is due")
	fs.DurationVar(&c.RaftHeartbeatTimeout, "raft-heartbeat-timeout", raftnode.DefaultHeartbeatTimeout, "silence from the leader after which a follower starts an election (checked at random between one and two of it); Raft's election and leader-lease timeouts are set to the same. Raise it on congested or long-distance links; every node should use the same")
	fs.StringVar(&c.HTTPTLSCert, "http-tls-cert", "", "PEM certificate (and intermediates) for HTTPS on --http-addr, with --http-tls-key; both files are checked at most once a second and reloaded when they change (a failed reload keeps the previous certificate)")
	fs.StringVar(&c.HTTPTLSKey, "http-tls-key", "", "PEM private key for --http-tls-cert")
	fs.IntVar(&c.HTTPMaxHeaderBytes, "http-max-header-bytes", httpserve.DefaultMaxHeaderBytes, "largest request line and headers accepted, in bytes (431 beyond)")
	fs.DurationVar(&c.HTTPReadHeaderTimeout, "http-read-header-timeout", httpserve.DefaultReadHeaderTimeout, "time allowed to read a request's line and headers")
	fs.DurationVar(&c.HTTPReadTimeout, "http-read-timeout", httpserve.DefaultReadTimeout, "time allowed to read a whole request, body included (not the time to serve it); 0: no limit")
	fs.DurationVar(&c.HTTPWriteTimeout, "http-write-timeout", httpserve.DefaultWriteTimeout, "time allowed from the end of a request's headers to the end of its answer; 0: no limit, since a synchronous purge answers only when its files are gone")
	fs.DurationVar(&c.HTTPWriteStall, "http-write-stall-timeout", httpserve.DefaultWriteStallTimeout, "how long an answer may stand still: a client that reads none of it for this long is cut off and its request's in-flight slot freed (each 64 KiB gets its own deadline, so slow readers still get large answers); 0: no limit")
	fs.DurationVar(&c.HTTPIdleTimeout, "http-idle-timeout", httpserve.DefaultIdleTimeout, "how long a keep-alive connection may sit idle; 0: --http-read-timeout")
	fs.IntVar(&c.HTTPMaxInFlight, "http-max-in-flight", httpserve.DefaultMaxInFlight, "requests this node serves at once; more are answered 503 with Retry-After: 1 (/healthz, /readyz and /metrics never are); 0: no cap")
	fs.StringVar(&c.Auth, "auth", authOff, "authentication and authorization of the client and operator APIs: off (anyone may do anything; warned at start) or on (a bearer token on every request but /v1/config, /v1/oauth/tokens and the probes; grants decide)")
	fs.StringVar(&c.AuthRootToken, "auth-root-token", "", "with --auth=on: a bearer token (16+ characters) for the root principal, which may do everything; set it through FLOE_AUTH_ROOT_TOKEN or a configuration file only its owner may read, rather than the command line (never logged)")
	fs.StringVar(&c.AuthAudience, "auth-audience", "floe", "the aud claim of the access tokens this cluster issues and accepts; the same on every node")
	fs.DurationVar(&c.AuthTokenTTL, "auth-token-ttl", auth.DefaultTokenTTL, "lifetime of access tokens issued at /v1/oauth/tokens")
	fs.DurationVar(&c.AuthMaxTokenTTL, "auth-max-token-ttl", auth.DefaultMaxTokenTTL, "longest lifetime of any access token; a retired signing key keeps verifying this long; the same on every node")
	fs.DurationVar(&c.AuthKeyRotation, "auth-key-rotation", 24*time.Hour, "age at which the leader rotates the token signing key (tokens signed by the old key stay valid until they expire); 0: only through the operator API")
	fs.StringVar(&c.AuthOIDCIssuer, "auth-oidc-issuer", "", "with --auth=on: also accept access tokens of this OpenID Connect issuer (its iss URL)")
	fs.StringVar(&c.AuthOIDCAudience, "auth-oidc-audience", "", "the aud an OIDC token must carry (the client id registered for floe); required with --auth-oidc-issuer")
	fs.StringVar(&c.AuthOIDCJWKSURL, "auth-oidc-jwks-url", "", "the issuer's JWKS URL, skipping discovery (default: from <issuer>/.well-known/openid-configuration)")
	fs.StringVar(&c.AuthOIDCPrincipalClaim, "auth-oidc-principal-claim", "sub", "the OIDC token claim that names the principal")
	fs.StringVar(&c.AuthOIDCRolesClaim, "auth-oidc-roles-claim", "", "the OIDC token claim holding the principal's roles (a string or a list; a dotted path reaches nested claims); empty: none")
	fs.StringVar(&c.AuditLog, "audit-log", "", "where the audit log goes, one JSON line per mutation and per refused request: stderr or a file path (appended to); empty: no audit log")
	fs.StringVar(&c.VendCredentials, "vend-credentials", vending.ModeOff, "storage credentials handed to clients that ask (X-Iceberg-Access-Delegation: vended-credentials) and at loadCredentials: off; sts (STS AssumeRole of --vend-role-arn, limited to the table's location); static-keys (this node's own S3 keys, unscoped: development only)")
	fs.StringVar(&c.VendSTSEndpoint, "vend-sts-endpoint", "", "STS API URL for --vend-credentials=sts on S3-compatible servers (default: AWS STS)")
	fs.StringVar(&c.VendRoleARN, "vend-role-arn", "", "role assumed for --vend-credentials=sts")
	fs.StringVar(&c.VendExternalID, "vend-external-id", "", "external ID passed when assuming --vend-role-arn, if its trust policy wants one")
	fs.DurationVar(&c.VendDuration, "vend-duration", vending.DefaultDuration, "lifetime of STS credentials vended to clients, 15m to 12h; reused for half of it")
	fs.IntVar(&c.PurgeWorkerThreads, "purge-worker-threads", purge.DefaultWorkerThreads, "purge jobs this node runs at once, 1 to 256")
	fs.IntVar(&c.PurgeDeleteThreads, "purge-delete-threads", purge.DefaultDeleteThreads, "threads of the node's one bulk-delete pool, shared by all purge jobs, 1 to 1024")
	fs.IntVar(&c.PurgeDeleteBatchSize, "purge-delete-batch-size", purge.DefaultDeleteBatchSize, "files per bulk delete (one S3 DeleteObjects request), 1 to 1000")
	fs.DurationVar(&c.PurgeHeartbeatTimeout, "purge-heartbeat-timeout", purge.DefaultHeartbeatTimeout, "silence after which the leader reassigns a node's purge jobs (nodes heartbeat every third of it)")
	fs.IntVar(&c.PurgeMaxAttempts, "purge-max-attempts", purge.DefaultMaxAttempts, "failed runs after which a purge job is FAILED")
	fs.DurationVar(&c.PurgeRetention, "purge-retention", purge.DefaultRetention, "how long SUCCEEDED and released FAILED purge jobs, and silent nodes' purge heartbeats, are kept; at least 3 × --purge-heartbeat-timeout")
	fs.BoolVar(&c.Idempotency, "idempotency", true, "honour the Idempotency-Key header on mutations (--idempotency=false turns it off)")
	fs.StringVar(&c.IdempotencyLifetime, "idempotency-lifetime", "PT30M", "how long an Idempotency-Key is honoured, as an ISO-8601 duration in days, hours, minutes and seconds (PT30M, P7D; 1s to 10 years)")
	return fs
}

// printUsage writes --help: every flag with its environment twin and default.
func printUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, `Usage: floe [flags]

floe is an Apache Iceberg REST catalog replicated with Raft. With no flags it
starts a single-node cluster with its data under ./floe-data.

Every flag can also be set through the environment variable shown, and in
the YAML file named by --config under the flag's name (data-dir: /srv/floe).
A flag on the command line wins over the environment, which wins over the
configuration file, which wins over the default.

Flags:
`)
	fs.VisitAll(func(f *flag.Flag) {
		typ, usage := flag.UnquoteUsage(f)
		if _, isBool := f.Value.(interface{ IsBoolFlag() bool }); isBool {
			typ = ""
		}
		name := "--" + f.Name
		if typ != "" {
			name += " " + typ
		}
		fmt.Fprintf(w, "  %s\n    \t%s\n    \tenv %s", name, usage, envName(f.Name))
		if f.DefValue != "" && f.DefValue != "false" {
			fmt.Fprintf(w, "; default %s", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}

// parseConfig reads flags from args, their twins from env (KEY=VALUE
// entries) and the configuration file named by --config (or FLOE_CONFIG), if
// any: a flag on the command line wins over the environment, which wins over
// the file, which wins over the default. It returns flag.ErrHelp after
// printing usage to stdout for -h/--help, and a usageError for any bad flag,
// value or file.
func parseConfig(args, env []string, stdout io.Writer) (config, error) {
	var c config
	fs := newFlagSet(&c)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stdout, fs)
			return c, flag.ErrHelp
		}
		if hint := commandFlagsFirst(args); hint != "" {
			return c, usagef("%v; %s", err, hint)
		}
		return c, usageError{err}
	}
	if fs.NArg() > 0 {
		if fs.NArg() == len(args) {
			// The first word, not a flag: a mistyped command.
			return c, usagef("unknown command %q (commands: %s; 'floe help' says more); a node takes flags only", fs.Arg(0), commandNames())
		}
		return c, usagef("unexpected argument %q (flags only; see --help)", fs.Arg(0))
	}
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	c.notices = append(c.notices, commandLineSecrets(onCommandLine, c.Warehouses)...)
	vars := envMap(env)
	c.notices = append(c.notices, unknownEnv(fs, vars)...)
	path := c.Config
	if !onCommandLine[configFlag] {
		path = vars[envName(configFlag)]
	}
	var file *configFile
	if path != "" {
		var err error
		if file, err = readConfigFile(path); err != nil {
			return c, err
		}
		// The file's values go in under the environment's and the
		// command line's: flags set there are left alone.
		for _, s := range file.settings {
			if onCommandLine[s.name] {
				continue
			}
			if _, inEnv := vars[envName(s.name)]; inEnv {
				continue
			}
			if err := fs.Set(s.name, s.value); err != nil {
				return c, file.errorf(s, "invalid value %q: %v", s.value, unwrapParse(err)) // checked by readConfigFile
			}
			file.applied[s.name] = s
		}
		c.notices = append(c.notices, file.notices()...)
	}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || onCommandLine[f.Name] {
			return
		}
		if v, ok := vars[envName(f.Name)]; ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = usagef("invalid value %q for %s: %v", v, envName(f.Name), unwrapParse(e))
			}
		}
	})
	if err != nil {
		return c, err
	}
	if err := c.validate(); err != nil {
		return c, file.annotate(err)
	}
	return c, nil
}

// commandLineSecrets warns when a secret was given on the command line,
// where every user of the machine may read it (ps, /proc/PID/cmdline) and
// shells keep it in their history.
func commandLineSecrets(onCommandLine map[string]bool, warehouses string) []notice {
	var secrets []string
	for _, name := range secretFlags {
		if onCommandLine[name] {
			secrets = append(secrets, name)
		}
	}
	if onCommandLine[warehousesFlag] && strings.Contains(warehouses, `"s3-secret-access-key"`) {
		secrets = append(secrets, warehousesFlag)
	}
	if len(secrets) == 0 {
		return nil
	}
	return []notice{{
		msg:   "secrets given on the command line can be read by every user of this machine: set them through the environment or a configuration file only their owner may read",
		attrs: []any{"flags", secrets},
	}}
}

// unwrapParse drops strconv's function-name prefix from a flag.Set error.
func unwrapParse(err error) error {
	var ne *strconv.NumError
	if errors.As(err, &ne) {
		return ne.Err
	}
	return err
}

// cliEnv are the FLOE_* variables the operator commands read (floe status,
// floe backup, ...) and deploy/cluster.sh's own: not a node's settings,
// but not mistakes either.
var cliEnv = []string{"FLOE_NODE", "FLOE_TOKEN", "FLOE_CLUSTER_BASE_PORT", "FLOE_CLUSTER_DIR", "FLOE_CLUSTER_TIMEOUT", "FLOE_CLUSTER_TLS_DIR", "FLOE_BIN"}

// unknownEnv warns of each FLOE_* variable that is no flag's twin: a
// misspelt FLOE_WAREHOSE would otherwise leave the node on its default
// warehouse without a word. A warning, not a refusal: a variable meant
// for another tool must not stop a node.
func unknownEnv(fs *flag.FlagSet, vars map[string]string) []notice {
	known := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { known[envName(f.Name)] = true })
	var out []notice
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		if known[k] || slices.Contains(cliEnv, k) {
			continue
		}
		attrs := []any{"variable", k}
		best, bestDist := "", 4 // farther than 3 edits is no suggestion
		for name := range known {
			if d := levenshtein.ComputeDistance(k, name); d < bestDist || (d == bestDist && name < best) {
				best, bestDist = name, d
			}
		}
		if best != "" {
			attrs = append(attrs, "did_you_mean", best)
		}
		out = append(out, notice{msg: "environment variable names no setting of floe; it is ignored", attrs: attrs})
	}
	return out
}

// loopbackAddr reports whether addr (host:port) binds to a loopback
// address only: "localhost" or a literal loopback IP.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func envMap(env []string) map[string]string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "FLOE_") {
			m[k] = v
		}
	}
	return m
}

// validate checks values and fills in the defaults that depend on others.
func (c *config) validate() error {
	if c.DataDir == "" {
		return usagef("--data-dir must not be empty")
	}
	abs, err := filepath.Abs(c.DataDir)
	if err != nil {
		return usagef("--data-dir %q: %v", c.DataDir, err)
	}
	c.DataDir = abs
	if c.NodeID != "" {
		if err := raftnode.CheckMemberID(c.NodeID); err != nil {
			return usagef("--node-id: %v", err)
		}
	}
	for name, addr := range map[string]string{"--http-addr": c.HTTPAddr, "--cluster-addr": c.ClusterAddr} {
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			return usagef("%s %q: want host:port: %v", name, addr, err)
		}
		n, err := net.LookupPort("tcp", port)
		if err != nil {
			return usagef("%s %q: want a port from 1 to 65535: %v", name, addr, err)
		}
		// Port 0 listens on a port chosen afresh at every start. The HTTP
		// address is published to the cluster as given, and a node
		// without --node-id is named by its cluster address: restarted,
		// it would no longer be the node its data directory belongs to.
		// With --node-id the cluster follows the node to its new port.
		if n == 0 && (name == "--http-addr" || c.NodeID == "") {
			msg := "want a port from 1 to 65535"
			if name == "--cluster-addr" {
				msg += " (port 0 only with --node-id: a node is otherwise named by its cluster address)"
			}
			return usagef("%s %q: %s", name, addr, msg)
		}
	}
	if c.Warehouse == "" {
		// The local store never crosses a symbolic link, so the default
		// warehouse names the data directory by its resolved path (a data
		// directory under a linked folder, /tmp on macOS say, still works).
		c.Warehouse = "file://" + filepath.ToSlash(filepath.Join(resolveExisting(c.DataDir), "warehouse"))
	}
	scheme, _, _, err := storage.ParseURI(c.Warehouse)
	if err != nil {
		return usagef("--warehouse %q: %s", redactURL(c.Warehouse), redactIn(err.Error(), c.Warehouse))
	}
	if (scheme != storage.SchemeFile && scheme != storage.SchemeS3) || !strings.Contains(c.Warehouse, "://") {
		return usagef("--warehouse %q: want file:// or s3://", redactURL(c.Warehouse))
	}
	for _, loc := range c.allowedLocations() {
		scheme, _, _, err := storage.ParseURI(loc)
		if err != nil {
			return usagef("--allowed-locations %q: %s", redactURL(loc), redactIn(err.Error(), loc))
		}
		if (scheme != storage.SchemeFile && scheme != storage.SchemeS3) || !strings.Contains(loc, "://") {
			return usagef("--allowed-locations %q: want file:// or s3:// prefixes", redactURL(loc))
		}
	}
	if c.warehouses, err = parseWarehouses(c.Warehouses, c.Prefix, c.Warehouse); err != nil {
		return err
	}
	if (c.S3AccessKeyID == "") != (c.S3SecretAccessKey == "") {
		return usagef("--s3-access-key-id and --s3-secret-access-key must be set together")
	}
	if err := checkS3Endpoint("--s3-endpoint", c.S3Endpoint); err != nil {
		return err
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		return usageError{err}
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return usagef("--log-format %q: want text or json", c.LogFormat)
	}
	if err := catalog.CheckPrefix(c.Prefix); err != nil {
		return usagef("--prefix %q: %v", c.Prefix, err)
	}
	if c.MaxBodyBytes <= 0 {
		return usagef("--max-body-bytes %d: must be positive", c.MaxBodyBytes)
	}
	if c.MetadataCacheBytes < 0 {
		return usagef("--metadata-cache-bytes %d: must be 0 (no cache) or positive", c.MetadataCacheBytes)
	}
	if transport.BindIP(c.ClusterAddr) == "" && c.ClusterAdvertise == "" {
		if host, _, _ := net.SplitHostPort(c.ClusterAddr); host == "" || net.ParseIP(host) != nil {
			return usagef("--cluster-addr %q listens on every interface: set --cluster-advertise to the address other nodes dial", c.ClusterAddr)
		}
	}
	if c.ClusterAdvertise != "" {
		if err := raftnode.CheckClusterAddr(c.ClusterAdvertise); err != nil {
			return usagef("--cluster-advertise: %v", err)
		}
	}
	if c.HTTPAdvertise, err = c.httpAdvertise(); err != nil {
		return err
	}
	for _, a := range c.joinAddrs() {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return usagef("--join %q: want host:port[,host:port...]: %v", c.Join, err)
		}
	}
	if c.BootstrapExpect < 0 {
		return usagef("--bootstrap-expect %d: must not be negative", c.BootstrapExpect)
	}
	if c.BootstrapExpect > 1 && len(c.joinAddrs()) == 0 {
		return usagef("--bootstrap-expect %d needs --join with the other nodes' cluster addresses", c.BootstrapExpect)
	}
	if c.RejoinAsNonvoter && len(c.joinAddrs()) == 0 {
		return usagef("--rejoin-as-nonvoter needs --join with the other nodes' cluster addresses")
	}
	if (c.TLSCert == "") != (c.TLSKey == "") || (c.TLSCert == "") != (c.TLSCA == "") {
		return usagef("--tls-cert, --tls-key and --tls-ca must be set together")
	}
	if c.SnapshotThreshold == 0 || c.SnapshotInterval <= 0 {
		return usagef("--snapshot-threshold and --snapshot-interval must be positive")
	}
	if c.RaftHeartbeatTimeout < 50*time.Millisecond || c.RaftHeartbeatTimeout > time.Minute {
		return usagef("--raft-heartbeat-timeout %s: want between 50ms and 1m", c.RaftHeartbeatTimeout)
	}
	if (c.HTTPTLSCert == "") != (c.HTTPTLSKey == "") {
		return usagef("--http-tls-cert and --http-tls-key must be set together")
	}
	if c.HTTPMaxHeaderBytes <= 0 || c.HTTPReadHeaderTimeout <= 0 {
		return usagef("--http-max-header-bytes and --http-read-header-timeout must be positive")
	}
	if c.HTTPMaxHeaderBytes > maxHTTPHeaderBytes {
		// net/http adds its own allowance to the limit: near the largest
		// int the sum overflows and every request is refused.
		return usagef("--http-max-header-bytes %d: want at most %d", c.HTTPMaxHeaderBytes, maxHTTPHeaderBytes)
	}
	if c.HTTPReadTimeout < 0 || c.HTTPWriteTimeout < 0 || c.HTTPWriteStall < 0 || c.HTTPIdleTimeout < 0 || c.HTTPMaxInFlight < 0 {
		return usagef("--http-read-timeout, --http-write-timeout, --http-write-stall-timeout, --http-idle-timeout and --http-max-in-flight must not be negative (0: no limit)")
	}
	switch c.Auth {
	case authOff:
	case authOn:
		if c.AuthRootToken == "" && c.AuthOIDCIssuer == "" {
			return usagef("--auth=on needs --auth-root-token (FLOE_AUTH_ROOT_TOKEN) or --auth-oidc-issuer: otherwise nobody could ever be granted anything")
		}
		if c.AuthRootToken != "" && len(c.AuthRootToken) < auth.MinRootTokenLen {
			return usagef("--auth-root-token must be at least %d characters", auth.MinRootTokenLen)
		}
		if c.AuthOIDCIssuer != "" && c.AuthOIDCAudience == "" {
			return usagef("--auth-oidc-issuer needs --auth-oidc-audience")
		}
	default:
		return usagef("--auth must be %s or %s, got %q", authOff, authOn, c.Auth)
	}
	if c.Auth == authOn && c.TLSCert == "" && !loopbackAddr(c.ClusterAddr) {
		if !c.ClusterInsecure {
			return usagef("--auth=on with --cluster-addr %s and no mutual TLS: the cluster port takes changes from anyone who reaches it, grants included, so authentication would be void. Give every node --tls-cert, --tls-key and --tls-ca (deploy/gen-certs.sh makes them), bind --cluster-addr to loopback, or pass --cluster-insecure if only the nodes can reach that address", c.ClusterAddr)
		}
		c.notices = append(c.notices, notice{
			msg:   "the cluster port serves without mutual TLS (--cluster-insecure): anyone who reaches it can change anything in the catalog, grants included",
			attrs: []any{"cluster_addr", c.ClusterAddr},
		})
	}
	if c.AuthTokenTTL <= 0 || c.AuthMaxTokenTTL < c.AuthTokenTTL || c.AuthKeyRotation < 0 {
		return usagef("--auth-token-ttl must be positive and at most --auth-max-token-ttl; --auth-key-rotation must not be negative")
	}
	switch c.VendCredentials {
	case vending.ModeOff, vending.ModeStaticKeys:
	case vending.ModeSTS:
		if c.VendRoleARN == "" {
			return usagef("--vend-credentials=sts needs --vend-role-arn")
		}
	default:
		return usagef("--vend-credentials must be %s, %s or %s, got %q", vending.ModeOff, vending.ModeSTS, vending.ModeStaticKeys, c.VendCredentials)
	}
	if c.VendDuration < vending.MinDuration || c.VendDuration > vending.MaxDuration {
		return usagef("--vend-duration must be between %s and %s, got %s", vending.MinDuration, vending.MaxDuration, c.VendDuration)
	}
	if c.PurgeWorkerThreads < 1 || c.PurgeDeleteThreads < 1 || c.PurgeMaxAttempts < 1 {
		return usagef("--purge-worker-threads, --purge-delete-threads and --purge-max-attempts must be at least 1")
	}
	if c.PurgeWorkerThreads > purge.MaxWorkerThreads {
		return usagef("--purge-worker-threads %d: want at most %d", c.PurgeWorkerThreads, purge.MaxWorkerThreads)
	}
	if c.PurgeDeleteThreads > purge.MaxDeleteThreads {
		return usagef("--purge-delete-threads %d: want at most %d (each is a thread the node starts)", c.PurgeDeleteThreads, purge.MaxDeleteThreads)
	}
	if c.PurgeDeleteBatchSize < 1 || c.PurgeDeleteBatchSize > 1000 {
		return usagef("--purge-delete-batch-size %d: want 1 to 1000", c.PurgeDeleteBatchSize)
	}
	if c.PurgeHeartbeatTimeout < 100*time.Millisecond || c.PurgeHeartbeatTimeout > maxPurgeHeartbeatTimeout {
		return usagef("--purge-heartbeat-timeout %s: want 100ms to %s", c.PurgeHeartbeatTimeout, maxPurgeHeartbeatTimeout)
	}
	if c.PurgeRetention < 3*c.PurgeHeartbeatTimeout {
		// The prune drops heartbeat rows older than the retention too; a
		// live node's row must never be among them.
		return usagef("--purge-retention %s: want at least 3 × --purge-heartbeat-timeout (%s)", c.PurgeRetention, 3*c.PurgeHeartbeatTimeout)
	}
	if c.idempotencyLifetime, err = idempotency.ParseLifetime(c.IdempotencyLifetime); err != nil {
		return usagef("--idempotency-lifetime: %v", err)
	}
	return nil
}

// wildcardHost reports whether host, from a listen address, stands for every
// interface ("", 0.0.0.0, ::) and so names no address to dial.
func wildcardHost(host string) bool {
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// httpAdvertise is the HTTP address this node publishes to the cluster (the
// members' http-address of GET /management/v1/cluster): --http-advertise
// when set, else --http-addr. An --http-addr on every interface (0.0.0.0:8181,
// :8181) names no address anyone could dial, so its port is then paired with
// the host other nodes already reach this one by: that of --cluster-advertise,
// else of --cluster-addr (which validate only lets listen on every interface
// with --cluster-advertise). In a container or a StatefulSet that is the
// stable DNS name the node is known by; behind a port mapping or a proxy,
// set --http-advertise.
func (c config) httpAdvertise() (string, error) {
	if c.HTTPAdvertise != "" {
		host, port, err := net.SplitHostPort(c.HTTPAdvertise)
		if err != nil {
			return "", usagef("--http-advertise %q: want host:port: %v", c.HTTPAdvertise, err)
		}
		if wildcardHost(host) || port == "" || port == "0" {
			return "", usagef("--http-advertise %q: want the host and port clients and other nodes dial, not a wildcard", c.HTTPAdvertise)
		}
		return c.HTTPAdvertise, nil
	}
	host, port, _ := net.SplitHostPort(c.HTTPAddr) // validated
	if !wildcardHost(host) {
		return c.HTTPAddr, nil
	}
	cluster := c.ClusterAdvertise
	if cluster == "" {
		cluster = c.ClusterAddr
	}
	if chost, _, err := net.SplitHostPort(cluster); err == nil && !wildcardHost(chost) {
		return net.JoinHostPort(chost, port), nil
	}
	return "", usagef("--http-addr %q listens on every interface: set --http-advertise to the address clients and other nodes dial", c.HTTPAddr)
}

func parseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("--log-level %q: want debug, info, warn or error", s)
}

func newLogger(c config, w io.Writer) *slog.Logger {
	level, _ := parseLevel(c.LogLevel) // validated
	opts := &slog.HandlerOptions{Level: level}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// checkS3Endpoint refuses an S3 endpoint URL that carries credentials
// (user information): the endpoint is handed to every client in its table's
// FileIO settings (s3.endpoint), so credentials in it would leave the node
// unasked. Credentials go in the access key settings instead.
func checkS3Endpoint(what, endpoint string) error {
	if endpoint == "" {
		return nil
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		// Not the URL nor url.Parse's error, which quotes it: a secret
		// with a "/" in it makes the URL unparseable.
		return usagef("%s: not a URL", what)
	}
	if u.User != nil {
		return usagef("%s %q: an endpoint carries no credentials (every client is given the endpoint); set the access key and secret instead", what, redactURL(endpoint))
	}
	return nil
}

// redactURL masks the password of a URL's user information ("user:xxxxx@"),
// so that credentials written into an endpoint or a warehouse URI never
// reach a log line or an error message. Anything that does not parse as a
// URL with a password is returned as it is.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		// Unparseable (a secret with a "/" in it does that): mask up to
		// the last "@" after the scheme, where user information would end.
		if at := strings.LastIndex(s, "@"); at >= 0 {
			if sch := strings.Index(s, "://"); sch >= 0 && sch < at {
				return s[:sch+3] + "xxxxx" + s[at:]
			}
			return "xxxxx" + s[at:]
		}
		return s
	}
	if u.User == nil {
		return s
	}
	if _, ok := u.User.Password(); !ok {
		return s
	}
	return u.Redacted()
}

// redactURLs is redactURL of each.
// redactIn masks in msg, an error about raw, the user information raw
// carries (and raw itself, spelled whole): parse errors quote the URI, or
// the bucket name the user information ran into.
func redactIn(msg, raw string) string {
	msg = strings.ReplaceAll(msg, raw, redactURL(raw))
	if sch := strings.Index(raw, "://"); sch >= 0 {
		if at := strings.LastIndex(raw, "@"); at > sch+3 {
			msg = strings.ReplaceAll(msg, raw[sch+3:at], "xxxxx")
		}
	}
	return msg
}

func redactURLs(in []string) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = redactURL(s)
	}
	return out
}

// logAttrs is the effective configuration for the startup log. The secret
// key is never included, only whether one is set.
func (c config) logAttrs() []any {
	nodeID := c.NodeID
	if nodeID == "" {
		nodeID = c.ClusterAddr + " (cluster address)"
	}
	return []any{
		"config_file", c.Config,
		"node_id", nodeID,
		"data_dir", c.DataDir,
		"http_addr", c.HTTPAddr,
		"http_advertise", c.HTTPAdvertise,
		"cluster_addr", c.ClusterAddr,
		"warehouse", redactURL(c.Warehouse),
		"allowed_locations", redactURLs(c.allowedLocations()),
		"warehouses", c.warehouseNames(),
		"s3_endpoint", redactURL(c.S3Endpoint),
		"s3_region", c.S3Region,
		"s3_access_key_id", c.S3AccessKeyID,
		"s3_secret_access_key_set", c.S3SecretAccessKey != "",
		"s3_path_style", c.S3PathStyle,
		"log_level", c.LogLevel,
		"log_format", c.LogFormat,
		"prefix", c.Prefix,
		"max_body_bytes", c.MaxBodyBytes,
		"metadata_cache_bytes", c.MetadataCacheBytes,
		"cluster_advertise", c.ClusterAdvertise,
		"join", c.Join,
		"bootstrap_expect", c.BootstrapExpect,
		"rejoin_as_nonvoter", c.RejoinAsNonvoter,
		"tls", c.TLSCert != "",
		"snapshot_threshold", c.SnapshotThreshold,
		"snapshot_interval", c.SnapshotInterval,
		"raft_heartbeat_timeout", c.RaftHeartbeatTimeout,
		"http_tls_cert", c.HTTPTLSCert,
		"http_max_header_bytes", c.HTTPMaxHeaderBytes,
		"http_read_header_timeout", c.HTTPReadHeaderTimeout,
		"http_read_timeout", c.HTTPReadTimeout,
		"http_write_timeout", c.HTTPWriteTimeout,
		"http_write_stall_timeout", c.HTTPWriteStall,
		"http_idle_timeout", c.HTTPIdleTimeout,
		"http_max_in_flight", c.HTTPMaxInFlight,
		"auth", c.Auth,
		"auth_root_token_set", c.AuthRootToken != "",
		"auth_oidc_issuer", redactURL(c.AuthOIDCIssuer),
		"audit_log", c.AuditLog,
		"vend_credentials", c.VendCredentials,
		"vend_sts_endpoint", redactURL(c.VendSTSEndpoint),
		"vend_role_arn", c.VendRoleARN,
		"vend_duration", c.VendDuration,
		"purge_worker_threads", c.PurgeWorkerThreads,
		"purge_delete_threads", c.PurgeDeleteThreads,
		"purge_delete_batch_size", c.PurgeDeleteBatchSize,
		"purge_heartbeat_timeout", c.PurgeHeartbeatTimeout,
		"purge_max_attempts", c.PurgeMaxAttempts,
		"purge_retention", c.PurgeRetention,
		"idempotency", c.Idempotency,
		"idempotency_lifetime", c.IdempotencyLifetime,
	}
}
