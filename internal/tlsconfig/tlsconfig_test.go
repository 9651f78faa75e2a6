package tlsconfig_test

import (
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/testenv/testcert"
	"github.com/claimd/claimd/internal/tlsconfig"
)

// handshake runs one TLS handshake over an in-memory pipe and returns the
// server's error and the client's view. In TLS 1.3 the client finishes
// before the server has checked its certificate, so a refused client
// certificate shows as the server's error; the client then sees the
// connection closed on its first read, which is waited for so that the
// server's goroutine is done when handshake returns.
func handshake(t *testing.T, server, client *tls.Config) (serverErr error, state tls.ConnectionState, clientErr error) {
	t.Helper()
	sc, cc := net.Pipe()
	defer cc.Close()
	deadline := time.Now().Add(10 * time.Second)
	sc.SetDeadline(deadline)
	cc.SetDeadline(deadline)
	done := make(chan error, 1)
	go func() {
		s := tls.Server(sc, server)
		err := s.Handshake()
		if err == nil {
			_, err = s.Write([]byte("x")) // proves the session carries data
		}
		s.Close()
		done <- err
	}()
	c := tls.Client(cc, client)
	clientErr = c.Handshake()
	if clientErr == nil {
		var b [1]byte
		if _, err := io.ReadFull(c, b[:]); err != nil {
			clientErr = err
		}
		state = c.ConnectionState()
	}
	cc.Close()
	return <-done, state, clientErr
}

// files are the PEM files a Reloader reads, in one directory, written as
// a certificate manager would replace them.
type files struct {
	tlsconfig.Files
}

