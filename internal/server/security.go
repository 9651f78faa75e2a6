package server

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/claimd/claimd/internal/auth"
	"github.com/claimd/claimd/internal/tlsconfig"
)

// SecurityConfig is how serve protects its listeners. Each field is the
// flag of the same name (--tls-cert, --auth-file, …).
type SecurityConfig struct {
	TLSCert, TLSKey string
	// TLSClientCA requires and verifies client certificates on gRPC (mTLS),
	// on the HTTP listener's API calls and on /metrics.
	TLSClientCA string
	// TLSIdentity is the one part of a client certificate that names its
	// principal in the auth file: uri, dns or cn (auth.IdentityKind).
	TLSIdentity string
	// TLSCRL is a CRL of the client CA: certificates it lists are refused
	// at the handshake.
	TLSCRL string
	// AuthFile is the auth file (--auth-file) that internal/auth loads:
	// principals by token hash or client certificate identity, their
	// namespaces and roles.
	AuthFile string
	// FastTierKeyFile holds the keys that seal the Redis fast tier's
	// records (internal/tiers/seal's format; fastkey.go).
	FastTierKeyFile string
	// Insecure waives the exposure check, with a warning at every start.
	Insecure bool
	// Reflection serves grpc.reflection (grpcurl list/describe).
	Reflection bool
	// FileCheckInterval is how often, at most, the TLS and auth files are
	// checked for a replacement (internal/filewatch).
	FileCheckInterval time.Duration
}

// check validates the flags that go together.
func (s *SecurityConfig) check() error {
	switch {
	case (s.TLSCert == "") != (s.TLSKey == ""):
		return fmt.Errorf("%w: --tls-cert and --tls-key go together", ErrUsage)
	case s.TLSClientCA != "" && s.TLSCert == "":
		return fmt.Errorf("%w: --tls-client-ca needs --tls-cert and --tls-key: client certificates are only asked for over TLS", ErrUsage)
	case s.TLSCRL != "" && s.TLSClientCA == "":
		return fmt.Errorf("%w: --tls-crl revokes client certificates: it needs --tls-client-ca, the CA that issued them", ErrUsage)
	}
	if _, err := auth.ParseIdentityKind(s.TLSIdentity); err != nil {
		return fmt.Errorf("%w: --tls-identity: %v", ErrUsage, err)
	}
	return nil
}

// identityKind is --tls-identity, checked by check.
func (s *SecurityConfig) identityKind() auth.IdentityKind { return auth.IdentityKind(s.TLSIdentity) }

// unboundCA is the refusal of --tls-client-ca without --auth-file, which
// would let every certificate the CA signs call every RPC in every
// namespace; "" when it does not apply.
func (s *SecurityConfig) unboundCA() string {
	if s.TLSClientCA == "" || s.AuthFile != "" {
		return ""
	}
	return fmt.Sprintf("--tls-client-ca %s without --auth-file would give every certificate that CA signs every right in every namespace: add --auth-file naming the principals and their certificate identities (--tls-identity %s)",
		s.TLSClientCA, s.TLSIdentity)
}

// looseFiles lists the secret files (--auth-file, --tls-key,
// --fast-tier-key-file) that other
// users of the host may read or write, or that their group may write, each
// with the chmod that fixes it. Group read is allowed: it is how a
// Kubernetes secret volume (root:fsGroup 0440) or a host's ssl-cert group
// (0640) lets a service read its key. A file that cannot be read is left
// to the loader, which names it.
func (s *SecurityConfig) looseFiles() []string {
	var out []string
	for _, f := range []struct{ flag, path string }{{"--auth-file", s.AuthFile}, {"--tls-key", s.TLSKey}, {"--fast-tier-key-file", s.FastTierKeyFile}} {
		if f.path == "" {
			continue
		}
		fi, err := os.Stat(f.path)
		if err != nil {
			continue
		}
		mode := fi.Mode().Perm()
		var what []string
		if mode&0o007 != 0 {
			what = append(what, "other users of the host may "+access(mode&0o007))
		}
		if mode&0o020 != 0 {
			what = append(what, "its group may write it")
		}
		if len(what) > 0 {
			out = append(out, fmt.Sprintf("%s %s has mode %04o: %s; chmod go-w,o-rwx %s (0600, or 0640 for a group that must read it)",
				f.flag, f.path, mode, strings.Join(what, " and "), f.path))
		}
	}
	return out
}

// access names the rights of the low three permission bits.
func access(bits os.FileMode) string {
	var r []string
	if bits&4 != 0 {
		r = append(r, "read")
	}
	if bits&2 != 0 {
		r = append(r, "write")
	}
	if bits&1 != 0 {
		r = append(r, "execute")
	}
	return strings.Join(r, ", ") + " it"
}

