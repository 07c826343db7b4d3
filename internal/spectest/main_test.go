package spectest

import (
	"fmt"
	"os"
	"testing"
)

// TestMain skips this package's tests, with one line, when the spec is not
// there to test against, unless FLOE_REQUIRE_SPEC=1.
func TestMain(m *testing.M) {
	if _, err := SpecPath(); err != nil && !Required() {
		fmt.Println("spectest: skipping:", MissingHint)
		os.Exit(0)
	}
	os.Exit(m.Run())
}
