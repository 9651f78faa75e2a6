package claimd_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/claimd/claimd/clients/go/claimd"
	"github.com/claimd/claimd/clients/go/claimdtest"
)

// Namespaces of the secured server's auth file.
const (
	secureNS  = "gosec"       // granted to principal hooks (and mesh)
	deniedNS  = "gosec-other" // granted to nobody
	pacedNS   = "gosec-paced" // principal paced: 1 call every 2s
	starvedNS = "gosec-slow"  // principal slow: 1 call every 10s
)

// securedServer is a claimd that requires TLS, a client certificate of its
// CA (mTLS) and, for every call, a principal of its auth file: by bearer
// token, or by the certificate's SPIFFE ID for principal mesh.
type securedServer struct {
	*claimdtest.Server
	ca *testCA
	// receiver's certificate names no principal: a call needs a token too.
	// mesh's names principal mesh; stranger's CA is not claimd's.
	receiver, mesh, stranger *certLeaf
	// Tokens of principals hooks (two: one to rotate to), paced and slow,
	// and one that no principal lists.
	hooks, hooksNext, paced, slow, revoked string
}

// newToken runs `claimd token new` as an operator would and returns the
// token (line 1) and the tokens: line it says to paste.
func newToken(t *testing.T) (token, line string) {
	t.Helper()
	out, err := exec.Command(binary, "token", "new").Output()
	if err != nil {
		t.Fatalf("claimd token new: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for _, l := range lines[1:] {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "tokens: ") {
			return lines[0], l
		}
	}
	t.Fatalf("claimd token new printed no tokens: line:\n%s", out)
	return "", ""
}

