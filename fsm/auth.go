package fsm

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
)

// Authentication and authorization state: OAuth2 clients, static bearer
// tokens, the token signing keys, grants and principals' roles. Every node
// reads them from its replica, so a token issued by one node is accepted by
// all and a grant takes effect everywhere once applied. Secrets are stored
// only as hashes (computed by the proposer); signing keys are stored whole,
// since every node signs and verifies with them.
const (
	TypePutAuthClient     CommandType = 30
	TypeDeleteAuthClient  CommandType = 31
	TypePutAuthToken      CommandType = 32
	TypeDeleteAuthToken   CommandType = 33
	TypeAddSigningKey     CommandType = 34
	TypeRetireSigningKey  CommandType = 35
	TypeSetGrant          CommandType = 36
	TypeSetPrincipalRoles CommandType = 37
)

// Bucket layout of the auth state.
//
//	auth_clients  client id → JSON AuthClient
//	auth_tokens   token id → JSON AuthToken
//	auth_keys     key id → JSON SigningKey
//	auth_grants   grantee, 0x00, namespace key, 0x00, privilege → JSON Grant
//	auth_roles    principal → JSON PrincipalRoles
var (
	bucketAuthClients = []byte("auth_clients")
	bucketAuthTokens  = []byte("auth_tokens")
	bucketAuthKeys    = []byte("auth_keys")
	bucketAuthGrants  = []byte("auth_grants")
	bucketAuthRoles   = []byte("auth_roles")
)

// AuthClient is an OAuth2 client (client credentials flow).
type AuthClient struct {
	ID string `json:"id"`
	// SecretHash is the client secret's slow hash (a PHC string).
	SecretHash  string   `json:"secret-hash"`
	Principal   string   `json:"principal"`
	Description string   `json:"description,omitempty"`
	CreatedMs   int64    `json:"created-ms"`
	CreatedBy   string   `json:"created-by,omitempty"`
	Roles       []string `json:"roles,omitempty"`
}

// AuthToken is a static bearer token for a service account.
type AuthToken struct {
	ID string `json:"id"`
	// Hash is the token secret's SHA-256, hex.
	Hash        string `json:"hash"`
	Principal   string `json:"principal"`
	Description string `json:"description,omitempty"`
	CreatedMs   int64  `json:"created-ms"`
	CreatedBy   string `json:"created-by,omitempty"`
	// ExpiresMs is when the token stops working; 0: never.
	ExpiresMs int64 `json:"expires-ms,omitempty"`
}

// SigningKey is an Ed25519 key that signs floe's access tokens.
type SigningKey struct {
	ID         string `json:"id"`
	Algorithm  string `json:"alg"`
	PrivateKey []byte `json:"private-key"`
	PublicKey  []byte `json:"public-key"`
	CreatedMs  int64  `json:"created-ms"`
	// RetiredMs is when the key stopped signing; 0: it may sign. A retired
	// key still verifies the tokens it signed until they expire.
	RetiredMs int64 `json:"retired-ms,omitempty"`
}

// Grant gives a grantee ("principal:NAME" or "role:NAME") a privilege on a
// namespace (with its children and tables) or, with no namespace, on the
// whole catalog.
type Grant struct {
	Grantee   string   `json:"grantee"`
	Namespace []string `json:"namespace,omitempty"`
	Privilege string   `json:"privilege"`
	CreatedMs int64    `json:"created-ms,omitempty"`
	CreatedBy string   `json:"created-by,omitempty"`
}

// PrincipalRoles lists the roles a principal holds.
type PrincipalRoles struct {
	Principal string   `json:"principal"`
	Roles     []string `json:"roles"`
}

// PutAuthClient creates or replaces an OAuth2 client.
type PutAuthClient struct {
	Client AuthClient `json:"client"`
	// IfAbsent refuses (StatusAlreadyExists) to replace a client with the
	// same id. Entries written before it existed replace.
	IfAbsent bool `json:"if-absent,omitempty"`
}

// DeleteAuthClient removes a client; StatusNotFound when there is none.
type DeleteAuthClient struct {
	ID string `json:"id"`
}

// PutAuthToken creates or replaces a static token.
type PutAuthToken struct {
	Token AuthToken `json:"token"`
}

