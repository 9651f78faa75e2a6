package tlsconfig

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"math/big"
	"time"
)

// revocations are the serial numbers the CRLs of one file revoke, by the
// issuer that revoked them: a serial is unique only within its issuer.
type revocations struct {
	// serials maps an issuer's raw subject to the revoked serials (in
	// hexadecimal).
	serials map[string]map[string]bool
	count   int
	// nextUpdate is the earliest NextUpdate of the file's CRLs: after it,
	// a newer CRL is due.
	nextUpdate time.Time
}

// parseCRLs reads a CRL file: PEM "X509 CRL" blocks, or one DER CRL. Each
// must verify against a CA certificate of cas whose subject is its issuer,
// so that a CRL of another CA (or a forged one) is refused, not trusted.
func parseCRLs(path string, b []byte, cas []*x509.Certificate) (*revocations, error) {
	var ders [][]byte
	if rest := bytes.TrimSpace(b); bytes.HasPrefix(rest, []byte("-----BEGIN")) {
		for n := 1; ; n++ {
			var block *pem.Block
			block, rest = pem.Decode(rest)
			if block == nil {
				break
			}
			if block.Type != "X509 CRL" {
				return nil, fmt.Errorf("tlsconfig: %s: PEM block %d is a %q, want X509 CRL", path, n, block.Type)
			}
			ders = append(ders, block.Bytes)
		}
		if len(bytes.TrimSpace(rest)) > 0 {
			return nil, fmt.Errorf("tlsconfig: %s: text after CRL %d is not PEM", path, len(ders))
		}
	} else {
		ders = [][]byte{b}
	}
	rev := &revocations{serials: map[string]map[string]bool{}}
	for i, der := range ders {
		crl, err := x509.ParseRevocationList(der)
		if err != nil {
			return nil, fmt.Errorf("tlsconfig: %s: CRL %d (PEM X509 CRL or DER): %w", path, i+1, err)
		}
		var signer *x509.Certificate
		for _, ca := range cas {
			if bytes.Equal(ca.RawSubject, crl.RawIssuer) && crl.CheckSignatureFrom(ca) == nil {
				signer = ca
				break
			}
		}
		if signer == nil {
			return nil, fmt.Errorf("tlsconfig: %s: CRL %d of %q is signed by no CA of the client CA file: a CRL revokes only what its CA issued",
				path, i+1, crl.Issuer.String())
		}
		set := rev.serials[string(crl.RawIssuer)]
		if set == nil {
			set = map[string]bool{}
			rev.serials[string(crl.RawIssuer)] = set
		}
		for _, e := range crl.RevokedCertificateEntries {
			set[serialKey(e.SerialNumber)] = true
			rev.count++
		}
		if rev.nextUpdate.IsZero() || (!crl.NextUpdate.IsZero() && crl.NextUpdate.Before(rev.nextUpdate)) {
			rev.nextUpdate = crl.NextUpdate
		}
	}
	return rev, nil
}

func serialKey(n *big.Int) string { return n.Text(16) }

// check refuses chains that hold a revoked certificate (the root, which
// no CRL of its own lists, aside).
func (r *revocations) check(chains [][]*x509.Certificate) error {
	for _, chain := range chains {
		for _, c := range chain {
			if r.serials[string(c.RawIssuer)][serialKey(c.SerialNumber)] {
				return fmt.Errorf("tlsconfig: certificate %q (serial %s) is revoked by the CRL of %q",
					c.Subject.String(), serialKey(c.SerialNumber), c.Issuer.String())
			}
		}
	}
	return nil
}
