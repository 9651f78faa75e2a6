package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers/postgres"
)

var binary string

// testVersion is the version the test binary is built with.
const testVersion = "v0.0.0-test"

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "claimd-bin")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "claimd")
	// As the image builds it (scripts/rootfs.sh: CGO_ENABLED=0, -trimpath),
	// with a version that TestVersion recognises. Every build of claimd in
	// make test uses these compile flags (rootfs.sh for the image tests,
	// docs, deploy, clients/go/claimdtest, scripts/test-clients.sh), so the
	// server is compiled once for all of them; a flag of its own would
	// compile it all again.
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-X main.version="+testVersion, "-o", binary, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		panic("go build: " + err.Error() + "\n" + string(out))
	}
	code := testenv.Main(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running claimd binary.
type proc struct {
	cmd        *exec.Cmd
	grpc, http string
	exited     chan error
	logs       *logLines // every line claimd wrote to stderr
}

// start runs `claimd serve` on free loopback ports and waits for its
// "claimd serving" log line, which carries the bound addresses.
func start(t *testing.T, args ...string) *proc {
	t.Helper()
	return startEnv(t, nil, args...)
}

// startEnv is start with env ("NAME=value") added to claimd's environment.
func startEnv(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	args = append([]string{"serve", "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"}, args...)
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	// If the test binary dies (a panic, a timeout), the kernel ends claimd too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return startCmd(t, cmd)
}

// startCmd is start for a command built by the caller (another binary, a
// chroot); it must set Pdeathsig itself.
func startCmd(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, exited: make(chan error, 1), logs: newLogLines()}
	serving := make(chan [2]string, 1)
	go func() {
		lines := bufio.NewScanner(stderr)
		for lines.Scan() {
			p.logs.add(lines.Text())
			var rec struct{ Msg, GRPC, HTTP string }
			if json.Unmarshal(lines.Bytes(), &rec) == nil && rec.Msg == "claimd serving" {
				serving <- [2]string{rec.GRPC, rec.HTTP}
			}
		}
		p.exited <- cmd.Wait()
	}()
	select {
	case addrs := <-serving:
		p.grpc, p.http = addrs[0], addrs[1]
	case err := <-p.exited:
		t.Fatalf("claimd exited before serving: %v", err)
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatal("claimd did not log \"claimd serving\" within 60s")
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// stop sends SIGTERM and requires a clean exit.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		if err != nil {
			t.Fatalf("claimd exit after SIGTERM = %v, want 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("claimd did not exit within 30s of SIGTERM")
	}
}

func (p *proc) conn(t *testing.T) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// waitServing watches grpc.health.v1 until the server reports SERVING: the
// tiers answered. Watch streams changes, so no polling or sleeping.
func waitServing(t *testing.T, conn *grpc.ClientConn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{Service: pb.ClaimService_ServiceDesc.ServiceName})
	if err != nil {
		t.Fatal(err)
	}
	for {
		r, err := w.Recv()
		if err != nil {
			t.Fatalf("health watch: %v", err)
		}
		if r.Status == healthpb.HealthCheckResponse_SERVING {
			return
		}
	}
}

func TestServeClaimRestartPersists(t *testing.T) {
	dataDir := t.TempDir()
	p := start(t, "--data-dir", dataDir)
	conn := p.conn(t)
	waitServing(t, conn)

	// Reflection lists both services, health and reflection itself.
	rctx, rcancel := context.WithCancel(context.Background())
	defer rcancel() // an open stream would hold up the graceful drain below
	rc, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(rctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := rc.Recv()
	if err != nil {
		t.Fatal(err)
	}
	rcancel()
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.Name)
	}
	for _, want := range []string{"idempotency.v1.ClaimService", "idempotency.v1.ProviderService", "idempotency.v1.EntityService", "idempotency.v1.InspectService", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
		if !strings.Contains(strings.Join(names, " "), want) {
			t.Errorf("reflection services = %v, missing %s", names, want)
		}
	}

	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 200} {
		res, err := http.Get("http://" + p.http + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("GET %s = %d, want %d", path, res.StatusCode, want)
		}
	}

	claims := pb.NewClaimServiceClient(conn)
	ctx := context.Background()
	req := &pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: "evt_restart"}}
	c, err := claims.Claim(ctx, req)
	if err != nil || c.Outcome != pb.Outcome_OUTCOME_ACQUIRED {
		t.Fatalf("Claim = %v, %v", c, err)
	}
	for _, to := range []pb.EventState{pb.EventState_EVENT_STATE_PROCESSING, pb.EventState_EVENT_STATE_SETTLED} {
		if _, err := claims.Transition(ctx, &pb.TransitionRequest{Namespace: "billing", Provider: "stripe", Key: c.Key, FencingToken: c.FencingToken, LeaseSecret: c.LeaseSecret, To: to}); err != nil {
			t.Fatal(err)
		}
	}
	open, err := claims.Claim(ctx, &pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: "evt_open"}})
	if err != nil || open.Outcome != pb.Outcome_OUTCOME_ACQUIRED {
		t.Fatalf("Claim(evt_open) = %v, %v", open, err)
	}
	p.stop(t)

	p2 := start(t, "--data-dir", dataDir)
	conn2 := p2.conn(t)
	waitServing(t, conn2)
	claims2 := pb.NewClaimServiceClient(conn2)
	d, err := claims2.Claim(ctx, req)
	if err != nil || d.Outcome != pb.Outcome_OUTCOME_DUPLICATE || d.ServedBy != pb.Tier_TIER_DURABLE {
		t.Fatalf("Claim after restart = %v, %v; want DUPLICATE from the durable tier", d, err)
	}
	ip, err := claims2.Claim(ctx, &pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: "evt_open"}})
	if err != nil || ip.Outcome != pb.Outcome_OUTCOME_IN_PROGRESS || ip.FencingToken != 0 || ip.Attempt != open.Attempt {
		t.Fatalf("Claim(evt_open) after restart = %v, %v; want IN_PROGRESS of the same attempt, without the holder's token", ip, err)
	}
	// The holder's token and lease secret outlive the restart.
	if _, err := claims2.Transition(ctx, &pb.TransitionRequest{Namespace: "billing", Provider: "stripe", Key: open.Key,
		FencingToken: open.FencingToken, LeaseSecret: open.LeaseSecret, To: pb.EventState_EVENT_STATE_PROCESSING}); err != nil {
		t.Fatalf("Transition(evt_open) by its holder after restart error = %v", err)
	}
	p2.stop(t)
}

