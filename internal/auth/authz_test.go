package auth

import (
	"strings"
	"testing"
)

func TestImplies(t *testing.T) {
	all := []string{PrivilegeRead, PrivilegeWrite, PrivilegeDrop, PrivilegePurge, PrivilegeAdmin}
	want := map[string][]string{
		PrivilegeRead:  {PrivilegeRead},
		PrivilegeWrite: {PrivilegeWrite, PrivilegeRead},
		PrivilegeDrop:  {PrivilegeDrop},
		PrivilegePurge: {PrivilegePurge, PrivilegeDrop},
		PrivilegeAdmin: all,
	}
	for _, has := range all {
		for _, w := range all {
			expected := false
			for _, x := range want[has] {
				expected = expected || x == w
			}
			if got := Implies(has, w); got != expected {
				t.Errorf("Implies(%s, %s) = %v", has, w, got)
			}
		}
	}
	if Implies("owner", PrivilegeRead) || Implies(PrivilegeAdmin, "owner") {
		t.Error("unknown privilege implied")
	}
}

func TestValidPrivilege(t *testing.T) {
	for _, s := range []string{"read", "write", "drop", "purge", "admin"} {
		if !ValidPrivilege(s) {
			t.Errorf("ValidPrivilege(%q) = false", s)
		}
	}
	for _, s := range []string{"", "READ", "owner", " read", "all"} {
		if ValidPrivilege(s) {
			t.Errorf("ValidPrivilege(%q) = true", s)
		}
	}
}

func TestValidGrantee(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want bool
	}{
		{"principal:alice", true},
		{"role:analysts", true},
		{"principal:alice@example.com", true},
		{"role:team-a.read_only", true},
		{"principal:A0", true},
		{"principal:" + strings.Repeat("x", 255), true},
		{"principal:" + strings.Repeat("x", 256), false},
		{"principal:", false},
		{"role:", false},
		{"alice", false},
		{"user:alice", false},
		{"Principal:alice", false},
		{"principal:al ice", false},
		{"principal:al/ice", false},
		{"role:a:b", false},
		{"principal:é", false},
		{"", false},
	} {
		if got := ValidGrantee(tc.s); got != tc.want {
			t.Errorf("ValidGrantee(%q) = %v, want %v", tc.s, got, tc.want)
		}
	}
}

func TestAllowed(t *testing.T) {
	alice := Principal{Name: "alice", Roles: []string{"analysts"}, Via: ViaJWT}
	bob := Principal{Name: "bob", Via: ViaOIDC}
	root := Principal{Name: "root", Roles: []string{RootRole}, Via: ViaRoot}
	fakeRoot := Principal{Name: "root", Via: ViaOIDC}
	grants := []Grant{
		{Grantee: "principal:alice", Namespace: []string{"sales"}, Privilege: PrivilegeWrite},
		{Grantee: "role:analysts", Namespace: []string{"finance", "tax"}, Privilege: PrivilegeRead},
		{Grantee: "role:analysts", Namespace: []string{"ops"}, Privilege: PrivilegePurge},
		{Grantee: "principal:bob", Namespace: nil, Privilege: PrivilegeRead},
		{Grantee: "principal:bob", Namespace: []string{"lab"}, Privilege: PrivilegeAdmin},
		{Grantee: "principal:alice", Namespace: []string{"junk"}, Privilege: "owner"}, // unknown: ignored
		{Grantee: "alice", Namespace: nil, Privilege: PrivilegeAdmin},                 // bad grantee: ignored
	}
	for _, tc := range []struct {
		name string
		p    Principal
		priv string
		ns   []string
		want bool
	}{
		{"grant on the namespace", alice, PrivilegeWrite, []string{"sales"}, true},
		{"write implies read", alice, PrivilegeRead, []string{"sales"}, true},
		{"child namespace", alice, PrivilegeWrite, []string{"sales", "eu"}, true},
		{"deep child", alice, PrivilegeRead, []string{"sales", "eu", "de", "q1"}, true},
		{"write does not imply drop", alice, PrivilegeDrop, []string{"sales"}, false},
		{"not the parent", alice, PrivilegeRead, nil, false},
		{"sibling with common prefix string", alice, PrivilegeRead, []string{"salesforce"}, false},
		{"grant through role", alice, PrivilegeRead, []string{"finance", "tax", "2025"}, true},
		{"role grant not on ancestor", alice, PrivilegeRead, []string{"finance"}, false},
		{"role grant read only", alice, PrivilegeWrite, []string{"finance", "tax"}, false},
		{"purge implies drop", alice, PrivilegeDrop, []string{"ops", "logs"}, true},
		{"purge does not imply read", alice, PrivilegeRead, []string{"ops"}, false},
		{"unknown grant privilege ignored", alice, PrivilegeRead, []string{"junk"}, false},
		{"malformed grantee ignored", alice, PrivilegeAdmin, nil, false},
		{"catalog-wide grant", bob, PrivilegeRead, []string{"anything", "deep"}, true},
		{"catalog-wide grant covers the catalog", bob, PrivilegeRead, nil, true},
		{"catalog-wide read is not write", bob, PrivilegeWrite, []string{"x"}, false},
		{"admin implies purge", bob, PrivilegePurge, []string{"lab", "x"}, true},
		{"admin implies write", bob, PrivilegeWrite, []string{"lab"}, true},
		{"unknown privilege asked", bob, "owner", []string{"lab"}, false},
		{"empty privilege asked", bob, "", []string{"lab"}, false},
		{"root always", root, PrivilegeAdmin, []string{"any"}, true},
		{"root even unknown privilege", root, "owner", nil, true},
		{"a principal named root is not root", fakeRoot, PrivilegeRead, []string{"sales"}, false},
		{"no grants", Principal{Name: "carol"}, PrivilegeRead, []string{"sales"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Allowed(tc.p, grants, tc.priv, tc.ns); got != tc.want {
				t.Fatalf("Allowed(%s, %s, %v) = %v", tc.p.Name, tc.priv, tc.ns, got)
			}
		})
	}
}

