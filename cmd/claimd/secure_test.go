package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/auth"
	"github.com/claimd/claimd/internal/testenv/testcert"
)

// runBounded runs claimd to its exit, failing the test when it is still
// running after a minute (a check that let it serve).
func runBounded(t *testing.T, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, args...).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("claimd %s still running after a minute; want it refused at start\n%s", strings.Join(args, " "), out)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

// serverFiles are a server certificate for 127.0.0.1 issued by a test CA,
// and an empty token file that stands for --auth-file.
type serverFiles struct {
	ca       *testcert.CA
	cert     *testcert.Leaf
	authFile string
}

func newServerFiles(t *testing.T) serverFiles {
	ca := testcert.NewCA(t, "claimd test CA")
	authPath := filepath.Join(t.TempDir(), "auth.yaml")
	body := "version: 1\nprincipals:\n  hooks:\n    tokens: [\"" + auth.HashToken(auth.NewToken()) + "\"]\n    namespaces: [billing]\n    roles: [claim]\n"
	if err := os.WriteFile(authPath, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return serverFiles{ca: ca, cert: ca.Issue(t, "claimd", "127.0.0.1", "localhost"), authFile: authPath}
}

func TestExposureRefused(t *testing.T) {
	f := newServerFiles(t)
	tlsFlags := []string{"--tls-cert", f.cert.CertFile, "--tls-key", f.cert.KeyFile}
	tests := []struct {
		desc    string
		args    []string
		want    []string // in the output
		notWant []string
	}{
		{
			desc: "public gRPC, nothing",
			args: []string{"--listen", "0.0.0.0:0"},
			want: []string{"--listen 0.0.0.0:", "not a loopback address", "add --tls-cert and --tls-key, and --auth-file or --tls-client-ca", "--insecure"},
		},
		{
			desc:    "public gRPC with TLS, no authentication",
			args:    append([]string{"--listen", "0.0.0.0:0"}, tlsFlags...),
			want:    []string{"--listen 0.0.0.0:", "add --auth-file or --tls-client-ca"},
			notWant: []string{"add --tls-cert"},
		},
		{
			desc:    "public gRPC with a token file, no TLS",
			args:    []string{"--listen", "0.0.0.0:0", "--auth-file", f.authFile},
			want:    []string{"add --tls-cert and --tls-key"},
			notWant: []string{"--auth-file or"},
		},
		{
			desc:    "public HTTP, nothing",
			args:    []string{"--http-listen", "0.0.0.0:0"},
			want:    []string{"--http-listen 0.0.0.0:", "/metrics and the API (--http-api) would be open", "add --tls-cert and --tls-key, and --tls-client-ca"},
			notWant: []string{"--listen 127"},
		},
		{
			desc:    "public HTTP without the API, nothing",
			args:    []string{"--http-listen", "0.0.0.0:0", "--http-api=false"},
			want:    []string{"--http-listen 0.0.0.0:", "/metrics would be open", "add --tls-cert and --tls-key, and --tls-client-ca"},
			notWant: []string{"the API"},
		},
		{
			desc:    "public HTTP with TLS and tokens: /metrics has no token check",
			args:    append([]string{"--http-listen", "0.0.0.0:0", "--auth-file", f.authFile}, tlsFlags...),
			want:    []string{"add --tls-client-ca"},
			notWant: []string{"add --tls-cert"},
		},
		{
			desc: "key without certificate",
			args: []string{"--tls-key", f.cert.KeyFile},
			want: []string{"--tls-cert and --tls-key go together"},
		},
		{
			desc: "client CA without TLS",
			args: []string{"--tls-client-ca", f.ca.File()},
			want: []string{"--tls-client-ca needs --tls-cert"},
		},
		{
			desc:    "client CA without an auth file, on loopback",
			args:    append([]string{"--tls-client-ca", f.ca.File()}, tlsFlags...),
			want:    []string{"--tls-client-ca " + f.ca.File() + " without --auth-file would give every certificate that CA signs every right in every namespace: add --auth-file", "or pass --insecure"},
			notWant: []string{"listen on 127.0.0.1"},
		},
		{
			desc: "auth file readable by other users",
			args: []string{"--auth-file", withMode(t, f.authFile, 0o644)},
			want: []string{"--auth-file ", "has mode 0644: other users of the host may read it; chmod go-w,o-rwx", "or pass --insecure"},
		},
		{
			desc: "auth file writable by its group",
			args: []string{"--auth-file", withMode(t, f.authFile, 0o660)},
			want: []string{"has mode 0660: its group may write it"},
		},
		{
			desc: "TLS key writable by other users",
			args: []string{"--tls-cert", f.cert.CertFile, "--tls-key", withMode(t, f.cert.KeyFile, 0o602)},
			want: []string{"--tls-key ", "has mode 0602: other users of the host may write it"},
		},
		{
			desc: "unknown identity kind",
			args: append([]string{"--tls-client-ca", f.ca.File(), "--auth-file", f.authFile, "--tls-identity", "email"}, tlsFlags...),
			want: []string{`--tls-identity: "email" is not an identity kind: want uri (the first URI SAN), dns (the first DNS SAN) or cn (the subject common name)`},
		},
		{
			desc: "CRL without client CA",
			args: append([]string{"--tls-crl", f.authFile}, tlsFlags...),
			want: []string{"--tls-crl revokes client certificates: it needs --tls-client-ca"},
		},
	}
	for _, tc := range tests {
		args := append([]string{"serve", "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--data-dir", t.TempDir()}, tc.args...)
		out, code := runBounded(t, args...)
		if code != 2 {
			t.Errorf("%s: exit = %d, want 2 (refused at start)\n%s", tc.desc, code, out)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: output does not say %q:\n%s", tc.desc, w, out)
			}
		}
		for _, w := range tc.notWant {
			if strings.Contains(out, w) {
				t.Errorf("%s: output says %q, which was given:\n%s", tc.desc, w, out)
			}
		}
	}
}

