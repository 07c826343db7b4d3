package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog/rest"
	"github.com/apache/iceberg-go/table"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const testRootToken = "root-token-for-tests-0123456789"

type authCluster struct {
	*testCluster
	auditDir string
}

// startAuthCluster starts three nodes with authorization on, each also
// given the flags extra.
func startAuthCluster(t *testing.T, extra ...string) *authCluster {
	t.Helper()
	auditDir := t.TempDir()
	c := &authCluster{auditDir: auditDir}
	c.testCluster = startTestClusterWith(t, func(p *clusterProc) []string {
		return append([]string{"--auth=on", "--auth-root-token", testRootToken, "--audit-log", filepath.Join(auditDir, p.id+".log")}, extra...)
	})
	require.Eventually(t, func() bool {
		for _, p := range c.procs {
			if !c.ready(p) {
				return false
			}
			if code, _ := c.call(t, p, testRootToken, "GET", "/management/v1/auth/keys", ""); code != http.StatusOK {
				return false
			}
		}
		return true
	}, 60*time.Second, 50*time.Millisecond)
	// The leader adds the first signing key on taking office.
	require.Eventually(t, func() bool {
		_, body := c.call(t, c.procs[0], testRootToken, "GET", "/management/v1/auth/keys", "")
		return strings.Contains(string(body), `"id"`)
	}, 30*time.Second, 50*time.Millisecond)
	return c
}

// call sends one request with a bearer token (none when token is "") and
// extra header pairs.
func (c *authCluster) call(t *testing.T, p *clusterProc, token, method, path, body string, headers ...string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://"+p.httpAddr+path, rd)
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}

// mustCall is call that requires status want.
func (c *authCluster) mustCall(t *testing.T, p *clusterProc, token, method, path, body string, want int) []byte {
	t.Helper()
	code, b := c.call(t, p, token, method, path, body)
	require.Equal(t, want, code, "%s %s on %s: %s", method, path, p.id, b)
	return b
}

// oauthToken gets an access token for id:secret at node p.
func (c *authCluster) oauthToken(t *testing.T, p *clusterProc, id, secret string) string {
	t.Helper()
	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {id}, "client_secret": {secret}, "scope": {"catalog"}}
	resp, err := c.client.PostForm("http://"+p.httpAddr+"/v1/oauth/tokens", form)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out struct {
		AccessToken string `json:"access_token"`
		TokenType   string `json:"token_type"`
		ExpiresIn   int    `json:"expires_in"`
	}
	body, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	require.NoError(t, json.Unmarshal(body, &out))
	require.NotEmpty(t, out.AccessToken)
	assert.True(t, strings.EqualFold(out.TokenType, "bearer"))
	assert.Positive(t, out.ExpiresIn)
	return out.AccessToken
}

// client creates an OAuth2 client for principal and returns id and secret.
func (c *authCluster) newClient(t *testing.T, p *clusterProc, principal string) (string, string) {
	t.Helper()
	body := c.mustCall(t, p, testRootToken, "POST", "/management/v1/auth/clients", `{"principal":"`+principal+`"}`, http.StatusCreated)
	var out struct {
		ID     string `json:"client-id"`
		Secret string `json:"client-secret"`
	}
	require.NoError(t, json.Unmarshal(body, &out))
	require.NotEmpty(t, out.Secret)
	return out.ID, out.Secret
}

func (c *authCluster) grant(t *testing.T, p *clusterProc, grantee string, ns []string, priv string) {
	t.Helper()
	b, err := json.Marshal(map[string]any{"grantee": grantee, "namespace": ns, "privilege": priv})
	require.NoError(t, err)
	c.mustCall(t, p, testRootToken, "POST", "/management/v1/auth/grants", string(b), http.StatusNoContent)
}