func TestAllowedRoleNamedLikePrincipal(t *testing.T) {
	// A role grant does not apply to a principal of the same name, nor
	// the other way round.
	grants := []Grant{{Grantee: "role:alice", Privilege: PrivilegeRead}}
	if Allowed(Principal{Name: "alice"}, grants, PrivilegeRead, nil) {
		t.Error("role:alice applied to principal alice")
	}
	grants = []Grant{{Grantee: "principal:ops", Privilege: PrivilegeRead}}
	if Allowed(Principal{Name: "bob", Roles: []string{"ops"}}, grants, PrivilegeRead, nil) {
		t.Error("principal:ops applied to role ops")
	}
}

func TestVisible(t *testing.T) {
	alice := Principal{Name: "alice", Roles: []string{"analysts"}}
	grants := []Grant{
		{Grantee: "principal:alice", Namespace: []string{"a", "b", "c"}, Privilege: PrivilegeRead},
		{Grantee: "role:analysts", Namespace: []string{"x"}, Privilege: PrivilegeWrite},
		{Grantee: "principal:alice", Namespace: []string{"junk"}, Privilege: "owner"},
	}
	for _, tc := range []struct {
		name string
		p    Principal
		g    []Grant
		ns   []string
		want bool
	}{
		{"the catalog, ancestor of a grant", alice, grants, nil, true},
		{"ancestor", alice, grants, []string{"a"}, true},
		{"ancestor 2", alice, grants, []string{"a", "b"}, true},
		{"the namespace", alice, grants, []string{"a", "b", "c"}, true},
		{"descendant", alice, grants, []string{"a", "b", "c", "d"}, true},
		{"sibling", alice, grants, []string{"a", "z"}, false},
		{"cousin", alice, grants, []string{"a", "b", "z"}, false},
		{"through role", alice, grants, []string{"x", "y"}, true},
		{"unrelated", alice, grants, []string{"q"}, false},
		{"unknown privilege ignored", alice, grants, []string{"junk"}, false},
		{"no grants, catalog", alice, nil, nil, false},
		{"catalog-wide grant", alice, []Grant{{Grantee: "principal:alice", Privilege: PrivilegeRead}}, []string{"any"}, true},
		{"root", Principal{Name: "root", Via: ViaRoot}, nil, []string{"any"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Visible(tc.p, tc.g, tc.ns); got != tc.want {
				t.Fatalf("Visible(%v) = %v", tc.ns, got)
			}
		})
	}
}
