package harness

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// PollInterval is the pause between two checks of the waits in this package.
const PollInterval = 20 * time.Millisecond

// Poll calls f until it returns nil, sleeping interval between calls. It
// gives up after timeout or after timeout/interval+1 calls, whichever comes
// first, and returns f's last error wrapped in "gave up after <timeout>";
// when ctx ends it returns ctx's error. f gets ctx as it is: a call that
// can block must bound itself (the HTTP clients here have timeouts).
func Poll(ctx context.Context, timeout, interval time.Duration, f func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for range int(timeout/interval) + 1 {
		if err := ctx.Err(); err != nil {
			return err
		}
		if last = f(ctx); last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
	if last == nil {
		last = errors.New("condition not met")
	}
	return fmt.Errorf("gave up after %s: %w", timeout, last)
}
