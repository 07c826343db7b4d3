// Package ststest serves the STS AssumeRole API on a loopback port for
// tests: it answers the AWS SDK's real requests with fresh credentials and
// records each request, so tests can check what a vendor asked for.
package ststest

import (
	"encoding/xml"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Call is one AssumeRole request as received.
type Call struct {
	RoleARN         string
	SessionName     string
	Policy          string
	DurationSeconds int
	ExternalID      string
	// Signed is true when the request carried a SigV4 Authorization header.
	Signed bool
}

// Server is a running fake STS endpoint.
type Server struct {
	URL string

	srv *httptest.Server
	mu  sync.Mutex
	// Calls lists the AssumeRole requests received, in order.
	calls []Call
	deny  bool
	n     int
	// maxPolicy, when positive, refuses a longer session policy as STS
	// refuses one whose packed size is too large.
	maxPolicy int
}

// LimitPolicy makes every later request whose session policy is longer
// than n characters fail with PackedPolicyTooLarge (400); 0 lifts it.
func (s *Server) LimitPolicy(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maxPolicy = n
}

// Start serves STS until Close.
func Start() *Server {
	s := &Server{}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	return s
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// Deny makes every later request fail with AccessDenied (403).
func (s *Server) Deny(deny bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deny = deny
}

// Calls returns the requests received so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// AccessKeyID returns the access key ID of the n-th issued credentials
// (from 1), for tests to recognise them.
func AccessKeyID(n int) string { return fmt.Sprintf("ASIAFLOETEST%08d", n) }

// SecretAccessKey returns the secret of the n-th issued credentials.
func SecretAccessKey(n int) string { return fmt.Sprintf("sts-test-secret-%08d", n) }

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil || r.Method != http.MethodPost || r.Form.Get("Action") != "AssumeRole" {
		writeError(w, http.StatusBadRequest, "InvalidAction", "only POST Action=AssumeRole is served")
		return
	}
	d, _ := strconv.Atoi(r.Form.Get("DurationSeconds"))
	c := Call{
		RoleARN:         r.Form.Get("RoleArn"),
		SessionName:     r.Form.Get("RoleSessionName"),
		Policy:          r.Form.Get("Policy"),
		DurationSeconds: d,
		ExternalID:      r.Form.Get("ExternalId"),
		Signed:          strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 "),
	}
	s.mu.Lock()
	s.calls = append(s.calls, c)
	deny := s.deny
	tooLarge := s.maxPolicy > 0 && len(c.Policy) > s.maxPolicy
	if !deny && !tooLarge {
		s.n++
	}
	n := s.n
	s.mu.Unlock()
	if tooLarge {
		writeError(w, http.StatusBadRequest, "PackedPolicyTooLarge", "the session policy is too large")
		return
	}
	if deny {
		writeError(w, http.StatusForbidden, "AccessDenied", "not authorized to assume "+c.RoleARN)
		return
	}
	if d == 0 {
		d = 3600
	}
	type credentials struct {
		AccessKeyID     string `xml:"AccessKeyId"`
		SecretAccessKey string `xml:"SecretAccessKey"`
		SessionToken    string `xml:"SessionToken"`
		Expiration      string `xml:"Expiration"`
	}
	type result struct {
		XMLName     xml.Name    `xml:"https://sts.amazonaws.com/doc/2011-06-15/ AssumeRoleResponse"`
		Credentials credentials `xml:"AssumeRoleResult>Credentials"`
		RoleArn     string      `xml:"AssumeRoleResult>AssumedRoleUser>Arn"`
		RoleID      string      `xml:"AssumeRoleResult>AssumedRoleUser>AssumedRoleId"`
		RequestID   string      `xml:"ResponseMetadata>RequestId"`
	}
	out := result{
		Credentials: credentials{
			AccessKeyID:     AccessKeyID(n),
			SecretAccessKey: SecretAccessKey(n),
			SessionToken:    fmt.Sprintf("sts-test-token-%08d", n),
			Expiration:      time.Now().Add(time.Duration(d) * time.Second).UTC().Format(time.RFC3339),
		},
		RoleArn:   c.RoleARN + "/" + c.SessionName,
		RoleID:    "AROAFLOETEST:" + c.SessionName,
		RequestID: fmt.Sprintf("req-%d", n),
	}
	w.Header().Set("Content-Type", "text/xml")
	_ = xml.NewEncoder(w).Encode(out)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	type errBody struct {
		XMLName   xml.Name `xml:"https://sts.amazonaws.com/doc/2011-06-15/ ErrorResponse"`
		Type      string   `xml:"Error>Type"`
		Code      string   `xml:"Error>Code"`
		Message   string   `xml:"Error>Message"`
		RequestID string   `xml:"RequestId"`
	}
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(status)
	_ = xml.NewEncoder(w).Encode(errBody{Type: "Sender", Code: code, Message: msg, RequestID: "req-error"})
}
