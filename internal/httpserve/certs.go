package httpserve

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// ErrInvalidKeyPair is wrapped by load errors for certificate and key files
// that were read but do not form a usable pair: no PEM certificate, no PEM
// key, or a key that does not match the certificate.
var ErrInvalidKeyPair = errors.New("httpserve: invalid TLS certificate and key")

// certReloader serves the certificate of a pair of PEM files and reloads
// it when either file changes. Changes are looked for during TLS handshakes,
// at most once per interval: a change is seen by the first handshake at
// least an interval after the previous check. A file has changed when its
// modification time or size differ, or when it is another file (replaced by
// a rename, or a symbolic link moved, as Kubernetes does with mounted
// secrets).
//
// A reload that fails (a file missing or unreadable, a key that does not
// match) keeps the certificate being served, logs an error and counts
// floe_http_tls_reloads_total{result="failure"}; it is tried again only once
// either file changes again, so broken files are reported once, not every
// interval.
type certReloader struct {
	certFile, keyFile string
	interval          time.Duration
	now               func() time.Time
	log               *slog.Logger
	m                 *metrics

	cert atomic.Pointer[tls.Certificate] // the pair being served

	mu                  sync.Mutex // held by one check at a time
	lastCheck           time.Time
	certStamp, keyStamp fileStamp // the files as of the last load attempt
}

// newCertReloader loads the pair. Its error names the file that is missing
// or unreadable (wrapping the os error) or wraps ErrInvalidKeyPair.
func newCertReloader(certFile, keyFile string, interval time.Duration, now func() time.Time, log *slog.Logger, m *metrics) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, interval: interval, now: now, log: log, m: m}
	// Stamp before reading: a change between the two is seen as a change
	// at the next check, and loaded then.
	r.certStamp, r.keyStamp = stampOf(certFile), stampOf(keyFile)
	cert, err := loadKeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	r.lastCheck = now()
	r.serve(cert)
	r.log.Info("http TLS certificate loaded", certAttrs(cert, certFile)...)
	return r, nil
}

// getCertificate is the tls.Config.GetCertificate of the server. It never
// fails: it serves the last pair that loaded.
func (r *certReloader) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.check()
	return r.cert.Load(), nil
}

// check reloads the pair if an interval has passed since the last check and
// either file has changed since the last load attempt.
func (r *certReloader) check() {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if now.Sub(r.lastCheck) < r.interval {
		return
	}
	r.lastCheck = now
	certStamp, keyStamp := stampOf(r.certFile), stampOf(r.keyFile)
	if certStamp.same(r.certStamp) && keyStamp.same(r.keyStamp) {
		return
	}
	r.certStamp, r.keyStamp = certStamp, keyStamp
	cert, err := loadKeyPair(r.certFile, r.keyFile)
	if err != nil {
		r.m.tlsReloads.WithLabelValues(resultFailure).Inc()
		r.log.Error("http TLS certificate reload failed; still serving the previous certificate",
			"error", err, "cert_file", r.certFile, "key_file", r.keyFile)
		return
	}
	r.serve(cert)
	r.m.tlsReloads.WithLabelValues(resultSuccess).Inc()
	r.log.Info("http TLS certificate reloaded", certAttrs(cert, r.certFile)...)
}

func (r *certReloader) serve(cert *tls.Certificate) {
	r.cert.Store(cert)
	r.m.tlsExpiry.Set(float64(cert.Leaf.NotAfter.Unix()))
}

// CheckKeyPair reports whether the certificate and key files load as New
// would load them, with New's errors: for a caller that must know before
// it does anything the server's failure would leave half done.
func CheckKeyPair(certFile, keyFile string) error {
	_, err := loadKeyPair(certFile, keyFile)
	return err
}

// loadKeyPair reads and parses the pair; cert.Leaf is always set.
func loadKeyPair(certFile, keyFile string) (*tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("httpserve: read TLS certificate file: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("httpserve: read TLS key file: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%w: certificate %s with key %s: %w", ErrInvalidKeyPair, certFile, keyFile, err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("%w: certificate %s: %w", ErrInvalidKeyPair, certFile, err)
		}
	}
	return &cert, nil
}

func certAttrs(cert *tls.Certificate, file string) []any {
	return []any{
		"cert_file", file,
		"subject", cert.Leaf.Subject.String(),
		"dns_names", cert.Leaf.DNSNames,
		"not_after", cert.Leaf.NotAfter.UTC().Format(time.RFC3339),
	}
}

// fileStamp identifies one version of a file: nil info when it could not
// be stat'ed.
type fileStamp struct{ info os.FileInfo }

// stampOf stats path, following symbolic links.
func stampOf(path string) fileStamp {
	info, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	return fileStamp{info: info}
}

// same reports whether s and o are the same version of the same file.
func (s fileStamp) same(o fileStamp) bool {
	if s.info == nil || o.info == nil {
		return s.info == nil && o.info == nil
	}
	return os.SameFile(s.info, o.info) && s.info.ModTime().Equal(o.info.ModTime()) && s.info.Size() == o.info.Size()
}