func TestAuthProcesses(t *testing.T) {
	c := startAuthCluster(t)
	n1, n2, n3 := c.procs[0], c.procs[1], c.procs[2]

	// The root principal sets up a namespace, a table and two principals:
	// the "engineers" role may write in sales; bob may only read in hr.
	c.mustCall(t, n2, testRootToken, "POST", "/v1/namespaces", `{"namespace":["sales"]}`, http.StatusOK)
	c.mustCall(t, n2, testRootToken, "POST", "/v1/namespaces", `{"namespace":["hr"]}`, http.StatusOK)
	c.mustCall(t, n2, testRootToken, "POST", "/v1/namespaces/sales/tables", `{"name":"orders","schema":{"type":"struct","fields":[]}}`, http.StatusOK)
	aliceID, aliceSecret := c.newClient(t, n3, "alice")
	bobID, bobSecret := c.newClient(t, n1, "bob")
	c.mustCall(t, n1, testRootToken, "PUT", "/management/v1/auth/principals/alice/roles", `{"roles":["engineers"]}`, http.StatusNoContent)
	c.grant(t, n2, "role:engineers", []string{"sales"}, "write")
	c.grant(t, n2, "role:engineers", []string{"sales"}, "purge")
	c.grant(t, n2, "principal:bob", []string{"hr"}, "read")

	// A token issued by one node is accepted by every node.
	alice := c.oauthToken(t, n1, aliceID, aliceSecret)
	bob := c.oauthToken(t, n3, bobID, bobSecret)
	for _, p := range c.procs {
		c.mustCall(t, p, alice, "GET", "/v1/namespaces/sales/tables/orders", "", http.StatusOK)
	}

	t.Run("a secret sent as a client id stays out of the audit log", func(t *testing.T) {
		form := url.Values{"grant_type": {"client_credentials"}, "client_id": {"swapped-secret-0123456789"}, "client_secret": {aliceID}}
		resp, err := c.client.PostForm("http://"+n2.httpAddr+"/v1/oauth/tokens", form)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	})

	t.Run("wrong secret and unknown client are refused", func(t *testing.T) {
		form := url.Values{"grant_type": {"client_credentials"}, "client_id": {aliceID}, "client_secret": {"wrong"}}
		resp, err := c.client.PostForm("http://"+n2.httpAddr+"/v1/oauth/tokens", form)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		assert.Contains(t, string(body), `"invalid_client"`)
	})

	// Every served route, from the router's own list (/v1/config's
	// endpoints), for each kind of caller. Namespace "sales" and table
	// "orders" exist; bodies are minimal, so an authorized request may
	// still be refused for its body, but never with 401 or 403.
	expired := c.expiredToken(t, n1, "alice")
	var cfg struct {
		Endpoints []string `json:"endpoints"`
	}
	require.NoError(t, json.Unmarshal(c.mustCall(t, n1, "", "GET", "/v1/config", "", http.StatusOK), &cfg))
	require.NotEmpty(t, cfg.Endpoints)
	for _, ep := range cfg.Endpoints {
		method, tmpl, ok := strings.Cut(ep, " ")
		require.True(t, ok, ep)
		path := strings.NewReplacer("{prefix}", "floe", "{namespace}", "sales", "{table}", "orders", "{view}", "v", "{function}", "f").Replace(tmpl)
		if method == "DELETE" || strings.HasSuffix(path, "/rename") || strings.HasSuffix(path, "/unregister") {
			continue // destructive routes are checked below, once
		}
		body := ""
		if method == "POST" || method == "PUT" {
			body = "{}"
		}
		for _, p := range []*clusterProc{n1, n2} {
			code, b := c.call(t, p, "", method, path, body)
			assert.Equal(t, http.StatusUnauthorized, code, "%s no token on %s: %s", ep, p.id, b)
			code, _ = c.call(t, p, "not-a-token", method, path, body)
			assert.Equal(t, http.StatusUnauthorized, code, "%s bad token", ep)
			code, _ = c.call(t, p, alice+"x", method, path, body)
			assert.Equal(t, http.StatusUnauthorized, code, "%s tampered token", ep)
			code, _ = c.call(t, p, expired, method, path, body)
			assert.Equal(t, http.StatusUnauthorized, code, "%s expired token", ep)
			code, b = c.call(t, p, bob, method, path, body)
			if strings.Contains(path, "/sales") {
				assert.Contains(t, []int{http.StatusNotFound, http.StatusForbidden}, code, "%s: bob sees nothing of sales: %s", ep, b)
			} else {
				// Routes that name their namespaces in the body or list
				// what bob may see: authenticated, checked further on.
				assert.NotEqual(t, http.StatusUnauthorized, code, "%s: %s", ep, b)
			}
			code, b = c.call(t, p, alice, method, path, body)
			assert.NotContains(t, []int{http.StatusUnauthorized, http.StatusForbidden}, code, "%s: alice may: %s", ep, b)
		}
	}

	t.Run("403 for what a caller sees but may not do, 404 for what it may not see", func(t *testing.T) {
		code, b := c.call(t, n2, bob, "GET", "/v1/namespaces/sales", "")
		assert.Equal(t, http.StatusNotFound, code, "%s", b)
		assert.Contains(t, string(b), "NoSuchNamespaceException")
		code, b = c.call(t, n2, bob, "GET", "/v1/namespaces?parent=sales", "")
		assert.Equal(t, http.StatusNotFound, code, "%s", b)
		// A table missing where bob may read is a plain 404, not a refusal
		// (the audit log below has no line for it).
		code, b = c.call(t, n2, bob, "GET", "/v1/namespaces/hr/tables/missing", "")
		assert.Equal(t, http.StatusNotFound, code, "%s", b)
		code, b = c.call(t, n2, bob, "POST", "/v1/namespaces/hr/tables", `{"name":"x","schema":{"type":"struct","fields":[]}}`)
		assert.Equal(t, http.StatusForbidden, code, "%s", b)
		assert.Contains(t, string(b), "ForbiddenException")
		// listNamespaces shows only what the caller may see.
		_, b = c.call(t, n3, bob, "GET", "/v1/namespaces", "")
		assert.Contains(t, string(b), `"hr"`)
		assert.NotContains(t, string(b), `"sales"`)
		// Only admins use the operator API.
		code, _ = c.call(t, n1, alice, "GET", "/management/v1/cluster", "")
		assert.Equal(t, http.StatusForbidden, code)
		code, _ = c.call(t, n1, "", "GET", "/management/v1/purge-jobs", "")
		assert.Equal(t, http.StatusUnauthorized, code)
		// The probes and the handshake stay open.
		c.mustCall(t, n1, "", "GET", "/readyz", "", http.StatusOK)
		c.mustCall(t, n1, "", "GET", "/v1/config", "", http.StatusOK)
	})

	t.Run("an engine with client credentials works end to end", func(t *testing.T) {
		ctx := context.Background()
		cat, err := rest.NewCatalog(ctx, "floe", "http://"+n2.httpAddr, rest.WithCredential(aliceID+":"+aliceSecret))
		require.NoError(t, err)
		tbl, err := cat.CreateTable(ctx, table.Identifier{"sales", "lines"}, testSchema())
		require.NoError(t, err)
		assert.Equal(t, table.Identifier{"sales", "lines"}, tbl.Identifier())
		_, err = cat.LoadTable(ctx, table.Identifier{"hr", "x"})
		assert.Error(t, err, "alice may not see hr")
		require.NoError(t, cat.PurgeTable(ctx, table.Identifier{"sales", "lines"}))
	})

	t.Run("a namespace writer places tables only inside its namespace", func(t *testing.T) {
		var cfgAns struct {
			Overrides map[string]string `json:"overrides"`
		}
		require.NoError(t, json.Unmarshal(c.mustCall(t, n1, "", "GET", "/v1/config", "", http.StatusOK), &cfgAns))
		wh := strings.TrimRight(cfgAns.Overrides["warehouse"], "/")
		require.NotEmpty(t, wh)
		body := func(name, loc string) string {
			return `{"name":"` + name + `","location":"` + loc + `","schema":{"type":"struct","fields":[]}}`
		}
		code, b := c.call(t, n2, alice, "POST", "/v1/namespaces/sales/tables", body("grab", wh+"/hr/grabbed"))
		assert.Equal(t, http.StatusForbidden, code, "%s", b)
		assert.Contains(t, string(b), "outside")
		c.mustCall(t, n2, alice, "POST", "/v1/namespaces/sales/tables", body("custom", wh+"/sales/elsewhere/custom"), http.StatusOK)
		// A catalog-wide writer (root) may place a table anywhere allowed.
		c.mustCall(t, n2, testRootToken, "POST", "/v1/namespaces/sales/tables", body("placed", wh+"/shared/placed"), http.StatusOK)
	})

	t.Run("a namespace writer's register adopts no place of another namespace", func(t *testing.T) {
		var created struct {
			MetadataLocation string         `json:"metadata-location"`
			Metadata         map[string]any `json:"metadata"`
		}
		require.NoError(t, json.Unmarshal(c.mustCall(t, n2, testRootToken, "POST", "/v1/namespaces/hr/tables",
			`{"name":"secret","schema":{"type":"struct","fields":[]}}`, http.StatusOK), &created))
		c.mustCall(t, n2, testRootToken, "DELETE", "/v1/namespaces/hr/tables/secret", "", http.StatusNoContent)
		hrLoc := created.Metadata["location"].(string)
		evilLoc := strings.Replace(hrLoc, "/hr/", "/sales/", 1) + "-evil"
		// alice writes, inside her own namespace, a metadata file whose log
		// names hr's file: registering it would adopt hr's place.
		write := func(props map[string]any) string {
			meta := maps.Clone(created.Metadata)
			meta["location"] = evilLoc
			meta["table-uuid"] = "0190b2c4-8d3e-7a1b-9c2d-3e4f5a6b7c8d"
			meta["metadata-log"] = []any{map[string]any{"metadata-file": created.MetadataLocation, "timestamp-ms": 1}}
			meta["properties"] = props
			b, err := json.Marshal(meta)
			require.NoError(t, err)
			file := evilLoc + "/metadata/00001-" + strconv.Itoa(len(props)) + ".metadata.json"
			path := strings.TrimPrefix(file, "file://")
			require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
			require.NoError(t, os.WriteFile(path, b, 0o644))
			return `{"name":"evil` + strconv.Itoa(len(props)) + `","metadata-location":"` + file + `"}`
		}
		code, b := c.call(t, n1, alice, "POST", "/v1/namespaces/sales/register", write(map[string]any{"write.data.path": hrLoc + "/data"}))
		assert.Equal(t, http.StatusBadRequest, code, "a write path into hr's place: %s", b)
		c.mustCall(t, n1, alice, "POST", "/v1/namespaces/sales/register", write(map[string]any{}), http.StatusOK)
		// hr's place was not taken: its table registers again.
		c.mustCall(t, n3, testRootToken, "POST", "/v1/namespaces/hr/register",
			`{"name":"secret","metadata-location":"`+created.MetadataLocation+`"}`, http.StatusOK)
	})

	t.Run("a cross-site browser request changes nothing", func(t *testing.T) {
		code, b := c.call(t, n1, testRootToken, "POST", "/v1/namespaces", `{"namespace":["xsite"]}`, "Sec-Fetch-Site", "cross-site")
		assert.Equal(t, http.StatusForbidden, code, "%s", b)
		// A page of another origin on the same site (another port of the
		// host), or a sandboxed one, is refused by its Origin.
		for _, origin := range []string{"http://127.0.0.1:1", "null", "http://evil.example"} {
			code, b = c.call(t, n1, testRootToken, "POST", "/v1/namespaces", `{"namespace":["xsite"]}`, "Origin", origin)
			assert.Equal(t, http.StatusForbidden, code, "%s: %s", origin, b)
		}
		code, b = c.call(t, n1, testRootToken, "POST", "/v1/namespaces", `{"namespace":["xsite"]}`, "Sec-Fetch-Site", "same-site")
		assert.Equal(t, http.StatusForbidden, code, "another port of the host: %s", b)
		code, _ = c.call(t, n1, testRootToken, "HEAD", "/v1/namespaces/xsite", "")
		assert.Equal(t, http.StatusNotFound, code)
		// The node's own origin, as the status page's forms send it.
		code, b = c.call(t, n1, testRootToken, "POST", "/v1/namespaces", `{"namespace":["xsite"]}`, "Origin", "http://"+n1.httpAddr)
		assert.Equal(t, http.StatusOK, code, "%s", b)
	})

	t.Run("two principals never share an Idempotency-Key's answer", func(t *testing.T) {
		const key = "0190f0f0-0000-7000-8000-000000000001"
		body := `{"namespace":["sales","q1"]}`
		code, b := c.call(t, n1, alice, "POST", "/v1/namespaces", body, "Idempotency-Key", key)
		require.Equal(t, http.StatusOK, code, "%s", b)
		code, b = c.call(t, n2, testRootToken, "POST", "/v1/namespaces", body, "Idempotency-Key", key)
		assert.Equal(t, http.StatusUnprocessableEntity, code, "another principal's key: %s", b)
		assert.Contains(t, string(b), "was already used for another request")
		assert.NotContains(t, string(b), "createNamespace", "nothing of the first request")
	})

	t.Run("rotation keeps unexpired tokens valid", func(t *testing.T) {
		before := alice
		// The route takes no fields: a body that sets any is refused.
		c.mustCall(t, n3, testRootToken, "POST", "/management/v1/auth/keys/rotate", `{"x":1}`, http.StatusBadRequest)
		c.mustCall(t, n3, testRootToken, "POST", "/management/v1/auth/keys/rotate", "not json", http.StatusBadRequest)
		c.mustCall(t, n3, testRootToken, "POST", "/management/v1/auth/keys/rotate", "", http.StatusOK)
		for _, p := range c.procs {
			c.mustCall(t, p, before, "GET", "/v1/namespaces/sales", "", http.StatusOK)
		}
		after := c.oauthToken(t, n2, aliceID, aliceSecret)
		assert.NotEqual(t, before, after)
		for _, p := range c.procs {
			c.mustCall(t, p, after, "GET", "/v1/namespaces/sales", "", http.StatusOK)
		}
	})

	t.Run("a replayed keyed creation names what the first request created", func(t *testing.T) {
		type created struct {
			ID        string `json:"id"`
			ClientID  string `json:"client-id"`
			CreatedMs int64  `json:"created-ms"`
			Token     string `json:"token"`
			Secret    string `json:"client-secret"`
		}
		for _, tc := range []struct{ path, body, key string }{
			{"/management/v1/auth/tokens", `{"principal":"dave"}`, "01937a5e-0000-7000-8000-0000000000a1"},
			{"/management/v1/auth/clients", `{"principal":"dave"}`, "01937a5e-0000-7000-8000-0000000000a2"},
		} {
			var answers []created
			for _, p := range []*clusterProc{n1, n2} {
				code, out := c.call(t, p, testRootToken, "POST", tc.path, tc.body, "Idempotency-Key", tc.key)
				require.Equal(t, http.StatusCreated, code, "%s: %s", tc.path, out)
				var a created
				require.NoError(t, json.Unmarshal(out, &a))
				answers = append(answers, a)
			}
			first, replay := answers[0], answers[1]
			assert.Equal(t, first.ID+first.ClientID, replay.ID+replay.ClientID, tc.path)
			assert.Equal(t, first.CreatedMs, replay.CreatedMs, tc.path)
			assert.NotEmpty(t, first.Token+first.Secret, tc.path)
			assert.Empty(t, replay.Token+replay.Secret, "a replay never repeats a secret: %s", tc.path)
			list := c.mustCall(t, n3, testRootToken, "GET", tc.path, "", http.StatusOK)
			assert.Contains(t, string(list), first.ID+first.ClientID, tc.path)
		}
	})

	t.Run("a replayed keyed rotation names the key the first one added", func(t *testing.T) {
		type rotated struct {
			ID        string `json:"id"`
			CreatedMs int64  `json:"created-ms"`
		}
		const key = "01937a5e-0000-7000-8000-0000000000a3"
		var answers []rotated
		for _, p := range []*clusterProc{n1, n2} {
			code, out := c.call(t, p, testRootToken, "POST", "/management/v1/auth/keys/rotate", "", "Idempotency-Key", key)
			require.Equal(t, http.StatusOK, code, "%s", out)
			var a rotated
			require.NoError(t, json.Unmarshal(out, &a))
			answers = append(answers, a)
		}
		assert.Equal(t, answers[0], answers[1])
		var keys struct {
			Keys []struct {
				ID string `json:"id"`
			} `json:"keys"`
		}
		require.NoError(t, json.Unmarshal(c.mustCall(t, n3, testRootToken, "GET", "/management/v1/auth/keys", "", http.StatusOK), &keys))
		var ids []string
		for _, k := range keys.Keys {
			ids = append(ids, k.ID)
		}
		assert.Contains(t, ids, answers[0].ID)
	})

	t.Run("operator requests that would not do what they say are refused", func(t *testing.T) {
		before := c.mustCall(t, n3, testRootToken, "GET", "/management/v1/auth/grants", "", http.StatusOK)
		beforeRoles := c.mustCall(t, n3, testRootToken, "GET", "/management/v1/auth/principals", "", http.StatusOK)
		for _, tc := range []struct{ method, path, body, want string }{
			// An empty namespace list would widen the grant to everything.
			{"POST", "/management/v1/auth/grants", `{"grantee":"principal:alice","namespace":[],"privilege":"admin"}`, "empty list"},
			// So would an empty warehouse name (an unset variable).
			{"POST", "/management/v1/auth/grants", `{"grantee":"principal:alice","warehouse":"","privilege":"admin"}`, "warehouse is empty"},
			// A namespace no table can be in matches nothing.
			{"POST", "/management/v1/auth/grants", `{"grantee":"principal:alice","namespace":["` + strings.Repeat("a", 256) + `"],"privilege":"read"}`, "at most 255 bytes"},
			// A missing roles field would clear every role.
			{"PUT", "/management/v1/auth/principals/alice/roles", `{}`, "roles is required"},
			{"PUT", "/management/v1/auth/principals/alice/roles", `{"roles":null}`, "roles is required"},
			// Only the root token is root.
			{"POST", "/management/v1/auth/clients", `{"principal":"root"}`, "reserved for the root token"},
			{"POST", "/management/v1/auth/tokens", `{"principal":"root"}`, "reserved for the root token"},
			{"POST", "/management/v1/auth/grants", `{"grantee":"principal:root","privilege":"read"}`, "reserved for the root token"},
			{"PUT", "/management/v1/auth/principals/root/roles", `{"roles":["etl"]}`, "reserved for the root token"},
			// Audit lines name a request without a principal "anonymous".
			{"POST", "/management/v1/auth/clients", `{"principal":"anonymous"}`, "reserved for requests without one"},
			{"POST", "/management/v1/auth/grants", `{"grantee":"principal:anonymous","privilege":"read"}`, "reserved for requests without one"},
			// A field the API does not have was never set.
			{"POST", "/management/v1/auth/tokens", `{"principal":"svc","id":"mine"}`, "unknown field"},
			{"POST", "/management/v1/auth/clients", `{"principal":"svc","secret":"mine"}`, "unknown field"},
			{"POST", "/management/v1/cluster/voters", `{"id":"x","address":"127.0.0.1:1","bogus":1}`, "unknown field"},
			{"POST", "/management/v1/auth/grants", `{"grantee":"principal:alice","privilege":"read"} {}`, "after the JSON value"},
		} {
			code, out := c.call(t, n1, testRootToken, tc.method, tc.path, tc.body)
			assert.Equal(t, http.StatusBadRequest, code, "%s %s %s: %s", tc.method, tc.path, tc.body, out)
			assert.Contains(t, string(out), tc.want, "%s %s", tc.method, tc.path)
		}
		assert.Equal(t, string(before), string(c.mustCall(t, n3, testRootToken, "GET", "/management/v1/auth/grants", "", http.StatusOK)))
		for _, g := range []string{"alice", "bogus:x", "principal:a/b"} {
			code, out := c.call(t, n1, testRootToken, "GET", "/management/v1/auth/grants?grantee="+url.QueryEscape(g), "")
			assert.Equal(t, http.StatusBadRequest, code, "a grantee filter of no grantee's form (%s): %s", g, out)
		}
		// A misspelt or repeated filter is refused, not ignored (every grant,
		// or the first grantee's alone, listed as the answer).
		for _, q := range []string{"grantees=principal:alice", "grantee=principal:alice&grantee=principal:bob"} {
			code, out := c.call(t, n1, testRootToken, "GET", "/management/v1/auth/grants?"+q, "")
			assert.Equal(t, http.StatusBadRequest, code, "%s: %s", q, out)
		}
		// The subtree's own path is no route: a 404 in the error model, not a redirect.
		noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		for _, path := range []string{"/management/v1/auth", "/management/v1/locations"} {
			req, err := http.NewRequest("POST", "http://"+n1.httpAddr+path, nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+testRootToken)
			resp, err := noFollow.Do(req)
			require.NoError(t, err)
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			assert.Equal(t, http.StatusNotFound, resp.StatusCode, "%s: %s", path, out)
			assert.Contains(t, string(out), `"code":404`, path)
		}
		assert.Equal(t, string(beforeRoles), string(c.mustCall(t, n3, testRootToken, "GET", "/management/v1/auth/principals", "", http.StatusOK)))
		code, out := c.call(t, n1, testRootToken, "GET", "/management/v1/auth/clients", "")
		require.Equal(t, http.StatusOK, code)
		assert.NotContains(t, string(out), `"principal":"root"`)
		// What an earlier release let through can still be removed.
		c.mustCall(t, n1, testRootToken, "POST", "/management/v1/auth/grants/revoke", `{"grantee":"principal:root","privilege":"read"}`, http.StatusNoContent)
		c.mustCall(t, n1, testRootToken, "PUT", "/management/v1/auth/principals/root/roles", `{"roles":[]}`, http.StatusNoContent)
	})

	t.Run("a client id is never replaced, with or without an Idempotency-Key", func(t *testing.T) {
		body := `{"id":"fixed-client","principal":"carol"}`
		first := c.mustCall(t, n1, testRootToken, "POST", "/management/v1/auth/clients", body, http.StatusCreated)
		var created struct {
			Secret string `json:"client-secret"`
		}
		require.NoError(t, json.Unmarshal(first, &created))
		for i, hdr := range [][]string{nil, {"Idempotency-Key", "01937a5e-0000-7000-8000-000000000001"}} {
			code, out := c.call(t, n2, testRootToken, "POST", "/management/v1/auth/clients", body, hdr...)
			assert.Equal(t, http.StatusConflict, code, "attempt %d: %s", i, out)
		}
		c.oauthToken(t, n3, "fixed-client", created.Secret)
	})

	t.Run("a deleted client gets no token; a revoked grant stops working", func(t *testing.T) {
		c.mustCall(t, n1, testRootToken, "DELETE", "/management/v1/auth/clients/"+bobID, "", http.StatusNoContent)
		form := url.Values{"grant_type": {"client_credentials"}, "client_id": {bobID}, "client_secret": {bobSecret}}
		resp, err := c.client.PostForm("http://"+n2.httpAddr+"/v1/oauth/tokens", form)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		// Revoked through one node, refused by every node at once: a
		// node checks grants against the cluster, not its own replica.
		// Several rounds, to give a lagging replica its chance.
		for i := range 5 {
			c.grant(t, n1, "principal:bob", []string{"hr"}, "read")
			for _, p := range c.procs {
				c.mustCall(t, p, bob, "GET", "/v1/namespaces/hr", "", http.StatusOK)
			}
			c.mustCall(t, n1, testRootToken, "POST", "/management/v1/auth/grants/revoke",
				`{"grantee":"principal:bob","namespace":["hr"],"privilege":"read"}`, http.StatusNoContent)
			for _, p := range []*clusterProc{n2, n3} {
				code, out := c.call(t, p, bob, "GET", "/v1/namespaces/hr", "")
				assert.Equal(t, http.StatusNotFound, code, "round %d, %s, just after the revoke: %s", i, p.id, out)
			}
		}
	})

	t.Run("a change feed ends once its caller's admin grant is revoked", func(t *testing.T) {
		_, out := c.call(t, n1, testRootToken, "POST", "/management/v1/auth/tokens", `{"principal":"feeder"}`)
		var tok struct {
			Token string `json:"token"`
		}
		require.NoError(t, json.Unmarshal(out, &tok), "%s", out)
		grant := `{"grantee":"principal:feeder","privilege":"admin"}`
		c.mustCall(t, n1, testRootToken, "POST", "/management/v1/auth/grants", grant, http.StatusNoContent)
		var cluster struct {
			Commit uint64 `json:"commit-index"`
		}
		require.NoError(t, json.Unmarshal(c.mustCall(t, n1, testRootToken, "GET", "/management/v1/cluster", "", http.StatusOK), &cluster))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("http://%s/management/v1/events?after=%d", n2.httpAddr, cluster.Commit), nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tok.Token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		lines := bufio.NewScanner(resp.Body)
		until := func(want string) []string {
			var seen []string
			for lines.Scan() {
				seen = append(seen, lines.Text())
				if strings.Contains(lines.Text(), want) {
					return seen
				}
			}
			t.Fatalf("the stream ended before %q: %q", want, seen)
			return nil
		}
		c.mustCall(t, n1, testRootToken, "POST", "/v1/namespaces", `{"namespace":["feed_before"]}`, http.StatusOK)
		until("feed_before")
		c.mustCall(t, n1, testRootToken, "POST", "/management/v1/auth/grants/revoke", grant, http.StatusNoContent)
		time.Sleep(1100 * time.Millisecond) // a stream checks at most once a second
		c.mustCall(t, n1, testRootToken, "POST", "/v1/namespaces", `{"namespace":["feed_after"]}`, http.StatusOK)
		seen := until("event: denied")
		assert.NotContains(t, strings.Join(seen, "\n"), "feed_after")
		rest, _ := io.ReadAll(resp.Body)
		assert.NotContains(t, string(rest), "feed_after", "the stream ended")
	})

	t.Run("a deleted static token is refused by every node at once", func(t *testing.T) {
		c.grant(t, n1, "principal:carol", []string{"sales"}, "read")
		for i := range 5 {
			_, out := c.call(t, n1, testRootToken, "POST", "/management/v1/auth/tokens", `{"principal":"carol"}`)
			var tok struct {
				ID    string `json:"id"`
				Token string `json:"token"`
			}
			require.NoError(t, json.Unmarshal(out, &tok), "%s", out)
			require.NotEmpty(t, tok.Token, "%s", out)
			for _, p := range c.procs {
				c.mustCall(t, p, tok.Token, "GET", "/v1/namespaces/sales", "", http.StatusOK)
			}
			c.mustCall(t, n1, testRootToken, "DELETE", "/management/v1/auth/tokens/"+tok.ID, "", http.StatusNoContent)
			for _, p := range []*clusterProc{n2, n3} {
				code, out := c.call(t, p, tok.Token, "GET", "/v1/namespaces/sales", "")
				assert.Equal(t, http.StatusUnauthorized, code, "round %d, %s, just after the delete: %s", i, p.id, out)
			}
		}
	})

	t.Run("the audit log names who did what", func(t *testing.T) {
		// A guessed status page session, answered with a redirect to the
		// login form, is an unauthenticated request all the same.
		c.call(t, n1, "", "GET", "/ui/purge-jobs", "", "Cookie", "floe_ui_session=floe_guess")
		var lines []map[string]any
		var all strings.Builder
		for _, p := range c.procs {
			f, err := os.Open(filepath.Join(c.auditDir, p.id+".log"))
			require.NoError(t, err)
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				all.Write(sc.Bytes())
				var m map[string]any
				require.NoError(t, json.Unmarshal(sc.Bytes(), &m), sc.Text())
				lines = append(lines, m)
			}
			f.Close()
		}
		find := func(pred func(m map[string]any) bool) bool {
			for _, m := range lines {
				if pred(m) {
					return true
				}
			}
			return false
		}
		assert.True(t, find(func(m map[string]any) bool {
			return m["principal"] == "alice" && m["operation"] == "createTable" && m["target"] == "sales.lines" && m["outcome"] == "ok" && m["request_id"] != ""
		}), "alice's createTable")
		assert.True(t, find(func(m map[string]any) bool {
			return m["principal"] == "bob" && m["outcome"] == "denied" && m["status"] == float64(http.StatusForbidden)
		}), "bob's refusal")
		assert.True(t, find(func(m map[string]any) bool {
			return m["principal"] == "bob" && m["outcome"] == "denied" && m["status"] == float64(http.StatusNotFound) &&
				m["operation"] == "loadNamespace" && m["target"] == "sales"
		}), "bob's read of a namespace hidden from him, answered 404: %v", linesOf(lines, "bob"))
		assert.True(t, find(func(m map[string]any) bool {
			return m["principal"] == "bob" && m["outcome"] == "denied" && m["operation"] == "listNamespaces"
		}), "bob's listing under a namespace hidden from him: %v", linesOf(lines, "bob"))
		assert.True(t, find(func(m map[string]any) bool {
			return m["principal"] == "bob" && m["outcome"] == "denied" && m["operation"] == "loadFunction" && m["target"] == "sales.f"
		}), "bob's load of a function in a namespace hidden from him names it: %v", linesOf(lines, "bob"))
		assert.False(t, find(func(m map[string]any) bool { return m["target"] == "hr.missing" }),
			"a read allowed but of a missing table is not a refusal")
		assert.True(t, find(func(m map[string]any) bool { return m["outcome"] == "unauthenticated" }), "a request without a token")
		assert.True(t, find(func(m map[string]any) bool {
			return m["path"] == "/ui/purge-jobs" && m["status"] == float64(http.StatusSeeOther) && m["outcome"] == "unauthenticated"
		}), "a guessed status page session")
		assert.True(t, find(func(m map[string]any) bool {
			return m["path"] == "/v1/oauth/tokens" && m["status"] == float64(http.StatusUnauthorized) && m["remote"] != "" &&
				m["target"] == "client:"+aliceID
		}), "a token request with a wrong secret, naming the client it tried")
		assert.True(t, find(func(m map[string]any) bool {
			return m["path"] == "/v1/oauth/tokens" && m["status"] == float64(http.StatusOK) && m["target"] == "client:"+aliceID
		}), "a token issued, naming the client")
		assert.True(t, find(func(m map[string]any) bool {
			return m["path"] == "/v1/oauth/tokens" && m["status"] == float64(http.StatusUnauthorized) && m["target"] == "client:(unknown)"
		}), "a token request for no known client")
		assert.NotContains(t, all.String(), "swapped-secret-0123456789", "an unknown client id is not written")
		assert.True(t, find(func(m map[string]any) bool {
			return m["principal"] == "root" && strings.Contains(fmt.Sprint(m["operation"]), "/management/v1/auth/grants") && m["node"] != "" &&
				m["target"] == "grantee=role:engineers privilege=write namespace=sales"
		}), "root's grant, naming what it grants: %v", linesOf(lines, "root"))
		assert.True(t, find(func(m map[string]any) bool {
			return m["principal"] == "root" && strings.Contains(fmt.Sprint(m["operation"]), "POST /management/v1/auth/clients") &&
				m["target"] == "principal=alice"
		}), "root's client for alice: %v", linesOf(lines, "root"))
		assert.True(t, find(func(m map[string]any) bool {
			return m["idempotency_key"] == "0190f0f0-0000-7000-8000-000000000001"
		}), "the Idempotency-Key")
		for _, p := range c.procs {
			b, err := os.ReadFile(filepath.Join(c.auditDir, p.id+".log"))
			require.NoError(t, err)
			assert.NotContains(t, string(b), aliceSecret)
			assert.NotContains(t, string(b), testRootToken)
			assert.NotContains(t, p.out.String(), aliceSecret)
			assert.NotContains(t, p.out.String(), testRootToken)
		}
	})

	// Last: it stops two nodes. A stale read is authorized from the
	// replica, as its data is read, so a node without a leader still
	// answers it; a linearizable one gets 503, never 401 or 403.
	t.Run("a stale read is authorized without a leader", func(t *testing.T) {
		_, out := c.call(t, n1, testRootToken, "POST", "/management/v1/auth/tokens", `{"principal":"carol"}`)
		var tok struct {
			Token string `json:"token"`
		}
		require.NoError(t, json.Unmarshal(out, &tok), "%s", out)
		c.mustCall(t, n3, tok.Token, "GET", "/v1/namespaces/sales", "", http.StatusOK)
		c.mustCall(t, n3, bob, "GET", "/v1/namespaces/hr", "", http.StatusNotFound)
		n1.kill(t)
		n2.kill(t)
		require.Eventually(t, func() bool {
			code, _ := c.call(t, n3, tok.Token, "GET", "/v1/namespaces/sales", "")
			return code == http.StatusServiceUnavailable
		}, 30*time.Second, 50*time.Millisecond, "without a leader a linearizable read is 503")
		stale := []string{"X-Floe-Read-Consistency", "stale"}
		code, body := c.call(t, n3, tok.Token, "GET", "/v1/namespaces/sales", "", stale...)
		assert.Equal(t, http.StatusOK, code, "a static token, stale: %s", body)
		code, body = c.call(t, n3, alice, "GET", "/v1/namespaces/sales/tables/orders", "", stale...)
		assert.Equal(t, http.StatusOK, code, "an OAuth token, stale: %s", body)
		code, body = c.call(t, n3, bob, "GET", "/v1/namespaces/hr", "", stale...)
		assert.Equal(t, http.StatusNotFound, code, "bob's revoked grant, from the replica: %s", body)
	})
}

// expiredToken creates a static token for principal that expires in one
// second and waits until it has.
func (c *authCluster) expiredToken(t *testing.T, p *clusterProc, principal string) string {
	t.Helper()
	body := c.mustCall(t, p, testRootToken, "POST", "/management/v1/auth/tokens", `{"principal":"`+principal+`","expires-in-seconds":1}`, http.StatusCreated)
	var out struct {
		Token string `json:"token"`
	}
	require.NoError(t, json.Unmarshal(body, &out))
	require.NotEmpty(t, out.Token)
	require.Eventually(t, func() bool {
		code, _ := c.call(t, p, out.Token, "GET", "/v1/namespaces", "")
		return code == http.StatusUnauthorized
	}, 10*time.Second, 100*time.Millisecond)
	return out.Token
}

func testSchema() *iceberg.Schema {
	return iceberg.NewSchema(0, iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true})
}

func linesOf(lines []map[string]any, principal string) []map[string]any {
	var out []map[string]any
	for _, m := range lines {
		if m["principal"] == principal {
			out = append(out, m)
		}
	}
	return out
}
