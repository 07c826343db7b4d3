// Package vending hands out storage credentials for one table's files, for
// clients that ask with X-Iceberg-Access-Delegation: vended-credentials.
//
// Two sources exist. STS (ModeSTS) assumes a role with an inline session
// policy that allows only the table's location, for a bounded time: what a
// production catalog hands out. Static keys (ModeStaticKeys) hand every
// client the node's own S3 keys: a development convenience, enabled only by
// name, that gives each client everything the node can do.
//
// See DESIGN.md.
package vending

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"

	"github.com/floe-catalog/floe/internal/location"
)

// Modes of a Vendor.
const (
	// ModeOff vends nothing: New returns a nil Vendor.
	ModeOff = "off"
	// ModeSTS assumes RoleARN with a session policy scoped to the table.
	ModeSTS = "sts"
	// ModeStaticKeys hands out the node's own credentials, unscoped.
	ModeStaticKeys = "static-keys"
)

// FileIO property names the credentials are given under (the Iceberg REST
// spec's LoadTableResult section and the Java client's S3FileIO).
const (
	PropAccessKeyID         = "s3.access-key-id"
	PropSecretAccessKey     = "s3.secret-access-key"
	PropSessionToken        = "s3.session-token"
	PropSessionTokenExpires = "s3.session-token-expires-at-ms"
)

// Duration bounds of an STS session (AssumeRole's own limits are 15 minutes
// to the role's maximum session duration, at most 12 hours).
const (
	DefaultDuration = time.Hour
	MinDuration     = 15 * time.Minute
	MaxDuration     = 12 * time.Hour
)

// Errors returned by Vend.
var (
	// ErrUnavailable means credentials could not be obtained (STS refused
	// or was unreachable, the node has no credentials); a retry may work.
	ErrUnavailable = errors.New("vending: credentials unavailable")
)

