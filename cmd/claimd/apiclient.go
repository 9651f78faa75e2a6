package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/claimd/claimd/clients/go/claimd"
)

// apiClientConfig is how a command that reads a running claimd through its
// API (reconcile, inspect) reaches it: the Go client's options as flags,
// with the client's rules (a token only over TLS or to loopback; plaintext
// to another host only when asked).
type apiClientConfig struct {
	Address                   string
	Token, TokenFile          string
	CAFile, CertFile, KeyFile string
	ServerName                string
	TLS, Plaintext            bool
	Timeout                   time.Duration
}

// bindAPIClient registers the API client's flags. Their names are the
// clients' option names (ca_file, cert_file, key_file, server_name, token);
// --plaintext is the clients' insecure, named apart from serve's
// --insecure so that one --config file serves both commands.
func bindAPIClient(fs *flag.FlagSet, c *apiClientConfig) {
	fs.StringVar(&c.Address, "address", "127.0.0.1:50051", "claimd's gRPC `ADDRESS` (host:port, or any gRPC target)")
	fs.StringVar(&c.Token, "token", "", "bearer token (claimd token new); prefer CLAIMD_TOKEN or --token-file to keep it out of process lists")
	fs.StringVar(&c.TokenFile, "token-file", "", "`FILE` holding the bearer token (a mounted secret); surrounding white space is ignored")
	fs.StringVar(&c.CAFile, "ca-file", "", "PEM CA bundle that verifies claimd's certificate; implies TLS (default roots: the system's)")
	fs.StringVar(&c.CertFile, "cert-file", "", "PEM client certificate, for a claimd that requires mTLS; implies TLS")
	fs.StringVar(&c.KeyFile, "key-file", "", "PEM private key of --cert-file")
	fs.StringVar(&c.ServerName, "server-name", "", "name claimd's certificate must carry when it is not --address's host")
	fs.BoolVar(&c.TLS, "tls", false, "connect over TLS with the system roots (implied by --ca-file and --cert-file)")
	fs.BoolVar(&c.Plaintext, "plaintext", false, "connect in plaintext to a host that is not loopback (never with a token; loopback needs no flag)")
	fs.DurationVar(&c.Timeout, "timeout", 30*time.Second, "bound on connecting and on each call")
}

// dial connects to claimd as the flags say. Errors wrap errUsage when the
// flags are at fault.
func (c *apiClientConfig) dial(ctx context.Context) (*claimd.Client, error) {
	if c.Timeout <= 0 {
		return nil, fmt.Errorf("%w: --timeout %v must be positive", errUsage, c.Timeout)
	}
	opts := []claimd.Option{claimd.WithConnectTimeout(c.Timeout), claimd.WithCallTimeout(c.Timeout)}
	token := c.Token
	if c.TokenFile != "" {
		if token != "" {
			return nil, fmt.Errorf("%w: --token and --token-file go one at a time", errUsage)
		}
		b, err := os.ReadFile(c.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("%w: --token-file: %v", errUsage, err)
		}
		token = strings.TrimSpace(string(b))
	}
	if token != "" {
		opts = append(opts, claimd.WithToken(token))
	}
	if c.TLS || c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" {
		opts = append(opts, claimd.WithTLSFiles(c.CAFile, c.CertFile, c.KeyFile))
	}
	if c.ServerName != "" {
		opts = append(opts, claimd.WithServerName(c.ServerName))
	}
	if c.Plaintext {
		opts = append(opts, claimd.WithInsecure())
	}
	cl, err := claimd.Dial(ctx, c.Address, opts...)
	if err != nil {
		if errors.Is(err, claimd.ErrInvalidArgument) {
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		return nil, err
	}
	return cl, nil
}

// call bounds one RPC by --timeout.
func (c *apiClientConfig) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.Timeout)
}
