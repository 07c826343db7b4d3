package bench

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"
)

// S3Requests counts S3 requests by operation, as a counting proxy in front
// of the server sees them (path-style addressing: /bucket/key).
type S3Requests struct {
	DeleteObjects int64 // POST /bucket?delete (bulk delete)
	DeleteKeys    int64 // keys named in those requests
	List          int64 // GET /bucket with list-type, prefix, … (ListObjects, ListObjectsV2)
	Get           int64 // GET /bucket/key
	Head          int64 // HEAD /bucket/key or /bucket
	Put           int64 // PUT /bucket/key (PutObject, UploadPart, CopyObject)
	DeleteObject  int64 // DELETE /bucket/key
	Other         int64 // anything else (multipart create/complete, bucket operations)
}

// Total is every request counted.
func (r S3Requests) Total() int64 {
	return r.DeleteObjects + r.List + r.Get + r.Head + r.Put + r.DeleteObject + r.Other
}

// Sub returns r - o, field by field.
func (r S3Requests) Sub(o S3Requests) S3Requests {
	return S3Requests{
		DeleteObjects: r.DeleteObjects - o.DeleteObjects, DeleteKeys: r.DeleteKeys - o.DeleteKeys, List: r.List - o.List,
		Get: r.Get - o.Get, Head: r.Head - o.Head, Put: r.Put - o.Put, DeleteObject: r.DeleteObject - o.DeleteObject, Other: r.Other - o.Other,
	}
}

// Add returns r + o, field by field.
func (r S3Requests) Add(o S3Requests) S3Requests {
	return S3Requests{
		DeleteObjects: r.DeleteObjects + o.DeleteObjects, DeleteKeys: r.DeleteKeys + o.DeleteKeys, List: r.List + o.List,
		Get: r.Get + o.Get, Head: r.Head + o.Head, Put: r.Put + o.Put, DeleteObject: r.DeleteObject + o.DeleteObject, Other: r.Other + o.Other,
	}
}

// s3CountingProxy is a reverse proxy on 127.0.0.1 in front of an S3
// server that counts the requests passing through it. The floe nodes are
// given its address as their S3 endpoint; the driver's own requests (the
// objects and manifests it writes while building tables) go to the server
// directly and are not counted. SigV4 requests signed for the proxy's
// address verify at the server because the proxy passes the Host header on
// unchanged.
type s3CountingProxy struct {
	Endpoint string // http://127.0.0.1:port

	srv *http.Server
	ln  net.Listener

	mu     sync.Mutex
	counts S3Requests
}

// startS3CountingProxy starts a proxy in front of target (an http:// URL).
func startS3CountingProxy(target string) (*s3CountingProxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &s3CountingProxy{Endpoint: "http://" + ln.Addr().String(), ln: ln}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
	}
	rp.ErrorLog = nil
	p.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p.count(r)
			rp.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 30 * time.Second,
	}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// count classifies r and, for a bulk delete, counts the keys in its body
// (which it reads and puts back).
func (p *s3CountingProxy) count(r *http.Request) {
	q := r.URL.Query()
	path := strings.Trim(r.URL.Path, "/")
	_, key, hasKey := strings.Cut(path, "/")
	hasKey = hasKey && key != ""
	var c S3Requests
	switch {
	case r.Method == http.MethodPost && q.Has("delete") && !hasKey:
		c.DeleteObjects = 1
		if r.Body != nil {
			body, err := io.ReadAll(r.Body)
			r.Body.Close()
			r.Body = io.NopCloser(bytes.NewReader(body))
			if err == nil {
				c.DeleteKeys = int64(bytes.Count(body, []byte("<Object>")))
			}
		}
	case r.Method == http.MethodGet && !hasKey && (q.Has("list-type") || q.Has("prefix") || q.Has("delimiter") || q.Has("marker") || len(q) == 0):
		c.List = 1
	case r.Method == http.MethodGet && hasKey:
		c.Get = 1
	case r.Method == http.MethodHead:
		c.Head = 1
	case r.Method == http.MethodPut && hasKey:
		c.Put = 1
	case r.Method == http.MethodDelete && hasKey:
		c.DeleteObject = 1
	default:
		c.Other = 1
	}
	p.mu.Lock()
	p.counts = p.counts.Add(c)
	p.mu.Unlock()
}

// Counts returns the requests counted so far.
func (p *s3CountingProxy) Counts() S3Requests {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts
}

// Stop closes the proxy.
func (p *s3CountingProxy) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := p.srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		_ = p.srv.Close()
	}
}
