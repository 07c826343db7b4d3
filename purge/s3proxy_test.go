package purge_test

import (
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/catalog"
	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/internal/storage"
	"github.com/floe-catalog/floe/internal/testenv"
)

// Refusal modes of refusingS3.
const (
	refuseNone   int32 = iota
	refuseStatus       // DeleteObjects answers 403 AccessDenied
	refuseKeys         // DeleteObjects answers 200 listing AccessDenied for every key
)

// refusingS3 is a reverse proxy in front of a real S3 server that, when
// told to, refuses bulk deletes the two ways S3 does: the whole request,
// or every key inside a 200 answer. Everything else passes through (the
// SigV4 signature covers the proxy's host, which the proxy keeps).
type refusingS3 struct {
	mode    atomic.Int32
	refused atomic.Int64
	srv     *httptest.Server
}

func newRefusingS3(t *testing.T, target string) *refusingS3 {
	t.Helper()
	u, err := url.Parse(target)
	require.NoError(t, err)
	p := &refusingS3{}
	rp := httputil.NewSingleHostReverseProxy(u)
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, isDelete := r.URL.Query()["delete"]
		mode := p.mode.Load()
		if r.Method != http.MethodPost || !isDelete || mode == refuseNone {
			rp.ServeHTTP(w, r)
			return
		}
		p.refused.Add(1)
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/xml")
		if mode == refuseStatus {
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>deletes refused by the test proxy</Message></Error>`)
			return
		}
		var req struct {
			Objects []struct {
				Key string `xml:"Key"`
			} `xml:"Object"`
		}
		_ = xml.Unmarshal(body, &req)
		var b strings.Builder
		b.WriteString(`<?xml version="1.0" encoding="UTF-8"?><DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">`)
		for _, o := range req.Objects {
			b.WriteString("<Error><Key>")
			_ = xml.EscapeText(&b, []byte(o.Key))
			b.WriteString("</Key><Code>AccessDenied</Code><Message>key refused by the test proxy</Message></Error>")
		}
		b.WriteString("</DeleteResult>")
		fmt.Fprint(w, b.String())
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// TestS3RefusingDeletes runs a cluster whose S3 endpoint is a proxy that
// refuses DeleteObjects: each purge retries (attempts grow, the last error
// is S3's), goes FAILED at max attempts with every file in place, and once
// the proxy heals, a retry through the operator API deletes everything.
func TestS3RefusingDeletes(t *testing.T) {
	var proxy *refusingS3
	wh := warehouse{name: "s3-proxy", uri: func(t *testing.T) (string, storage.Config) {
		s3 := testenv.S3(t)
		proxy = newRefusingS3(t, s3.Endpoint)
		cfg := s3.StorageConfig()
		cfg.S3Endpoint = proxy.srv.URL
		return s3.Warehouse(), cfg
	}}
	c := newCluster(t, wh, 3, 5)
	for _, tc := range []struct {
		name string
		mode int32
		want string
	}{
		{"whole request refused", refuseStatus, "AccessDenied"},
		{"every key refused", refuseKeys, "AccessDenied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := c.follower()
			tbl := fmt.Sprintf("t%d", tc.mode)
			tt := c.makeTable(n, "refusing", tbl, nil, 2, 4)
			proxy.mode.Store(tc.mode)
			defer proxy.mode.Store(refuseNone)
			before := proxy.refused.Load()
			r := n.do(t, "DELETE", "/v1/namespaces/refusing/tables/"+tbl+"?purgeRequested=true", "", catalog.AsyncPurgeHeader, "true")
			require.Equal(t, 204, r.status, r.body)

			var attempts []int
			job := c.waitJob("refusing", tbl, 30*time.Second, func(j fsm.PurgeJob) bool {
				if len(attempts) == 0 || attempts[len(attempts)-1] != j.Attempts {
					attempts = append(attempts, j.Attempts)
				}
				return j.State == fsm.JobFailed
			})
			assert.Equal(t, 3, job.Attempts, "FAILED at max attempts")
			assert.Contains(t, job.LastError, tc.want)
			assert.GreaterOrEqual(t, proxy.refused.Load()-before, int64(3), "one refused request per attempt at least")
			assert.IsNonDecreasing(t, attempts)
			assert.ElementsMatch(t, tt.files, c.exist(tt.files), "nothing was deleted")
			var deleteErrors float64
			for _, o := range c.live() {
				deleteErrors += gathered(t, o.reg, "floe_purge_delete_errors_total")
			}
			assert.Greater(t, deleteErrors, float64(0), "refused deletes are counted")

			// The proxy heals; the operator retries the FAILED job.
			proxy.mode.Store(refuseNone)
			r = n.do(t, "POST", "/management/v1/purge-jobs/"+job.ID+"/retry", "")
			require.Equal(t, 200, r.status, r.body)
			done := c.waitJob("refusing", tbl, 30*time.Second, isState(fsm.JobSucceeded))
			assert.Empty(t, c.list(tt.tbl.Location()), "the table's prefix is empty")
			assert.Equal(t, int64(len(tt.files)), done.Progress.Deleted)
			r = n.do(t, "POST", "/v1/namespaces/refusing/tables", createTableBody(tbl, ""))
			assert.Equal(t, 200, r.status, "the tombstones are gone: %s", r.body)
		})
	}
}
