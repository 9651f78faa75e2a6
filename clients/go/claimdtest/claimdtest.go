// Package claimdtest builds and runs a real claimd binary for tests: on free
// loopback ports, with embedded tiers in a temporary directory. Tests of
// code that calls claimd use it instead of a mock server.
package claimdtest

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Package is the import path of claimd's main package.
const Package = "github.com/claimd/claimd/cmd/claimd"

// Bounds on how long the binary may take to start and to stop.
const (
	StartTimeout = 60 * time.Second
	StopTimeout  = 30 * time.Second
)

// serverModule is the module of Package.
const serverModule = "github.com/claimd/claimd"

// SourceEnv names the directory of claimd's source (its module root) that
// Source and Build use when it is set.
const SourceEnv = "CLAIMD_SRC"

// Source returns the directory of claimd's module, whose go.mod lists what
// the server needs: $CLAIMD_SRC when set; else the directory the calling
// module resolves claimd's module to, when it requires it; else the nearest
// directory above the working directory whose go.mod is claimd's (a test in
// a checkout of the repository, such as the client module's own). The
// client's module does not require the server's, so that importing the
// client never pulls in the server's databases.
func Source() (string, error) {
	if dir := os.Getenv(SourceEnv); dir != "" {
		if !isServerModule(dir) {
			return "", fmt.Errorf("$%s=%s: no go.mod of module %s there", SourceEnv, dir, serverModule)
		}
		return dir, nil
	}
	if out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", serverModule).Output(); err == nil {
		if dir := strings.TrimSpace(string(out)); dir != "" {
			return dir, nil
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if isServerModule(dir) {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("claimd's source (module %s) not found: the calling module does not require it and no directory above %s holds it; set $%s", serverModule, wd, SourceEnv)
		}
	}
}

