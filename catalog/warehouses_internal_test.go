package catalog

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
)

type allowAll struct{}

func (allowAll) Principal(*http.Request) string                        { return "p" }
func (allowAll) Allowed(*http.Request, string, []string) (bool, error) { return true, nil }
func (allowAll) Visible(*http.Request, []string) (bool, error)         { return true, nil }

// An unknown warehouse's message names the served ones only without
// authorization: with it on, /v1/config answers without a token, and a
// principal of one warehouse need not learn the others' names.
func TestUnknownWarehouseNamesTheServedOnesOnlyWithoutAuth(t *testing.T) {
	s := &Server{warehouses: []*warehouse{{prefix: "floe"}, {prefix: "sales"}}}
	assert.Equal(t, ` (this catalog serves "floe", "sales")`, s.servedHint())
	s.cfg.Authorizer = allowAll{}
	assert.Empty(t, s.servedHint())
}