// DeleteAuthToken removes a static token; StatusNotFound when there is none.
type DeleteAuthToken struct {
	ID string `json:"id"`
}

// AddSigningKey adds a key; the proposer generates it. With RetireOthers,
// every other key that may still sign is retired at AtMs in the same entry
// (a rotation). A key id already present is StatusAlreadyExists.
type AddSigningKey struct {
	Key          SigningKey `json:"key"`
	RetireOthers bool       `json:"retire-others,omitempty"`
	AtMs         int64      `json:"at-ms"`
	// PruneBeforeMs deletes keys retired before it (their tokens have all
	// expired); 0 keeps them.
	PruneBeforeMs int64 `json:"prune-before-ms,omitempty"`
}

// RetireSigningKey stops a key from signing at AtMs (it still verifies).
// StatusNotFound when there is no such key.
type RetireSigningKey struct {
	ID   string `json:"id"`
	AtMs int64  `json:"at-ms"`
}

// SetGrant adds a grant, or removes it with Revoke. Adding an existing grant
// or revoking a missing one changes nothing and is StatusOK: the end state
// is what was asked.
type SetGrant struct {
	Grant  Grant `json:"grant"`
	Revoke bool  `json:"revoke,omitempty"`
}

// SetPrincipalRoles replaces a principal's roles; no roles removes the entry.
type SetPrincipalRoles struct {
	Principal string   `json:"principal"`
	Roles     []string `json:"roles"`
}

func (PutAuthClient) Type() CommandType     { return TypePutAuthClient }
func (DeleteAuthClient) Type() CommandType  { return TypeDeleteAuthClient }
func (PutAuthToken) Type() CommandType      { return TypePutAuthToken }
func (DeleteAuthToken) Type() CommandType   { return TypeDeleteAuthToken }
func (AddSigningKey) Type() CommandType     { return TypeAddSigningKey }
func (RetireSigningKey) Type() CommandType  { return TypeRetireSigningKey }
func (SetGrant) Type() CommandType          { return TypeSetGrant }
func (SetPrincipalRoles) Type() CommandType { return TypeSetPrincipalRoles }

func init() {
	allBuckets = append(allBuckets, bucketAuthClients, bucketAuthTokens, bucketAuthKeys, bucketAuthGrants, bucketAuthRoles)
	register(TypePutAuthClient, registration{1, jsonCodec[PutAuthClient](1), applyPutAuthClient})
	register(TypeDeleteAuthClient, registration{1, jsonCodec[DeleteAuthClient](1), applyDeleteAuthClient})
	register(TypePutAuthToken, registration{1, jsonCodec[PutAuthToken](1), applyPutAuthToken})
	register(TypeDeleteAuthToken, registration{1, jsonCodec[DeleteAuthToken](1), applyDeleteAuthToken})
	register(TypeAddSigningKey, registration{1, jsonCodec[AddSigningKey](1), applyAddSigningKey})
	register(TypeRetireSigningKey, registration{1, jsonCodec[RetireSigningKey](1), applyRetireSigningKey})
	register(TypeSetGrant, registration{1, jsonCodec[SetGrant](1), applySetGrant})
	register(TypeSetPrincipalRoles, registration{1, jsonCodec[SetPrincipalRoles](1), applySetPrincipalRoles})
}

func grantKey(g Grant) []byte {
	var b bytes.Buffer
	b.WriteString(g.Grantee)
	b.WriteByte(0)
	b.Write(namespaceKey(g.Namespace))
	b.WriteByte(0)
	b.WriteString(g.Privilege)
	return b.Bytes()
}

// --- checks (see validate.go) ---

func (c PutAuthClient) check() (Result, bool) {
	if res, bad := checkID("client id", c.Client.ID); bad {
		return res, bad
	}
	if c.Client.SecretHash == "" {
		return invalid("client %s has no secret hash", c.Client.ID)
	}
	return checkID("principal", c.Client.Principal)
}

func (c DeleteAuthClient) check() (Result, bool) { return checkID("client id", c.ID) }

func (c PutAuthToken) check() (Result, bool) {
	if res, bad := checkID("token id", c.Token.ID); bad {
		return res, bad
	}
	if c.Token.Hash == "" {
		return invalid("token %s has no hash", c.Token.ID)
	}
	return checkID("principal", c.Token.Principal)
}

