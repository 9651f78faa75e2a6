package testenv

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// StartRedisProcess starts a redis-server on a free loopback port in a new
// temporary directory under dir ("" means os.TempDir()) and waits until it
// answers PING. It runs without persistence, so a restart comes back empty.
// It is the entry point for tools without a *testing.T (the benchmark
// harness); the caller must Close the server.
func StartRedisProcess(dir string) (*Server, error) {
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
		probe:   pingRedis,
		command: func(port int) *exec.Cmd {
			cmd := exec.Command(bin,
				"--port", strconv.Itoa(port),
				"--bind", "127.0.0.1",
				"--dir", tmp,
				"--save", "", "--appendonly", "no", // no persistence: nothing outlives the test
				"--daemonize", "no",
			)
			cmd.Dir = tmp
			cmd.SysProcAttr = sysProcAttr(nil)
			return cmd
		},
	}
	if err := s.launch(); err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	s.url = fmt.Sprintf("redis://127.0.0.1:%d/0", s.port)
	return s, nil
}

// pingRedis is the readiness probe: one PING in RESP, answered +PONG (a server
// still loading answers -LOADING and is not ready).
func pingRedis(ctx context.Context, port int) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
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