// TestInsecureServesWithWarning: --insecure lets a public listener serve
// without TLS, and an auth file that other users may read, and says so
// every time it starts.
func TestInsecureServesWithWarning(t *testing.T) {
	loose := withMode(t, newServerFiles(t).authFile, 0o644)
	p := start(t, "--listen", "0.0.0.0:0", "--http-listen", "0.0.0.0:0", "--insecure", "--auth-file", loose, "--data-dir", t.TempDir())
	w := p.logs.wait(t, "warning about --insecure", func(r map[string]any) bool {
		return r["level"] == "WARN" && strings.HasPrefix(fmt.Sprint(r["msg"]), "--insecure")
	})
	if waived := fmt.Sprint(w["waived"]); !strings.Contains(waived, "--listen") || !strings.Contains(waived, "--http-listen") || !strings.Contains(waived, "--auth-file "+loose+" has mode 0644") {
		t.Errorf("--insecure warning waived = %s, want both listeners and the auth file's mode named", waived)
	}
	conn, err := grpc.NewClient(loopback(t, p.grpc), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	waitServing(t, conn)
	p.stop(t)
}

// loopback is addr's port on 127.0.0.1: a listener bound to 0.0.0.0 is
// reached there, and the test CA's certificate names it.
func loopback(t *testing.T, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", port)
}

// withMode is a copy of the file at path with permissions mode.
func withMode(t *testing.T, path string, mode os.FileMode) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), filepath.Base(path))
	if err := os.WriteFile(out, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(out, mode); err != nil { // past the umask
		t.Fatal(err)
	}
	return out
}

// TestBrokenCRLRefused: a --tls-crl that does not load, or is not the
// client CA's, stops claimd at start naming the flag and the file.
func TestBrokenCRLRefused(t *testing.T) {
	f := newServerFiles(t)
	for _, tc := range []struct {
		desc string
		crl  []byte
		want string
	}{
		{"not a CRL", f.cert.CertPEM, `PEM block 1 is a "CERTIFICATE", want X509 CRL`},
		{"CRL of another CA", testcert.NewCA(t, "other CA").CRL(t), "is signed by no CA of the client CA file"},
	} {
		path := filepath.Join(t.TempDir(), "ca.crl")
		if err := os.WriteFile(path, tc.crl, 0o600); err != nil {
			t.Fatal(err)
		}
		out, code := runBounded(t, "serve", "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--data-dir", t.TempDir(),
			"--tls-cert", f.cert.CertFile, "--tls-key", f.cert.KeyFile, "--tls-client-ca", f.ca.File(), "--auth-file", f.authFile, "--tls-crl", path)
		if code == 0 || !strings.Contains(out, "--tls-crl") || !strings.Contains(out, path) || !strings.Contains(out, tc.want) {
			t.Errorf("%s: serve = exit %d, %q; want refused naming --tls-crl, %s and %q", tc.desc, code, out, path, tc.want)
		}
	}
}