func (c DeleteAuthToken) check() (Result, bool) { return checkID("token id", c.ID) }

func (c AddSigningKey) check() (Result, bool) {
	if res, bad := checkID("key id", c.Key.ID); bad {
		return res, bad
	}
	if len(c.Key.PublicKey) == 0 {
		return invalid("signing key %s has no public key", c.Key.ID)
	}
	return Result{}, false
}

func (c RetireSigningKey) check() (Result, bool) { return checkID("key id", c.ID) }

func (c SetGrant) check() (Result, bool) {
	if res, bad := checkID("grantee", c.Grant.Grantee); bad {
		return res, bad
	}
	if res, bad := checkID("privilege", c.Grant.Privilege); bad {
		return res, bad
	}
	if len(c.Grant.Namespace) > 0 {
		return checkLevels(c.Grant.Namespace)
	}
	return Result{}, false
}

func (c SetPrincipalRoles) check() (Result, bool) {
	if res, bad := checkID("principal", c.Principal); bad {
		return res, bad
	}
	for _, r := range c.Roles {
		if res, bad := checkID("role", r); bad {
			return res, bad
		}
	}
	return Result{}, false
}

// --- apply ---

func notFound(format string, args ...any) Result {
	return Result{Status: StatusNotFound, Message: fmt.Sprintf(format, args...)}
}

func applyPutAuthClient(tx *txn, c Command) Result {
	cmd := c.(PutAuthClient)
	if cmd.IfAbsent {
		var old AuthClient
		if tx.get(bucketAuthClients, []byte(cmd.Client.ID), &old) {
			return fail(StatusAlreadyExists, "client %s exists; delete it first", cmd.Client.ID)
		}
	}
	tx.put(bucketAuthClients, []byte(cmd.Client.ID), cmd.Client)
	return Result{}
}

func applyDeleteAuthClient(tx *txn, c Command) Result {
	cmd := c.(DeleteAuthClient)
	var old AuthClient
	if !tx.get(bucketAuthClients, []byte(cmd.ID), &old) {
		return notFound("no client %s", cmd.ID)
	}
	tx.del(bucketAuthClients, []byte(cmd.ID))
	return Result{}
}

func applyPutAuthToken(tx *txn, c Command) Result {
	cmd := c.(PutAuthToken)
	tx.put(bucketAuthTokens, []byte(cmd.Token.ID), cmd.Token)
	return Result{}
}

func applyDeleteAuthToken(tx *txn, c Command) Result {
	cmd := c.(DeleteAuthToken)
	var old AuthToken
	if !tx.get(bucketAuthTokens, []byte(cmd.ID), &old) {
		return notFound("no token %s", cmd.ID)
	}
	tx.del(bucketAuthTokens, []byte(cmd.ID))
	return Result{}
}

func applyAddSigningKey(tx *txn, c Command) Result {
	cmd := c.(AddSigningKey)
	var old SigningKey
	if tx.get(bucketAuthKeys, []byte(cmd.Key.ID), &old) {
		return Result{Status: StatusAlreadyExists, Message: "signing key " + cmd.Key.ID + " exists"}
	}
	var keys []SigningKey
	_ = tx.tx.Bucket(bucketAuthKeys).ForEach(func(k, v []byte) error {
		var sk SigningKey
		mustUnmarshal(k, v, &sk)
		keys = append(keys, sk)
		return nil
	})
	for _, k := range keys {
		switch {
		case cmd.PruneBeforeMs > 0 && k.RetiredMs > 0 && k.RetiredMs < cmd.PruneBeforeMs:
			tx.del(bucketAuthKeys, []byte(k.ID))
		case cmd.RetireOthers && k.RetiredMs == 0:
			k.RetiredMs = cmd.AtMs
			tx.put(bucketAuthKeys, []byte(k.ID), k)
		}
	}
	tx.put(bucketAuthKeys, []byte(cmd.Key.ID), cmd.Key)
	return Result{}
}

func applyRetireSigningKey(tx *txn, c Command) Result {
	cmd := c.(RetireSigningKey)
	var k SigningKey
	if !tx.get(bucketAuthKeys, []byte(cmd.ID), &k) {
		return notFound("no signing key %s", cmd.ID)
	}
	if k.RetiredMs == 0 {
		k.RetiredMs = cmd.AtMs
		tx.put(bucketAuthKeys, []byte(k.ID), k)
	}
	return Result{}
}

