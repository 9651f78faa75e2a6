package auth

import (
	"context"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// peerIdentities returns the identities of the call's client certificate in
// the auth file's notation, in the order they are tried: URI SANs (SPIFFE
// IDs), DNS SANs, then the subject CN. Only a certificate the TLS layer
// verified against the client CA counts (VerifiedChains); one a client
// merely presented is ignored.
func peerIdentities(ctx context.Context) []string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return nil
	}
	leaf := info.State.VerifiedChains[0][0]
	var out []string
	for _, u := range leaf.URIs {
		if s := u.String(); u.Scheme == "spiffe" {
			out = append(out, s)
		} else {
			out = append(out, "uri:"+s)
		}
	}
	for _, d := range leaf.DNSNames {
		out = append(out, "dns:"+strings.ToLower(d))
	}
	if cn := leaf.Subject.CommonName; cn != "" {
		out = append(out, "cn:"+cn)
	}
	return out
}

// peerAddr is the caller's address for log lines.
func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}
