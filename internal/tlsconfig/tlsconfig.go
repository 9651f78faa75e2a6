// Package tlsconfig builds the tls.Configs of claimd's listeners and backend
// clients from PEM files that may be replaced while the process runs:
// cert-manager, Vault agent and kubelet rotate certificates by rewriting the
// files (often by swapping a symlinked directory), and claimd must pick the
// new ones up without a restart.
//
// A Reloader checks the files on the TLS handshake path, at most once per
// CheckInterval of an injected clock, and re-parses them only when their
// contents changed; SIGHUP re-reads them at once. That is claimd's one way
// of noticing a replaced file (internal/filewatch says why it polls rather
// than watches), shared with the auth file. A replacement that does not load
// (a new certificate with the old key half-way through a rotation, a
// truncated file, an expired certificate) keeps the previous material and
// logs why, once per distinct content.
package tlsconfig

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/filewatch"
)

// MinVersion is the oldest TLS version any config of this package accepts.
const MinVersion = tls.VersionTLS12

// DefaultCheckInterval is how often, at most, a handshake re-reads the
// files. A rotation is seen within it; certificate managers renew long
// before expiry, so seconds are plenty.
const DefaultCheckInterval = filewatch.DefaultInterval

// Files names PEM files.
type Files struct {
	// Cert is a certificate chain, leaf first; Key its private key. Both
	// or neither.
	Cert, Key string
	// CA is a bundle of CA certificates that verify the peer: a server's
	// clients, or the server a client dials. Empty means none (a server
	// asks for no client certificate; a client trusts the system roots).
	CA string
	// CRL is a certificate revocation list of a CA in CA, in PEM (one or
	// more "X509 CRL" blocks) or DER: a server refuses, at the handshake,
	// a client certificate whose chain holds a certificate it lists.
	// Each CRL must be signed by a certificate of CA. Servers only; needs
	// CA.
	CRL string
}

// Config configures a Reloader. Zero values of the optional fields mean
// defaults.
type Config struct {
	Files
	// Clock decides when the files are due for another check. Default
	// clock.Real.
	Clock clock.Clock
	// CheckInterval is the least time between two checks of the files.
	// Default DefaultCheckInterval.
	CheckInterval time.Duration
	// Logger receives a line for every reload and every replacement that
	// does not load. Default slog.Default().
	Logger *slog.Logger
}

// Reloader holds the current certificate and CA pool read from Files and
// re-reads them when they change. It is safe for concurrent use.
type Reloader struct {
	cfg   Config
	cur   atomic.Pointer[material]
	files *filewatch.Files // Cert, Key, CA, CRL
}

// material is one consistent reading of the files.
type material struct {
	cert    *tls.Certificate // nil without Cert/Key
	pool    *x509.CertPool   // nil without CA
	revoked *revocations     // nil without CRL
}

