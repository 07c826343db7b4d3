package storage_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/internal/storage"
)

// writeAll writes each uri with its own name as content, 16 at a time.
func writeAll(t *testing.T, s storage.Storage, uris []string) {
	t.Helper()
	ctx := context.Background()
	errs := make([]error, len(uris))
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i, u := range uris {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = s.Write(ctx, u, []byte(u))
		})
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, uris[i])
	}
}

// listAll returns every URI List reports under prefix.
func listAll(t *testing.T, s storage.Storage, prefix string) []string {
	t.Helper()
	var got []string
	require.NoError(t, s.List(context.Background(), prefix, func(uri string) error {
		got = append(got, uri)
		return nil
	}))
	return got
}
