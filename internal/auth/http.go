package auth

import (
	"context"
	"crypto/x509"
	"fmt"
	"math"
	"net/http"
	"strconv"

	"google.golang.org/grpc/peer"
)

// RequireRole returns next guarded by the auth file, for HTTP endpoints
// outside the gRPC services (/metrics): a request must authenticate as
// RPCs do (authorization: Bearer <token>, or a verified client certificate
// read under --tls-identity) as a principal holding role (admin holds
// every role), within its rate limit. Refusals are 401 with
// WWW-Authenticate (no, unknown or expired credentials), 403 (the role is
// missing) or 429 with Retry-After, each with its ErrorInfo reason in the
// body, and are counted in claimd_auth_denied_total like refused calls;
// only an admitted request spends the principal's budget.
func (a *Authenticator) RequireRole(role Roles, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := a.current()
		p, via, reason, msg := st.authenticate(r.Header.Values("Authorization"), verifiedLeafOf(r))
		ctx := httpPeer(r)
		if reason != "" {
			a.unauthenticated(ctx, r.URL.Path, reason, msg)
			w.Header().Set("WWW-Authenticate", `Bearer realm="claimd"`)
			http.Error(w, reason+": "+msg, http.StatusUnauthorized)
			return
		}
		if !p.cfg.Roles.Has(role) {
			c := call{method: r.URL.Path, rule: rule{name: r.URL.Path, role: role}, p: p, via: via}
			a.denied(ctx, c, ReasonRoleDenied, "", "")
			http.Error(w, fmt.Sprintf("%s: principal %s (roles %s) may not read %s: it needs role %s",
				ReasonRoleDenied, p.cfg.Name, p.cfg.Roles, r.URL.Path, role), http.StatusForbidden)
			return
		}
		if delay, ok := a.spend(p, r.URL.Path); !ok {
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(delay.Seconds()))))
			http.Error(w, fmt.Sprintf("%s: principal %s is over its rate limit %s: retry after %s", ReasonRateLimited, p.cfg.Name, p.cfg.Rate, delay),
				http.StatusTooManyRequests)
			return
		}
		next.ServeHTTP(w, r.WithContext(NewContext(r.Context(), p.context(via))))
	})
}

// verifiedLeafOf is the request's client certificate that the listener
// verified, or nil.
func verifiedLeafOf(r *http.Request) *x509.Certificate {
	if r.TLS == nil {
		return nil
	}
	return verifiedLeaf(r.TLS.VerifiedChains)
}

// httpPeer is a context that carries the request's remote address where
// the refusal log lines look for a gRPC peer.
func httpPeer(r *http.Request) context.Context {
	return peer.NewContext(r.Context(), &peer.Peer{Addr: remoteAddr(r.RemoteAddr)})
}

// remoteAddr is a net.Addr of an http.Request's RemoteAddr.
type remoteAddr string

func (a remoteAddr) Network() string { return "tcp" }
func (a remoteAddr) String() string  { return string(a) }
