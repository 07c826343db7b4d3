package catalog

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strings"

	"github.com/floe-catalog/floe/fsm"
)

// CredentialVendor hands out storage credentials for a table's files.
type CredentialVendor interface {
	// Vend returns FileIO properties holding credentials for the files
	// under location, allowing reads only when readOnly is set. ok is false
	// when the location's storage has nothing to vend (a local path). A
	// non-nil error means the credentials could not be obtained now; its
	// text holds no secret. also names further locations the credentials
	// should reach if they can (a moved table's former ones), most
	// important first.
	Vend(ctx context.Context, location string, readOnly bool, also ...string) (props map[string]string, ok bool, err error)
	// Expiring reports whether vended credentials expire, so that clients
	// are told where to refresh them.
	Expiring() bool
	// Scoped reports whether vended credentials reach only the location and
	// the access asked for. Unscoped ones (the node's own keys) reach every
	// table the node's keys do, read-write.
	Scoped() bool
}

// AccessDelegationHeader is how a client asks for delegated access: a
// comma-separated list of mechanisms, of which floe offers
// vended-credentials.
const AccessDelegationHeader = "X-Iceberg-Access-Delegation"

// FileIO properties that tell the Java client where to refresh vended
// credentials (S3FileIOProperties.REFRESH_CREDENTIALS_ENDPOINT, a path
// relative to the catalog URI).
const propRefreshCredentialsEndpoint = "client.refresh-credentials-endpoint"

type storageCredential struct {
	Prefix string            `json:"prefix"`
	Config map[string]string `json:"config"`
}

type loadCredentialsResponse struct {
	StorageCredentials []storageCredential `json:"storage-credentials"`
}

// wantsVendedCredentials reports whether the request asks for vended
// credentials. The header may repeat; values are compared without case.
func wantsVendedCredentials(r *http.Request) bool {
	for _, h := range r.Header.Values(AccessDelegationHeader) {
		for _, v := range strings.Split(h, ",") {
			if strings.EqualFold(strings.TrimSpace(v), "vended-credentials") {
				return true
			}
		}
	}
	return false
}

// vend returns the credential for the table id at location; ok is false
// when vending is off or the storage has nothing to vend. A failure is a
// 503: the client asked for credentials and would fail without them.
//
// A principal that may read but not write in the table's namespace gets
// read-only credentials.
func (s *Server) vend(r *http.Request, id fsm.Ident, location string) (storageCredential, bool, error) {
	vendor := s.whOf(r.Context()).vendor
	if vendor == nil {
		return storageCredential{}, false, nil
	}
	readOnly, err := s.readOnlyCredentials(r, id.Namespace)
	if err != nil {
		return storageCredential{}, false, err
	}
	if !vendor.Scoped() && s.cfg.Authorizer != nil {
		// Unscoped keys reach every table, read-write: with authorization
		// on, only a principal who may write the whole catalog gets
		// them. Others get an answer without credentials, as when the
		// storage has none to vend, and use their own.
		// The whole catalog, not the warehouse: a named warehouse without
		// keys of its own hands out the node's, which reach every other.
		wide, err := s.cfg.Authorizer.Allowed(r, PrivWrite, nil)
		if err != nil {
			return storageCredential{}, false, err
		}
		if !wide {
			s.log.Info("unscoped credentials withheld: the principal may not write the whole catalog",
				"table", id.String(), "principal", s.principalOf(r))
			return storageCredential{}, false, nil
		}
	}
	props, ok, err := vendor.Vend(r.Context(), location, readOnly, s.formerLocations(id, location)...)
	if err != nil {
		return storageCredential{}, false, &apiError{status: http.StatusServiceUnavailable, typ: "ServiceUnavailableException",
			// The cause (STS's answer: role and account names) is the
			// vendor's log line, not the client's business.
			msg: fmt.Sprintf("cannot vend credentials for table %s now; retry later", id), retryAfter: "1"}
	}
	if !ok {
		return storageCredential{}, false, nil
	}
	return storageCredential{Prefix: location, Config: props}, true, nil
}

// formerLocations are the locations table id moved away from, most
// recent first, when it is at location: its older snapshots reference
// files there, which its credentials should reach too (one credential,
// its prefix the current location: Java's and PyIceberg's refresh take
// exactly one). Read from this node's replica, which the request's read
// has brought up to date.
func (s *Server) formerLocations(id fsm.Ident, location string) []string {
	var out []string
	_ = s.store.StaleRead(func(rd *fsm.Reader) error {
		t, ok := rd.Table(id)
		if !ok || t.Location != location {
			return nil
		}
		for i := len(t.FormerLocations) - 1; i >= 0; i-- {
			out = append(out, t.FormerLocations[i].Location)
		}
		return nil
	})
	return out
}

// vendedCredentials are the credentials a LoadTableResult carries: cred,
// when ok.
type vendedCredentials struct {
	cred storageCredential
	ok   bool
}

// credentials obtains the credentials for the table's location when the
// request asks for them and vending is configured (see vend). A mutation
// whose answer carries them (create, register) obtains them before it
// proposes, so that a vendor failure is a 503 with nothing applied, which
// a client may retry, and never follows a change that did take effect.
func (s *Server) credentials(r *http.Request, id fsm.Ident, location string) (vendedCredentials, error) {
	if !wantsVendedCredentials(r) {
		return vendedCredentials{}, nil
	}
	cred, ok, err := s.vend(r, id, location)
	return vendedCredentials{cred: cred, ok: ok}, err
}

// addVendedCredentials puts vc into res: in storage-credentials, which
// current clients read first, and in config, which older clients read.
func (s *Server) addVendedCredentials(r *http.Request, id fsm.Ident, vc vendedCredentials, res *loadTableResult) {
	if !vc.ok {
		return
	}
	res.StorageCredentials = []storageCredential{vc.cred}
	if res.Config == nil {
		res.Config = map[string]string{}
	}
	maps.Copy(res.Config, vc.cred.Config)
	if s.whOf(r.Context()).vendor.Expiring() {
		res.Config[propRefreshCredentialsEndpoint] = s.credentialsPath(id)
	}
}

// credentialsPath is the loadCredentials path of id relative to the
// catalog's base URI, with the namespace levels joined by the unit
// separator, which every client and this server accept.
func (s *Server) credentialsPath(id fsm.Ident) string {
	wh, ns := fsm.SplitWarehouse(id.Namespace)
	prefix := wh
	if wh == "" {
		prefix = s.cfg.Prefix
	}
	levels := make([]string, len(ns))
	for i, l := range ns {
		levels[i] = url.PathEscape(l)
	}
	return "v1/" + url.PathEscape(prefix) + "/namespaces/" + strings.Join(levels, "%1F") +
		"/tables/" + url.PathEscape(id.Name) + "/credentials"
}

// loadCredentials serves GET …/tables/{table}/credentials: the credentials
// a client may use for the table's files now. The list is empty when
// vending is off or the table's storage has nothing to vend; the client
// then uses its own credentials. 404 when the table does not exist.
func (s *Server) loadCredentials(w http.ResponseWriter, r *http.Request) error {
	id, err := tableVar(r)
	if err != nil {
		return err
	}
	t, err := s.lookupTable(r, id)
	if err != nil {
		return err
	}
	resp := loadCredentialsResponse{StorageCredentials: []storageCredential{}}
	cred, ok, err := s.vend(r, id, t.Location)
	if err != nil {
		return err
	}
	if ok {
		resp.StorageCredentials = append(resp.StorageCredentials, cred)
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, resp)
	return nil
}