// TestTLSListeners runs claimd with mTLS on a public gRPC address (allowed
// without --insecure: TLS and client certificates, an auth file naming
// their identities) and checks who gets in: a certificate is read by its
// first URI SAN alone, a revoked one is refused at the handshake, /metrics
// needs a principal with role metrics.
func TestTLSListeners(t *testing.T) {
	f := newServerFiles(t)
	other := testcert.NewCA(t, "other CA")
	client, stranger := f.ca.Issue(t, "spiffe://claimd.test/billing"), other.Issue(t, "spiffe://claimd.test/billing")
	scraper := f.ca.Issue(t, "spiffe://claimd.test/prometheus")
	// The same identity as client's, revoked by the CRL: only the CRL
	// tells them apart.
	revoked := f.ca.Issue(t, "spiffe://claimd.test/billing")
	// A principal's CN and a random DNS SAN, no URI SAN (issue 32's
	// certificate admitted as admin).
	byCN := f.ca.Issue(t, "ops-admin", "random.example.net")
	authFile := filepath.Join(t.TempDir(), "auth.yaml")
	crl := filepath.Join(t.TempDir(), "ca.crl")
	for path, body := range map[string][]byte{
		authFile: []byte("version: 1\nprincipals:\n" +
			"  hooks:\n    identities: [\"spiffe://claimd.test/billing\"]\n    namespaces: [billing]\n    roles: [claim]\n" +
			"  prometheus:\n    identities: [\"spiffe://claimd.test/prometheus\"]\n    roles: [metrics]\n" +
			"  ops-admin:\n    identities: [\"cn:ops-admin\", \"dns:random.example.net\"]\n    namespaces: [\"*\"]\n    roles: [admin]\n"),
		crl: f.ca.CRL(t, revoked.Cert),
	} {
		if err := os.WriteFile(path, body, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := start(t, "--listen", "0.0.0.0:0", "--tls-cert", f.cert.CertFile, "--tls-key", f.cert.KeyFile,
		"--tls-client-ca", f.ca.File(), "--tls-crl", crl, "--auth-file", authFile, "--reflection=false", "--data-dir", t.TempDir())
	grpcAddr := loopback(t, p.grpc)

	dial := func(creds credentials.TransportCredentials) *grpc.ClientConn {
		conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	clientTLS := func(cert *testcert.Leaf) *tls.Config {
		c := &tls.Config{RootCAs: f.ca.Pool()}
		if cert != nil {
			// Present it even when the server's CA list does not name its
			// issuer, as an attacker would.
			c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert.TLS, nil }
		}
		return c
	}

	conn := dial(credentials.NewTLS(clientTLS(client)))
	waitServing(t, conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pb.NewClaimServiceClient(conn).Claim(ctx, &pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: "evt_mtls"}})
	if err != nil || c.Outcome != pb.Outcome_OUTCOME_ACQUIRED {
		t.Fatalf("Claim over mTLS = %v, %v; want ACQUIRED", c, err)
	}
	rc, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err == nil {
		_, err = rc.Recv()
	}
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("reflection with --reflection=false = %v, want Unimplemented", err)
	}

	_, err = pb.NewClaimServiceClient(dial(credentials.NewTLS(clientTLS(byCN)))).Claim(ctx, &pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: "evt_cn"}})
	if st := status.Convert(err); st.Code() != codes.Unauthenticated || !strings.Contains(st.Message(), "has no URI SAN") {
		t.Errorf("Claim with a certificate whose CN and DNS SAN name ops-admin, without a URI SAN = %v, want Unauthenticated: no URI SAN", err)
	}

	for _, tc := range []struct {
		desc  string
		creds credentials.TransportCredentials
	}{
		{"no client certificate", credentials.NewTLS(clientTLS(nil))},
		{"client certificate of another CA", credentials.NewTLS(clientTLS(stranger))},
		{"revoked client certificate", credentials.NewTLS(clientTLS(revoked))},
		{"plaintext", insecure.NewCredentials()},
	} {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := healthpb.NewHealthClient(dial(tc.creds)).Check(cctx, &healthpb.HealthCheckRequest{})
		cancel()
		if status.Code(err) != codes.Unavailable {
			t.Errorf("%s: Health.Check = %v, want Unavailable (connection refused at the handshake)", tc.desc, err)
		}
	}

	httpsClient := func(cert *testcert.Leaf) *http.Client {
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: clientTLS(cert)}}
	}
	base := "https://" + p.http
	for _, tc := range []struct {
		desc   string
		client *http.Client
		url    string
		want   int
	}{
		{"probe without a certificate", httpsClient(nil), base + "/healthz", http.StatusOK},
		{"readiness without a certificate", httpsClient(nil), base + "/readyz", http.StatusOK},
		{"metrics without a certificate", httpsClient(nil), base + "/metrics", http.StatusForbidden},
		{"metrics with a certificate of a principal without role metrics", httpsClient(client), base + "/metrics", http.StatusForbidden},
		{"metrics with the scraper's certificate (role metrics)", httpsClient(scraper), base + "/metrics", http.StatusOK},
		{"plaintext", &http.Client{Timeout: 10 * time.Second}, "http://" + p.http + "/healthz", http.StatusBadRequest},
	} {
		res, err := tc.client.Get(tc.url)
		if err != nil {
			t.Errorf("%s: GET %s: %v", tc.desc, tc.url, err)
			continue
		}
		res.Body.Close()
		if res.StatusCode != tc.want {
			t.Errorf("%s: GET %s = %d, want %d", tc.desc, tc.url, res.StatusCode, tc.want)
		}
	}
	for desc, cert := range map[string]*testcert.Leaf{"of another CA": stranger, "revoked": revoked} {
		if _, err = httpsClient(cert).Get(base + "/metrics"); err == nil {
			t.Errorf("metrics with a certificate %s: GET succeeded, want the handshake refused", desc)
		}
	}

	// The API on the HTTP listener asks what gRPC asks: a certificate of
	// the client CA, whose identity the auth file names.
	for _, tc := range []struct {
		desc   string
		client *http.Client
		want   int
		reason string // in the body; "" for any
	}{
		{"API with a certificate of the CA", httpsClient(client), http.StatusOK, ""},
		{"API without a certificate", httpsClient(nil), http.StatusUnauthorized, "CREDENTIALS_MISSING"},
		{"API with a certificate whose CN and DNS SAN name a principal, no URI SAN", httpsClient(byCN), http.StatusUnauthorized, "IDENTITY_UNKNOWN"},
	} {
		res, err := tc.client.Post(base+"/v1/claims", "application/json",
			strings.NewReader(`{"namespace":"billing","provider":"stripe","eventId":"evt_https"}`))
		if err != nil {
			t.Errorf("%s: POST /v1/claims: %v", tc.desc, err)
			continue
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != tc.want || !strings.Contains(string(body), tc.reason) {
			t.Errorf("%s: POST /v1/claims = %d %s, want %d %s", tc.desc, res.StatusCode, body, tc.want, tc.reason)
		}
	}
	p.stop(t)
}