// isServerModule reports whether dir/go.mod declares claimd's module.
func isServerModule(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`) == serverModule
		}
	}
	return false
}

// Build compiles claimd into dir and returns the binary's path. It runs
// `go build` in claimd's module as Source finds it, because only that
// module lists what the server needs. When $CLAIMD_BIN names a binary, as
// for the Python, TypeScript and Java clients' harnesses, Build compiles
// nothing and returns that one (make test builds claimd once and sets it).
func Build(dir string) (string, error) {
	return BuildTool(dir, Package)
}

// binEnv names, for Package and the test tools of claimd's module, the
// environment variable that names a binary of it built already. make test
// (scripts/test.sh) builds them once and sets these for every suite, Go's
// included, so that no test links them again.
var binEnv = map[string]string{
	Package: "CLAIMD_BIN",
	serverModule + "/internal/testenv/cmd/testca":     "CLAIMD_TESTCA_BIN",
	serverModule + "/internal/testenv/cmd/testpg":     "CLAIMD_TESTPG_BIN",
	serverModule + "/internal/testenv/cmd/effectspec": "CLAIMD_EFFECTSPEC_BIN",
}

// BuildEnv returns env for a go command that builds as claimd's image does
// (scripts/rootfs.sh: static, -trimpath), the flags of every build in
// claimd's tests that is not -race: on a cold build cache the server and
// the client's dependencies are compiled once for all of them. env's GOFLAGS
// (its last, the one a command sees) are kept, with -trimpath added.
func BuildEnv(env []string) []string {
	var goflags string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "GOFLAGS="); ok {
			goflags = v
		}
	}
	return append(env, "CGO_ENABLED=0", "GOFLAGS="+strings.TrimSpace(goflags+" -trimpath"))
}

// BuildTool compiles the main package pkg of claimd's module (Package, or a
// test tool under it) into dir, named as pkg's last element, and returns
// the binary's path; or, when pkg's variable is set ($CLAIMD_BIN,
// $CLAIMD_TESTCA_BIN, $CLAIMD_TESTPG_BIN, $CLAIMD_EFFECTSPEC_BIN), returns
// the binary it names, compiling nothing.
func BuildTool(dir, pkg string) (string, error) {
	if v := binEnv[pkg]; v != "" && os.Getenv(v) != "" {
		bin := os.Getenv(v)
		if fi, err := os.Stat(bin); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("$%s=%s: not an executable file", v, bin)
		}
		return bin, nil
	}
	src, err := Source()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, filepath.Base(pkg))
	build := exec.Command("go", "build", "-o", bin, pkg)
	build.Dir = src
	build.Env = BuildEnv(os.Environ())
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s in %s: %v\n%s", pkg, build.Dir, err, out)
	}
	return bin, nil
}

// Server is a running claimd.
type Server struct {
	// Addr is the gRPC address, HTTPAddr the metrics/health one.
	Addr, HTTPAddr string

	cmd    *exec.Cmd
	exited chan struct{}
	err    error // cmd.Wait's answer, set before exited closes

	mu   sync.Mutex
	logs []string // the last lines of stderr, for failure messages
}

// Start runs `binary serve` on free loopback ports with its data under
// dataDir (plus args) and returns once claimd's health service reports
// SERVING, i.e. its tiers answer.
func Start(binary, dataDir string, args ...string) (*Server, error) {
	return StartTLS(binary, dataDir, nil, args...)
}

// StartTLS is Start for a claimd that serves TLS (args name --tls-cert
// and the rest): the health check connects with clientTLS, which must
// trust claimd's certificate and, when args require client certificates,
// present one. A nil clientTLS connects in plaintext.
func StartTLS(binary, dataDir string, clientTLS *tls.Config, args ...string) (*Server, error) {
	args = append([]string{"serve", "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--data-dir", dataDir}, args...)
	cmd := exec.Command(binary, args...)
	cmd.SysProcAttr = procAttr()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &Server{cmd: cmd, exited: make(chan struct{})}
	serving := make(chan [2]string, 1)
	go func() {
		// Keep draining stderr for the process's whole life: claimd logs a
		// line per request and would block on a full pipe.
		lines := bufio.NewScanner(stderr)
		lines.Buffer(make([]byte, 64<<10), 1<<20)
		for lines.Scan() {
			s.keep(lines.Text())
			var rec struct{ Msg, GRPC, HTTP string }
			if json.Unmarshal(lines.Bytes(), &rec) == nil && rec.Msg == "claimd serving" {
				select {
				case serving <- [2]string{rec.GRPC, rec.HTTP}:
				default:
				}
			}
		}
		s.err = cmd.Wait()
		close(s.exited)
	}()

	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	select {
	case addrs := <-serving:
		s.Addr, s.HTTPAddr = addrs[0], addrs[1]
	case <-s.exited:
		return nil, fmt.Errorf("claimd exited before serving: %v\n%s", s.err, s.Logs())
	case <-ctx.Done():
		s.kill()
		return nil, fmt.Errorf("claimd did not log \"claimd serving\" within %v\n%s", StartTimeout, s.Logs())
	}
	if err := waitServing(ctx, s.Addr, clientTLS); err != nil {
		s.kill()
		return nil, fmt.Errorf("claimd at %s not SERVING: %v\n%s", s.Addr, err, s.Logs())
	}
	return s, nil
}

// StartT is Start for a test: data in t.TempDir(), a fatal error on
// failure, and Stop registered as cleanup.
func StartT(t testing.TB, binary string, args ...string) *Server {
	t.Helper()
	return StartTLST(t, binary, nil, args...)
}

// StartTLST is StartTLS for a test, as StartT is Start.
func StartTLST(t testing.TB, binary string, clientTLS *tls.Config, args ...string) *Server {
	t.Helper()
	s, err := StartTLS(binary, t.TempDir(), clientTLS, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// waitServing watches grpc.health.v1 until claimd reports SERVING: Watch
// streams changes, so nothing polls or sleeps.
func waitServing(ctx context.Context, addr string, clientTLS *tls.Config) error {
	creds := insecure.NewCredentials()
	if clientTLS != nil {
		creds = credentials.NewTLS(clientTLS)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer conn.Close()
	stream, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		if resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
	}
}

// Stop sends SIGTERM and waits for claimd to drain and exit; a non-zero
// exit is an error. It is safe to call more than once.
func (s *Server) Stop() error {
	select {
	case <-s.exited:
		return s.exitErr()
	default:
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-s.exited:
		return s.exitErr()
	case <-time.After(StopTimeout):
		s.kill()
		return fmt.Errorf("claimd did not exit within %v of SIGTERM\n%s", StopTimeout, s.Logs())
	}
}

func (s *Server) exitErr() error {
	if s.err != nil {
		return fmt.Errorf("claimd exit: %v\n%s", s.err, s.Logs())
	}
	return nil
}

func (s *Server) kill() {
	_ = s.cmd.Process.Kill()
	<-s.exited
}

// Logs returns the last lines claimd wrote to stderr.
func (s *Server) Logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.logs, "\n")
}

func (s *Server) keep(line string) {
	const keep = 50
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.logs) == keep {
		s.logs = append(s.logs[:0], s.logs[1:]...)
	}
	s.logs = append(s.logs, line)
}