// Config configures a Vendor.
type Config struct {
	// Mode is ModeOff, ModeSTS or ModeStaticKeys.
	Mode string
	// AWS holds the node's credentials and region: the identity that calls
	// STS, or the keys handed out in ModeStaticKeys.
	AWS aws.Config
	// STSEndpoint is the STS API URL for STS-compatible servers; empty means
	// AWS's regional endpoint.
	STSEndpoint string
	// RoleARN is the role assumed in ModeSTS (required there).
	RoleARN string
	// ExternalID is passed to AssumeRole when the role's trust policy wants one.
	ExternalID string
	// Duration is how long vended STS credentials live; 0 means
	// DefaultDuration. Credentials are reused for half of it.
	Duration   time.Duration
	Now        func() time.Time
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Access is what the credentials allow.
type Access int

const (
	// ReadWrite allows reading, writing and deleting objects under the location.
	ReadWrite Access = iota
	// ReadOnly allows reading and listing only.
	ReadOnly
)

func (a Access) String() string {
	if a == ReadOnly {
		return "read"
	}
	return "read-write"
}

// Vendor hands out credentials. It is safe for concurrent use.
type Vendor struct {
	cfg     Config
	sts     *sts.Client
	log     *slog.Logger
	metrics *metrics

	group singleflight.Group
	mu    sync.Mutex
	cache map[cacheKey]cached
}

type cacheKey struct {
	location string
	also     string // the further locations, joined by NUL
	access   Access
}

type cached struct {
	props   map[string]string
	reuseTo time.Time // handed out again until then
}

// stsTimeout bounds one round of credential fetching, SDK retries included.
const stsTimeout = 30 * time.Second

// maxCached bounds the cache; when full, expired entries go first, then all.
const maxCached = 4096

// New returns a Vendor for cfg, or nil when cfg.Mode is ModeOff or empty. It
// fails on an unknown mode, a missing RoleARN in ModeSTS or a Duration out of
// bounds. It makes no network call.
func New(cfg Config) (*Vendor, error) {
	switch cfg.Mode {
	case "", ModeOff:
		return nil, nil
	case ModeSTS:
		if cfg.RoleARN == "" {
			return nil, errors.New("vending: sts needs a role ARN")
		}
	case ModeStaticKeys:
	default:
		return nil, fmt.Errorf("vending: unknown mode %q (want %s, %s or %s)", cfg.Mode, ModeOff, ModeSTS, ModeStaticKeys)
	}
	if cfg.Duration == 0 {
		cfg.Duration = DefaultDuration
	}
	if cfg.Duration < MinDuration || cfg.Duration > MaxDuration {
		return nil, fmt.Errorf("vending: duration %s out of range %s..%s", cfg.Duration, MinDuration, MaxDuration)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	v := &Vendor{cfg: cfg, log: cfg.Logger, metrics: newMetrics(cfg.Registerer), cache: map[cacheKey]cached{}}
	if cfg.Mode == ModeSTS {
		v.sts = sts.NewFromConfig(cfg.AWS, func(o *sts.Options) {
			if cfg.STSEndpoint != "" {
				o.BaseEndpoint = aws.String(cfg.STSEndpoint)
			}
		})
	}
	return v, nil
}

// Mode returns the vendor's mode.
func (v *Vendor) Mode() string { return v.cfg.Mode }

// Vend returns FileIO properties holding credentials for the objects under
// loc (an s3:// table location), allowing reads only when readOnly is set.
// ok is false, with no error, when loc is not in S3 (a local path): there is
// nothing to vend. The error wraps ErrUnavailable when the credentials
// cannot be obtained; its text holds no secret. The returned map is the
// caller's.
//
// also names further locations the credentials should reach (the ones a
// moved table left, whose files its older snapshots reference), most
// important first. STS credentials reach as many of them as fit STS's
// bound on a session policy (maxSessionPolicy); one not in S3, or that
// cannot be scoped (scopeOf), is left out. Static keys reach everything
// the node's keys do.
func (v *Vendor) Vend(ctx context.Context, loc string, readOnly bool, also ...string) (props map[string]string, ok bool, err error) {
	access := ReadWrite
	if readOnly {
		access = ReadOnly
	}
	u, err := location.Parse(loc)
	if err != nil || u.Scheme != location.SchemeS3 {
		v.metrics.vended.WithLabelValues(v.cfg.Mode, "not-vendable").Inc()
		return nil, false, nil
	}
	var extra []string
	for _, a := range also {
		if a = strings.TrimRight(a, "/"); a != "" && a != strings.TrimRight(loc, "/") && !slices.Contains(extra, a) {
			extra = append(extra, a)
		}
	}
	key := cacheKey{location: strings.TrimRight(loc, "/"), also: strings.Join(extra, "\x00"), access: access}
	if props, ok := v.lookup(key, v.cfg.Now()); ok {
		v.metrics.vended.WithLabelValues(v.cfg.Mode, "cached").Inc()
		return props, true, nil
	}
	res, err, _ := v.group.Do(key.location+"\x00"+access.String()+"\x00"+key.also, func() (any, error) {
		if props, ok := v.lookup(key, v.cfg.Now()); ok {
			return props, nil
		}
		// Callers waiting on this call share its result: one caller
		// giving up must not fail the others.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stsTimeout)
		defer cancel()
		var c cached
		var err error
		if v.cfg.Mode == ModeSTS {
			c, err = v.assumeRole(ctx, u.Bucket, u.Key, extra, access)
		} else {
			c, err = v.staticKeys(ctx)
		}
		if err != nil {
			return nil, err
		}
		v.store(key, c)
		return c.props, nil
	})
	if err != nil {
		v.metrics.vended.WithLabelValues(v.cfg.Mode, "error").Inc()
		v.log.Warn("cannot vend credentials", "location", loc, "mode", v.cfg.Mode, "error", err)
		return nil, false, err
	}
	v.metrics.vended.WithLabelValues(v.cfg.Mode, "issued").Inc()
	return clone(res.(map[string]string)), true, nil
}

// Expiring reports whether vended credentials expire (ModeSTS), so that
// clients must refresh them.
func (v *Vendor) Expiring() bool { return v.cfg.Mode == ModeSTS }

// Scoped reports whether vended credentials are limited to the location
// and access asked for (ModeSTS); static keys are the node's own.
func (v *Vendor) Scoped() bool { return v.cfg.Mode == ModeSTS }

func (v *Vendor) lookup(key cacheKey, now time.Time) (map[string]string, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	c, ok := v.cache[key]
	if !ok || !now.Before(c.reuseTo) {
		return nil, false
	}
	return clone(c.props), true
}

func (v *Vendor) store(key cacheKey, c cached) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.cache) >= maxCached {
		now := v.cfg.Now()
		for k, e := range v.cache {
			if !now.Before(e.reuseTo) {
				delete(v.cache, k)
			}
		}
		if len(v.cache) >= maxCached {
			clear(v.cache)
		}
	}
	v.cache[key] = c
}

