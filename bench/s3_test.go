package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/internal/harness"
)

// TestCountOnDiskMatchesListing checks that counting a prefix's objects on
// versitygw's disk gives what ListObjectsV2 gives, for objects written
// through S3 and written as files, before and after they are deleted.
func TestCountOnDiskMatchesListing(t *testing.T) {
	bin, err := harness.FindVersitygw()
	if err != nil {
		if os.Getenv("FLOE_REQUIRE_S3") == "1" {
			t.Fatal(err)
		}
		t.Skipf("versitygw not installed (bash .ci/install-versitygw.sh): %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s3, err := StartS3(ctx, bin, filepath.Join(t.TempDir(), "s3"))
	require.NoError(t, err)
	defer s3.Stop()

	uri := func(key string) string { return "s3://" + s3.Bucket + "/" + key }
	var put, bulk, other, keys []string
	for i := range 3 {
		put = append(put, uri(fmt.Sprintf("w/t/data/p%d.parquet", i)))
	}
	for i := range 5 {
		bulk = append(bulk, uri(fmt.Sprintf("w/t/data/sub/b%d.parquet", i)))
	}
	other = append(other, uri("w/t2/data/x.parquet"), uri("w/tx.parquet"))
	require.NoError(t, s3.putObjects(ctx, append(put, other...)))
	require.NoError(t, s3.bulkWriteObjects(ctx, bulk))
	for _, u := range append(put, bulk...) {
		keys = append(keys, s3Key(u))
	}

	check := func(when string, counts map[string]int) {
		t.Helper()
		for prefix, want := range counts {
			listed, err := s3.list(ctx, prefix)
			require.NoError(t, err)
			require.Equal(t, want, listed, "ListObjectsV2 under %s %s", prefix, when)
			counted, err := s3.Count(ctx, prefix)
			require.NoError(t, err)
			require.Equal(t, want, counted, "counted on disk under %s %s", prefix, when)
		}
	}
	check("before the delete", map[string]int{"w/t/": 8, "w/t/data/sub/": 5, "w/": 10, "w/none/": 0})
	require.NoError(t, s3.deleteLoop(ctx, keys))
	check("after the delete", map[string]int{"w/t/": 0, "w/": 2})
}
