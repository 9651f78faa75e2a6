package auth_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/auth"
	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/horizon"
	"github.com/claimd/claimd/internal/service"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/memory"
	"github.com/claimd/claimd/internal/tiers/sqlite"
	"github.com/claimd/claimd/internal/tiers/tierstest"
	"github.com/claimd/claimd/internal/tiers/twotier"
)

// ca is a throwaway certificate authority.
type ca struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

var serial atomic.Int64

func newCA(t *testing.T, name string) *ca {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &ca{cert: cert, key: key, pool: pool}
}

// leaf is what a certificate says about its holder.
type leaf struct {
	cn   string
	uris []string
	dns  []string
	ips  []net.IP
}

func (c *ca) issue(t *testing.T, l leaf, usage x509.ExtKeyUsage) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: l.cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     l.dns,
		IPAddresses:  l.ips,
	}
	for _, u := range l.uris {
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// Tokens of the test auth file (testFile).
var (
	hooksToken  = auth.NewToken() // billing-hooks: claim, read in billing and payouts-*
	readerToken = auth.NewToken() // billing-reader: read in billing
	spiffeToken = auth.NewToken() // spiffe-hooks, which also has a certificate identity
	opsToken    = auth.NewToken() // ops: admin everywhere
	floodToken  = auth.NewToken() // flood and calm: claim in load, 50/s burst 5 each
	calmToken   = auth.NewToken()
)

const (
	spiffeID = "spiffe://example.org/ns/billing/sa/hooks"
)

func testFile() string {
	return `version: 1
default_rate: unlimited
principals:
  billing-hooks:
    tokens: ["` + auth.HashToken(hooksToken) + `"]
    namespaces: [billing, "payouts-*"]
    roles: [claim, read]
  billing-reader:
    tokens: ["` + auth.HashToken(readerToken) + `"]
    namespaces: [billing]
    roles: [read]
  spiffe-hooks:
    tokens: ["` + auth.HashToken(spiffeToken) + `"]
    identities: ["` + spiffeID + `"]
    namespaces: [billing]
    roles: [claim]
  dns-hooks:
    identities: ["dns:hooks.billing.svc"]
    namespaces: [billing]
    roles: [claim]
  cn-hooks:
    identities: ["cn:hooks"]
    namespaces: [billing]
    roles: [claim]
  ops:
    tokens: ["` + auth.HashToken(opsToken) + `"]
    namespaces: ["*"]
    roles: [admin]
  flood:
    tokens: ["` + auth.HashToken(floodToken) + `"]
    namespaces: [load]
    roles: [claim]
    rate: {per_second: 50, burst: 5}
  calm:
    tokens: ["` + auth.HashToken(calmToken) + `"]
    namespaces: [load]
    roles: [claim]
    rate: {per_second: 50, burst: 5}
`
}

// env is claimd's gRPC server with the real service over the embedded tiers
// behind the auth interceptors, on 127.0.0.1 with TLS that verifies client
// certificates when they are sent.
type env struct {
	a        *auth.Authenticator
	path     string
	reg      *prometheus.Registry
	clk      *clock.Fake
	store    *tierstest.CountingStore
	logs     *testenv.LogBuffer
	addr     string
	serverCA *ca
	clientCA *ca
	// seen is the Principal the last admitted call carried into the handler.
	seen     atomic.Pointer[auth.Principal]
	reloaded chan error
	conns    *grpc.ClientConn // a connection without a certificate, for tests that need one
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, auth.Options{})
}

