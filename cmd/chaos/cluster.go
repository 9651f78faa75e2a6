package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/testenv"
)

// Bounds on waiting for a process. They are deadlines, not delays.
const (
	readyTimeout = 60 * time.Second // claimd migrates its database first
	stopTimeout  = 20 * time.Second
	pollInterval = 50 * time.Millisecond
)

// providersYAML is the start of the registry every replica of a run loads
// (lifecycleYAML adds the provider of the lifecycle scenarios): one provider
// whose lease outlives any run, so that a lease never ends by itself and the
// model need not know time (see RELIABILITY.md).
const providersYAML = `version: 1
providers:
  chaos:
    retry_horizon: 72h
    margin: 12h
    lease: 1h
    max_lease: 1h
    key: json:id
    source: "https://github.com/claimd/claimd/blob/main/cmd/chaos/cluster.go"
    reviewed_on: 2026-11-01
`

// Names every call of the suite uses.
const (
	namespace = "chaos"
	provider  = "chaos"
)

// replica is one claimd process the suite starts, kills and restarts on
// the same ports (and, embedded, the same data directory).
type replica struct {
	name    string
	bin     string
	args    []string
	env     []string // added to the environment of the next start only
	addr    string   // gRPC listen address
	logPath string

	cmd  *exec.Cmd
	done chan struct{}
}

// newReplica picks free loopback ports for a claimd with the tier flags in
// tierArgs.
func newReplica(name, bin, dir string, tierArgs []string) (*replica, error) {
	grpcPort, err := freePort()
	if err != nil {
		return nil, err
	}
	httpPort, err := freePort()
	if err != nil {
		return nil, err
	}
	r := &replica{
		name: name, bin: bin,
		addr:    net.JoinHostPort("127.0.0.1", strconv.Itoa(grpcPort)),
		logPath: filepath.Join(dir, name+".log"),
	}
	r.args = append([]string{"serve",
		"--listen", r.addr,
		"--http-listen", net.JoinHostPort("127.0.0.1", strconv.Itoa(httpPort)),
		"--providers", filepath.Join(dir, "providers.yaml"),
		"--log-level", "warn",
		"--shutdown-timeout", "5s",
	}, tierArgs...)
	return r, nil
}

// start runs the replica and waits until its health service is SERVING.
func (r *replica) start(ctx context.Context) error {
	logf, err := os.OpenFile(r.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close() // the child holds its own descriptor
	cmd := exec.Command(r.bin, r.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), r.env...)
	r.env = nil
	// Its own process group, and killed by the kernel if the suite dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", r.name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	r.cmd, r.done = cmd, done
	return r.waitReady(ctx)
}

func (r *replica) exited() bool {
	if r.done == nil {
		return true
	}
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// waitExit waits up to d for the process to exit on its own (a crash point).
func (r *replica) waitExit(d time.Duration) bool {
	if r.done == nil {
		return true
	}
	select {
	case <-r.done:
		return true
	case <-time.After(d):
		return false
	}
}

// killedBySignal reports whether the last run ended by SIGKILL.
func (r *replica) killedBySignal() bool {
	if r.cmd == nil || r.cmd.ProcessState == nil {
		return false
	}
	ws, ok := r.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

func (r *replica) waitReady(ctx context.Context) error {
	cc, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	deadline := time.Now().Add(readyTimeout)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := hc.Check(cctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		if r.exited() {
			return fmt.Errorf("%s exited before it was ready; see %s", r.name, r.logPath)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s not SERVING after %v (%v); see %s", r.name, readyTimeout, err, r.logPath)
		}
		time.Sleep(pollInterval) // polling a process we do not control
	}
}

// kill is kill -9 of the replica by PID; it waits for the exit.
func (r *replica) kill() error {
	if r.exited() {
		return nil
	}
	if err := r.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	<-r.done
	return nil
}

// stop is a graceful stop (SIGTERM: claimd drains), then SIGKILL.
func (r *replica) stop() error {
	if r.exited() {
		return nil
	}
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-r.done:
		return nil
	case <-time.After(stopTimeout):
		syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
		<-r.done
		return fmt.Errorf("%s did not stop within %v of SIGTERM; killed", r.name, stopTimeout)
	}
}

// target is where the load sends calls: a replica, directly or through the
// reply-losing proxy.
type target struct {
	name string
	cc   *grpc.ClientConn
	c    pb.ClaimServiceClient
	ent  pb.EntityServiceClient
}

// dial connects to addr. Reconnects are retried quickly (grpc-go's default
// backoff grows to two minutes, which would measure the client, not the
// server), and calls fail fast while the replica is down.
func dial(name, addr string) (*target, error) {
	bo := backoff.DefaultConfig
	bo.BaseDelay, bo.MaxDelay = 20*time.Millisecond, 200*time.Millisecond
	cc, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: time.Second}))
	if err != nil {
		return nil, err
	}
	return &target{name: name, cc: cc, c: pb.NewClaimServiceClient(cc), ent: pb.NewEntityServiceClient(cc)}, nil
}

// freePort asks the kernel for an unused loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// backends are the Redis and PostgreSQL servers shared by every production
// scenario; each scenario gets a database of its own.
type backends struct {
	servers *testenv.Servers
}

func startBackends(dir string) (*backends, error) {
	// Durable: with synchronous_commit off an immediate stop would lose
	// commits that claimd was told were durable, a fault of the test setup.
	s, err := testenv.StartServers(dir, testenv.Options{Durable: true})
	if err != nil {
		return nil, err
	}
	return &backends{servers: s}, nil
}

func (b *backends) close() error { return b.servers.Close() }

// pgURL is the URL of database db on the suite's PostgreSQL.
func (b *backends) pgURL(db string) string {
	u, err := url.Parse(b.servers.Postgres.URL())
	if err != nil {
		panic(err) // testenv builds it
	}
	u.Path = "/" + db
	return u.String()
}

// createDatabase makes an empty database for one scenario.
func (b *backends) createDatabase(ctx context.Context, db string) (string, error) {
	conn, err := pgx.Connect(ctx, b.pgURL("postgres"))
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)"); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()); err != nil {
		return "", err
	}
	return b.pgURL(db), nil
}

// flushRedis empties Redis: FLUSHALL, the fault, and the clean slate between
// scenarios.
func (b *backends) flushRedis(ctx context.Context) error {
	opts, err := goredis.ParseURL(b.servers.Redis.URL())
	if err != nil {
		return err
	}
	c := goredis.NewClient(opts)
	defer c.Close()
	return c.FlushAll(ctx).Err()
}