func applySetGrant(tx *txn, c Command) Result {
	cmd := c.(SetGrant)
	key := grantKey(cmd.Grant)
	if cmd.Revoke {
		tx.del(bucketAuthGrants, key)
		return Result{}
	}
	var old Grant
	if !tx.get(bucketAuthGrants, key, &old) {
		tx.put(bucketAuthGrants, key, cmd.Grant)
	}
	return Result{}
}

func applySetPrincipalRoles(tx *txn, c Command) Result {
	cmd := c.(SetPrincipalRoles)
	roles := slices.Clone(cmd.Roles)
	slices.Sort(roles)
	roles = slices.Compact(roles)
	if len(roles) == 0 {
		tx.del(bucketAuthRoles, []byte(cmd.Principal))
		return Result{}
	}
	tx.put(bucketAuthRoles, []byte(cmd.Principal), PrincipalRoles{Principal: cmd.Principal, Roles: roles})
	return Result{}
}

// --- reads ---

// AuthClient returns the OAuth2 client with the given id.
func (r *Reader) AuthClient(id string) (AuthClient, bool) {
	var c AuthClient
	ok := r.get(bucketAuthClients, []byte(id), &c)
	return c, ok
}

// AuthClients lists every client, by id.
func (r *Reader) AuthClients() []AuthClient {
	var out []AuthClient
	_ = r.tx.Bucket(bucketAuthClients).ForEach(func(k, v []byte) error {
		var c AuthClient
		mustUnmarshal(k, v, &c)
		out = append(out, c)
		return nil
	})
	return out
}

// AuthToken returns the static token with the given id.
func (r *Reader) AuthToken(id string) (AuthToken, bool) {
	var t AuthToken
	ok := r.get(bucketAuthTokens, []byte(id), &t)
	return t, ok
}

// AuthTokens lists every static token, by id.
func (r *Reader) AuthTokens() []AuthToken {
	var out []AuthToken
	_ = r.tx.Bucket(bucketAuthTokens).ForEach(func(k, v []byte) error {
		var t AuthToken
		mustUnmarshal(k, v, &t)
		out = append(out, t)
		return nil
	})
	return out
}

// SigningKeys lists every signing key, by id.
func (r *Reader) SigningKeys() []SigningKey {
	var out []SigningKey
	_ = r.tx.Bucket(bucketAuthKeys).ForEach(func(k, v []byte) error {
		var sk SigningKey
		mustUnmarshal(k, v, &sk)
		out = append(out, sk)
		return nil
	})
	return out
}

// Grants lists the grants of the given grantees, or every grant when
// grantees is empty, ordered by grantee, namespace and privilege.
func (r *Reader) Grants(grantees ...string) []Grant {
	var out []Grant
	c := r.tx.Bucket(bucketAuthGrants).Cursor()
	collect := func(prefix []byte) {
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			var g Grant
			mustUnmarshal(k, v, &g)
			out = append(out, g)
		}
	}
	if len(grantees) == 0 {
		collect(nil)
		return out
	}
	sorted := slices.Clone(grantees)
	slices.Sort(sorted)
	for _, g := range slices.Compact(sorted) {
		collect(append([]byte(g), 0))
	}
	return out
}

// PrincipalRoles returns the roles of a principal (nil when none).
func (r *Reader) PrincipalRoles(principal string) []string {
	var pr PrincipalRoles
	if r.get(bucketAuthRoles, []byte(principal), &pr) {
		return pr.Roles
	}
	return nil
}

// AllPrincipalRoles lists every principal that holds a role.
func (r *Reader) AllPrincipalRoles() []PrincipalRoles {
	var out []PrincipalRoles
	_ = r.tx.Bucket(bucketAuthRoles).ForEach(func(k, v []byte) error {
		var pr PrincipalRoles
		mustUnmarshal(k, v, &pr)
		out = append(out, pr)
		return nil
	})
	return out
}

// GranteesOf returns the grantee names a principal acts as:
// "principal:NAME" and "role:R" for each of its roles.
func GranteesOf(principal string, roles []string) []string {
	out := []string{"principal:" + principal}
	for _, r := range roles {
		out = append(out, "role:"+strings.TrimSpace(r))
	}
	return out
}
