package transport

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"time"
)

// TLSFiles names the PEM files for mutual TLS. All three are required.
//
// CertFile holds this node's certificate (optionally followed by
// intermediates), KeyFile its private key, CAFile the CA certificate(s) that
// sign every node's certificate. The node certificate must carry the
// serverAuth and clientAuth extended key usages (the same certificate is
// presented when accepting and when dialling) and a SAN for the host peers
// dial. Files are read once, by Load; rotating certificates needs a restart.
type TLSFiles struct {
	CertFile, KeyFile, CAFile string
}

// NotAfter reads CertFile and returns when this node's certificate
// expires. Load reads the files once, so a certificate renewed on disk is
// not used until a restart: a node keeps its open connections past this
// time, but no new one to or from it succeeds after it.
func (f TLSFiles) NotAfter() (time.Time, error) {
	certPEM, err := os.ReadFile(f.CertFile)
	if err != nil {
		return time.Time{}, fmt.Errorf("transport: read TLS certificate file: %w", err)
	}
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return time.Time{}, fmt.Errorf("transport: TLS certificate %s: no PEM block", f.CertFile)
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return time.Time{}, fmt.Errorf("transport: TLS certificate %s: %w", f.CertFile, err)
	}
	return leaf.NotAfter, nil
}

// Load reads and checks the files and returns the configuration for the
// accepting side (requires and verifies client certificates against the CA)
// and for the dialling side (verifies the server against the CA and presents
// the node certificate). Both require TLS 1.3.
//
// Errors name the offending file: missing or unreadable files, a CA file
// without certificates, a key that does not match the certificate, or a
// certificate that the CA did not sign.
func (f TLSFiles) Load() (server, client *tls.Config, err error) {
	if f.CertFile == "" || f.KeyFile == "" || f.CAFile == "" {
		return nil, nil, errors.New("transport: TLS needs CertFile, KeyFile and CAFile")
	}
	caPEM, err := os.ReadFile(f.CAFile)
	if err != nil {
		return nil, nil, fmt.Errorf("transport: read TLS CA file: %w", err)
	}
	certPEM, err := os.ReadFile(f.CertFile)
	if err != nil {
		return nil, nil, fmt.Errorf("transport: read TLS certificate file: %w", err)
	}
	keyPEM, err := os.ReadFile(f.KeyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("transport: read TLS key file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, nil, fmt.Errorf("transport: TLS CA file %s: no PEM certificates found", f.CAFile)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("transport: TLS certificate %s with key %s: %w", f.CertFile, f.KeyFile, err)
	}
	// Catch a certificate from another CA at startup rather than as
	// handshake failures on every peer.
	inter := x509.NewCertPool()
	for _, der := range pair.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, nil, fmt.Errorf("transport: TLS certificate %s: %w", f.CertFile, err)
		}
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := leaf.Verify(x509.VerifyOptions{
			Roots:         pool,
			Intermediates: inter,
			KeyUsages:     []x509.ExtKeyUsage{usage},
		}); err != nil {
			return nil, nil, fmt.Errorf("transport: TLS certificate %s does not verify under CA %s for both server and client auth: %w", f.CertFile, f.CAFile, err)
		}
	}

	server = &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{pair},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
	}
	client = &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{pair},
		RootCAs:      pool,
	}
	return server, client, nil
}
