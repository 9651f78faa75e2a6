package claimd_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/claimd/claimd/clients/go/claimdtest"
)

// The client's module does not require the server's, so these tests get
// their infrastructure as every other client's tests do: as processes built
// from claimd's source (claimdtest.Source), not as imports of its internal
// packages. testca makes certificates, testpg runs PostgreSQL, effectspec
// drives the effect processes.
const (
	testcaPkg     = "github.com/claimd/claimd/internal/testenv/cmd/testca"
	testpgPkg     = "github.com/claimd/claimd/internal/testenv/cmd/testpg"
	effectspecPkg = "github.com/claimd/claimd/internal/testenv/cmd/effectspec"
)

// toolsDir holds the tools built for this test binary; TestMain sets it.
var toolsDir string

var (
	toolsMu sync.Mutex
	tools   = map[string]string{} // package -> built binary
)

// tool builds pkg of claimd's module once per test binary.
func tool(t *testing.T, pkg string) string {
	t.Helper()
	toolsMu.Lock()
	defer toolsMu.Unlock()
	if bin, ok := tools[pkg]; ok {
		return bin
	}
	bin, err := claimdtest.BuildTool(toolsDir, pkg)
	if err != nil {
		t.Fatal(err)
	}
	tools[pkg] = bin
	return bin
}

// testCA is a throwaway CA made by testca, with the certificates it issued.
type testCA struct {
	file   string
	pool   *x509.CertPool
	leaves map[string]*certLeaf
}

// certLeaf is a certificate and key issued by a testCA.
type certLeaf struct {
	CertFile, KeyFile string
	TLS               tls.Certificate
}

// File is the path of the CA's PEM certificate.
func (c *testCA) File() string { return c.file }

// Pool is a pool holding only the CA.
func (c *testCA) Pool() *x509.CertPool { return c.pool }

// newTestCA runs testca for a CA named name and one leaf per entry of
// leaves, NAME=CN[,SAN…] (testca's -leaf).
func newTestCA(t *testing.T, name string, leaves ...string) *testCA {
	t.Helper()
	args := []string{"-dir", t.TempDir(), "-name", name}
	for _, l := range leaves {
		args = append(args, "-leaf", l)
	}
	out, err := exec.Command(tool(t, testcaPkg), args...).Output()
	if err != nil {
		t.Fatalf("testca %s: %v", strings.Join(args, " "), err)
	}
	var files struct {
		CA     string `json:"ca"`
		Leaves map[string]struct {
			Cert string `json:"cert"`
			Key  string `json:"key"`
		} `json:"leaves"`
	}
	if err := json.Unmarshal(out, &files); err != nil {
		t.Fatalf("testca printed %q: %v", out, err)
	}
	caPEM, err := os.ReadFile(files.CA)
	if err != nil {
		t.Fatal(err)
	}
	ca := &testCA{file: files.CA, pool: x509.NewCertPool(), leaves: map[string]*certLeaf{}}
	if !ca.pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("testca's %s holds no certificate", files.CA)
	}
	for key, f := range files.Leaves {
		pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			t.Fatalf("testca's leaf %s: %v", key, err)
		}
		ca.leaves[key] = &certLeaf{CertFile: f.Cert, KeyFile: f.Key, TLS: pair}
	}
	return ca
}

// leaf returns the certificate issued for key.
func (c *testCA) leaf(t *testing.T, key string) *certLeaf {
	t.Helper()
	l, ok := c.leaves[key]
	if !ok {
		t.Fatalf("testca issued no leaf %q", key)
	}
	return l
}

// postgresURLEnv names an external PostgreSQL to use instead of starting
// one, as internal/testenv's CLAIMD_TEST_POSTGRES_URL does for the server.
const postgresURLEnv = "CLAIMD_TEST_POSTGRES_URL"

// The PostgreSQL shared by this test binary: testpg, started on first use
// and stopped by stopPostgres (closing its standard input stops it).
var (
	pgOnce  sync.Once
	pgURL   string
	pgErr   error
	pgCmd   *exec.Cmd
	pgStdin io.WriteCloser
	pgSeq   atomic.Int64
)

// postgres returns the URL of a new, empty database on the shared server,
// dropped in t.Cleanup, so tests may run in parallel.
func postgres(t *testing.T) string {
	t.Helper()
	pgOnce.Do(func() {
		if pgURL = os.Getenv(postgresURLEnv); pgURL != "" {
			return
		}
		bin, err := claimdtest.BuildTool(toolsDir, testpgPkg)
		if err != nil {
			pgErr = err
			return
		}
		pgURL, pgErr = startTestpg(bin)
	})
	if pgErr != nil {
		t.Fatalf("shared PostgreSQL: %v", pgErr)
	}
	// The pid keeps names apart when several binaries share an external server.
	name := fmt.Sprintf("gotest_%d_%d", os.Getpid(), pgSeq.Add(1))
	if err := pgExec(pgURL, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pgExec(pgURL, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Error(err)
		}
	})
	u, err := url.Parse(pgURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// startTestpg runs testpg and returns the URL it prints once PostgreSQL answers.
func startTestpg(bin string) (string, error) {
	pgCmd = exec.Command(bin)
	pgCmd.Stderr = os.Stderr
	var err error
	if pgStdin, err = pgCmd.StdinPipe(); err != nil {
		return "", err
	}
	stdout, err := pgCmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := pgCmd.Start(); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		pgStdin.Close()
		return "", errors.Join(fmt.Errorf("testpg printed no URL: %w", err), pgCmd.Wait())
	}
	return strings.TrimSpace(line), nil
}

// stopPostgres stops the shared testpg, if this binary started one.
func stopPostgres() error {
	if pgCmd == nil {
		return nil
	}
	pgStdin.Close()
	if err := pgCmd.Wait(); err != nil {
		return fmt.Errorf("testpg: %w", err)
	}
	return nil
}

// pgExec runs one statement on the database at url.
func pgExec(url, sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}
