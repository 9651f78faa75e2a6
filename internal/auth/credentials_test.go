package auth_test

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/auth"
)

var (
	tempToken    = auth.NewToken() // temp: claim in billing until 10:00 on the env's clock
	scraperToken = auth.NewToken() // scraper: metrics, until 10:00
	slowToken    = auth.NewToken() // slow-scraper: metrics, one scrape a second
)

const scraperID = "spiffe://example.org/prometheus"

// withCredentials is the test file and principals whose tokens expire an
// hour after the env's clock starts, and a scraper (role metrics, no
// namespaces).
func withCredentials() string {
	return testFile() + `  temp:
    tokens:
      - {hash: "` + auth.HashToken(tempToken) + `", expires: "2026-12-01T10:00:00Z"}
    namespaces: [billing]
    roles: [claim]
  scraper:
    tokens: [{hash: "` + auth.HashToken(scraperToken) + `", expires: "2026-12-01T10:00:00Z"}]
    identities: ["` + scraperID + `"]
    roles: [metrics]
  slow-scraper:
    tokens: ["` + auth.HashToken(slowToken) + `"]
    roles: [metrics]
    rate: {per_second: 1, burst: 1}
`
}

// TestTokenExpires: a token with expires: is admitted until that instant
// of the injected clock and refused from it on, naming when it expired;
// the principal's other credentials are untouched.
func TestTokenExpires(t *testing.T) {
	e := newEnv(t)
	e.write(t, withCredentials())
	if err := e.a.Reload(); err != nil {
		t.Fatal(err)
	}
	c := e.claims(t, nil)
	if _, err := c.Claim(as(tempToken), claimReq("billing", "evt_before")); err != nil {
		t.Fatalf("Claim with the token before it expires error = %v", err)
	}
	e.clk.Advance(time.Hour - time.Millisecond)
	if _, err := c.Claim(as(tempToken), claimReq("billing", "evt_last_ms")); err != nil {
		t.Errorf("Claim with the token a millisecond before it expires error = %v", err)
	}
	e.clk.Advance(time.Millisecond)
	before, writes := e.denied(t, auth.ReasonTokenUnknown), e.store.Writes.Load()
	_, err := c.Claim(as(tempToken), claimReq("billing", "evt_after"))
	wantRefused(t, "Claim with the token at its expiry", err, codes.Unauthenticated, auth.ReasonTokenUnknown)
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "expired at 2026-12-01T10:00:00Z") {
		t.Errorf("Claim with the expired token message = %q, want it to say when the token expired", msg)
	}
	if got := e.denied(t, auth.ReasonTokenUnknown) - before; got != 1 {
		t.Errorf("claimd_auth_denied_total{reason=TOKEN_UNKNOWN} moved by %v, want 1", got)
	}
	if e.store.Writes.Load() != writes {
		t.Errorf("a Claim with an expired token reached the store")
	}
	if _, err := c.Claim(as(hooksToken), claimReq("billing", "evt_other")); err != nil {
		t.Errorf("Claim with a token without expires error = %v, want it admitted", err)
	}
	e.noSecrets(t)
}

// TestRefusalsSpendNoBudget: calls refused for their namespace or role do
// not spend the principal's rate budget: after a flood of them, the
// principal's full burst is still there.
func TestRefusalsSpendNoBudget(t *testing.T) {
	e := newEnv(t)
	conn := e.conn(t, nil)
	c := pb.NewClaimServiceClient(conn)
	const burst = 5 // flood's, in testFile
	for i := range 3 * burst {
		if _, err := c.Claim(as(floodToken), claimReq("billing", "evt_elsewhere")); codeOf(err) != codes.PermissionDenied {
			t.Fatalf("Claim %d outside flood's namespaces error = %v, want PermissionDenied", i, err)
		}
		if _, err := c.Get(as(floodToken), &pb.GetRequest{Namespace: "load", Provider: "stripe", Key: "x"}); codeOf(err) != codes.PermissionDenied {
			t.Fatalf("Get %d without role read error = %v, want PermissionDenied", i, err)
		}
		if _, err := pb.NewProviderServiceClient(conn).ListProviders(as(floodToken), &pb.ListProvidersRequest{}); codeOf(err) != codes.PermissionDenied {
			t.Fatalf("ListProviders %d without role read error = %v, want PermissionDenied", i, err)
		}
	}
	// The clock has not moved: only an untouched bucket admits a burst.
	for i := range burst {
		if _, err := c.Claim(as(floodToken), claimReq("load", "evt_burst")); err != nil {
			t.Errorf("Claim %d of the burst after %d refused calls error = %v, want it admitted", i+1, 9*burst, err)
		}
	}
	if _, err := c.Claim(as(floodToken), claimReq("load", "evt_over")); codeOf(err) != codes.ResourceExhausted {
		t.Errorf("Claim after the burst error = %v, want ResourceExhausted (the limiter still holds)", err)
	}
}