// New reads the files once and fails, naming the file, when they do not
// load: a server must not start without a usable certificate.
func New(cfg Config) (*Reloader, error) {
	if (cfg.Cert == "") != (cfg.Key == "") {
		return nil, errors.New("tlsconfig: a certificate and its key go together: give both files or neither")
	}
	if cfg.Cert == "" && cfg.CA == "" {
		return nil, errors.New("tlsconfig: no files given")
	}
	if cfg.CRL != "" && cfg.CA == "" {
		return nil, errors.New("tlsconfig: a CRL revokes certificates of a CA: give the CA file too")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = DefaultCheckInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	r := &Reloader{cfg: cfg, files: filewatch.New(cfg.Clock, cfg.CheckInterval, cfg.Cert, cfg.Key, cfg.CA, cfg.CRL)}
	if err := r.files.Load(func(c [][]byte) error {
		m, err := r.parse(c[0], c[1], c[2], c[3])
		if err == nil {
			r.cur.Store(m)
		}
		return err
	}); err != nil {
		return nil, wrapRead(err)
	}
	return r, nil
}

// Reload re-reads the files now, whatever the interval and whether they
// changed (SIGHUP). On an error the previous material stays in use; the
// error says why, and is logged.
func (r *Reloader) Reload() error {
	err := wrapRead(r.files.Load(r.swap))
	if err != nil {
		r.cfg.Logger.Warn("TLS files do not load; keeping the previous ones", "err", err)
	}
	return err
}

// Leaf returns the certificate currently served, nil without Files.Cert.
func (r *Reloader) Leaf() *x509.Certificate {
	if c := r.cur.Load().cert; c != nil {
		return c.Leaf
	}
	return nil
}

// current returns the material to use for one handshake, after checking
// the files when they are due. A handshake never waits for another one's
// check: it then uses the material as it stands.
func (r *Reloader) current() *material {
	if _, err := r.files.Poll(r.swap); err != nil {
		// Once per distinct content: a file left broken is not logged at
		// every check.
		r.cfg.Logger.Warn("TLS files changed but do not load; keeping the previous ones", "err", wrapRead(err))
	}
	return r.cur.Load()
}

// swap parses a reading of the files and puts it in force.
func (r *Reloader) swap(c [][]byte) error {
	m, err := r.parse(c[0], c[1], c[2], c[3])
	if err != nil {
		return err
	}
	r.cur.Store(m)
	attrs := []any{"cert", r.cfg.Cert, "ca", r.cfg.CA}
	if m.revoked != nil {
		attrs = append(attrs, "crl", r.cfg.CRL, "revoked", m.revoked.count)
	}
	if m.cert != nil {
		attrs = append(attrs, "subject", m.cert.Leaf.Subject.String(), "serial", m.cert.Leaf.SerialNumber.Text(16),
			"not_after", m.cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	r.cfg.Logger.Info("TLS files reloaded", attrs...)
	return nil
}

// wrapRead prefixes a read error (an *fs.PathError names the file) with
// the package; parse's errors already carry it.
func wrapRead(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("tlsconfig: %w", err)
	}
	return err
}

// parse checks a reading: the key matches the certificate, the
// certificate has not expired, the CA file holds certificates only.
func (r *Reloader) parse(certPEM, keyPEM, caPEM, crlBytes []byte) (*material, error) {
	m := &material{}
	if certPEM != nil {
		c, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("tlsconfig: %s with %s: %w", r.cfg.Cert, r.cfg.Key, err)
		}
		if now := r.cfg.Clock.Now(); now.After(c.Leaf.NotAfter) {
			return nil, fmt.Errorf("tlsconfig: %s: certificate %q expired at %s", r.cfg.Cert, c.Leaf.Subject.String(), c.Leaf.NotAfter.UTC().Format(time.RFC3339))
		}
		m.cert = &c
	}
	if caPEM != nil {
		cas, err := parseCAs(r.cfg.CA, caPEM)
		if err != nil {
			return nil, err
		}
		m.pool = x509.NewCertPool()
		for _, c := range cas {
			m.pool.AddCert(c)
		}
		if crlBytes != nil {
			if m.revoked, err = parseCRLs(r.cfg.CRL, crlBytes, cas); err != nil {
				return nil, err
			}
			if next := m.revoked.nextUpdate; !next.IsZero() && next.Before(r.cfg.Clock.Now()) {
				// Still enforced: what it revokes stays revoked. A newer
				// one is due from the CA.
				r.cfg.Logger.Warn("the CRL is past its next update; it is enforced until a newer one replaces it", "crl", r.cfg.CRL,
					"next_update", m.revoked.nextUpdate.UTC().Format(time.RFC3339))
			}
		}
	}
	return m, nil
}

// parseCAs reads every block of a CA bundle strictly: anything but a
// certificate is an error, so a key pasted into the wrong file is noticed.
func parseCAs(path string, b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	n := 0
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		n++
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("tlsconfig: %s: PEM block %d is a %q, want CERTIFICATE", path, n, block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("tlsconfig: %s: certificate %d: %w", path, n, err)
		}
		out = append(out, c)
	}
	if n == 0 {
		return nil, fmt.Errorf("tlsconfig: %s: no PEM certificate found", path)
	}
	if len(bytes.TrimSpace(b)) > 0 {
		return nil, fmt.Errorf("tlsconfig: %s: text after certificate %d is not PEM", path, n)
	}
	return out, nil
}

// ClientCerts is what a server does with client certificates when
// Files.CA is set (without it, none is asked for).
type ClientCerts int

const (
	// RequireClientCert fails the handshake of a client without a
	// certificate that Files.CA verifies (mTLS).
	RequireClientCert ClientCerts = iota
	// VerifyClientCertIfGiven admits a client without a certificate and
	// verifies one that is given; the handler decides what an
	// unauthenticated client may see (RequireVerifiedClient).
	VerifyClientCertIfGiven
)

// ServerConfig returns the config of a listener that negotiates protos by
// ALPN ("h2" for gRPC; "h2", "http/1.1" for HTTP). Each handshake gets the
// current certificate and client CA pool. ALPN protocols are repeated in
// the per-handshake config because that config, not the listener's,
// decides the handshake: gRPC refuses a connection that negotiated none.
func (r *Reloader) ServerConfig(cc ClientCerts, protos ...string) *tls.Config {
	return &tls.Config{
		MinVersion: MinVersion,
		NextProtos: protos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := r.current()
			if m.cert == nil {
				return nil, errors.New("tlsconfig: no server certificate configured")
			}
			c := &tls.Config{MinVersion: MinVersion, NextProtos: protos, Certificates: []tls.Certificate{*m.cert}}
			if m.pool != nil {
				c.ClientCAs = m.pool
				c.ClientAuth = tls.RequireAndVerifyClientCert
				if cc == VerifyClientCertIfGiven {
					c.ClientAuth = tls.VerifyClientCertIfGiven
				}
			}
			if rev := m.revoked; rev != nil {
				// Called after the chain is verified, on resumed sessions
				// too, so a certificate revoked since it last connected
				// does not come back through a session ticket.
				c.VerifyConnection = func(cs tls.ConnectionState) error {
					if err := rev.check(cs.VerifiedChains); err != nil {
						r.cfg.Logger.Warn("TLS handshake refused: revoked client certificate", "err", err)
						return err
					}
					return nil
				}
			}
			return c, nil
		},
	}
}

// ClientConfig returns the config of a client of a backend: it verifies
// the server against Files.CA as read now (the system roots without it;
// a new CA bundle takes a restart, unlike the rest) and presents the
// current certificate, re-read as it rotates, when the server asks for one.
// The caller sets ServerName when the dialer does not.
func (r *Reloader) ClientConfig() *tls.Config {
	c := &tls.Config{MinVersion: MinVersion, RootCAs: r.cur.Load().pool}
	if r.cfg.Cert != "" {
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return r.current().cert, nil
		}
	}
	return c
}
