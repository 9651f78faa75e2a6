package claimd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/credentials/local"
	"google.golang.org/grpc/status"
)

// TokenSource returns the bearer token to send with a call. It is called
// once per RPC attempt, so a source that reads a file or a secret store
// (behind its own cache) rotates tokens without a new Client. An error
// fails the attempt with UNAVAILABLE, which the retry policy retries;
// return a status error to choose the code. Neither the token nor the
// source's error text should contain the token: the latter reaches logs.
type TokenSource func(ctx context.Context) (string, error)

// WithToken sends token as "authorization: Bearer <token>" with every
// call (see claimd token new). Dial refuses it on a plaintext connection
// to anything but a loopback address, and each call checks again, so the
// token never crosses a network in clear. The token appears in no log,
// error or formatted value of the Client.
func WithToken(token string) Option {
	return func(o *options) {
		o.token = func(context.Context) (string, error) { return token, nil }
		o.tokenErr = checkToken(token)
	}
}

// WithTokenSource is WithToken for a token that changes: src is asked for
// it before every call attempt.
func WithTokenSource(src TokenSource) Option {
	return func(o *options) {
		o.token, o.tokenErr = src, nil
		if src == nil {
			o.tokenErr = errors.New("WithTokenSource: the source is nil")
		}
	}
}

// WithTLS connects over TLS with cfg: its RootCAs verify claimd's
// certificate (nil means the system roots), its Certificates or
// GetClientCertificate answer a server that requires client certificates
// (mTLS). A nil cfg is TLS with the system roots. TLS 1.2 is the minimum
// unless cfg says otherwise.
func WithTLS(cfg *tls.Config) Option {
	return func(o *options) {
		if cfg == nil {
			cfg = &tls.Config{}
		}
		o.tls, o.tlsErr = cfg, nil
	}
}

// WithTLSFiles connects over TLS with PEM files: caFile is the bundle that
// verifies claimd's certificate ("" for the system roots); certFile and
// keyFile are the client certificate and key for a claimd that requires
// mTLS (both or neither). The CA bundle is read once, by Dial. The client
// certificate is read by Dial and again at each new connection's handshake,
// so a certificate rotated on disk (cert-manager, Vault agent) is used from
// the next reconnection on; a replacement that does not load keeps the
// previous pair.
func WithTLSFiles(caFile, certFile, keyFile string) Option {
	return func(o *options) {
		o.tls, o.tlsErr = tlsFromFiles(caFile, certFile, keyFile)
	}
}

// WithServerName sets the name claimd's certificate must carry, when it
// differs from the target's host (dialing an IP address, a load balancer,
// or through a tunnel). It needs WithTLS or WithTLSFiles.
func WithServerName(name string) Option {
	return func(o *options) { o.serverName = name }
}

// WithInsecure sends calls in plaintext to any address. Without it,
// plaintext is only for loopback targets and anything else needs TLS. It
// cannot be combined with a token: a token sent in clear is a token given
// away.
func WithInsecure() Option {
	return func(o *options) { o.insecure = true }
}

// WithTransportCredentials uses creds (ALTS, a SPIFFE workload API source,
// xDS…) instead of WithTLS. A token is sent only when creds report
// privacy and integrity.
func WithTransportCredentials(creds credentials.TransportCredentials) Option {
	return func(o *options) { o.creds = creds }
}

// transportCredentials decides how Dial secures the connection to target,
// or says which option is missing.
func (o *options) transportCredentials(target string) (credentials.TransportCredentials, error) {
	if o.tlsErr != nil {
		return nil, o.tlsErr
	}
	if o.tokenErr != nil {
		return nil, o.tokenErr
	}
	chosen := 0
	for _, set := range []bool{o.tls != nil, o.creds != nil, o.insecure} {
		if set {
			chosen++
		}
	}
	if chosen > 1 {
		return nil, errors.New("give one of WithTLS, WithTLSFiles, WithTransportCredentials and WithInsecure")
	}
	if o.serverName != "" && o.tls == nil {
		return nil, errors.New("WithServerName needs WithTLS or WithTLSFiles")
	}
	switch {
	case o.tls != nil:
		cfg := o.tls.Clone()
		if o.serverName != "" {
			cfg.ServerName = o.serverName
		}
		return credentials.NewTLS(cfg), nil
	case o.creds != nil:
		return o.creds, nil
	case o.insecure:
		if o.token != nil {
			return nil, errors.New("WithInsecure would send the bearer token in plaintext: use WithTLS or WithTLSFiles")
		}
		return insecure.NewCredentials(), nil
	case !loopbackTarget(target):
		what := "calls"
		if o.token != nil {
			what = "the bearer token"
		}
		return nil, fmt.Errorf("%s is not a loopback address, and %s must not cross the network in plaintext: add WithTLS or WithTLSFiles (or WithInsecure for plaintext without a token)",
			clipTarget(target), what)
	}
	// Plaintext on loopback: local credentials check at each handshake that
	// the peer really is on this machine (a name such as localhost could
	// resolve elsewhere).
	return local.NewCredentials(), nil
}

