package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/internal/testenv"
)

// findChromium returns the Chromium (or Chrome) binary, or skips the test
// with one line when there is none, unless FLOE_REQUIRE_CHROMIUM=1 (CI
// installs it), which fails it instead.
func findChromium(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("FLOE_REQUIRE_CHROMIUM") == "1" {
		t.Fatal("FLOE_REQUIRE_CHROMIUM=1 but no chromium: install it (apt-get install -y --no-install-recommends chromium)")
	}
	t.Skip("no chromium (/usr/bin/chromium, or chromium, chromium-browser, google-chrome on PATH); skipping the browser test")
	return ""
}

// artifactDir is where the browser test keeps its screenshots:
// $FLOE_ARTIFACTS when set, else the test's temporary directory.
func artifactDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("FLOE_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	dir = filepath.Join(dir, "ui-browser")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	return dir
}

// TestStatusPageInChromium runs a real node with authentication on and a
// file warehouse, makes a table and a FAILED purge job through the APIs,
// then drives headless Chromium through the status page: sign in with the
// root token, see the cluster, find the table in the catalog browser, see
// the FAILED job and release it. Screenshots of each step are kept.
func TestStatusPageInChromium(t *testing.T) {
	chrome := findChromium(t)
	bin := floeBinary(t)
	shots := artifactDir(t)
	dir := t.TempDir()
	const root = "ui-browser-test-root-token-0123456789abcdef"
	p := &clusterProc{id: "node1", httpAddr: freeAddr(t), clusterAddr: freeAddr(t), out: &testenv.LogBuffer{}}
	p.args = []string{
		"--node-id", p.id, "--data-dir", filepath.Join(dir, "data"),
		"--http-addr", p.httpAddr, "--cluster-addr", p.clusterAddr,
		"--warehouse", "file://" + filepath.Join(dir, "warehouse"),
		"--purge-max-attempts", "1", "--auth", "on", "--auth-root-token", root,
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("---- node1, last lines:\n%s", p.tail(60))
		}
	})
	t.Cleanup(func() { p.kill(t) })
	p.start(t, bin)
	base := "http://" + p.httpAddr
	client := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	call := func(method, path, body string, headers ...string) (int, []byte, http.Header) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+root)
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(headers); i += 2 {
			if headers[i+1] == "" {
				req.Header.Del(headers[i]) // "": without it
			} else {
				req.Header.Set(headers[i], headers[i+1])
			}
		}
		resp, err := client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, b, resp.Header
	}
	require.Eventually(t, func() bool {
		resp, err := client.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 100*time.Millisecond, "node never ready")

	// A namespace, a table to browse, and a table whose purge fails: its
	// metadata file is corrupt, which fails the job at once.
	code, body, _ := call("POST", "/v1/namespaces", `{"namespace":["demo"],"properties":{"owner":"ops"}}`)
	require.Equal(t, http.StatusOK, code, string(body))
	schema := `{"type":"struct","schema-id":0,"fields":[{"id":1,"name":"id","type":"long","required":true},{"id":2,"name":"payload","type":"string","required":false}]}`
	code, body, _ = call("POST", "/v1/namespaces/demo/tables", `{"name":"events","schema":`+schema+`}`)
	require.Equal(t, http.StatusOK, code, string(body))
	var events struct {
		MetadataLocation string `json:"metadata-location"`
	}
	require.NoError(t, json.Unmarshal(body, &events))
	code, body, _ = call("POST", "/v1/namespaces/demo/tables", `{"name":"doomed","schema":`+schema+`}`)
	require.Equal(t, http.StatusOK, code, string(body))
	var doomed struct {
		MetadataLocation string `json:"metadata-location"`
	}
	require.NoError(t, json.Unmarshal(body, &doomed))
	u, err := url.Parse(doomed.MetadataLocation)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(u.Path, []byte("{this is not table metadata"), 0o644))
	code, body, _ = call("DELETE", "/v1/namespaces/demo/tables/doomed?purgeRequested=true", "", "X-Gravitino-Async-Purge", "true")
	require.Equal(t, http.StatusNoContent, code, string(body))
	var jobID string
	require.Eventually(t, func() bool {
		_, body, _ := call("GET", "/management/v1/purge-jobs?state=FAILED", "")
		var list struct {
			Jobs []struct {
				ID string `json:"id"`
			} `json:"jobs"`
		}
		if json.Unmarshal(body, &list) != nil || len(list.Jobs) != 1 {
			return false
		}
		jobID = list.Jobs[0].ID
		return true
	}, 20*time.Second, 100*time.Millisecond, "the purge job never FAILED")

	// Without a browser: no credential is sent to the login form, a bearer
	// header works, and an action without the CSRF field is refused.
	code, _, h := call("GET", "/ui/catalog", "", "Authorization", "")
	require.Equal(t, http.StatusSeeOther, code)
	assert.Equal(t, "/ui/login?next=%2Fui%2Fcatalog", h.Get("Location"))
	code, body, _ = call("GET", "/ui/catalog", "")
	require.Equal(t, http.StatusOK, code, string(body))
	assert.Contains(t, string(body), "demo")
	code, _, _ = call("POST", "/ui/purge-jobs/"+jobID+"/release", "form-token=01a2b3c4-0000-7000-8000-000000000000",
		"Content-Type", "application/x-www-form-urlencoded")
	require.Equal(t, http.StatusForbidden, code)

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.Headless, chromedp.WindowSize(1400, 900))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	defer cancelTab()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()

	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		require.NoError(t, err)
		path := filepath.Join(shots, name)
		require.NoError(t, os.WriteFile(path, png, 0o644))
		t.Logf("screenshot: %s", path)
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		require.NoError(t, err, sel)
		return s
	}
	// click clicks and waits for the page it loads.
	click := func(sel string) {
		t.Helper()
		_, err := chromedp.Run(ctx, chromedp.WaitEvent(page.LoadEventFired, nil, chromedp.Click(chromedp.CSS(sel))))
		require.NoError(t, err, sel)
	}

	// Sign in: /ui sends the browser to the login form, which sends it back.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/ui"), chromedp.WaitVisible(chromedp.ID("token"))))
	shot("01-login.png")
	require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("token"), root)))
	click(`form[action="/ui/login"] button[type="submit"]`)
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("members"))))
	members := text("#members")
	assert.Contains(t, members, "node1")
	assert.Contains(t, members, "leader")
	assert.Contains(t, members, "ready")
	assert.Contains(t, text("#cluster-summary"), "node1")
	assert.Contains(t, text("header"), "signed in as root")
	shot("02-cluster.png")

	// The catalog browser: the namespace, then the table.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/ui/catalog"), chromedp.WaitVisible(chromedp.ID("namespaces"))))
	click(`a[href="/ui/namespace?ns=demo"]`)
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("tables"))))
	tables := text("#tables")
	assert.Contains(t, tables, "events")
	assert.NotContains(t, tables, "doomed", "a dropped table is gone")
	click(`a[href="/ui/table?name=events&ns=demo"]`)
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("table-facts"))))
	facts := text("#table-facts")
	assert.Contains(t, facts, events.MetadataLocation)
	assert.Contains(t, facts, filepath.Join(dir, "warehouse", "demo", "events"))
	assert.Contains(t, text("main"), "payload")
	shot("03-table.png")

	// The FAILED job, released from the page.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/ui/purge-jobs?state=FAILED"), chromedp.WaitVisible(chromedp.ID("jobs"))))
	jobs := text("#jobs")
	assert.Contains(t, jobs, jobID)
	assert.Contains(t, jobs, "demo.doomed")
	assert.Contains(t, jobs, "FAILED")
	assert.Contains(t, jobs, "unreadable")
	shot("04-failed-job.png")
	click(`button[value="release"]`)
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("flash"))))
	assert.Contains(t, text("#flash"), "Purge job "+jobID+" released")
	assert.Contains(t, text("#jobs"), "released")
	loc, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	assert.Contains(t, loc, "/ui/purge-jobs?")
	shot("05-released.png")

	code, body, _ = call("GET", "/management/v1/purge-jobs/"+jobID, "")
	require.Equal(t, http.StatusOK, code, string(body))
	var job struct {
		Released   bool   `json:"released"`
		ReleasedBy string `json:"released-by"`
	}
	require.NoError(t, json.Unmarshal(body, &job))
	assert.True(t, job.Released)
	assert.Equal(t, "root", job.ReleasedBy)
	assert.Contains(t, p.out.String(), "purge job released from the status page")
}
