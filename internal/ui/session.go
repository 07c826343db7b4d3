package ui

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"path"
	"strings"
)

// Cookies of the status page. Both are HttpOnly, SameSite=Strict, scoped
// to /ui, and Secure when the request came over TLS.
const (
	// sessionCookie holds the token pasted into the login form. It is
	// checked exactly like an Authorization: Bearer header, on every
	// request (WithSessionToken).
	sessionCookie = "floe_ui_session"
	// csrfCookie holds a random value every form repeats in its csrfField
	// (double submit): a POST whose field does not match it is refused.
	csrfCookie = "floe_ui_csrf"
	csrfField  = "csrf"
	cookiePath = "/ui"
	// maxCookieToken bounds a token kept in the session cookie: browsers
	// keep cookies up to about 4 KiB.
	maxCookieToken = 3800
	// maxFormBytes bounds a form's body.
	maxFormBytes = 64 << 10
)

// loginPath is the login form, answered without a principal.
const loginPath = "/ui/login"

// IsOpenPath reports whether path is answered without a principal: the
// login form.
func IsOpenPath(path string) bool { return path == loginPath }

// WithSessionToken returns r with the session cookie's token as its
// Authorization: Bearer header, when r has no Authorization header of its
// own and carries the cookie; fromCookie reports whether it did so. The
// caller then authenticates r as any other request.
func WithSessionToken(r *http.Request) (_ *http.Request, fromCookie bool) {
	if r.Header.Get("Authorization") != "" {
		return r, false
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil || c.Value == "" {
		return r, false
	}
	r2 := r.Clone(r.Context())
	r2.Header.Set("Authorization", "Bearer "+c.Value)
	return r2, true
}

// ErrUnavailable: a credential could not be checked now (see
// Config.VerifyToken and AuthUnavailable).
var ErrUnavailable = errors.New("ui: the credential cannot be checked now")

// AuthUnavailable answers a status page request whose credential could not
// be checked now (no leader, an identity provider out of reach): 503, to be
// retried, with the session cookie kept, since nothing says it is wrong.
func AuthUnavailable(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write([]byte("503 Service Unavailable: the credential could not be checked now (no leader, or the identity provider is out of reach); reload shortly.\n"))
}

// Unauthenticated answers a status page request without a valid
// credential. A request that brought its own Authorization header gets
// 401; a browser (no credential, or a session cookie that no longer
// verifies, which is cleared) is sent to the login form, which sends it
// back here once it has signed in.
func Unauthenticated(w http.ResponseWriter, r *http.Request, fromCookie bool) {
	w.Header().Set("Cache-Control", "no-store")
	if !fromCookie && r.Header.Get("Authorization") != "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="floe"`)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte("401 Unauthorized: the bearer token was refused.\n"))
		return
	}
	if fromCookie {
		clearCookie(w, r, sessionCookie)
	}
	next := "/ui"
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		next = r.URL.RequestURI()
	}
	http.Redirect(w, r, loginPath+"?"+url.Values{"next": {next}}.Encode(), http.StatusSeeOther)
}