func run(t *testing.T, args ...string) (string, int) {
	t.Helper()
	out, err := exec.Command(binary, args...).CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

func TestProvidersCommand(t *testing.T) {
	out, code := run(t, "providers")
	if code != 0 || !strings.Contains(out, "stripe") || !strings.Contains(out, "84h") || !strings.Contains(out, "billing") {
		t.Fatalf("claimd providers = %d\n%s\nwant a table with stripe (ttl 84h) and billing", code, out)
	}
	bad := filepath.Join(t.TempDir(), "providers.yaml")
	os.WriteFile(bad, []byte("version: 1\nproviders:\n  acme:\n    retry_horizon: 1h\n    margin: 0s\n    lease: 30s\n    max_lease: 1m\n    key: json:id\n    source: x\n    reviewed_on: 2026-11-01\n"), 0o600)
	out, code = run(t, "providers", "--check", bad)
	if code == 0 || !strings.Contains(out, ":5") || !strings.Contains(out, "margin") {
		t.Fatalf("claimd providers --check (margin 0) = %d\n%s\nwant non-zero naming line 5 and margin", code, out)
	}
	_, code = run(t, "frobnicate")
	if code != 2 {
		t.Fatalf("claimd frobnicate exit = %d, want 2", code)
	}
	_, code = run(t, "serve", "--redis-url", "redis://127.0.0.1:1")
	if code != 2 {
		t.Fatalf("claimd serve --redis-url without --postgres-url exit = %d, want 2", code)
	}
}

// TestReplicasOneKey is DESIGN §3's promise across processes: claimd
// replicas sharing one Redis deployment and one PostgreSQL, hundreds of
// concurrent claims of a few keys spread over every replica, exactly one
// ACQUIRED per key and the rest IN_PROGRESS. On Redis Cluster the keys live
// on different primaries.
func TestReplicasOneKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc     string
		replicas int
		redisURL func(t *testing.T) string
	}{
		{"two replicas, one Redis", 2, func(t *testing.T) string { return testenv.StartRedis(t).URL() }},
		{"three replicas, Redis Cluster", 3, func(t *testing.T) string { return testenv.StartRedisCluster(t).URL() }},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			redisURL := tc.redisURL(t)
			pg := testenv.StartPostgres(t, postgres.Migrate)
			keyFile := fastKeyFile(t) // one key file, shared by the replicas
			var clients []pb.ClaimServiceClient
			for range tc.replicas {
				p := start(t, "--redis-url", redisURL, "--fast-tier-key-file", keyFile, "--postgres-url", pg.URL(), "--data-dir", t.TempDir(), "--log-format", "json")
				conn := p.conn(t)
				waitServing(t, conn)
				clients = append(clients, pb.NewClaimServiceClient(conn))
			}
			raceOnKeys(t, clients, 3, 100)
		})
	}
}

// raceOnKeys fires calls claims of each of keys event ids at once, spread
// round robin over clients, and requires one ACQUIRED per key.
func raceOnKeys(t *testing.T, clients []pb.ClaimServiceClient, keys, calls int) {
	t.Helper()
	n := keys * calls
	var (
		wg       sync.WaitGroup
		startGun = make(chan struct{})
		outcomes = make([]pb.Outcome, n)
		errs     = make([]error, n)
	)
	for i := range n {
		wg.Go(func() {
			<-startGun
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			key := fmt.Sprintf("evt_contended_%d", i%keys)
			r, err := clients[(i/keys)%len(clients)].Claim(ctx, &pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: key}})
			outcomes[i], errs[i] = r.GetOutcome(), err
		})
	}
	close(startGun)
	wg.Wait()
	counts := make([]map[pb.Outcome]int, keys)
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Claim #%d error = %v", i, errs[i])
		}
		if counts[i%keys] == nil {
			counts[i%keys] = map[pb.Outcome]int{}
		}
		counts[i%keys][outcomes[i]]++
	}
	for k, c := range counts {
		if c[pb.Outcome_OUTCOME_ACQUIRED] != 1 || c[pb.Outcome_OUTCOME_IN_PROGRESS] != calls-1 {
			t.Fatalf("%d claims of evt_contended_%d over %d replicas: %v, want exactly 1 ACQUIRED and %d IN_PROGRESS", calls, k, len(clients), c, calls-1)
		}
	}
}
