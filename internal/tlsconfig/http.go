package tlsconfig

import "net/http"

// RequireVerifiedClient serves next only to a client that presented a
// certificate the listener verified (VerifyClientCertIfGiven); any other
// request is answered 403. It guards /metrics on a listener whose probes
// (/healthz, /readyz) must stay open to a kubelet without a certificate.
func RequireVerifiedClient(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
			http.Error(w, "a verified client certificate is required", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}
