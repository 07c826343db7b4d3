package admin

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floe-catalog/floe/fsm"
)

// The feed names a named warehouse's tables as clients do, with the
// warehouse beside them; the default warehouse's events are unchanged.
func TestFeedEventsNameTheWarehouse(t *testing.T) {
	from := fsm.Ident{Namespace: fsm.InWarehouse("sales", []string{"a"}), Name: "t"}
	to := fsm.Ident{Namespace: fsm.InWarehouse("sales", []string{"b"}), Name: "u"}
	ev := fsm.Event{Index: 7, Ident: &from, To: &to}
	raw, err := json.Marshal(clientEvent(ev))
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, json.Unmarshal(raw, &got))
	assert.Equal(t, "sales", got["warehouse"])
	assert.Equal(t, map[string]any{"namespace": []any{"a"}, "name": "t"}, got["ident"])
	assert.Equal(t, map[string]any{"namespace": []any{"b"}, "name": "u"}, got["to"])
	assert.Equal(t, fsm.InWarehouse("sales", []string{"a"}), from.Namespace, "the stored event is not changed")

	nsEv := fsm.Event{Index: 8, Namespace: fsm.InWarehouse("sales", []string{"x"})}
	raw, err = json.Marshal(clientEvent(nsEv))
	require.NoError(t, err)
	assert.JSONEq(t, `{"index":8,"seq":0,"type":"","namespace":["x"],"warehouse":"sales"}`, string(raw))

	def := fsm.Event{Index: 9, Namespace: []string{"x"}}
	raw, err = json.Marshal(clientEvent(def))
	require.NoError(t, err)
	assert.JSONEq(t, `{"index":9,"seq":0,"type":"","namespace":["x"]}`, string(raw))
}
