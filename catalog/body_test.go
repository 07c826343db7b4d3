package catalog

import (
	"encoding/json"
	"io"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// loneSurrogate finds exactly the \u escapes encoding/json would read as
// U+FFFD: half of a surrogate pair.
func TestLoneSurrogate(t *testing.T) {
	for body, want := range map[string]bool{
		`{"a":"plain"}`:                   false,
		`{"a":"\u00e9\n\\u"}`:             false, // an escaped backslash, then a u
		`{"a":"\ud83d\ude00"}`:            false, // a pair
		`{"a":"\uD83D\uDE00 and \u0041"}`: false,
		`{"a":"a\ud800b"}`:                true, // high half alone
		`{"a":"a\udc00"}`:                 true, // low half alone
		`{"a":"\ud800\u0041"}`:            true, // high half, then no low half
		`{"a":"\ud800\ud800\udc00"}`:      true,
		`{"a":"x"}\ud800`:                 true,  // outside a string: the decoder refuses it anyway
		`{"a":"\u12"}`:                    false, // malformed: the decoder's to judge
		`\`:                               false,
	} {
		assert.Equal(t, want, loneSurrogate([]byte(body)), body)
		if want && json.Valid([]byte(body)) {
			var v map[string]string
			if assert.NoError(t, json.Unmarshal([]byte(body), &v), body) {
				assert.Contains(t, v["a"], "\ufffd", "encoding/json reads %s with U+FFFD", body)
			}
		}
	}
}

// timeoutReader fails as a body the server cut off for arriving too
// slowly: a net.Error that names the sockets.
type timeoutReader struct{}

func (timeoutReader) Read([]byte) (int, error) { return 0, timeoutError{} }

type timeoutError struct{}

func (timeoutError) Error() string {
	return "read tcp 127.0.0.1:8181->127.0.0.1:38518: i/o timeout"
}
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// A body the server cut off is a 400 that says so, without the sockets.
func TestBodyCutOffNamesNoSocket(t *testing.T) {
	r := httptest.NewRequest("POST", "/v1/namespaces", io.NopCloser(timeoutReader{}))
	_, err := readBody(r)
	var ae *apiError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, 400, ae.status)
	assert.Equal(t, "the request body did not arrive in time", ae.msg)
}
