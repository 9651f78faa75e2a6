package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/claimd/claimd/internal/tlsconfig"
)

// securityConfig is how serve protects its listeners.
type securityConfig struct {
	TLSCert, TLSKey string
	// TLSClientCA requires and verifies client certificates on gRPC (mTLS),
	// on the HTTP listener's API calls and on /metrics.
	TLSClientCA string
	// AuthFile is the auth file (--auth-file) that internal/auth loads:
	// principals by token hash or client certificate identity, their
	// namespaces and roles.
	AuthFile string
	// Insecure waives the exposure check, with a warning at every start.
	Insecure bool
	// Reflection serves grpc.reflection (grpcurl list/describe).
	Reflection bool
}

func bindSecurity(fs *flag.FlagSet, s *securityConfig) {
	fs.StringVar(&s.TLSCert, "tls-cert", "", "PEM certificate chain of both listeners (TLS 1.2+); re-read when it changes")
	fs.StringVar(&s.TLSKey, "tls-key", "", "PEM private key of --tls-cert; re-read when it changes")
	fs.StringVar(&s.TLSClientCA, "tls-client-ca", "", "PEM CA bundle: gRPC callers, HTTP API callers and /metrics scrapers must present a certificate it signed (mTLS); re-read when it changes")
	fs.StringVar(&s.AuthFile, "auth-file", "", "auth file (YAML): principals, their token hashes or client certificate identities, namespaces and roles; re-read on SIGHUP and on change. Empty: no authentication")
	fs.BoolVar(&s.Insecure, "insecure", false, "allow a non-loopback listener without TLS and authentication (logs a warning at every start)")
	fs.BoolVar(&s.Reflection, "reflection", true, "serve gRPC server reflection (grpcurl list/describe)")
}

// check validates the flags that go together.
func (s *securityConfig) check() error {
	switch {
	case (s.TLSCert == "") != (s.TLSKey == ""):
		return fmt.Errorf("%w: --tls-cert and --tls-key go together", errUsage)
	case s.TLSClientCA != "" && s.TLSCert == "":
		return fmt.Errorf("%w: --tls-client-ca needs --tls-cert and --tls-key: client certificates are only asked for over TLS", errUsage)
	}
	return nil
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
func (s *securityConfig) exposure(listen string, grpcAddr net.Addr, httpListen string, httpAddr net.Addr, api bool) []string {
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

// admit applies the exposure check to the bound listeners: refused
// without --insecure; with it, a warning at every start naming what it
// waived.
func (s *securityConfig) admit(listen string, grpcAddr net.Addr, httpListen string, httpAddr net.Addr, api bool, log *slog.Logger) error {
	problems := s.exposure(listen, grpcAddr, httpListen, httpAddr, api)
	switch {
	case !s.Insecure && len(problems) > 0:
		return fmt.Errorf("%w: %s; or listen on 127.0.0.1, or pass --insecure to accept the risk", errUsage, strings.Join(problems, "; "))
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
func (s *securityConfig) reloader(log *slog.Logger) (*tlsconfig.Reloader, error) {
	if s.TLSCert == "" {
		return nil, nil
	}
	r, err := tlsconfig.New(tlsconfig.Config{
		Files:  tlsconfig.Files{Cert: s.TLSCert, Key: s.TLSKey, CA: s.TLSClientCA},
		Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("--tls-cert, --tls-key, --tls-client-ca: %w", err)
	}
	return r, nil
}

// grpcCreds is the gRPC listener's TLS: client certificates required when
// a client CA is set.
func grpcCreds(r *tlsconfig.Reloader) grpc.ServerOption {
	return grpc.Creds(credentials.NewTLS(r.ServerConfig(tlsconfig.RequireClientCert, "h2")))
}

// tlsMode names the listeners' protection for the start-up log line.
func (s *securityConfig) tlsMode() string {
	switch {
	case s.TLSClientCA != "":
		return "mtls"
	case s.TLSCert != "":
		return "tls"
	}
	return "off"
}