// newEnvWith is newEnv with the Options' Identity (the rest is the env's).
func newEnvWith(t *testing.T, o auth.Options) *env {
	t.Helper()
	e := &env{
		reg: prometheus.NewRegistry(), clk: clock.NewFake(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)),
		logs: &testenv.LogBuffer{}, serverCA: newCA(t, "server ca"), clientCA: newCA(t, "client ca"),
		path: filepath.Join(t.TempDir(), "auth.yaml"), reloaded: make(chan error, 16),
	}
	e.write(t, testFile())
	log := slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var err error
	e.a, err = auth.Load(e.path, auth.Options{Registerer: e.reg, Logger: log, Clock: e.clk, Identity: o.Identity, Reloaded: func(err error) { e.reloaded <- err }})
	if err != nil {
		t.Fatalf("auth.Load() error = %v", err)
	}

	lite, err := sqlite.New(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "claimd.db")})
	if err != nil {
		t.Fatal(err)
	}
	store := twotier.New(memory.New(memory.Config{}), lite, twotier.Config{})
	t.Cleanup(func() { store.Close() })
	e.store = &tierstest.CountingStore{Store: store}
	reg, err := horizon.Default()
	if err != nil {
		t.Fatal(err)
	}

	serverCert := e.serverCA.issue(t, leaf{cn: "claimd", ips: []net.IP{net.IPv4(127, 0, 0, 1)}}, x509.ExtKeyUsageServerAuth)
	creds := credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{serverCert},
		ClientCAs:    e.clientCA.pool,
		ClientAuth:   tls.VerifyClientCertIfGiven,
		MinVersion:   tls.VersionTLS12,
	})
	// seen runs after the auth interceptor: it sees what handlers see.
	seen := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		p := auth.FromContext(ctx)
		e.seen.Store(&p)
		return h(ctx, req)
	}
	srv := grpc.NewServer(grpc.Creds(creds), grpc.ChainUnaryInterceptor(e.a.UnaryServerInterceptor(), seen),
		grpc.ChainStreamInterceptor(e.a.StreamServerInterceptor()))
	// The service reads entities through the store it is given: keep the
	// embedded pair's reads visible behind the counting wrapper.
	svcStore := struct {
		*tierstest.CountingStore
		tiers.Entities
	}{e.store, store}
	service.New(service.Config{Store: svcStore, Registry: reg, Clock: e.clk, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}).Register(srv)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	reflection.Register(srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.addr = lis.Addr().String()
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return e
}

func (e *env) write(t *testing.T, content string) {
	t.Helper()
	// Write beside and rename over, as editors and config managers do, so
	// a reader never sees half a file.
	tmp := e.path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, e.path); err != nil {
		t.Fatal(err)
	}
}

// conn dials the server with TLS, presenting cert when it is non-nil.
func (e *env) conn(t *testing.T, cert *tls.Certificate) *grpc.ClientConn {
	t.Helper()
	cfg := &tls.Config{RootCAs: e.serverCA.pool, MinVersion: tls.VersionTLS12}
	if cert != nil {
		// Sent whatever CAs the server names, so a certificate of another
		// CA reaches the server and is refused there.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func (e *env) claims(t *testing.T, cert *tls.Certificate) pb.ClaimServiceClient {
	return pb.NewClaimServiceClient(e.conn(t, cert))
}

// clientCert is a client certificate of the client CA.
func (e *env) clientCert(t *testing.T, l leaf) *tls.Certificate {
	c := e.clientCA.issue(t, l, x509.ExtKeyUsageClientAuth)
	return &c
}

// as returns a context whose calls carry token.
func as(token string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
}

// denied returns the value of claimd_auth_denied_total{reason}.
func (e *env) denied(t *testing.T, reason string) float64 {
	t.Helper()
	return e.metric(t, "claimd_auth_denied_total", "reason", reason)
}

// metric returns the value of the series of name whose label is value
// ("" label: the unlabelled series).
func (e *env) metric(t *testing.T, name, label, value string) float64 {
	t.Helper()
	fams, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if label == "" {
				return m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no series %s{%s=%q}", name, label, value)
	return 0
}

// errorInfo returns the code and ErrorInfo of err.
func errorInfo(err error) (codes.Code, *errdetails.ErrorInfo) {
	st := status.Convert(err)
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return st.Code(), ei
		}
	}
	return st.Code(), nil
}

// wantRefused fails t unless err is code with an ErrorInfo of reason in
// claimd's domain.
func wantRefused(t *testing.T, what string, err error, code codes.Code, reason string) {
	t.Helper()
	got, ei := errorInfo(err)
	if got != code || ei == nil || ei.GetReason() != reason || ei.GetDomain() != service.ErrorDomain {
		t.Errorf("%s error = %v (ErrorInfo %v), want %v with reason %s in domain %s", what, err, ei, code, reason, service.ErrorDomain)
	}
}

// noSecrets fails t if the logs carry any token of the file.
func (e *env) noSecrets(t *testing.T) {
	t.Helper()
	logs := e.logs.String()
	for _, tok := range []string{hooksToken, readerToken, spiffeToken, opsToken, floodToken, calmToken} {
		if strings.Contains(logs, tok) || strings.Contains(logs, tok[len(auth.TokenPrefix):]) {
			t.Errorf("logs carry a bearer token")
		}
	}
}

// logLines returns the log records whose msg is msg.
func (e *env) logLines(msg string) []string {
	var out []string
	for _, l := range strings.Split(e.logs.String(), "\n") {
		if strings.Contains(l, `"msg":"`+msg+`"`) {
			out = append(out, l)
		}
	}
	return out
}
