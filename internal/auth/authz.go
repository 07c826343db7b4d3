package auth

import (
	"slices"
	"strings"
)

// Privileges, from weakest to strongest. A grant of one privilege also
// grants the ones it implies:
//
//	admin ⊇ every privilege
//	purge ⊇ drop     (purging a table drops it and deletes its files)
//	write ⊇ read     (committing needs the current metadata)
//
// drop does not imply read or write, and purge does not imply write.
const (
	PrivilegeRead  = "read"
	PrivilegeWrite = "write"
	PrivilegeDrop  = "drop"
	PrivilegePurge = "purge"
	PrivilegeAdmin = "admin"
)

// Grantee prefixes.
const (
	GranteePrincipal = "principal:"
	GranteeRole      = "role:"
)

// maxGranteeNameLen is the longest principal or role name.
const maxGranteeNameLen = 255

// Grant gives a principal or role a privilege on a namespace subtree or the
// whole catalog.
type Grant struct {
	// Grantee is "principal:NAME" or "role:NAME".
	Grantee string
	// Namespace the grant applies to, with its children at any depth and
	// their tables; nil or empty: the whole catalog.
	Namespace []string
	// Privilege is one of the Privilege constants.
	Privilege string
}

// implies lists what each privilege grants, itself included.
var implies = map[string][]string{
	PrivilegeRead:  {PrivilegeRead},
	PrivilegeWrite: {PrivilegeWrite, PrivilegeRead},
	PrivilegeDrop:  {PrivilegeDrop},
	PrivilegePurge: {PrivilegePurge, PrivilegeDrop},
	PrivilegeAdmin: {PrivilegeAdmin, PrivilegePurge, PrivilegeDrop, PrivilegeWrite, PrivilegeRead},
}

// ValidPrivilege reports whether s is one of the Privilege constants.
func ValidPrivilege(s string) bool {
	_, ok := implies[s]
	return ok
}

// Implies reports whether holding privilege has grants want. Both must be
// valid privileges.
func Implies(has, want string) bool {
	return slices.Contains(implies[has], want)
}

// ValidGrantee reports whether s is "principal:NAME" or "role:NAME" with
// NAME 1 to 255 characters of [A-Za-z0-9._@-].
func ValidGrantee(s string) bool {
	name, ok := strings.CutPrefix(s, GranteePrincipal)
	if !ok {
		name, ok = strings.CutPrefix(s, GranteeRole)
	}
	return ok && ValidName(name)
}

// ValidName reports whether s is a valid principal or role name: 1 to 255
// characters of [A-Za-z0-9._@-].
func ValidName(s string) bool {
	if len(s) == 0 || len(s) > maxGranteeNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '.', c == '_', c == '@', c == '-':
		default:
			return false
		}
	}
	return true
}

// Allowed reports whether p holds priv on namespace (or on a table in it):
// some grant to "principal:<p.Name>" or to "role:<r>" for one of p.Roles
// has a privilege that implies priv, on namespace, on one of its ancestors,
// or on the whole catalog. The root principal (Principal.IsRoot) is always
// allowed. An unknown priv is never allowed (except to root); grants with
// unknown privileges are ignored. A nil or empty namespace asks about the
// catalog itself, which only catalog-wide grants cover.
func Allowed(p Principal, grants []Grant, priv string, namespace []string) bool {
	if p.IsRoot() {
		return true
	}
	if !ValidPrivilege(priv) {
		return false
	}
	for _, g := range grants {
		if holds(p, g) && Implies(g.Privilege, priv) && isPrefix(g.Namespace, namespace) {
			return true
		}
	}
	return false
}

// Visible reports whether p may see namespace exist: it holds some
// privilege on it, on an ancestor, on the whole catalog or on a descendant
// (so that listing namespaces shows the path down to what p may use). The
// root principal sees everything.
func Visible(p Principal, grants []Grant, namespace []string) bool {
	if p.IsRoot() {
		return true
	}
	for _, g := range grants {
		if holds(p, g) && ValidPrivilege(g.Privilege) && (isPrefix(g.Namespace, namespace) || isPrefix(namespace, g.Namespace)) {
			return true
		}
	}
	return false
}

// holds reports whether g is granted to p, by name or through a role.
func holds(p Principal, g Grant) bool {
	if name, ok := strings.CutPrefix(g.Grantee, GranteePrincipal); ok {
		return name != "" && name == p.Name
	}
	if role, ok := strings.CutPrefix(g.Grantee, GranteeRole); ok {
		return role != "" && slices.Contains(p.Roles, role)
	}
	return false
}

// isPrefix reports whether prefix is namespace or one of its ancestors
// (the empty namespace is everyone's ancestor).
func isPrefix(prefix, namespace []string) bool {
	return len(prefix) <= len(namespace) && slices.Equal(prefix, namespace[:len(prefix)])
}