func newFiles(t *testing.T, leaf *testcert.Leaf, ca *testcert.CA) *files {
	dir := t.TempDir()
	f := &files{tlsconfig.Files{Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key")}}
	f.put(t, leaf)
	if ca != nil {
		f.CA = filepath.Join(dir, "ca.crt")
		f.putCA(t, ca)
	}
	return f
}

func (f *files) put(t *testing.T, leaf *testcert.Leaf) {
	t.Helper()
	write(t, f.Cert, leaf.CertPEM)
	write(t, f.Key, leaf.KeyPEM)
}

func (f *files) putCA(t *testing.T, ca *testcert.CA) { write(t, f.CA, ca.CertPEM) }

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func newReloader(t *testing.T, f *files, clk clock.Clock, log io.Writer) *tlsconfig.Reloader {
	t.Helper()
	if log == nil {
		log = io.Discard
	}
	r, err := tlsconfig.New(tlsconfig.Config{Files: f.Files, Clock: clk, Logger: slog.New(slog.NewTextHandler(log, nil))})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return r
}

// clientOf is a client that verifies the server against ca and presents
// cert whatever CAs the server says it accepts (crypto/tls would otherwise
// send no certificate the server's CAs did not sign; an attacker would).
func clientOf(ca *testcert.CA, cert *testcert.Leaf) *tls.Config {
	c := &tls.Config{RootCAs: ca.Pool(), ServerName: "claimd.test", NextProtos: []string{"h2"}}
	if cert != nil {
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert.TLS, nil }
	}
	return c
}

func TestHandshakes(t *testing.T) {
	ca := testcert.NewCA(t, "test CA")
	other := testcert.NewCA(t, "other CA")
	server := ca.Issue(t, "claimd.test")
	client := ca.Issue(t, "spiffe://example.org/billing")
	stranger := other.Issue(t, "spiffe://example.org/billing")
	tlsOnly := newReloader(t, newFiles(t, server, nil), nil, nil)
	mtls := newReloader(t, newFiles(t, server, ca), nil, nil)

	tls11 := clientOf(ca, nil)
	tls11.MinVersion, tls11.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
	tests := []struct {
		desc          string
		server        *tls.Config
		client        *tls.Config
		wantServerErr string // "" for a handshake that succeeds
	}{
		{"TLS, client verifies the server", tlsOnly.ServerConfig(tlsconfig.RequireClientCert, "h2"), clientOf(ca, nil), ""},
		{"TLS 1.1 is refused", tlsOnly.ServerConfig(tlsconfig.RequireClientCert, "h2"), tls11, "unsupported versions"},
		{"mTLS with a certificate of the CA", mtls.ServerConfig(tlsconfig.RequireClientCert, "h2"), clientOf(ca, client), ""},
		{"mTLS without a certificate", mtls.ServerConfig(tlsconfig.RequireClientCert, "h2"), clientOf(ca, nil), "didn't provide a certificate"},
		{"mTLS with a certificate of another CA", mtls.ServerConfig(tlsconfig.RequireClientCert, "h2"), clientOf(ca, stranger), "unknown authority"},
		{"optional client cert, none given", mtls.ServerConfig(tlsconfig.VerifyClientCertIfGiven, "h2"), clientOf(ca, nil), ""},
		{"optional client cert of another CA", mtls.ServerConfig(tlsconfig.VerifyClientCertIfGiven, "h2"), clientOf(ca, stranger), "unknown authority"},
	}
	for _, tc := range tests {
		serverErr, state, clientErr := handshake(t, tc.server, tc.client)
		if tc.wantServerErr != "" {
			if serverErr == nil || !strings.Contains(serverErr.Error(), tc.wantServerErr) {
				t.Errorf("%s: server handshake = %v, want an error containing %q", tc.desc, serverErr, tc.wantServerErr)
			}
			if clientErr == nil {
				t.Errorf("%s: client read data over a refused handshake", tc.desc)
			}
			continue
		}
		if serverErr != nil || clientErr != nil {
			t.Errorf("%s: handshake = server %v, client %v; want both nil", tc.desc, serverErr, clientErr)
			continue
		}
		if got := state.PeerCertificates[0].SerialNumber; got.Cmp(server.Cert.SerialNumber) != 0 {
			t.Errorf("%s: served serial %x, want %x", tc.desc, got, server.Cert.SerialNumber)
		}
		if state.NegotiatedProtocol != "h2" {
			t.Errorf("%s: ALPN = %q, want h2 (gRPC refuses a connection without it)", tc.desc, state.NegotiatedProtocol)
		}
	}
}

// TestRotation replaces the files under a running config, as cert-manager
// does, and checks that new handshakes see the new certificate once the
// check interval has passed on the injected clock, and that a replacement
// that does not load keeps the previous certificate and says why.
func TestRotation(t *testing.T) {
	ca := testcert.NewCA(t, "test CA")
	first, second, third := ca.Issue(t, "claimd.test"), ca.Issue(t, "claimd.test"), ca.Issue(t, "claimd.test")
	f := newFiles(t, first, nil)
	clk := clock.NewFake(time.Now())
	var log testenv.LogBuffer
	r := newReloader(t, f, clk, &log)
	cfg := r.ServerConfig(tlsconfig.RequireClientCert, "h2")
	served := func(step string, want *testcert.Leaf) {
		t.Helper()
		serverErr, state, clientErr := handshake(t, cfg, clientOf(ca, nil))
		if serverErr != nil || clientErr != nil {
			t.Fatalf("%s: handshake = server %v, client %v", step, serverErr, clientErr)
		}
		if got := state.PeerCertificates[0].SerialNumber; got.Cmp(want.Cert.SerialNumber) != 0 {
			t.Fatalf("%s: served serial %x, want %x", step, got, want.Cert.SerialNumber)
		}
	}

	served("start", first)
	f.put(t, second)
	served("replaced, interval not yet passed", first)
	clk.Advance(tlsconfig.DefaultCheckInterval)
	served("replaced, interval passed", second)
	if !strings.Contains(log.String(), "TLS files reloaded") {
		t.Errorf("log after a reload = %q, want a \"TLS files reloaded\" line", log.String())
	}

	// Half-way through a rotation: the new certificate with the old key.
	write(t, f.Cert, third.CertPEM)
	clk.Advance(tlsconfig.DefaultCheckInterval)
	served("new certificate, old key", second)
	if l := log.String(); !strings.Contains(l, "keeping the previous ones") || !strings.Contains(l, f.Cert) {
		t.Errorf("log after a broken pair = %q, want a line saying the previous pair is kept and naming %s", l, f.Cert)
	}
	before := log.String()
	clk.Advance(tlsconfig.DefaultCheckInterval)
	served("still broken", second)
	if log.String() != before {
		t.Errorf("a pair left broken is logged again on the next check:\n%s", strings.TrimPrefix(log.String(), before))
	}
	write(t, f.Key, third.KeyPEM)
	clk.Advance(tlsconfig.DefaultCheckInterval)
	served("key caught up", third)

	// Reload reads at once, whatever the interval.
	f.put(t, first)
	if err := r.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	served("after Reload", first)
	if got := r.Leaf().SerialNumber; got.Cmp(first.Cert.SerialNumber) != 0 {
		t.Errorf("Leaf().SerialNumber = %x, want %x", got, first.Cert.SerialNumber)
	}
	write(t, f.Key, []byte("not a key"))
	if err := r.Reload(); err == nil || !strings.Contains(err.Error(), f.Key) {
		t.Errorf("Reload with a broken key = %v, want an error naming %s", err, f.Key)
	}
	served("after a failed Reload", first)
}

// TestClientCARotation swaps the CA that verifies clients: a client of the
// new CA gets in once the files are re-read, one of the old CA no longer.
func TestClientCARotation(t *testing.T) {
	oldCA, newCA := testcert.NewCA(t, "old CA"), testcert.NewCA(t, "new CA")
	f := newFiles(t, oldCA.Issue(t, "claimd.test"), oldCA)
	clk := clock.NewFake(time.Now())
	cfg := newReloader(t, f, clk, nil).ServerConfig(tlsconfig.RequireClientCert, "h2")
	oldClient, newClient := clientOf(oldCA, oldCA.Issue(t, "billing")), clientOf(oldCA, newCA.Issue(t, "billing"))

	if serverErr, _, _ := handshake(t, cfg, oldClient); serverErr != nil {
		t.Fatalf("client of the old CA before the swap: %v", serverErr)
	}
	f.putCA(t, newCA)
	clk.Advance(tlsconfig.DefaultCheckInterval)
	if serverErr, _, _ := handshake(t, cfg, newClient); serverErr != nil {
		t.Errorf("client of the new CA after the swap: %v", serverErr)
	}
	if serverErr, _, _ := handshake(t, cfg, oldClient); serverErr == nil {
		t.Errorf("client of the old CA after the swap: handshake succeeded, want it refused")
	}
}

// TestClientConfig is the backend side: the server is verified against the
// CA file, and the client certificate follows rotation.
func TestClientConfig(t *testing.T) {
	ca, other := testcert.NewCA(t, "test CA"), testcert.NewCA(t, "other CA")
	first, second := ca.Issue(t, "claimd"), ca.Issue(t, "claimd")
	f := newFiles(t, first, ca)
	clk := clock.NewFake(time.Now())
	client := newReloader(t, f, clk, nil).ClientConfig()
	client.ServerName = "backend.test"

	var seen *tls.Certificate
	backend := func(leaf *testcert.Leaf) *tls.Config {
		return &tls.Config{
			Certificates: []tls.Certificate{leaf.TLS}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool(),
			VerifyConnection: func(cs tls.ConnectionState) error {
				seen = &tls.Certificate{Leaf: cs.PeerCertificates[0]}
				return nil
			},
		}
	}
	if serverErr, _, clientErr := handshake(t, backend(ca.Issue(t, "backend.test")), client); serverErr != nil || clientErr != nil {
		t.Fatalf("handshake with a backend of the CA = server %v, client %v", serverErr, clientErr)
	}
	if seen.Leaf.SerialNumber.Cmp(first.Cert.SerialNumber) != 0 {
		t.Errorf("client presented serial %x, want %x", seen.Leaf.SerialNumber, first.Cert.SerialNumber)
	}
	f.put(t, second)
	clk.Advance(tlsconfig.DefaultCheckInterval)
	if serverErr, _, clientErr := handshake(t, backend(ca.Issue(t, "backend.test")), client); serverErr != nil || clientErr != nil {
		t.Fatalf("handshake after rotation = server %v, client %v", serverErr, clientErr)
	}
	if seen.Leaf.SerialNumber.Cmp(second.Cert.SerialNumber) != 0 {
		t.Errorf("client presented serial %x after rotation, want %x", seen.Leaf.SerialNumber, second.Cert.SerialNumber)
	}
	_, _, clientErr := handshake(t, backend(other.Issue(t, "backend.test")), client)
	if clientErr == nil || !strings.Contains(clientErr.Error(), "unknown authority") {
		t.Errorf("handshake with a backend of another CA: client error %v, want unknown authority", clientErr)
	}
}

func TestNewRefusesBrokenFiles(t *testing.T) {
	ca := testcert.NewCA(t, "test CA")
	good, otherLeaf := ca.Issue(t, "claimd.test"), ca.Issue(t, "claimd.test")
	dir := t.TempDir()
	path := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		write(t, p, b)
		return p
	}
	cert, key := path("cert.pem", good.CertPEM), path("key.pem", good.KeyPEM)
	tests := []struct {
		desc  string
		files tlsconfig.Files
		want  string // in the error
	}{
		{"no files", tlsconfig.Files{}, "no files"},
		{"certificate without key", tlsconfig.Files{Cert: cert}, "both files or neither"},
		{"missing certificate", tlsconfig.Files{Cert: filepath.Join(dir, "absent.pem"), Key: key}, "absent.pem"},
		{"key of another certificate", tlsconfig.Files{Cert: cert, Key: path("other.key", otherLeaf.KeyPEM)}, "does not match"},
		{"key in the CA file", tlsconfig.Files{Cert: cert, Key: key, CA: path("ca-is-key.pem", good.KeyPEM)}, `"PRIVATE KEY", want CERTIFICATE`},
		{"empty CA file", tlsconfig.Files{Cert: cert, Key: key, CA: path("empty.pem", nil)}, "no PEM certificate"},
	}
	for _, tc := range tests {
		_, err := tlsconfig.New(tlsconfig.Config{Files: tc.files})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, want an error containing %q", tc.desc, err, tc.want)
		}
	}

	expired := tlsconfig.Config{Files: tlsconfig.Files{Cert: cert, Key: key}, Clock: clock.NewFake(good.Cert.NotAfter.Add(time.Second))}
	if _, err := tlsconfig.New(expired); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("expired certificate: New = %v, want an error saying it expired", err)
	}
}