// safeNext is where the login form may send a browser after signing in: a
// page of the status page, never another site.
func safeNext(next string) string {
	p := strings.SplitN(next, "?", 2)[0]
	if !IsPath(p) || path.Clean(p) != p || strings.Contains(next, "//") || strings.Contains(next, `\`) {
		return "/ui"
	}
	return next
}

func setCookie(w http.ResponseWriter, r *http.Request, name, value string) {
	http.SetCookie(w, &http.Cookie{
		Name: name, Value: value, Path: cookiePath,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
}

func clearCookie(w http.ResponseWriter, r *http.Request, name string) {
	http.SetCookie(w, &http.Cookie{
		Name: name, Value: "", Path: cookiePath, MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
}

// csrfToken returns the browser's CSRF value, setting a new one when it
// has none (or a malformed one). Forms repeat it in csrfField.
func (s *Server) csrfToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && validCSRF(c.Value) {
		return c.Value
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	v := base64.RawURLEncoding.EncodeToString(b)
	setCookie(w, r, csrfCookie, v)
	return v
}

func validCSRF(v string) bool {
	b, err := base64.RawURLEncoding.DecodeString(v)
	return err == nil && len(b) == 32
}

// checkForm parses a POSTed form and checks its CSRF field against the
// cookie (403 when they differ or either is missing).
func checkForm(w http.ResponseWriter, r *http.Request) error {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		return badRequest("malformed form: %v", err)
	}
	c, err := r.Cookie(csrfCookie)
	field := r.PostForm.Get(csrfField)
	if err != nil || !validCSRF(c.Value) || subtle.ConstantTimeCompare([]byte(c.Value), []byte(field)) != 1 {
		return forbidden("The form's security token is missing or does not match this browser's (the form may be from an old page or another site). Reload the page and try again.")
	}
	return nil
}

// loginPage is the login form's content.
type loginPage struct {
	Next  string
	Error string
}

func (s *Server) loginForm(w http.ResponseWriter, r *http.Request) error {
	if !s.authOn() {
		http.Redirect(w, r, "/ui", http.StatusSeeOther)
		return nil
	}
	s.render(w, r, http.StatusOK, "login", "Sign in", "", loginPage{Next: safeNext(r.URL.Query().Get("next"))})
	return nil
}

// login checks the pasted token as the node checks a bearer token and,
// when it verifies, keeps it in the session cookie.
func (s *Server) login(w http.ResponseWriter, r *http.Request) error {
	if !s.authOn() {
		http.Redirect(w, r, "/ui", http.StatusSeeOther)
		return nil
	}
	if err := checkForm(w, r); err != nil {
		return err
	}
	next := safeNext(r.PostForm.Get("next"))
	token := strings.TrimSpace(r.PostForm.Get("token"))
	if len(token) > len("Bearer ") && strings.EqualFold(token[:len("Bearer ")], "Bearer ") {
		token = strings.TrimSpace(token[len("Bearer "):])
	}
	refuse := func(status int, msg string) error {
		s.render(w, r, status, "login", "Sign in", "", loginPage{Next: next, Error: msg})
		return nil
	}
	switch {
	case token == "":
		return refuse(http.StatusBadRequest, "Paste a token: the root token, a static token or an access token.")
	case len(token) > maxCookieToken:
		return refuse(http.StatusBadRequest, "This token is too long to keep in a cookie; send it as an Authorization: Bearer header instead.")
	case !cookieSafe(token):
		return refuse(http.StatusBadRequest, "This token holds characters a cookie cannot keep; send it as an Authorization: Bearer header instead.")
	}
	principal, err := s.cfg.VerifyToken(r.Context(), token)
	if errors.Is(err, ErrUnavailable) {
		s.log.Warn("status page sign-in: the token could not be checked", "remote", r.RemoteAddr, "error", err)
		w.Header().Set("Retry-After", "1")
		return refuse(http.StatusServiceUnavailable, "The token could not be checked now (no leader, or the identity provider is out of reach): try again shortly.")
	}
	if err != nil {
		s.log.Info("status page sign-in refused", "remote", r.RemoteAddr)
		return refuse(http.StatusUnauthorized, "That token was refused: it is unknown, expired or malformed.")
	}
	setCookie(w, r, sessionCookie, token)
	s.log.Info("status page sign-in", "principal", principal, "remote", r.RemoteAddr)
	http.Redirect(w, r, next, http.StatusSeeOther)
	return nil
}

// cookieSafe reports whether a browser keeps v in a cookie unchanged:
// printable ASCII without space, quote, comma, semicolon or backslash.
func cookieSafe(v string) bool {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c <= 0x20 || c >= 0x7f || c == '"' || c == ',' || c == ';' || c == '\\' {
			return false
		}
	}
	return true
}

// logout forgets the session cookie.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) error {
	if err := checkForm(w, r); err != nil {
		return err
	}
	clearCookie(w, r, sessionCookie)
	if !s.authOn() {
		http.Redirect(w, r, "/ui", http.StatusSeeOther)
		return nil
	}
	http.Redirect(w, r, loginPath, http.StatusSeeOther)
	return nil
}
