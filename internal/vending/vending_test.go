package vending_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/internal/vending"
	"github.com/floe-catalog/floe/internal/vending/ststest"
)

func nodeAWS(key, secret string) aws.Config {
	return aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider(key, secret, ""),
	}
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newSTSVendor(t *testing.T, srv *ststest.Server, clk *clock) *vending.Vendor {
	t.Helper()
	v, err := vending.New(vending.Config{
		Mode: vending.ModeSTS, AWS: nodeAWS("NODEKEY", "NODESECRET"), STSEndpoint: srv.URL,
		RoleARN: "arn:aws:iam::123456789012:role/floe-tables", ExternalID: "ext-1",
		Duration: 30 * time.Minute, Now: clk.Now, Registerer: prometheus.NewRegistry(),
	})
	require.NoError(t, err)
	return v
}

func TestNewRefusesBadSettings(t *testing.T) {
	v, err := vending.New(vending.Config{Mode: vending.ModeOff})
	require.NoError(t, err)
	assert.Nil(t, v, "off vends nothing")
	for _, cfg := range []vending.Config{
		{Mode: "maybe"},
		{Mode: vending.ModeSTS},
		{Mode: vending.ModeSTS, RoleARN: "arn:aws:iam::1:role/r", Duration: time.Minute},
		{Mode: vending.ModeSTS, RoleARN: "arn:aws:iam::1:role/r", Duration: 13 * time.Hour},
	} {
		_, err := vending.New(cfg)
		assert.Error(t, err, "%+v", cfg)
	}
}

func TestSTSCredentialsAreScopedToTheLocation(t *testing.T) {
	srv := ststest.Start()
	defer srv.Close()
	clk := &clock{now: time.Now()}
	v := newSTSVendor(t, srv, clk)

	props, ok, err := v.Vend(context.Background(), "s3://lake/warehouse/db/orders", false)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, ststest.AccessKeyID(1), props[vending.PropAccessKeyID])
	assert.Equal(t, ststest.SecretAccessKey(1), props[vending.PropSecretAccessKey])
	assert.NotEmpty(t, props[vending.PropSessionToken])
	exp, err := strconv.ParseInt(props[vending.PropSessionTokenExpires], 10, 64)
	require.NoError(t, err)
	assert.InDelta(t, time.Now().Add(30*time.Minute).UnixMilli(), exp, float64(time.Minute.Milliseconds()))

	calls := srv.Calls()
	require.Len(t, calls, 1)
	c := calls[0]
	assert.True(t, c.Signed, "the node signs the AssumeRole request with its own credentials")
	assert.Equal(t, "arn:aws:iam::123456789012:role/floe-tables", c.RoleARN)
	assert.Equal(t, "ext-1", c.ExternalID)
	assert.Equal(t, 1800, c.DurationSeconds)
	assert.Regexp(t, `^floe-[0-9a-f]{16}$`, c.SessionName)

	var policy struct {
		Statement []struct {
			Action    []string
			Resource  []string
			Condition map[string]map[string][]string
		}
	}
	require.NoError(t, json.Unmarshal([]byte(c.Policy), &policy), c.Policy)
	require.Len(t, policy.Statement, 3)
	assert.Equal(t, []string{"arn:aws:s3:::lake/warehouse/db/orders/*"}, policy.Statement[0].Resource)
	assert.Contains(t, policy.Statement[0].Action, "s3:PutObject")
	assert.Equal(t, []string{"arn:aws:s3:::lake"}, policy.Statement[1].Resource)
	assert.Equal(t, []string{"warehouse/db/orders/", "warehouse/db/orders/*"}, policy.Statement[1].Condition["StringLike"]["s3:prefix"],
		"never the bare prefix, which would list warehouse/db/orders2/ too")
}

