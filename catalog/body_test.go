package catalog

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
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
