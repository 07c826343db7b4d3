package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLogTail(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log")
	assert.Equal(t, "", LogTail(p, 3))
	var b strings.Builder
	for i := range 10 {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	require.NoError(t, os.WriteFile(p, []byte(b.String()), 0o644))
	assert.Equal(t, "line 7\nline 8\nline 9", LogTail(p, 3))
	assert.Equal(t, strings.TrimSuffix(b.String(), "\n"), LogTail(p, 100))
}

func TestLogContains(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log")
	assert.False(t, LogContains(p, 0, "x"))
	assert.Equal(t, int64(0), LogSize(p))
	require.NoError(t, os.WriteFile(p, []byte("alpha beta\ngamma\n"), 0o644))
	assert.True(t, LogContains(p, 0, "alpha", "beta"))
	assert.False(t, LogContains(p, 0, "alpha", "gamma"), "every string on one line")
	assert.False(t, LogContains(p, LogSize(p), "gamma"), "only from the offset on")
	assert.True(t, LogContains(p, int64(len("alpha beta\n")), "gamma"))
}

func TestShellJoin(t *testing.T) {
	assert.Equal(t, "floe --data-dir /tmp/a 'it'\\''s' '' 'a b'", ShellJoin([]string{"floe", "--data-dir", "/tmp/a", "it's", "", "a b"}))
}

func TestEnvWithout(t *testing.T) {
	t.Setenv("HARNESS_TEST_DROP", "1")
	t.Setenv("HARNESS_TEST_EXACT", "1")
	t.Setenv("HARNESS_TEST_EXACTLY", "1")
	env := EnvWithout("HARNESS_TEST_D", "HARNESS_TEST_EXACT=")
	assert.NotContains(t, env, "HARNESS_TEST_DROP=1")
	assert.NotContains(t, env, "HARNESS_TEST_EXACT=1")
	assert.Contains(t, env, "HARNESS_TEST_EXACTLY=1")
}