// A moved table's credentials reach the locations it left too, in one
// session: the most recent first, as many as fit STS's bound on a session
// policy; one that cannot be scoped, or not in S3, is left out.
func TestSTSCredentialsReachTheLocationsATableLeft(t *testing.T) {
	srv := ststest.Start()
	defer srv.Close()
	v := newSTSVendor(t, srv, &clock{now: time.Now()})
	ctx := context.Background()
	type policyDoc struct {
		Statement []struct {
			Action    []string
			Resource  []string
			Condition map[string]map[string][]string
		}
	}
	last := func() (string, policyDoc) {
		calls := srv.Calls()
		require.NotEmpty(t, calls)
		var doc policyDoc
		require.NoError(t, json.Unmarshal([]byte(calls[len(calls)-1].Policy), &doc))
		return calls[len(calls)-1].Policy, doc
	}

	_, _, err := v.Vend(ctx, "s3://lake/w/t2", true, "s3://lake/w/t1/", "s3://other/old/t", "s3://lake/w/t*", "file:///x", "s3://lake/w/t2")
	require.NoError(t, err)
	_, doc := last()
	require.Len(t, doc.Statement, 5, "objects, then list and location for each bucket")
	assert.Equal(t, []string{"arn:aws:s3:::lake/w/t2/*", "arn:aws:s3:::lake/w/t1/*", "arn:aws:s3:::other/old/t/*"}, doc.Statement[0].Resource)
	assert.NotContains(t, doc.Statement[0].Action, "s3:PutObject")
	assert.Equal(t, []string{"arn:aws:s3:::lake"}, doc.Statement[1].Resource)
	assert.Equal(t, []string{"w/t2/", "w/t2/*", "w/t1/", "w/t1/*"}, doc.Statement[1].Condition["StringLike"]["s3:prefix"])
	assert.Equal(t, []string{"arn:aws:s3:::other"}, doc.Statement[3].Resource)
	assert.Equal(t, []string{"old/t/", "old/t/*"}, doc.Statement[3].Condition["StringLike"]["s3:prefix"])

	// Other locations left are other credentials, not the cached ones.
	n := len(srv.Calls())
	_, _, err = v.Vend(ctx, "s3://lake/w/t2", true)
	require.NoError(t, err)
	assert.Len(t, srv.Calls(), n+1)

	// Thirty-two long locations do not fit: the most recent ones do.
	var also []string
	for i := range 32 {
		also = append(also, fmt.Sprintf("s3://lake/w/%s-%02d", strings.Repeat("x", 60), i))
	}
	_, _, err = v.Vend(ctx, "s3://lake/w/t3", false, also...)
	require.NoError(t, err)
	policy, doc := last()
	assert.LessOrEqual(t, len(policy), 2048, "STS's bound on a session policy")
	objects := doc.Statement[0].Resource
	require.Greater(t, len(objects), 2)
	require.Less(t, len(objects), 33)
	assert.Equal(t, "arn:aws:s3:::lake/w/t3/*", objects[0])
	assert.Equal(t, "arn:aws:s3:::lake/w/"+strings.Repeat("x", 60)+"-00/*", objects[1], "in the order given")

	// STS refusing the larger policy (its packed size) does not fail the
	// table's own credentials: they are asked for alone.
	srv.LimitPolicy(700)
	n = len(srv.Calls())
	props, ok, err := v.Vend(ctx, "s3://lake/w/t4", false, also...)
	require.NoError(t, err)
	require.True(t, ok)
	assert.NotEmpty(t, props[vending.PropSessionToken])
	require.Len(t, srv.Calls(), n+2)
	_, doc = last()
	assert.Equal(t, []string{"arn:aws:s3:::lake/w/t4/*"}, doc.Statement[0].Resource)
}

func TestReadOnlyPolicyCannotWrite(t *testing.T) {
	p, err := vending.SessionPolicy("lake", "/w/t/", vending.ReadOnly)
	require.NoError(t, err)
	assert.NotContains(t, p, "PutObject")
	assert.NotContains(t, p, "DeleteObject")
	assert.Contains(t, p, `"arn:aws:s3:::lake/w/t/*"`)
	_, err = vending.SessionPolicy("", "w", vending.ReadOnly)
	assert.Error(t, err)
	// A wildcard in the location would widen the grant: refused.
	for _, prefix := range []string{"w/t*", "w/t?x", "w/${aws:username}"} {
		_, err = vending.SessionPolicy("lake", prefix, vending.ReadWrite)
		assert.ErrorIs(t, err, vending.ErrUnavailable, prefix)
	}
}