// staticKeys returns the node's own credentials. They are not cached beyond
// the SDK's own provider cache, so a rotated key is handed out at once.
func (v *Vendor) staticKeys(ctx context.Context) (cached, error) {
	if v.cfg.AWS.Credentials == nil {
		return cached{}, fmt.Errorf("%w: the node has no S3 credentials", ErrUnavailable)
	}
	creds, err := v.cfg.AWS.Credentials.Retrieve(ctx)
	if err != nil {
		return cached{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	props := map[string]string{
		PropAccessKeyID:     creds.AccessKeyID,
		PropSecretAccessKey: creds.SecretAccessKey,
	}
	if creds.SessionToken != "" {
		props[PropSessionToken] = creds.SessionToken
	}
	if creds.CanExpire {
		props[PropSessionTokenExpires] = strconv.FormatInt(creds.Expires.UnixMilli(), 10)
	}
	return cached{props: props}, nil // reuseTo zero: never reused
}

// assumeRole asks STS for credentials limited to bucket/prefix, and to as
// many of the also locations as fit the session policy's bound.
func (v *Vendor) assumeRole(ctx context.Context, bucket, prefix string, also []string, access Access) (cached, error) {
	main, err := scopeOf(bucket, prefix)
	if err != nil {
		return cached{}, err
	}
	scopes := []scope{main}
	policy := sessionPolicy(scopes, access)
	left := 0
	for _, loc := range also {
		u, err := location.Parse(loc)
		if err != nil || u.Scheme != location.SchemeS3 {
			left++
			continue
		}
		sc, err := scopeOf(u.Bucket, u.Key)
		if err != nil {
			left++
			continue
		}
		if p := sessionPolicy(append(scopes, sc), access); len(p) <= maxSessionPolicy {
			scopes, policy = append(scopes, sc), p
		} else {
			left++
		}
	}
	if left > 0 {
		v.log.Info("vended credentials leave out locations the table left", "location", "s3://"+bucket+"/"+prefix,
			"left_out", left, "included", len(scopes)-1)
	}
	start := time.Now()
	in := &sts.AssumeRoleInput{
		RoleArn:         aws.String(v.cfg.RoleARN),
		RoleSessionName: aws.String(sessionName(bucket, prefix)),
		Policy:          aws.String(policy),
		DurationSeconds: aws.Int32(int32(v.cfg.Duration / time.Second)),
	}
	if v.cfg.ExternalID != "" {
		in.ExternalId = aws.String(v.cfg.ExternalID)
	}
	out, err := v.sts.AssumeRole(ctx, in)
	v.metrics.stsLatency.Observe(time.Since(start).Seconds())
	if err != nil && len(scopes) > 1 {
		// STS also bounds a policy's packed (compressed) size, which the
		// text's length does not tell: the table's own location alone
		// must not fail for the ones it left.
		v.log.Info("sts refused the session policy with the locations a table left; asking for its own alone",
			"location", "s3://"+bucket+"/"+prefix, "error", err)
		in.Policy = aws.String(sessionPolicy(scopes[:1], access))
		out, err = v.sts.AssumeRole(ctx, in)
	}
	if err != nil {
		return cached{}, fmt.Errorf("%w: sts AssumeRole: %v", ErrUnavailable, err)
	}
	c := out.Credentials
	if c == nil || c.AccessKeyId == nil || c.SecretAccessKey == nil || c.SessionToken == nil {
		return cached{}, fmt.Errorf("%w: sts AssumeRole answered without credentials", ErrUnavailable)
	}
	expires := v.cfg.Now().Add(v.cfg.Duration)
	if c.Expiration != nil {
		expires = *c.Expiration
	}
	props := map[string]string{
		PropAccessKeyID:         *c.AccessKeyId,
		PropSecretAccessKey:     *c.SecretAccessKey,
		PropSessionToken:        *c.SessionToken,
		PropSessionTokenExpires: strconv.FormatInt(expires.UnixMilli(), 10),
	}
	// Reuse for half the remaining lifetime: a client always gets at least
	// half of Duration before it must refresh.
	now := v.cfg.Now()
	return cached{props: props, reuseTo: now.Add(expires.Sub(now) / 2)}, nil
}

// sessionName names the STS session after the location, so audit trails
// (CloudTrail) show which table credentials were for: "floe-" and 16 hex
// digits of the location's SHA-256, within STS's 64-character limit.
func sessionName(bucket, prefix string) string {
	sum := sha256.Sum256([]byte(bucket + "/" + prefix))
	return "floe-" + hex.EncodeToString(sum[:8])
}

// maxSessionPolicy is STS's bound on the plain text of an inline session
// policy, in characters.
const maxSessionPolicy = 2048

// scope is one location a session policy grants: the objects under
// s3://bucket/prefix.
type scope struct{ bucket, prefix string }

// scopeOf checks that s3://bucket/prefix can be granted exactly. It fails
// when the bucket is empty, or when the location holds a character IAM
// reads as a wildcard.
func scopeOf(bucket, prefix string) (scope, error) {
	if bucket == "" {
		return scope{}, errors.New("vending: location has no bucket")
	}
	prefix = strings.Trim(prefix, "/")
	// IAM reads * and ? as wildcards and ${…} as a policy variable in both
	// the resource and the s3:prefix condition: a location holding one
	// would widen the grant beyond the table, and IAM has no escape for
	// them here. Such a location gets no scoped credentials.
	if strings.ContainsAny(bucket+"/"+prefix, "*?$") {
		return scope{}, fmt.Errorf("%w: location s3://%s/%s holds a character IAM reads as a wildcard (*, ? or $); credentials cannot be scoped to it", ErrUnavailable, bucket, prefix)
	}
	return scope{bucket, prefix}, nil
}

// SessionPolicy returns the IAM session policy that limits an assumed role
// to the objects under s3://bucket/prefix: object reads (and writes and
// deletes for ReadWrite), listing only below the prefix, and the bucket's
// location. It fails when the bucket is empty.
func SessionPolicy(bucket, prefix string, access Access) (string, error) {
	sc, err := scopeOf(bucket, prefix)
	if err != nil {
		return "", err
	}
	return sessionPolicy([]scope{sc}, access), nil
}

// sessionPolicy is SessionPolicy for every scope of scopes: one statement
// for the objects, and per bucket (in the order first named) one for
// listing below its prefixes and one for its location.
func sessionPolicy(scopes []scope, access Access) string {
	var objects, buckets []string
	listPrefixes := map[string][]string{}
	for _, sc := range scopes {
		if !slices.Contains(buckets, sc.bucket) {
			buckets = append(buckets, sc.bucket)
		}
		if sc.prefix == "" {
			objects = append(objects, "arn:aws:s3:::"+sc.bucket+"/*")
			listPrefixes[sc.bucket] = append(listPrefixes[sc.bucket], "*")
			continue
		}
		objects = append(objects, "arn:aws:s3:::"+sc.bucket+"/"+sc.prefix+"/*")
		// Not the bare prefix: s3:prefix "w/t" would list w/t2/… too.
		listPrefixes[sc.bucket] = append(listPrefixes[sc.bucket], sc.prefix+"/", sc.prefix+"/*")
	}
	actions := []string{"s3:GetObject", "s3:GetObjectVersion"}
	if access == ReadWrite {
		actions = append(actions, "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts")
	}
	type statement struct {
		Effect    string         `json:"Effect"`
		Action    []string       `json:"Action"`
		Resource  []string       `json:"Resource"`
		Condition map[string]any `json:"Condition,omitempty"`
	}
	doc := struct {
		Version   string      `json:"Version"`
		Statement []statement `json:"Statement"`
	}{
		Version:   "2012-10-17",
		Statement: []statement{{Effect: "Allow", Action: actions, Resource: objects}},
	}
	for _, b := range buckets {
		doc.Statement = append(doc.Statement,
			statement{Effect: "Allow", Action: []string{"s3:ListBucket"}, Resource: []string{"arn:aws:s3:::" + b},
				Condition: map[string]any{"StringLike": map[string][]string{"s3:prefix": listPrefixes[b]}}},
			statement{Effect: "Allow", Action: []string{"s3:GetBucketLocation"}, Resource: []string{"arn:aws:s3:::" + b}})
	}
	out, err := json.Marshal(doc)
	if err != nil {
		panic("vending: encode session policy: " + err.Error()) // strings only
	}
	return string(out)
}

func clone(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

type metrics struct {
	vended     *prometheus.CounterVec
	stsLatency prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		vended: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floe_credentials_vended_total",
			Help: "Credential requests by mode and result: issued (new), cached (reused), not-vendable (not S3), error.",
		}, []string{"mode", "result"}),
		stsLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "floe_credentials_sts_seconds",
			Help:    "Latency of STS AssumeRole calls made to vend credentials.",
			Buckets: prometheus.DefBuckets,
		}),
	}
	if reg != nil {
		reg.MustRegister(m.vended, m.stsLatency)
	}
	return m
}
