// Package testcert makes throwaway certificate authorities and
// certificates for tests, with crypto/x509 alone (no openssl). It depends on
// nothing of claimd's, so that tests outside the server's module (the Go
// client's) use it without pulling in the server's dependencies.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a throwaway certificate authority for tests: a self-signed ECDSA
// P-256 root made in memory with crypto/x509 (no openssl), whose files live
// in a test's temporary directory. Certificates it issues are valid from an
// hour ago (clock skew) for a day.
type CA struct {
	// Cert is the root certificate; CertPEM its PEM encoding, also written
	// to File.
	Cert    *x509.Certificate
	CertPEM []byte
	key     *ecdsa.PrivateKey
	dir     string
	seq     atomic.Int64 // names the files of issued certificates
}

// Leaf is a certificate a CA issued, with its private key, in memory and
// in PEM files.
type Leaf struct {
	Cert              *x509.Certificate
	CertPEM, KeyPEM   []byte
	CertFile, KeyFile string
	// TLS is the pair ready for a tls.Config (Certificates or
	// GetClientCertificate).
	TLS tls.Certificate
}

// NewCA makes a root CA named name, with its files in a new directory that
// t removes at cleanup.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	ca, err := newCA(t.TempDir(), name)
	if err != nil {
		t.Fatalf("testcert: CA %s: %v", name, err)
	}
	return ca
}

// CreateCA is NewCA outside a test, for generators that make certificates
// for other languages' test suites (cmd/testca): the CA's files go in dir,
// which must exist.
func CreateCA(dir, name string) (*CA, error) { return newCA(dir, name) }

func newCA(dir, name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	ca := &CA{Cert: cert, CertPEM: pemBlock("CERTIFICATE", der), key: key, dir: dir}
	if err := os.WriteFile(ca.File(), ca.CertPEM, 0o644); err != nil {
		return nil, err
	}
	return ca, nil
}

// File is the path of the CA's certificate in PEM: what a client passes as
// its root (sslrootcert, --redis-ca) and a server as its client CA.
func (ca *CA) File() string { return filepath.Join(ca.dir, "ca.pem") }

// Pool is a certificate pool holding only this CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Issue makes a certificate for servers and clients alike. names[0] is the
// subject's common name; every name is also a subject alternative name: an
// IP address as an IP SAN, a URI (spiffe://…) as a URI SAN, anything else
// as a DNS name.
func (ca *CA) Issue(t testing.TB, names ...string) *Leaf {
	t.Helper()
	l, err := ca.issue(names...)
	if err != nil {
		t.Fatalf("testcert: issue %v: %v", names, err)
	}
	return l
}

// IssueLeaf is Issue outside a test: it returns the error Issue would fail
// the test with.
func (ca *CA) IssueLeaf(names ...string) (*Leaf, error) { return ca.issue(names...) }

func (ca *CA) issue(names ...string) (*Leaf, error) {
	if len(names) == 0 {
		return nil, fmt.Errorf("a certificate needs at least one name")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: names[0]},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			continue
		}
		if strings.Contains(n, "://") {
			u, err := url.Parse(n)
			if err != nil {
				return nil, err
			}
			tmpl.URIs = append(tmpl.URIs, u)
			continue
		}
		tmpl.DNSNames = append(tmpl.DNSNames, n)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	l := &Leaf{Cert: cert, CertPEM: pemBlock("CERTIFICATE", der), KeyPEM: pemBlock("PRIVATE KEY", keyDER)}
	if l.TLS, err = tls.X509KeyPair(l.CertPEM, l.KeyPEM); err != nil {
		return nil, err
	}
	n := ca.seq.Add(1)
	l.CertFile = filepath.Join(ca.dir, fmt.Sprintf("leaf%d.pem", n))
	l.KeyFile = filepath.Join(ca.dir, fmt.Sprintf("leaf%d.key", n))
	if err := os.WriteFile(l.CertFile, l.CertPEM, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(l.KeyFile, l.KeyPEM, 0o600); err != nil {
		return nil, err
	}
	return l, nil
}

// serial is a random 128-bit serial number, so certificates never collide.
func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// CRL is a certificate revocation list of ca in PEM that revokes each of
// revoked, valid from an hour ago for a day (RevocationList for other
// times).
func (ca *CA) CRL(t testing.TB, revoked ...*x509.Certificate) []byte {
	t.Helper()
	now := time.Now()
	der, err := ca.RevocationList(now.Add(-time.Hour), now.Add(24*time.Hour), revoked...)
	if err != nil {
		t.Fatalf("testcert: CRL: %v", err)
	}
	return pemBlock("X509 CRL", der)
}

// RevocationList is a DER certificate revocation list of ca that revokes
// each of revoked, issued at thisUpdate and due for renewal at nextUpdate.
func (ca *CA) RevocationList(thisUpdate, nextUpdate time.Time, revoked ...*x509.Certificate) ([]byte, error) {
	tmpl := &x509.RevocationList{Number: serial(), ThisUpdate: thisUpdate, NextUpdate: nextUpdate}
	for _, c := range revoked {
		tmpl.RevokedCertificateEntries = append(tmpl.RevokedCertificateEntries,
			x509.RevocationListEntry{SerialNumber: c.SerialNumber, RevocationTime: thisUpdate})
	}
	return x509.CreateRevocationList(rand.Reader, tmpl, ca.Cert, ca.key)
}
