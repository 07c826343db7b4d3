package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// maxBody bounds every response body the driver reads.
const maxBody = 16 << 20

// doRequest sends one request with a JSON body (nil: none) and extra
// headers (name, value pairs), bounded by writeTimeout, and returns the
// status and the whole body.
func doRequest(ctx context.Context, cl *http.Client, method, url string, body any, headers ...string) (int, []byte, error) {
	return doRequestTimeout(ctx, cl, writeTimeout, method, url, body, headers...)
}

// doRequestTimeout is doRequest bounded by timeout instead.
func doRequestTimeout(ctx context.Context, cl *http.Client, timeout time.Duration, method, url string, body any, headers ...string) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		var b []byte
		switch v := body.(type) {
		case []byte:
			b = v
		case string:
			b = []byte(v)
		default:
			var err error
			if b, err = json.Marshal(body); err != nil {
				return 0, nil, err
			}
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := cl.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	return resp.StatusCode, rb, err
}

// expect turns a status other than want into an error naming the request.
func expect(what string, want, status int, body []byte, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if status != want {
		return fmt.Errorf("%s: status %d (want %d), body %s", what, status, want, truncate(string(body), 300))
	}
	return nil
}

// tableSchema is the one-column schema of every benchmark table.
const tableSchema = `{"type":"struct","schema-id":0,"fields":[{"id":1,"name":"id","type":"long","required":true}]}`

// loadedTable is the part of a LoadTableResult the driver reads.
type loadedTable struct {
	MetadataLocation string `json:"metadata-location"`
	Metadata         struct {
		UUID     string `json:"table-uuid"`
		Location string `json:"location"`
	} `json:"metadata"`
}

// createTableAt creates ns.name through base (a node's URL) and returns
// the created table.
func createTableAt(ctx context.Context, cl *http.Client, base, ns, name string, headers ...string) (loadedTable, error) {
	var lt loadedTable
	body := fmt.Sprintf(`{"name":%q,"schema":%s}`, name, tableSchema)
	st, rb, err := doRequest(ctx, cl, http.MethodPost, base+"/v1/namespaces/"+ns+"/tables", body, headers...)
	if err := expect("create table "+ns+"."+name, http.StatusOK, st, rb, err); err != nil {
		return lt, err
	}
	err = json.Unmarshal(rb, &lt)
	return lt, err
}

// ensureNamespace creates ns through base; an existing one is fine.
func ensureNamespace(ctx context.Context, cl *http.Client, base, ns string) error {
	st, rb, err := doRequest(ctx, cl, http.MethodPost, base+"/v1/namespaces", map[string]any{"namespace": []string{ns}})
	if err == nil && st == http.StatusConflict {
		return nil
	}
	return expect("create namespace "+ns, http.StatusOK, st, rb, err)
}

// parallel runs f(i) for i in [0, n) on at most workers goroutines and
// returns the first error; after an error no new i is started.
func parallel(ctx context.Context, n, workers int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range max(1, min(workers, n)) {
		wg.Go(func() {
			for i := range next {
				if err := f(ctx, i); err != nil {
					cancel(err)
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	return context.Cause(ctx)
}

// truncate shortens s, trimmed, to n bytes for error messages.
func truncate(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
