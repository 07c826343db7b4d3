package harness

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// pollWhileRunning is Poll that gives up at once, with
// "<name> exited before serving: <why>", when p is not running.
func (p *Process) pollWhileRunning(ctx context.Context, timeout time.Duration, f func(context.Context) error) error {
	var exited error
	err := Poll(ctx, timeout, PollInterval, func(ctx context.Context) error {
		if !p.Running() {
			exited = fmt.Errorf("%s exited before serving: %v (log %s)", p.cfg.Name, p.exitError(), p.cfg.LogPath)
			return nil // stop polling; exited is the result
		}
		return f(ctx)
	})
	if exited != nil {
		return exited
	}
	return err
}

// WaitHTTP waits, at most timeout, until a GET of url answers 200 OK. It
// gives up at once when the process exits ("<name> exited before serving").
// client must bound each request (see NewHTTPClient).
func (p *Process) WaitHTTP(ctx context.Context, client *http.Client, url string, timeout time.Duration) error {
	return p.pollWhileRunning(ctx, timeout, func(ctx context.Context) error {
		return getOK(ctx, client, url)
	})
}

// getOK GETs url and fails unless the answer is 200 OK, quoting the start
// of any other answer's body.
func getOK(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, truncate(string(body), 300))
	}
	return nil
}

func truncate(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