// TestBoundedResources: an idle keep-alive HTTP connection is closed, and a
// gRPC request over --max-request-bytes is refused RESOURCE_EXHAUSTED while
// one under it is served.
func TestBoundedResources(t *testing.T) {
	p := start(t, "--http-idle-timeout", "200ms", "--max-request-bytes", "65536", "--data-dir", t.TempDir())

	nc, err := net.Dial("tcp", p.http)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(nc, "GET /healthz HTTP/1.1\r\nHost: claimd\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || res.Close {
		t.Fatalf("GET /healthz = %d (close %v), want 200 on a kept-alive connection", res.StatusCode, res.Close)
	}
	// The read ends when the server hangs up; without an idle timeout it
	// would run into the 10s deadline instead.
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("read on the idle keep-alive connection = %v, want EOF (closed by the server)", err)
	}

	conn := p.conn(t)
	waitServing(t, conn)
	claims := pb.NewClaimServiceClient(conn)
	claim := func(id string, size int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		body := fmt.Sprintf(`{"id":%q,"pad":%q}`, id, strings.Repeat("x", size))
		_, err := claims.Claim(ctx, &pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_Delivery{Delivery: &pb.Delivery{Body: []byte(body)}}})
		return err
	}
	if err := claim("evt_small", 32<<10); err != nil {
		t.Errorf("Claim with a 32 KiB delivery = %v, want it served", err)
	}
	err = claim("evt_big", 64<<10)
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("Claim with a 64 KiB delivery over --max-request-bytes 65536 = %v, want ResourceExhausted", err)
	}
	p.stop(t)
}
