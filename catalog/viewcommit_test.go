package catalog

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// decodeViewCommit takes the bodies clients send, with or without
// requirements, and refuses the rest with a 400.
func TestDecodeViewCommit(t *testing.T) {
	for _, body := range []string{
		`{"updates":[{"action":"set-properties","updates":{"k":"v"}}]}`,
		`{"requirements":null,"updates":[]}`,
		`{"requirements":[]}`, `{}`, // absent lists are empty
		`{"identifier":{"namespace":["db"],"name":"v"},"requirements":[{"type":"assert-view-uuid","uuid":"0190b2c4-8d3e-7a1b-9c2d-3e4f5a6b7c8d"}],"updates":[{"action":"remove-properties","removals":["k"]}]}`,
	} {
		req, err := decodeViewCommit([]byte(body))
		require.NoError(t, err, body)
		for _, u := range req.Updates {
			require.NotNil(t, u, body)
		}
	}
	for _, body := range []string{
		``, `null`, ` null`, `[]`, `"x"`, `{`,
		`{"updates":5}`, `{"updates":[{"action":"no-such-action"}]}`,
		`{"requirements":[{"type":"no-such-requirement"}],"updates":[]}`,
		`{"requirements":{},"updates":[]}`, `{"identifier":5,"updates":[]}`,
		// iceberg-go takes these as a nil schema and fails on it.
		`{"updates":[{"action":"add-schema"}]}`, `{"updates":[{"action":"add-schema","schema":null}]}`,
		`{"updates":[{"action":"add-schema","schema":5}]}`,
	} {
		_, err := decodeViewCommit([]byte(body))
		requireBadRequest(t, err)
	}
}