func startSecured(t *testing.T) *securedServer {
	t.Helper()
	s := &securedServer{ca: newTestCA(t, "claimd client test CA",
		"server=claimd,127.0.0.1,localhost,claimd.test",
		"receiver=spiffe://claimd.test/receiver",
		"mesh=spiffe://claimd.test/mesh")}
	server := s.ca.leaf(t, "server")
	s.receiver, s.mesh = s.ca.leaf(t, "receiver"), s.ca.leaf(t, "mesh")
	s.stranger = newTestCA(t, "another CA", "receiver=spiffe://claimd.test/receiver").leaf(t, "receiver")

	var hooksLine, nextLine, pacedLine, slowLine string
	s.hooks, hooksLine = newToken(t)
	s.hooksNext, nextLine = newToken(t)
	s.paced, pacedLine = newToken(t)
	s.slow, slowLine = newToken(t)
	s.revoked, _ = newToken(t)
	// hooks lists its second token on a line of its own: the printed line
	// holds one hash in a flow list.
	nextHash := strings.TrimSuffix(strings.TrimPrefix(nextLine, `tokens: [`), `]`)
	hooksLine = strings.TrimSuffix(hooksLine, "]") + ", " + nextHash + "]"
	authFile := filepath.Join(t.TempDir(), "auth.yaml")
	body := fmt.Sprintf(`version: 1
principals:
  hooks:
    %s
    namespaces: [%s]
    roles: [claim, read]
  mesh:
    identities: ["spiffe://claimd.test/mesh"]
    namespaces: [%s]
    roles: [claim]
  paced:
    %s
    namespaces: [%s]
    roles: [claim]
    rate: {per_second: 0.5, burst: 1}
  slow:
    %s
    namespaces: [%s]
    roles: [claim]
    rate: {per_second: 0.1, burst: 1}
`, hooksLine, secureNS, secureNS, pacedLine, pacedNS, slowLine, starvedNS)
	if err := os.WriteFile(authFile, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	s.Server = claimdtest.StartTLST(t, binary,
		&tls.Config{RootCAs: s.ca.Pool(), Certificates: []tls.Certificate{s.receiver.TLS}},
		"--tls-cert", server.CertFile, "--tls-key", server.KeyFile, "--tls-client-ca", s.ca.File(), "--auth-file", authFile)
	return s
}

// dialSecured connects to the secured server with its CA, the receiver's
// certificate and opts.
func (s *securedServer) dial(t *testing.T, opts ...claimd.Option) *claimd.Client {
	t.Helper()
	opts = append([]claimd.Option{claimd.WithTLSFiles(s.ca.File(), s.receiver.CertFile, s.receiver.KeyFile)}, opts...)
	return dial(t, s.Addr, opts...)
}

// TestSecured runs the client against a claimd that requires TLS, mTLS and
// a principal for every call.
func TestSecured(t *testing.T) {
	t.Parallel()
	s := startSecured(t)

	t.Run("guard round trip with token and client certificate", func(t *testing.T) {
		t.Parallel()
		ctx := ctxT(t)
		c := s.dial(t, claimd.WithToken(s.hooks))
		req := claimd.ClaimRequest{Namespace: secureNS, Provider: "stripe", EventID: eventID(t)}
		var runs atomic.Int32
		fn := func(context.Context, claimd.Claim) ([]byte, error) {
			runs.Add(1)
			return []byte(`{"charged":true}`), nil
		}
		for _, want := range []claimd.Disposition{claimd.Settled, claimd.Duplicate} {
			o := c.Guard(ctx, req, fn)
			if o.Disposition != want || o.Status != http.StatusOK || string(o.Body) != `{"charged":true}` {
				t.Fatalf("Guard(%q) = %v %d %q (err %v), want %v 200 with the result\n%s", req.EventID, o.Disposition, o.Status, o.Body, o.Err, want, s.Logs())
			}
		}
		if n := runs.Load(); n != 1 {
			t.Errorf("guarded fn ran %d times, want 1", n)
		}
	})

	t.Run("client certificate alone names principal mesh", func(t *testing.T) {
		t.Parallel()
		c := dial(t, s.Addr, claimd.WithTLSFiles(s.ca.File(), s.mesh.CertFile, s.mesh.KeyFile))
		o := c.Guard(ctxT(t), claimd.ClaimRequest{Namespace: secureNS, Provider: "stripe", EventID: eventID(t)},
			func(context.Context, claimd.Claim) ([]byte, error) { return []byte("ok"), nil })
		if o.Disposition != claimd.Settled {
			t.Fatalf("Guard over mTLS only = %v %d (err %v), want settled", o.Disposition, o.Status, o.Err)
		}
	})

	t.Run("token source rotates per call", func(t *testing.T) {
		t.Parallel()
		ctx := ctxT(t)
		var current atomic.Value
		current.Store(s.hooks)
		var asked atomic.Int32
		c := s.dial(t, claimd.WithTokenSource(func(context.Context) (string, error) {
			asked.Add(1)
			return current.Load().(string), nil
		}))
		claim := func() error {
			_, err := c.Claim(ctx, claimd.ClaimRequest{Namespace: secureNS, Provider: "stripe", EventID: eventID(t)})
			return err
		}
		if err := claim(); err != nil {
			t.Fatalf("Claim with the first token = %v", err)
		}
		current.Store(s.hooksNext)
		if err := claim(); err != nil {
			t.Fatalf("Claim with the rotated token = %v", err)
		}
		current.Store(s.revoked)
		if err := claim(); !errors.Is(err, claimd.ErrUnauthenticated) {
			t.Fatalf("Claim with a token no principal lists = %v, want ErrUnauthenticated", err)
		}
		if n := asked.Load(); n < 3 {
			t.Errorf("token source asked %d times for 3 calls, want once per call", n)
		}
	})

	t.Run("refusals are typed, write nothing, and the guard answers 500", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			desc       string
			opts       []claimd.Option
			namespace  string
			want       error
			wantCode   codes.Code
			wantReason string
		}{
			{
				desc: "no token, certificate of no principal", namespace: secureNS,
				want: claimd.ErrUnauthenticated, wantCode: codes.Unauthenticated, wantReason: claimd.ErrorReasonIdentityUnknown,
			},
			{
				desc: "token no principal lists", opts: []claimd.Option{claimd.WithToken(s.revoked)}, namespace: secureNS,
				want: claimd.ErrUnauthenticated, wantCode: codes.Unauthenticated, wantReason: claimd.ErrorReasonTokenUnknown,
			},
			{
				desc: "namespace outside the principal's", opts: []claimd.Option{claimd.WithToken(s.hooks)}, namespace: deniedNS,
				want: claimd.ErrPermissionDenied, wantCode: codes.PermissionDenied, wantReason: claimd.ErrorReasonNamespaceDenied,
			},
		}
		owner := s.dial(t, claimd.WithToken(s.hooks))
		for _, tc := range tests {
			t.Run(tc.desc, func(t *testing.T) {
				t.Parallel()
				ctx := ctxT(t)
				c := s.dial(t, tc.opts...)
				req := claimd.ClaimRequest{Namespace: tc.namespace, Provider: "stripe", EventID: eventID(t)}
				_, err := c.Claim(ctx, req)
				var e *claimd.Error
				if !errors.As(err, &e) || !errors.Is(err, tc.want) || e.Code != tc.wantCode || e.Reason != tc.wantReason {
					t.Fatalf("Claim(%q) = %v, want %v with code %v and reason %s", req.EventID, err, tc.want, tc.wantCode, tc.wantReason)
				}
				if e.Attempts != 1 {
					t.Errorf("Claim(%q) was sent %d times, want 1: a refusal is not retried", req.EventID, e.Attempts)
				}
				for _, token := range []string{s.hooks, s.revoked} {
					if strings.Contains(err.Error(), token) {
						t.Errorf("Claim error %q contains a bearer token", err)
					}
				}

				ran := false
				o := c.Guard(ctx, req, func(context.Context, claimd.Claim) ([]byte, error) { ran = true; return nil, nil })
				if o.Status != http.StatusInternalServerError || o.Disposition != claimd.Rejected || ran || o.Ran || !errors.Is(o.Err, tc.want) {
					t.Errorf("Guard(%q) = %v %d (ran %v, err %v), want rejected 500 without running fn", req.EventID, o.Disposition, o.Status, ran, o.Err)
				}

				if tc.namespace == secureNS {
					// Nothing was written: the key is new to its rightful owner.
					cl, err := owner.Claim(ctx, req)
					if err != nil || !cl.Acquired() || cl.GetReason() != claimd.ReasonNew {
						t.Errorf("Claim(%q) by the owner after the refusals = %v, %v; want ACQUIRED NEW", req.EventID, cl.ClaimResponse, err)
					}
				}
			})
		}
	})

	t.Run("rate limit is retried after its RetryInfo delay", func(t *testing.T) {
		t.Parallel()
		ctx := ctxT(t)
		// attempts records what each attempt of a Claim got, and when.
		type attempt struct {
			at   time.Time
			code codes.Code
			err  error
		}
		var (
			mu       sync.Mutex
			attempts []attempt
		)
		record := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			err := invoker(ctx, method, req, reply, cc, opts...)
			mu.Lock()
			attempts = append(attempts, attempt{time.Now(), status.Code(err), err})
			mu.Unlock()
			return err
		}
		c := s.dial(t, claimd.WithToken(s.paced), claimd.WithRetry(claimd.RetryPolicy{MaxAttempts: 3, MaxElapsed: 10 * time.Second}),
			claimd.WithDialOptions(grpc.WithChainUnaryInterceptor(record)))
		for i := range 2 {
			if _, err := c.Claim(ctx, claimd.ClaimRequest{Namespace: pacedNS, Provider: "stripe", EventID: eventID(t)}); err != nil {
				t.Fatalf("Claim %d = %v, want it admitted after the rate limit's delay", i+1, err)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if len(attempts) != 3 || attempts[1].code != codes.ResourceExhausted || attempts[2].code != codes.OK {
			t.Fatalf("attempts = %v, want OK, RESOURCE_EXHAUSTED, OK (burst 1 at 0.5 per second)", attempts)
		}
		var delay time.Duration
		for _, d := range status.Convert(attempts[1].err).Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				delay = ri.GetRetryDelay().AsDuration()
			}
		}
		if delay <= 0 {
			t.Fatalf("refusal %v carries no RetryInfo delay", attempts[1].err)
		}
		// The pause is measured from the refused attempt's return, which is
		// after claimd computed the delay: it can only be longer.
		if gap := attempts[2].at.Sub(attempts[1].at); gap < delay {
			t.Errorf("retried %v after the refusal, want at least its RetryInfo delay %v", gap, delay)
		}
	})

	t.Run("rate limit past the call's time fails at once and the guard answers 503", func(t *testing.T) {
		t.Parallel()
		ctx := ctxT(t)
		c := s.dial(t, claimd.WithToken(s.slow), claimd.WithRetry(claimd.RetryPolicy{MaxAttempts: 4, MaxElapsed: 2 * time.Second}))
		if _, err := c.Claim(ctx, claimd.ClaimRequest{Namespace: starvedNS, Provider: "stripe", EventID: eventID(t)}); err != nil {
			t.Fatalf("first Claim = %v", err)
		}
		start := time.Now()
		_, err := c.Claim(ctx, claimd.ClaimRequest{Namespace: starvedNS, Provider: "stripe", EventID: eventID(t)})
		took := time.Since(start)
		var e *claimd.Error
		if !errors.As(err, &e) || !errors.Is(err, claimd.ErrResourceExhausted) || e.RetryDelay < 5*time.Second || e.Attempts != 1 {
			t.Fatalf("second Claim = %v (%+v), want ErrResourceExhausted after 1 attempt with a RetryDelay near 10s", err, e)
		}
		if took >= 2*time.Second {
			t.Errorf("second Claim took %v, want a prompt failure: the delay %v outlasts MaxElapsed 2s", took, e.RetryDelay)
		}

		ran := false
		o := c.Guard(ctx, claimd.ClaimRequest{Namespace: starvedNS, Provider: "stripe", EventID: eventID(t)},
			func(context.Context, claimd.Claim) ([]byte, error) { ran = true; return nil, nil })
		if o.Status != http.StatusServiceUnavailable || o.Disposition != claimd.Unavailable || ran || o.RetryAfter < 5*time.Second {
			t.Errorf("Guard over the rate limit = %v %d Retry-After %v (ran %v), want unavailable 503 with claimd's delay", o.Disposition, o.Status, o.RetryAfter, ran)
		}
	})

	t.Run("server name and roots are checked", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			desc string
			opts []claimd.Option
			ok   bool
		}{
			{"server name the certificate carries", []claimd.Option{claimd.WithServerName("claimd.test")}, true},
			{"server name it does not carry", []claimd.Option{claimd.WithServerName("elsewhere.test")}, false},
		}
		for _, tc := range tests {
			opts := append([]claimd.Option{claimd.WithTLSFiles(s.ca.File(), s.receiver.CertFile, s.receiver.KeyFile),
				claimd.WithToken(s.hooks), claimd.WithConnectTimeout(time.Second)}, tc.opts...)
			c, err := claimd.Dial(ctxT(t), s.Addr, opts...)
			if err == nil {
				c.Close()
			}
			if (err == nil) != tc.ok {
				t.Errorf("%s: Dial(%s) = %v, want ok %v", tc.desc, s.Addr, err, tc.ok)
			}
		}
		// Without a CA the system roots decide, and they do not know the
		// test CA.
		cfg := &tls.Config{Certificates: []tls.Certificate{s.receiver.TLS}}
		if _, err := claimd.Dial(ctxT(t), s.Addr, claimd.WithTLS(cfg), claimd.WithConnectTimeout(time.Second)); !errors.Is(err, claimd.ErrUnavailable) {
			t.Errorf("Dial with the system roots = %v, want ErrUnavailable (certificate of an unknown authority)", err)
		}
	})

	t.Run("token stays out of formatted values", func(t *testing.T) {
		t.Parallel()
		c := s.dial(t, claimd.WithToken(s.hooks))
		for _, verb := range []string{"%v", "%+v", "%#v"} {
			if strings.Contains(fmt.Sprintf(verb, c), s.hooks) {
				t.Errorf("fmt %s of a Client prints its token", verb)
			}
		}
	})
}

