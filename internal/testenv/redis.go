package testenv

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/claimd/claimd/internal/testenv/testcert"
)

// StartRedisProcess starts a redis-server on a free loopback port in a new
// temporary directory under dir ("" means os.TempDir()) and waits until it
// answers PING. It runs without persistence, so a restart comes back empty.
// It is the entry point for tools without a *testing.T (the benchmark
// harness); the caller must Close the server.
func StartRedisProcess(dir string) (*Server, error) {
	return startRedis(dir, nil)
}

// StartRedisTLS starts a private redis-server for one test that speaks only
// TLS (--port 0), with a certificate for 127.0.0.1 and localhost issued by
// ca. Like Redis by default (tls-auth-clients yes) it requires a client
// certificate that ca issued. Its URL is rediss://127.0.0.1:PORT/0; it is
// closed in t.Cleanup.
func StartRedisTLS(t testing.TB, ca *testcert.CA) *Server {
	t.Helper()
	s, err := startRedis("", &redisTLS{
		server: ca.Issue(t, "redis", "127.0.0.1", "localhost"),
		probe:  ca.Issue(t, "testenv-probe"),
		ca:     ca,
	})
	if err != nil {
		t.Fatalf("testenv: private Redis with TLS: %v", err)
	}
	cleanupClose(t, s)
	return s
}

// redisTLS is what a TLS-only redis-server needs: its certificate, the CA
// that verifies clients, and a client certificate for the readiness probe.
type redisTLS struct {
	server, probe *testcert.Leaf
	ca            *testcert.CA
}

func startRedis(dir string, tlsFiles *redisTLS) (*Server, error) {
	bin, err := redisBinary()
	if err != nil {
		return nil, err
	}
	tmp, err := newDir(dir, "claimd-redis-")
	if err != nil {
		return nil, err
	}
	s := &Server{
		name:    "redis-server",
		dir:     tmp,
		stopSig: syscall.SIGTERM,
		probe:   pingRedis(nil),
		command: func(port int) *exec.Cmd {
			args := []string{
				"--port", strconv.Itoa(port),
				"--bind", "127.0.0.1",
				"--dir", tmp,
				"--save", "", "--appendonly", "no", // no persistence: nothing outlives the test
				"--daemonize", "no",
			}
			if tlsFiles != nil {
				args[1] = "0" // no plaintext port: a client that skips TLS cannot connect at all
				args = append(args,
					"--tls-port", strconv.Itoa(port),
					"--tls-cert-file", tlsFiles.server.CertFile,
					"--tls-key-file", tlsFiles.server.KeyFile,
					"--tls-ca-cert-file", tlsFiles.ca.File(),
				)
			}
			cmd := exec.Command(bin, args...)
			cmd.Dir = tmp
			cmd.SysProcAttr = sysProcAttr(nil)
			return cmd
		},
	}
	scheme := "redis"
	if tlsFiles != nil {
		scheme = "rediss"
		s.probe = pingRedis(&tls.Config{
			RootCAs:      tlsFiles.ca.Pool(),
			Certificates: []tls.Certificate{tlsFiles.probe.TLS},
			ServerName:   "127.0.0.1",
			MinVersion:   tls.VersionTLS12,
		})
	}
	if err := s.launch(); err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	s.url = fmt.Sprintf("%s://127.0.0.1:%d/0", scheme, s.port)
	return s, nil
}

// pingRedis is the readiness probe: one PING in RESP, answered +PONG (a server
// still loading answers -LOADING and is not ready), over TLS when tc is set.
func pingRedis(tc *tls.Config) func(ctx context.Context, port int) error {
	return func(ctx context.Context, port int) error {
		dial := (&net.Dialer{}).DialContext
		if tc != nil {
			dial = (&tls.Dialer{Config: tc}).DialContext
		}
		conn, err := dial(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			return err
		}
		defer conn.Close()
		if dl, ok := ctx.Deadline(); ok {
			conn.SetDeadline(dl)
		}
		if _, err := conn.Write([]byte("PING\r\n")); err != nil {
			return err
		}
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil {
			return err
		}
		if !strings.HasPrefix(line, "+PONG") {
			return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
		}
		return nil
	}
}
