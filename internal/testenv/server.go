package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Bounds on waiting for a server. They are deadlines, not delays: readiness is
// polled and a stop returns as soon as the process has exited.
const (
	readyTimeout = 90 * time.Second // a cold initdb'd PostgreSQL under -race on 2 cores
	stopTimeout  = 15 * time.Second // then SIGKILL to the whole process group
	pollInterval = 20 * time.Millisecond
	logName      = "server.log"
)

// Server is one redis-server or PostgreSQL process owned by this package, living
// in its own temporary directory (data, unix socket and log) on a fixed loopback
// port. It can be stopped and started again on the same port and data directory,
// which is what fault tests need; Close stops it and removes the directory.
type Server struct {
	name    string // binary name, for messages
	dir     string // owned temp dir; removed by Close
	port    int
	url     string
	command func(port int) *exec.Cmd // builds the server's command line for one start
	probe   func(ctx context.Context, port int) error
	stopSig syscall.Signal // graceful stop signal; SIGKILL follows after stopTimeout

	mu   sync.Mutex
	proc *process // nil while stopped
}

// process is one running incarnation of a Server.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when Wait has returned
}

// URL returns the client URL of the server (redis://... or postgres://...).
func (s *Server) URL() string { return s.url }

// Port returns the loopback TCP port the server listens on; it never changes.
func (s *Server) Port() int { return s.port }

// Dir returns the server's temporary directory, which holds its log (server.log).
func (s *Server) Dir() string { return s.dir }

// Stop stops the server (graceful signal, then SIGKILL after a bound) and waits
// for it to exit. Clients see refused connections until Start.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if err := s.stop(); err != nil {
		t.Fatalf("testenv: stop %s: %v", s.name, err)
	}
}

// Start starts a stopped server again on the same port and data directory and
// waits until it answers. Redis comes back empty (it runs without persistence);
// PostgreSQL keeps its data.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	if err := s.start(); err != nil {
		t.Fatalf("testenv: restart %s: %v", s.name, err)
	}
}

// Crash stops the server abruptly: it sends sig to the server process alone
// (SIGKILL for Redis's kill -9; SIGQUIT is PostgreSQL's immediate shutdown,
// what pg_ctl -m immediate sends: no checkpoint, crash recovery at the next
// start) and waits for it to exit, killing the process group after
// stopTimeout. Fault tools without a *testing.T call it, then Restart.
func (s *Server) Crash(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p == nil {
		return fmt.Errorf("%s is not running", s.name)
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-p.done:
		s.proc = nil
		return nil
	case <-time.After(stopTimeout):
		s.killLocked()
		return fmt.Errorf("%s did not exit within %v of %v; killed", s.name, stopTimeout, sig)
	}
}

// Restart starts a stopped or crashed server again on the same port and
// data directory and waits until it answers; Start for tools without a
// *testing.T.
func (s *Server) Restart() error { return s.start() }

// Close stops the server if it runs and removes its directory. It is safe to
// call more than once.
func (s *Server) Close() error {
	err := s.stop()
	if rmErr := os.RemoveAll(s.dir); rmErr != nil && err == nil {
		err = rmErr
	}
	return err
}

// launch picks a free port and starts the server for the first time. Another
// process may take the port between probing and binding, so a bind failure is
// retried on a fresh port; every other failure is final.
func (s *Server) launch() error {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if s.port, err = freePort(); err != nil {
			return err
		}
		if err = s.start(); err == nil || !strings.Contains(err.Error(), "Address already in use") {
			return err
		}
	}
	return err
}

// start runs the server's command and waits until the probe succeeds, the
// process exits, or readyTimeout passes. Output goes to the log in s.dir; a
// failure carries the log's tail.
func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		select {
		case <-s.proc.done: // it died on its own; starting again is fine
			s.proc = nil
		default:
			return fmt.Errorf("%s already running on port %d", s.name, s.port)
		}
	}
	logf, err := os.OpenFile(filepath.Join(s.dir, logName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := s.command(s.port)
	cmd.Stdout, cmd.Stderr = logf, logf
	err = startFromSpawner(cmd)
	logf.Close() // the child holds its own descriptor
	if err != nil {
		return fmt.Errorf("start %s: %w", s.name, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	s.proc = p

	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := waitReady(ctx, p, func(ctx context.Context) error { return s.probe(ctx, s.port) }); err != nil {
		s.killLocked()
		return fmt.Errorf("%s on port %d: %w\n%s", s.name, s.port, err, s.logTail())
	}
	return nil
}

// waitReady polls probe until it succeeds. It gives up when the process exits
// (so a crash is reported at once, not at the deadline) or ctx ends.
func waitReady(ctx context.Context, p *process, probe func(context.Context) error) error {
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := probe(pctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("exited before it was ready (%v)", p.cmd.ProcessState)
		case <-ctx.Done():
			return fmt.Errorf("not ready after %v: %w", readyTimeout, err)
		case <-tick.C:
		}
	}
}

// stop sends the graceful signal, waits up to stopTimeout, then kills the
// process group. Stopping a stopped server is a no-op.
func (s *Server) stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p == nil {
		return nil
	}
	if err := p.cmd.Process.Signal(s.stopSig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-p.done:
		s.proc = nil
		return nil
	case <-time.After(stopTimeout):
		s.killLocked()
		return fmt.Errorf("%s did not exit within %v of %v; killed", s.name, stopTimeout, s.stopSig)
	}
}

// killLocked SIGKILLs the server's whole process group (PostgreSQL backends
// outlive a killed postmaster and would hold its shared memory) and reaps it.
func (s *Server) killLocked() {
	p := s.proc
	if p == nil {
		return
	}
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
	s.proc = nil
}

// logTail returns the last lines of the server's log for error messages.
func (s *Server) logTail() string {
	b, err := os.ReadFile(filepath.Join(s.dir, logName))
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return "--- tail of " + filepath.Join(s.dir, logName) + " ---\n" + string(bytes.Join(lines, []byte("\n")))
}

// sysProcAttr puts the server in its own process group (so a kill reaches its
// children) and has the kernel kill it if this process dies first, so a crashed
// or timed-out test binary leaves no server behind. cred, when set, is the
// unprivileged user PostgreSQL must run as.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
}

// freePort asks the kernel for an unused loopback port.
//
// A server keeps its port across a restart, and between its stop and its
// start the port is free: another test binary (packages run in parallel)
// could be handed it and take it. So every port handed out is also reserved
// with an exclusive lock on a file named after it, held until this process
// exits, and a port another process holds is passed over.
func freePort() (int, error) {
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		ok, err := reservePort(port)
		if err != nil {
			return 0, err
		}
		if ok {
			return port, nil
		}
	}
	return 0, errors.New("testenv: no free loopback port that no other test process holds")
}

// reserved keeps the lock files of this process's ports open (an flock
// lives as long as its file descriptor).
var reserved struct {
	sync.Mutex
	files []*os.File
}

// reservePort takes the lock of port; ok is false when another process
// holds it.
func reservePort(port int) (ok bool, err error) {
	dir := filepath.Join(os.TempDir(), "claimd-testenv-ports")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return false, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return false, nil
		}
		return false, err
	}
	reserved.Lock()
	reserved.files = append(reserved.files, f)
	reserved.Unlock()
	return true, nil
}

// newDir creates the server's temporary directory under parent ("" means
// os.TempDir()). It is made world-traversable because PostgreSQL runs as an
// unprivileged user when we are root and must reach its data dir inside it.
func newDir(parent, prefix string) (string, error) {
	dir, err := os.MkdirTemp(parent, prefix)
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}