func TestRequireVerifiedClient(t *testing.T) {
	ca := testcert.NewCA(t, "test CA")
	r := newReloader(t, newFiles(t, ca.Issue(t, "127.0.0.1"), ca), nil, nil)
	srv := httptest.NewUnstartedServer(tlsconfig.RequireVerifiedClient(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "metrics")
	})))
	srv.TLS = r.ServerConfig(tlsconfig.VerifyClientCertIfGiven, "http/1.1")
	srv.StartTLS()
	defer srv.Close()

	for _, tc := range []struct {
		desc string
		cert *testcert.Leaf
		want int
	}{
		{"no client certificate", nil, http.StatusForbidden},
		{"client certificate of the CA", ca.Issue(t, "prometheus"), http.StatusOK},
	} {
		cfg := clientOf(ca, tc.cert)
		cfg.ServerName, cfg.NextProtos = "127.0.0.1", nil
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
		res, err := c.Get(srv.URL)
		if err != nil {
			t.Fatalf("%s: GET: %v", tc.desc, err)
		}
		res.Body.Close()
		if res.StatusCode != tc.want {
			t.Errorf("%s: GET = %d, want %d", tc.desc, res.StatusCode, tc.want)
		}
	}
}

// TestCRL: a client certificate the CRL revokes is refused at the
// handshake, required or optional, PEM or DER; one it does not list gets
// in; a CRL rewritten to revoke another certificate is picked up at the
// next check of the injected clock; a CRL that is not the client CA's is
// refused at start.
func TestCRL(t *testing.T) {
	ca, other := testcert.NewCA(t, "test CA"), testcert.NewCA(t, "other CA")
	server := ca.Issue(t, "claimd.test")
	good, revoked, later := ca.Issue(t, "spiffe://example.org/good"), ca.Issue(t, "spiffe://example.org/revoked"), ca.Issue(t, "spiffe://example.org/later")
	f := newFiles(t, server, ca)
	f.CRL = filepath.Join(filepath.Dir(f.Cert), "ca.crl")
	write(t, f.CRL, ca.CRL(t, revoked.Cert))
	clk := clock.NewFake(time.Now())
	var log strings.Builder
	r := newReloader(t, f, clk, &log)
	required, optional := r.ServerConfig(tlsconfig.RequireClientCert, "h2"), r.ServerConfig(tlsconfig.VerifyClientCertIfGiven, "h2")

	for _, tc := range []struct {
		desc          string
		server        *tls.Config
		client        *testcert.Leaf
		wantServerErr string
	}{
		{"certificate the CRL does not list", required, good, ""},
		{"revoked certificate", required, revoked, "is revoked by the CRL"},
		{"revoked certificate where one is optional", optional, revoked, "is revoked by the CRL"},
		{"no certificate where one is optional", optional, nil, ""},
	} {
		serverErr, _, clientErr := handshake(t, tc.server, clientOf(ca, tc.client))
		switch {
		case tc.wantServerErr == "" && (serverErr != nil || clientErr != nil):
			t.Errorf("%s: handshake = server %v, client %v; want both nil", tc.desc, serverErr, clientErr)
		case tc.wantServerErr != "" && (serverErr == nil || !strings.Contains(serverErr.Error(), tc.wantServerErr)):
			t.Errorf("%s: server handshake = %v, want an error containing %q", tc.desc, serverErr, tc.wantServerErr)
		case tc.wantServerErr != "" && clientErr == nil:
			t.Errorf("%s: client read data over a refused handshake", tc.desc)
		}
	}
	if !strings.Contains(log.String(), "revoked client certificate") {
		t.Errorf("log does not name the refused handshake:\n%s", log.String())
	}

	// Re-issued as DER, revoking later instead: seen after the interval.
	der, err := ca.RevocationList(time.Now().Add(-time.Hour), time.Now().Add(time.Hour), later.Cert)
	if err != nil {
		t.Fatal(err)
	}
	write(t, f.CRL, der)
	if serverErr, _, _ := handshake(t, required, clientOf(ca, later)); serverErr != nil {
		t.Errorf("before the check interval: handshake of the newly revoked certificate = %v, want it admitted (old CRL)", serverErr)
	}
	clk.Advance(tlsconfig.DefaultCheckInterval)
	if serverErr, _, _ := handshake(t, required, clientOf(ca, later)); serverErr == nil || !strings.Contains(serverErr.Error(), "revoked") {
		t.Errorf("after the check interval: handshake of the newly revoked certificate = %v, want it refused", serverErr)
	}
	if serverErr, _, _ := handshake(t, required, clientOf(ca, revoked)); serverErr != nil {
		t.Errorf("after the check interval: handshake of the certificate the new CRL no longer lists = %v, want it admitted", serverErr)
	}

	for _, tc := range []struct {
		desc string
		crl  []byte
		want string
	}{
		{"CRL of another CA", other.CRL(t, revoked.Cert), `ca.crl: CRL 1 of "CN=other CA" is signed by no CA of the client CA file`},
		{"not a CRL", server.CertPEM, `ca.crl: PEM block 1 is a "CERTIFICATE", want X509 CRL`},
		{"garbage", []byte("not a crl"), "ca.crl: CRL 1 (PEM X509 CRL or DER)"},
	} {
		write(t, f.CRL, tc.crl)
		_, err := tlsconfig.New(tlsconfig.Config{Files: f.Files, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New() error = %v, want it to contain %q", tc.desc, err, tc.want)
		}
	}
	if _, err := tlsconfig.New(tlsconfig.Config{Files: tlsconfig.Files{Cert: f.Cert, Key: f.Key, CRL: f.CRL}}); err == nil || !strings.Contains(err.Error(), "give the CA file too") {
		t.Errorf("New() with a CRL and no CA error = %v, want it refused", err)
	}
}
