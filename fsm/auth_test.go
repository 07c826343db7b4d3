package fsm

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAuthState(t *testing.T) {
	f := mustOpen(t, filepath.Join(t.TempDir(), "fsm.db"))
	var i uint64
	apply := func(c Command) Result { i++; return result(t, f.Apply(entry(t, i, c))) }
	view := func(fn func(r *Reader)) {
		require.NoError(t, f.View(func(r *Reader) error { fn(r); return nil }))
	}

	// Clients and tokens: put replaces, delete of a missing one is NotFound.
	require.NoError(t, apply(PutAuthClient{Client: AuthClient{ID: "etl", SecretHash: "$argon2id$x", Principal: "etl-bot"}}).Err())
	require.NoError(t, apply(PutAuthClient{Client: AuthClient{ID: "etl", SecretHash: "$argon2id$y", Principal: "etl-bot"}}).Err())
	require.NoError(t, apply(PutAuthToken{Token: AuthToken{ID: "t1", Hash: "abc", Principal: "svc"}}).Err())
	// IfAbsent never replaces: the owner of the client keeps its secret.
	assert.ErrorIs(t, apply(PutAuthClient{Client: AuthClient{ID: "etl", SecretHash: "$argon2id$z", Principal: "etl-bot"}, IfAbsent: true}).Err(), ErrAlreadyExists)
	view(func(r *Reader) {
		c, ok := r.AuthClient("etl")
		require.True(t, ok)
		assert.Equal(t, "$argon2id$y", c.SecretHash)
		assert.Len(t, r.AuthClients(), 1)
		tk, ok := r.AuthToken("t1")
		require.True(t, ok)
		assert.Equal(t, "svc", tk.Principal)
	})
	require.NoError(t, apply(DeleteAuthClient{ID: "etl"}).Err())
	assert.ErrorIs(t, apply(DeleteAuthClient{ID: "etl"}).Err(), ErrNotFound)
	require.NoError(t, apply(DeleteAuthToken{ID: "t1"}).Err())
	assert.ErrorIs(t, apply(DeleteAuthToken{ID: "t1"}).Err(), ErrNotFound)
	assert.ErrorIs(t, apply(PutAuthClient{Client: AuthClient{ID: "x", Principal: "p"}}).Err(), ErrInvalidCommand, "no secret hash")
	assert.ErrorIs(t, apply(PutAuthToken{Token: AuthToken{ID: "", Hash: "h", Principal: "p"}}).Err(), ErrInvalidCommand)

	// Signing keys: a rotation retires the others in the same entry; a
	// later rotation prunes keys retired before its cut-off.
	require.NoError(t, apply(AddSigningKey{Key: SigningKey{ID: "k1", PublicKey: []byte{1}, CreatedMs: 100}, AtMs: 100}).Err())
	assert.ErrorIs(t, apply(AddSigningKey{Key: SigningKey{ID: "k1", PublicKey: []byte{1}}}).Err(), ErrAlreadyExists)
	require.NoError(t, apply(AddSigningKey{Key: SigningKey{ID: "k2", PublicKey: []byte{2}, CreatedMs: 200}, RetireOthers: true, AtMs: 200}).Err())
	view(func(r *Reader) {
		keys := r.SigningKeys()
		require.Len(t, keys, 2)
		assert.Equal(t, int64(200), keys[0].RetiredMs, "k1 retired by the rotation")
		assert.Zero(t, keys[1].RetiredMs)
	})
	require.NoError(t, apply(AddSigningKey{Key: SigningKey{ID: "k3", PublicKey: []byte{3}, CreatedMs: 300}, RetireOthers: true, AtMs: 300, PruneBeforeMs: 250}).Err())
	view(func(r *Reader) {
		var ids []string
		for _, k := range r.SigningKeys() {
			ids = append(ids, k.ID)
		}
		assert.Equal(t, []string{"k2", "k3"}, ids, "k1 retired before 250 is pruned; k2 retired at 300 stays")
	})
	require.NoError(t, apply(RetireSigningKey{ID: "k3", AtMs: 400}).Err())
	assert.ErrorIs(t, apply(RetireSigningKey{ID: "nope", AtMs: 400}).Err(), ErrNotFound)

	// Grants are a set: adding twice or revoking a missing one is OK.
	g := Grant{Grantee: "role:analysts", Namespace: []string{"sales"}, Privilege: "read"}
	require.NoError(t, apply(SetGrant{Grant: g}).Err())
	require.NoError(t, apply(SetGrant{Grant: g}).Err())
	require.NoError(t, apply(SetGrant{Grant: Grant{Grantee: "principal:alice", Privilege: "admin"}}).Err())
	require.NoError(t, apply(SetGrant{Grant: Grant{Grantee: "role:analysts-eu", Privilege: "read"}}).Err())
	require.NoError(t, apply(SetPrincipalRoles{Principal: "bob", Roles: []string{"analysts", "analysts", "etl"}}).Err())
	view(func(r *Reader) {
		assert.Len(t, r.Grants(), 3)
		assert.Equal(t, []Grant{g}, r.Grants("role:analysts"), "a grantee's prefix does not match a longer name")
		assert.Equal(t, []string{"analysts", "etl"}, r.PrincipalRoles("bob"))
		assert.Len(t, r.Grants(GranteesOf("bob", r.PrincipalRoles("bob"))...), 1)
	})
	require.NoError(t, apply(SetGrant{Grant: g, Revoke: true}).Err())
	require.NoError(t, apply(SetGrant{Grant: g, Revoke: true}).Err())
	require.NoError(t, apply(SetPrincipalRoles{Principal: "bob"}).Err())
	view(func(r *Reader) {
		assert.Empty(t, r.Grants("role:analysts"))
		assert.Nil(t, r.PrincipalRoles("bob"))
	})
	assert.ErrorIs(t, apply(SetGrant{Grant: Grant{Grantee: "role:x", Namespace: []string{""}, Privilege: "read"}}).Err(), ErrInvalidCommand)
}