// exposure lists the listeners that are reachable from other machines
// without the protection they need, each with the flags to add; none when
// both are on loopback or protected. The bound addresses are checked, so
// a host name that resolves to a public address counts as public; messages
// quote the flags as given.
//
// gRPC needs TLS and authentication: a token file or client certificates.
// The HTTP listener needs TLS and client certificates, the one
// authentication /metrics has; /healthz and /readyz stay open to probes.
// With api (--http-api) it carries the gRPC services too, and then needs
// no less than gRPC: client certificates are required of its API calls as
// of gRPC's (gateway.RequireClientCert), and the auth file applies to both.
func (s *SecurityConfig) exposure(listen string, grpcAddr net.Addr, httpListen string, httpAddr net.Addr, api bool) []string {
	var problems []string
	if !isLoopback(grpcAddr) {
		var add []string
		if s.TLSCert == "" {
			add = append(add, "--tls-cert and --tls-key")
		}
		if s.AuthFile == "" && s.TLSClientCA == "" {
			add = append(add, "--auth-file or --tls-client-ca")
		}
		if len(add) > 0 {
			problems = append(problems, fmt.Sprintf("--listen %s is not a loopback address and anyone who reaches it could claim and settle any key: add %s",
				listen, strings.Join(add, ", and ")))
		}
	}
	if !isLoopback(httpAddr) {
		var add []string
		if s.TLSCert == "" {
			add = append(add, "--tls-cert and --tls-key")
		}
		if s.TLSClientCA == "" {
			add = append(add, "--tls-client-ca (scrapers present a client certificate)")
		}
		what := "/metrics"
		if api {
			what = "/metrics and the API (--http-api)"
		}
		if len(add) > 0 {
			problems = append(problems, fmt.Sprintf("--http-listen %s is not a loopback address and %s would be open to anyone who reaches it: add %s",
				httpListen, what, strings.Join(add, ", and ")))
		}
	}
	return problems
}

// admit applies the start-up checks: the exposure of the bound
// listeners, --tls-client-ca without --auth-file, and the permissions of
// the secret files. Each is refused without --insecure; with it, a warning
// at every start names what it waived.
func (s *SecurityConfig) admit(listen string, grpcAddr net.Addr, httpListen string, httpAddr net.Addr, api bool, log *slog.Logger) error {
	exposed := s.exposure(listen, grpcAddr, httpListen, httpAddr, api)
	problems := slices.Concat(exposed, s.looseFiles())
	if u := s.unboundCA(); u != "" {
		problems = append(problems, u)
	}
	switch {
	case !s.Insecure && len(exposed) > 0:
		return fmt.Errorf("%w: %s; or listen on 127.0.0.1, or pass --insecure to accept the risk", ErrUsage, strings.Join(problems, "; "))
	case !s.Insecure && len(problems) > 0:
		return fmt.Errorf("%w: %s; or pass --insecure to accept the risk", ErrUsage, strings.Join(problems, "; "))
	case s.Insecure && len(problems) == 0:
		log.Warn("--insecure given, though every listener is on loopback or protected; remove it")
	case s.Insecure:
		log.Warn("--insecure: serving without the protection a non-loopback listener needs", "waived", problems)
	}
	return nil
}

func isLoopback(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// reloader reads --tls-cert, --tls-key and --tls-client-ca; nil without
// TLS.
func (s *SecurityConfig) reloader(log *slog.Logger) (*tlsconfig.Reloader, error) {
	if s.TLSCert == "" {
		return nil, nil
	}
	r, err := tlsconfig.New(tlsconfig.Config{
		Files:         tlsconfig.Files{Cert: s.TLSCert, Key: s.TLSKey, CA: s.TLSClientCA, CRL: s.TLSCRL},
		CheckInterval: s.FileCheckInterval,
		Logger:        log,
	})
	if err != nil {
		return nil, fmt.Errorf("--tls-cert, --tls-key, --tls-client-ca, --tls-crl: %w", err)
	}
	return r, nil
}

// guardMetrics is who may read /metrics (principal names, refusal
// counters, every namespace's series): with --tls-client-ca, a client
// certificate of the CA; with --auth-file besides, a principal with role
// metrics or admin (by token, or by that certificate). Without either it is
// open: on loopback, or waived by --insecure.
func (s *SecurityConfig) guardMetrics(h http.Handler, authn *auth.Authenticator) http.Handler {
	if authn != nil {
		h = authn.RequireRole(auth.RoleMetrics, h)
	}
	if s.TLSClientCA != "" {
		h = tlsconfig.RequireVerifiedClient(h)
	}
	return h
}

// grpcCreds is the gRPC listener's TLS: client certificates required when
// a client CA is set.
func grpcCreds(r *tlsconfig.Reloader) grpc.ServerOption {
	return grpc.Creds(credentials.NewTLS(r.ServerConfig(tlsconfig.RequireClientCert, "h2")))
}

// tlsMode names the listeners' protection for the start-up log line.
func (s *SecurityConfig) tlsMode() string {
	switch {
	case s.TLSClientCA != "":
		return "mtls"
	case s.TLSCert != "":
		return "tls"
	}
	return "off"
}
