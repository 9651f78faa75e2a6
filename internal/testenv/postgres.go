package testenv

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/jackc/pgx/v5"

	"github.com/claimd/claimd/internal/testenv/testcert"
)

// Options configures a PostgreSQL server started by this package. The zero
// value is the fast test server.
type Options struct {
	// Durable keeps PostgreSQL's crash-safe defaults (fsync, full_page_writes
	// and synchronous_commit on). Without it the server skips flushes, which
	// suits tests and would falsify benchmarks that measure commit latency.
	Durable bool
	// TLS, when set, makes the server speak TLS with a certificate for
	// 127.0.0.1 and localhost issued by this CA, and refuse connections
	// without it (pg_hba hostssl only). The Server's URL then verifies it:
	// sslmode=verify-full&sslrootcert=<the CA's file>.
	TLS *testcert.CA
}

const (
	pgSuperuser = "postgres" // initdb -U; trust auth, loopback only
	pgDatabase  = "claimd"   // created at start; a Server's URL points at it
	pgAdminDB   = "postgres" // where CREATE/DROP DATABASE are issued
)

// StartPostgresProcess runs initdb in a new temporary directory under dir (""
// means os.TempDir()), starts postgres on a free loopback port with its unix
// socket inside that directory, and creates the empty database "claimd" that
// the returned Server's URL points at. As root it runs initdb and postgres as
// the user nobody, because PostgreSQL refuses to run as root. It is the entry
// point for tools without a *testing.T (the benchmark harness); the caller
// must Close the server.
func StartPostgresProcess(dir string, opts Options) (*Server, error) {
	initdb, postgres, err := postgresBinaries()
	if err != nil {
		return nil, err
	}
	tmp, err := newDir(dir, "claimd-pg-")
	if err != nil {
		return nil, err
	}
	s, err := initPostgres(tmp, initdb, postgres, opts)
	if err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	return s, nil
}

// initPostgres does the work of StartPostgresProcess inside tmp.
func initPostgres(tmp, initdb, postgres string, opts Options) (*Server, error) {
	cred, err := unprivileged()
	if err != nil {
		return nil, err
	}
	if err := checkTraversable(tmp, cred); err != nil {
		return nil, err
	}
	data, sock := filepath.Join(tmp, "data"), filepath.Join(tmp, "run")
	for _, d := range []string{data, sock} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, err
		}
		if cred != nil {
			if err := os.Chown(d, int(cred.Uid), int(cred.Gid)); err != nil {
				return nil, err
			}
		}
	}

	// --no-sync: an interrupted initdb is simply redone, so its flushes are waste.
	cmd := exec.Command(initdb, "-D", data, "-U", pgSuperuser, "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync")
	cmd.Dir = tmp // initdb resolves its own path relative to a readable cwd
	cmd.SysProcAttr = sysProcAttr(cred)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}

	settings := []string{
		"listen_addresses=127.0.0.1",
		"unix_socket_directories=" + sock,
		"max_connections=200",
	}
	if !opts.Durable {
		settings = append(settings, "fsync=off", "synchronous_commit=off", "full_page_writes=off")
	}
	if opts.TLS != nil {
		if err := serveTLSOnly(data, opts.TLS, cred); err != nil {
			return nil, err
		}
		settings = append(settings, "ssl=on") // server.crt and server.key in the data directory
	}
	urlOf := func(port int, db string) string { return pgURL(port, db, opts.TLS) }
	s := &Server{
		name: "postgres",
		dir:  tmp,
		// SIGINT is PostgreSQL's "fast" shutdown: it disconnects clients. SIGTERM
		// ("smart") would wait for every pooled connection of the test to close.
		stopSig: syscall.SIGINT,
		probe: func(ctx context.Context, port int) error {
			return withConn(ctx, urlOf(port, pgAdminDB), func(*pgx.Conn) error { return nil })
		},
		command: func(port int) *exec.Cmd {
			args := []string{"-D", data, "-p", strconv.Itoa(port)}
			for _, kv := range settings {
				args = append(args, "-c", kv)
			}
			cmd := exec.Command(postgres, args...)
			cmd.Dir = tmp
			cmd.SysProcAttr = sysProcAttr(cred)
			return cmd
		},
	}
	if err := s.launch(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := exec1(ctx, urlOf(s.port, pgAdminDB), "CREATE DATABASE "+ident(pgDatabase)); err != nil {
		s.Close()
		return nil, err
	}
	s.url = urlOf(s.port, pgDatabase)
	return s, nil
}

// unprivileged returns the credential PostgreSQL must run under: nil when we
// are not root, otherwise the user nobody.
func unprivileged() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		return nil, fmt.Errorf("running as root, PostgreSQL needs the unprivileged user nobody: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// checkTraversable fails early, with a readable message, when the user
// PostgreSQL runs as cannot reach dir: otherwise initdb fails obscurely.
func checkTraversable(dir string, cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("PostgreSQL runs as nobody and cannot traverse %s (mode %v); "+
				"set TMPDIR to a world-traversable directory", d, fi.Mode().Perm())
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// serveTLSOnly writes into the data directory a server certificate that ca
// issued and a pg_hba.conf that admits TCP connections only over TLS.
// PostgreSQL refuses a key file that is readable by others or not owned by
// the user it runs as, so every file goes to that user with mode 0600.
func serveTLSOnly(data string, ca *testcert.CA, cred *syscall.Credential) error {
	leaf, err := ca.IssueLeaf("postgres", "127.0.0.1", "localhost")
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"server.crt": leaf.CertPEM,
		"server.key": leaf.KeyPEM,
		// Trust stays (the tests have no passwords); what changes is that a
		// TCP client without TLS matches no line and is refused.
		"pg_hba.conf": []byte("local all all trust\nhostssl all all 127.0.0.1/32 trust\n"),
	}
	for name, b := range files {
		path := filepath.Join(data, name)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return err
		}
		if cred != nil {
			if err := os.Chown(path, int(cred.Uid), int(cred.Gid)); err != nil {
				return err
			}
		}
	}
	return nil
}

// pgURL is the URL of database db on a server started by this package; with
// ca, one that verifies the server's certificate against it.
func pgURL(port int, db string, ca *testcert.CA) string {
	q := url.Values{"sslmode": {"disable"}}
	if ca != nil {
		q = url.Values{"sslmode": {"verify-full"}, "sslrootcert": {ca.File()}}
	}
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?%s", pgSuperuser, port, db, q.Encode())
}

// withDatabase returns rawURL (a postgres:// URL) pointing at database db.
func withDatabase(rawURL, db string) (string, error) {
	u, err := url.Parse(rawURL)
	if err == nil && u.Scheme != "postgres" && u.Scheme != "postgresql" {
		err = fmt.Errorf("scheme %q is not postgres", u.Scheme)
	}
	if err != nil {
		return "", fmt.Errorf("PostgreSQL URL must be a postgres:// URL: %w", err)
	}
	u.Path = "/" + db
	u.RawPath = ""
	return u.String(), nil
}

// withConn runs f on a new connection to url and closes it. Admin statements
// use a connection each: they are few, and nothing stays connected to a
// template database or to a database about to be dropped.
func withConn(ctx context.Context, url string, f func(*pgx.Conn) error) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return f(conn)
}

// exec1 runs one admin statement.
func exec1(ctx context.Context, url, sql string, args ...any) error {
	return withConn(ctx, url, func(c *pgx.Conn) error {
		if _, err := c.Exec(ctx, sql, args...); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
		return nil
	})
}

// ident quotes a database name for SQL.
func ident(name string) string { return pgx.Identifier{name}.Sanitize() }
