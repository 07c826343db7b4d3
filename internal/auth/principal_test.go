package auth

import (
	"context"
	"slices"
	"testing"
)

func TestPrincipalContext(t *testing.T) {
	if _, ok := FromContext(context.Background()); ok {
		t.Fatal("empty context has a principal")
	}
	p := Principal{Name: "alice", Roles: []string{"analyst"}, Via: ViaJWT}
	got, ok := FromContext(WithPrincipal(context.Background(), p))
	if !ok || got.Name != p.Name || got.Via != p.Via || !slices.Equal(got.Roles, p.Roles) {
		t.Fatalf("FromContext = %+v, %v", got, ok)
	}
}

func TestIsRoot(t *testing.T) {
	for _, tc := range []struct {
		p    Principal
		want bool
	}{
		{Principal{Name: "root", Via: ViaRoot}, true},
		{Principal{Name: "root", Via: ViaOIDC}, false},
		{Principal{Name: "root", Via: ViaJWT}, false},
		{Principal{Name: "alice", Via: ViaRoot}, false},
	} {
		if got := tc.p.IsRoot(); got != tc.want {
			t.Errorf("%+v.IsRoot() = %v", tc.p, got)
		}
	}
}