// TestPlaintextLoopbackToken: a token goes to a claimd on loopback without
// TLS (make run with an auth file), checked at the connection.
func TestPlaintextLoopbackToken(t *testing.T) {
	t.Parallel()
	tok, line := newToken(t)
	authFile := filepath.Join(t.TempDir(), "auth.yaml")
	body := "version: 1\nprincipals:\n  local:\n    " + line + "\n    namespaces: [" + namespace + "]\n    roles: [claim]\n"
	if err := os.WriteFile(authFile, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	s := claimdtest.StartT(t, binary, "--auth-file", authFile)
	c := dial(t, s.Addr, claimd.WithToken(tok))
	o := c.Guard(ctxT(t), claimd.ClaimRequest{Namespace: namespace, Provider: "stripe", EventID: eventID(t)},
		func(context.Context, claimd.Claim) ([]byte, error) { return []byte("ok"), nil })
	if o.Disposition != claimd.Settled {
		t.Fatalf("Guard with a token over loopback plaintext = %v %d (err %v), want settled", o.Disposition, o.Status, o.Err)
	}
}

// TestDialRefusesPlaintext: Dial refuses, before any connection, what would
// put calls or a token on the network in clear, and says what to add.
func TestDialRefusesPlaintext(t *testing.T) {
	t.Parallel()
	const token = "cl_not-a-real-token-but-secret-all-the-same"
	tests := []struct {
		desc   string
		target string
		opts   []claimd.Option
		want   []string
	}{
		{"remote host, nothing", "claimd.invalid:50051", nil, []string{"not a loopback address", "WithTLS", "WithInsecure"}},
		{"remote host, token", "dns:///claimd.invalid:50051", []claimd.Option{claimd.WithToken(token)}, []string{"bearer token", "WithTLS"}},
		{"remote IP, token", "192.0.2.1:50051", []claimd.Option{claimd.WithToken(token)}, []string{"not a loopback address"}},
		{"insecure with a token", "claimd.invalid:50051", []claimd.Option{claimd.WithInsecure(), claimd.WithToken(token)}, []string{"WithInsecure would send the bearer token in plaintext"}},
		{"loopback, token with a newline", "127.0.0.1:50051", []claimd.Option{claimd.WithToken(token + "\n")}, []string{"trailing newline"}},
		{"server name without TLS", "127.0.0.1:50051", []claimd.Option{claimd.WithServerName("claimd.test")}, []string{"WithServerName needs"}},
		{"TLS and insecure", "127.0.0.1:50051", []claimd.Option{claimd.WithTLS(nil), claimd.WithInsecure()}, []string{"give one of"}},
		{"certificate without key", "127.0.0.1:50051", []claimd.Option{claimd.WithTLSFiles("", "client.pem", "")}, []string{"give both or neither"}},
	}
	for _, tc := range tests {
		opts := append([]claimd.Option{claimd.WithLazyConnect()}, tc.opts...)
		c, err := claimd.Dial(context.Background(), tc.target, opts...)
		if err == nil {
			c.Close()
			t.Errorf("%s: Dial(%s) succeeded, want it refused", tc.desc, tc.target)
			continue
		}
		if !errors.Is(err, claimd.ErrInvalidArgument) {
			t.Errorf("%s: Dial(%s) = %v, want ErrInvalidArgument", tc.desc, tc.target, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: Dial(%s) = %q, want it to say %q", tc.desc, tc.target, err, w)
			}
		}
		if strings.Contains(err.Error(), "secret-all-the-same") {
			t.Errorf("%s: Dial error %q contains the token", tc.desc, err)
		}
	}
	// Loopback targets stay plaintext by default.
	for _, target := range []string{"127.0.0.1:1", "localhost:1", "[::1]:1", "dns:///localhost:1", "unix:///tmp/claimd.sock"} {
		c, err := claimd.Dial(context.Background(), target, claimd.WithLazyConnect(), claimd.WithToken(token))
		if err != nil {
			t.Errorf("Dial(%s) with a token = %v, want a loopback target accepted", target, err)
			continue
		}
		c.Close()
	}
}