// loopbackTarget reports whether a gRPC target names this machine: a
// loopback IP, localhost, or a Unix socket. Targets it cannot read (a
// custom resolver's) are not loopback.
func loopbackTarget(target string) bool {
	switch {
	case strings.HasPrefix(target, "unix:"), strings.HasPrefix(target, "unix-abstract:"):
		return true
	case strings.HasPrefix(target, "ipv4:"), strings.HasPrefix(target, "ipv6:"):
		_, list, _ := strings.Cut(target, ":")
		for _, a := range strings.Split(list, ",") {
			if !loopbackHost(a) {
				return false
			}
		}
		return true
	}
	for _, scheme := range []string{"dns:", "passthrough:"} {
		if rest, ok := strings.CutPrefix(target, scheme); ok {
			// dns:[//authority/]host[:port]; the authority is the resolver's.
			if strings.HasPrefix(rest, "//") {
				_, rest, _ = strings.Cut(rest[2:], "/")
			}
			return loopbackHost(rest)
		}
	}
	if strings.Contains(target, "://") {
		return false
	}
	return loopbackHost(target)
}

// loopbackHost reports whether host[:port] is a loopback address or
// localhost.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// clipTarget keeps a target printable in an error.
func clipTarget(t string) string {
	const max = 64
	if len(t) > max {
		return fmt.Sprintf("%q… (%d bytes)", t[:max], len(t))
	}
	return fmt.Sprintf("%q", t)
}

// checkToken refuses what cannot be a bearer token, without echoing it.
func checkToken(tok string) error {
	switch {
	case tok == "":
		return errors.New("WithToken: the token is empty")
	case len(tok) > 512:
		return fmt.Errorf("WithToken: the token is %d bytes; claimd accepts at most 512", len(tok))
	case strings.ContainsFunc(tok, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		// Most often a token read from a file with its trailing newline.
		return errors.New("WithToken: the token contains white space or a control character (a trailing newline from a file?)")
	}
	return nil
}

// bearer is the PerRPCCredentials of WithToken and WithTokenSource. The
// token lives only in src's closure, so formatting a Client never prints
// it.
type bearer struct{ src TokenSource }

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (b bearer) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	// RequireTransportSecurity cannot say "TLS or loopback", so the check is
	// made here, per call, on the connection the call is about to use.
	ri, _ := credentials.RequestInfoFromContext(ctx)
	if !secureEnough(ri.AuthInfo) {
		return nil, status.Error(codes.Unauthenticated, "claimd: the bearer token is only sent over TLS or to a loopback address")
	}
	tok, err := b.src(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkToken(tok); err != nil {
		return nil, status.Error(codes.Unauthenticated, "claimd: the token source returned an unusable token: "+strings.TrimPrefix(err.Error(), "WithToken: "))
	}
	return map[string]string{"authorization": "Bearer " + tok}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials; see
// GetRequestMetadata for the check that replaces it.
func (bearer) RequireTransportSecurity() bool { return false }

// secureEnough reports whether a connection may carry a token: one with
// privacy and integrity (TLS, a Unix socket), or a loopback TCP connection
// that local credentials verified.
func secureEnough(ai credentials.AuthInfo) bool {
	if ai == nil {
		return false
	}
	if ai.AuthType() == "local" {
		return true
	}
	return credentials.CheckSecurityLevel(ai, credentials.PrivacyAndIntegrity) == nil && ai.AuthType() != "insecure"
}

// tlsFromFiles builds the config of WithTLSFiles.
func tlsFromFiles(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("WithTLSFiles: CA bundle: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("WithTLSFiles: CA bundle %s holds no PEM certificate", caFile)
		}
		cfg.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("WithTLSFiles: the client certificate and its key go together: give both or neither")
	}
	if certFile != "" {
		kp := &keyPair{certFile: certFile, keyFile: keyFile}
		if _, err := kp.load(); err != nil {
			return nil, fmt.Errorf("WithTLSFiles: %w", err)
		}
		cfg.GetClientCertificate = kp.get
	}
	return cfg, nil
}

// keyPair reads a client certificate and key at each handshake, keeping the
// last pair that loaded for when a rotation is half-way through (a new
// certificate beside the old key).
type keyPair struct {
	certFile, keyFile string

	mu   sync.Mutex
	last *tls.Certificate
}

func (k *keyPair) load() (*tls.Certificate, error) {
	c, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		return nil, fmt.Errorf("client certificate %s and key %s: %w", k.certFile, k.keyFile, err)
	}
	k.mu.Lock()
	k.last = &c
	k.mu.Unlock()
	return &c, nil
}

func (k *keyPair) get(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	c, err := k.load()
	if err == nil {
		return c, nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.last != nil {
		return k.last, nil
	}
	return nil, err
}