// TestRequireRoleHTTP: /metrics behind RequireRole(RoleMetrics) admits a
// principal with role metrics or admin, by token or by certificate, and
// refuses a stranger (401), each wrong credential (401), a principal
// without the role (403) and one over its rate (429, Retry-After).
func TestRequireRoleHTTP(t *testing.T) {
	e := newEnv(t)
	e.write(t, withCredentials())
	if err := e.a.Reload(); err != nil {
		t.Fatal(err)
	}
	var seen string
	h := e.a.RequireRole(auth.RoleMetrics, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = auth.FromContext(r.Context()).Name
		io.WriteString(w, "claimd_up 1\n")
	}))
	hs := httptest.NewUnstartedServer(h)
	hs.TLS = &tls.Config{ClientCAs: e.clientCA.pool, ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12}
	hs.TLS.Certificates = []tls.Certificate{e.serverCA.issue(t, leaf{cn: "claimd", ips: []net.IP{net.IPv4(127, 0, 0, 1)}}, x509.ExtKeyUsageServerAuth)}
	hs.StartTLS()
	t.Cleanup(hs.Close)
	// authorization is the header's value: a token alone is sent as
	// "Bearer <token>".
	get := func(authorization string, cert *tls.Certificate) (int, string) {
		cfg := &tls.Config{RootCAs: e.serverCA.pool}
		if cert != nil {
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
		}
		req, _ := http.NewRequest("GET", hs.URL+"/metrics", nil)
		if strings.HasPrefix(authorization, auth.TokenPrefix) {
			authorization = "Bearer " + authorization
		}
		if authorization != "" {
			req.Header.Set("Authorization", authorization)
		}
		res, err := (&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}).Do(req)
		if err != nil {
			t.Fatalf("GET /metrics: %v", err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	tests := []struct {
		desc  string
		token string
		cert  *tls.Certificate
		code  int
		want  string // in the body; for 200 the principal seen
	}{
		{"stranger", "", nil, http.StatusUnauthorized, auth.ReasonCredentialsMissing},
		{"unknown token", auth.NewToken(), nil, http.StatusUnauthorized, auth.ReasonTokenUnknown},
		{"basic authorization", "Basic " + scraperToken, nil, http.StatusUnauthorized, auth.ReasonTokenMalformed},
		{"certificate of nobody", "", e.clientCert(t, leaf{uris: []string{"spiffe://example.org/stranger"}}), http.StatusUnauthorized, auth.ReasonIdentityUnknown},
		{"token without role metrics", hooksToken, nil, http.StatusForbidden, auth.ReasonRoleDenied + ": principal billing-hooks (roles claim,read) may not read /metrics: it needs role metrics"},
		{"certificate without role metrics", "", e.clientCert(t, leaf{uris: []string{spiffeID}}), http.StatusForbidden, auth.ReasonRoleDenied},
		{"scraper token", scraperToken, nil, http.StatusOK, "scraper"},
		{"scraper certificate", "", e.clientCert(t, leaf{uris: []string{scraperID}}), http.StatusOK, "scraper"},
		{"admin token", opsToken, nil, http.StatusOK, "ops"},
	}
	for _, tc := range tests {
		seen = ""
		code, body := get(tc.token, tc.cert)
		switch {
		case code != tc.code:
			t.Errorf("%s: GET /metrics = %d %q, want %d", tc.desc, code, body, tc.code)
		case code == http.StatusOK && seen != tc.want:
			t.Errorf("%s: handler saw principal %q, want %q", tc.desc, seen, tc.want)
		case code != http.StatusOK && (!strings.Contains(body, tc.want) || seen != ""):
			t.Errorf("%s: GET /metrics body = %q (handler saw %q), want it to say %q and the handler not run", tc.desc, body, seen, tc.want)
		}
	}
	// Over its rate: 429 with Retry-After, and the handler does not run.
	if code, body := get(slowToken, nil); code != http.StatusOK {
		t.Errorf("slow-scraper's first scrape = %d %q, want 200", code, body)
	}
	seen = ""
	res := func() *http.Response {
		req, _ := http.NewRequest("GET", hs.URL+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+slowToken)
		res, err := (&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: e.serverCA.pool}}}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}()
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") != "1" || seen != "" {
		t.Errorf("slow-scraper's second scrape in the same instant = %d, Retry-After %q (handler saw %q); want 429, 1 and the handler not run",
			res.StatusCode, res.Header.Get("Retry-After"), seen)
	}

	e.clk.Advance(time.Hour)
	if code, body := get(scraperToken, nil); code != http.StatusUnauthorized || !strings.Contains(body, "expired") {
		t.Errorf("expired scraper token: GET /metrics = %d %q, want 401 saying it expired", code, body)
	}
	if got := e.denied(t, auth.ReasonRoleDenied); got != 2 {
		t.Errorf("claimd_auth_denied_total{reason=ROLE_DENIED} = %v, want 2 (the two refused for their role)", got)
	}
	e.noSecrets(t)
}

// TestUnmatchableIdentitiesWarned: identities of a kind --tls-identity
// does not read are named in a warning at load: they admit nobody.
func TestUnmatchableIdentitiesWarned(t *testing.T) {
	e := newEnvWith(t, auth.Options{Identity: auth.IdentityDNS})
	lines := e.logLines("auth file lists certificate identities that --tls-identity never reads; they admit nobody")
	if len(lines) != 1 || !strings.Contains(lines[0], spiffeID) || !strings.Contains(lines[0], "cn:hooks") || strings.Contains(lines[0], "dns:hooks") {
		t.Errorf("warnings at load = %q, want one naming the SPIFFE ID and cn:hooks, not dns:hooks", lines)
	}
}