func TestSTSCredentialsAreReusedForHalfTheirLife(t *testing.T) {
	srv := ststest.Start()
	defer srv.Close()
	clk := &clock{now: time.Now()}
	v := newSTSVendor(t, srv, clk)
	ctx := context.Background()

	first, _, err := v.Vend(ctx, "s3://lake/w/t1", false)
	require.NoError(t, err)
	again, _, err := v.Vend(ctx, "s3://lake/w/t1/", false)
	require.NoError(t, err)
	assert.Equal(t, first, again, "the same location within half the lifetime reuses its credentials")
	assert.Len(t, srv.Calls(), 1)

	other, _, err := v.Vend(ctx, "s3://lake/w/t2", false)
	require.NoError(t, err)
	assert.NotEqual(t, first[vending.PropAccessKeyID], other[vending.PropAccessKeyID], "another table gets its own credentials")
	_, _, err = v.Vend(ctx, "s3://lake/w/t1", true)
	require.NoError(t, err)
	assert.Len(t, srv.Calls(), 3, "read-only credentials are separate")

	clk.Add(16 * time.Minute) // past half of 30 minutes
	fresh, _, err := v.Vend(ctx, "s3://lake/w/t1", false)
	require.NoError(t, err)
	assert.NotEqual(t, first[vending.PropAccessKeyID], fresh[vending.PropAccessKeyID])
	assert.Len(t, srv.Calls(), 4)
}

func TestSTSRefusalIsUnavailable(t *testing.T) {
	srv := ststest.Start()
	defer srv.Close()
	srv.Deny(true)
	v := newSTSVendor(t, srv, &clock{now: time.Now()})
	_, _, err := v.Vend(context.Background(), "s3://lake/w/t", false)
	require.ErrorIs(t, err, vending.ErrUnavailable)
	assert.NotContains(t, err.Error(), "NODESECRET")

	srv.Deny(false)
	props, _, err := v.Vend(context.Background(), "s3://lake/w/t", false)
	require.NoError(t, err, "a refusal is not cached")
	assert.NotEmpty(t, props[vending.PropSessionToken])
}

func TestLocalLocationsAreNotVendable(t *testing.T) {
	srv := ststest.Start()
	defer srv.Close()
	v := newSTSVendor(t, srv, &clock{now: time.Now()})
	for _, loc := range []string{"file:///data/w/t", "/data/w/t", "", "gs://b/t"} {
		props, ok, err := v.Vend(context.Background(), loc, false)
		assert.NoError(t, err, loc)
		assert.False(t, ok, loc)
		assert.Nil(t, props, loc)
	}
	assert.Empty(t, srv.Calls())
}

func TestStaticKeysHandOutTheNodeKeys(t *testing.T) {
	v, err := vending.New(vending.Config{Mode: vending.ModeStaticKeys, AWS: nodeAWS("NODEKEY", "NODESECRET")})
	require.NoError(t, err)
	props, _, err := v.Vend(context.Background(), "s3a://lake/w/t", true)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{vending.PropAccessKeyID: "NODEKEY", vending.PropSecretAccessKey: "NODESECRET"}, props)

	none, err := vending.New(vending.Config{Mode: vending.ModeStaticKeys, AWS: aws.Config{}})
	require.NoError(t, err)
	_, _, err = none.Vend(context.Background(), "s3://lake/w/t", true)
	assert.ErrorIs(t, err, vending.ErrUnavailable)
}

func TestConcurrentRequestsShareOneSTSCall(t *testing.T) {
	srv := ststest.Start()
	defer srv.Close()
	v := newSTSVendor(t, srv, &clock{now: time.Now()})
	var wg sync.WaitGroup
	keys := make([]string, 16)
	for i := range keys {
		wg.Go(func() {
			p, _, err := v.Vend(context.Background(), "s3://lake/w/hot", false)
			if assert.NoError(t, err) {
				keys[i] = p[vending.PropAccessKeyID]
			}
		})
	}
	wg.Wait()
	for _, k := range keys {
		assert.Equal(t, keys[0], k)
	}
	assert.Len(t, srv.Calls(), 1)
}
