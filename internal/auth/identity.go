package auth

import (
	"context"
	"crypto/x509"
	"fmt"
	"strings"

	"github.com/claimd/claimd/internal/textclip"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// IdentityKind is the one part of a client certificate that names its
// principal (--tls-identity). Only that part is read: a certificate is never
// tried under another kind when its own names nobody, so a CA that signs
// DNS names for one purpose cannot mint a principal through the CN.
type IdentityKind string

// The kinds of certificate identity.
const (
	// IdentityURI is the certificate's first URI SAN: a SPIFFE ID
	// ("spiffe://…" in the auth file) or another URI ("uri:…"). The
	// default.
	IdentityURI IdentityKind = "uri"
	// IdentityDNS is the certificate's first DNS SAN ("dns:…", compared in
	// lower case).
	IdentityDNS IdentityKind = "dns"
	// IdentityCN is the subject common name ("cn:…").
	IdentityCN IdentityKind = "cn"
)

// IdentityKinds lists the kinds in the order help and errors name them.
var IdentityKinds = []IdentityKind{IdentityURI, IdentityDNS, IdentityCN}

// ParseIdentityKind returns the kind s names, or an error that lists the
// kinds.
func ParseIdentityKind(s string) (IdentityKind, error) {
	for _, k := range IdentityKinds {
		if string(k) == s {
			return k, nil
		}
	}
	return "", fmt.Errorf("%s is not an identity kind: want uri (the first URI SAN), dns (the first DNS SAN) or cn (the subject common name)", textclip.Quote(s, maxEcho))
}

// describe names what the kind reads, for messages.
func (k IdentityKind) describe() string {
	switch k {
	case IdentityDNS:
		return "first DNS SAN"
	case IdentityCN:
		return "subject common name"
	}
	return "first URI SAN"
}

// noun names the part of a certificate the kind reads, without "first".
func (k IdentityKind) noun() string {
	switch k {
	case IdentityDNS:
		return "DNS SAN"
	case IdentityCN:
		return "subject common name"
	}
	return "URI SAN"
}

// matches reports whether an identity of the auth file (normalised by
// parseIdentity) is of kind k, so that a certificate can ever present it.
func (k IdentityKind) matches(id string) bool {
	switch k {
	case IdentityDNS:
		return strings.HasPrefix(id, "dns:")
	case IdentityCN:
		return strings.HasPrefix(id, "cn:")
	}
	return strings.HasPrefix(id, "spiffe:") || strings.HasPrefix(id, "uri:")
}

// certIdentity returns the identity of kind k of a verified leaf in the
// auth file's notation, and false when the certificate has none of that
// kind.
func certIdentity(leaf *x509.Certificate, k IdentityKind) (string, bool) {
	switch k {
	case IdentityDNS:
		if len(leaf.DNSNames) == 0 {
			return "", false
		}
		return "dns:" + strings.ToLower(leaf.DNSNames[0]), true
	case IdentityCN:
		if leaf.Subject.CommonName == "" {
			return "", false
		}
		return "cn:" + leaf.Subject.CommonName, true
	}
	if len(leaf.URIs) == 0 {
		return "", false
	}
	u := leaf.URIs[0]
	if u.Scheme == "spiffe" {
		return u.String(), true
	}
	return "uri:" + u.String(), true
}

// peerLeaf returns the call's client certificate, or nil. Only a
// certificate the TLS layer verified against the client CA counts
// (VerifiedChains); one a client merely presented is ignored.
func peerLeaf(ctx context.Context) *x509.Certificate {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return nil
	}
	return verifiedLeaf(info.State.VerifiedChains)
}

// verifiedLeaf is the leaf of the first verified chain, or nil.
func verifiedLeaf(chains [][]*x509.Certificate) *x509.Certificate {
	if len(chains) == 0 || len(chains[0]) == 0 {
		return nil
	}
	return chains[0][0]
}

// peerAddr is the caller's address for log lines.
func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}
