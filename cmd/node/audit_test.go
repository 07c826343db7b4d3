package main

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An audit line is bounded whatever the request: a refused request with a
// 1 MiB path wrote it twice, 2 MB a line, as fast as a client could send.
func TestAuditLinesAreBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	a, err := openAuditLog(path, "n1")
	require.NoError(t, err)
	long := "/v1/namespaces/" + strings.Repeat("A", 1<<20)
	r := httptest.NewRequest("POST", long, nil)
	a.write(r, "anonymous", "req-1", opOf(r), "ns "+strings.Repeat("é", 1<<19), 401, "unauthenticated")
	require.NoError(t, a.Close())
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Less(t, len(b), 5*maxAuditedField, "one line")
	var line map[string]any
	require.NoError(t, json.Unmarshal(b, &line))
	for _, k := range []string{"path", "operation", "target"} {
		v, _ := line[k].(string)
		assert.Contains(t, v, " bytes)", k)
		assert.LessOrEqual(t, len(v), maxAuditedField+32, k)
	}
	assert.Equal(t, "/v1/namespaces/AAA", line["path"].(string)[:18])
	assert.Equal(t, "n1", line["node"])
}

// With authentication off every token request is answered 200 and no
// client exists: the id, which may be a secret sent in the wrong field,
// is never written.
func TestTokenRequestsWithAuthOffNameNoClient(t *testing.T) {
	s := &security{on: false}
	assert.Equal(t, "client:(unknown)", s.clientTarget("my-secret-in-the-wrong-field", 200))
	assert.Equal(t, "", s.clientTarget("", 200))
}
