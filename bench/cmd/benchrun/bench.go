package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/claimd/claimd/internal/auth"
	"github.com/claimd/claimd/internal/testenv"
)

// Names of the scenarios, the load clients and the targets.
const (
	scenarioNew     = "new"
	scenarioDup     = "dup"
	scenarioMix     = "mix"
	scenarioContend = "contend"
	// The lifecycle scenarios run whole events (claimload only): Claim →
	// PROCESSING → SETTLED, and Claim(start) → SETTLED.
	scenarioLifecycle      = "lifecycle"
	scenarioLifecycleStart = "lifecycle-start"

	clientGhz       = "ghz"
	clientClaimload = "claimload"

	targetNoop            = "noop"
	targetNaive           = "naive"
	targetEmbedded        = "claimd-embedded" // the default: --sqlite-durability=full
	targetEmbeddedRelaxed = "claimd-embedded-relaxed"
	targetClaimd          = "claimd"
	// targetClaimdHeap is claimd on Redis + PostgreSQL with the heap
	// headroom of before --gc-heap-headroom's default (heapHeadroomBefore
	// MiB): what the default's lower peak RSS costs in CPU.
	targetClaimdHeap   = "claimd-heap128"
	heapHeadroomBefore = 128
)

var (
	allScenarios = []string{scenarioLifecycle, scenarioLifecycleStart, scenarioNew, scenarioDup, scenarioMix, scenarioContend}
	allTargets   = []string{targetNoop, targetNaive, targetEmbedded, targetEmbeddedRelaxed, targetClaimd, targetClaimdHeap}
)

// onlyScenarios limits a target to the scenarios it is measured for: the
// relaxed embedded tier exists in the report only as the yardstick of the
// default's fsync per commit, which only new keys pay.
var onlyScenarios = map[string][]string{
	targetEmbeddedRelaxed: {scenarioNew},
	// The heap headroom's yardstick: whole events and new keys.
	targetClaimdHeap: {scenarioLifecycle, scenarioLifecycleStart, scenarioNew},
	// The no-op handler answers every Claim DUPLICATE: it has no event to
	// carry through a lifecycle.
	targetNoop: {scenarioNew, scenarioDup, scenarioMix, scenarioContend},
}

// measures reports whether target runs scenario sc.
func measures(target, sc string) bool {
	only, ok := onlyScenarios[target]
	return !ok || slices.Contains(only, sc)
}

// lifecycle reports whether sc runs whole events, which only claimload
// sends.
func lifecycle(sc string) bool { return sc == scenarioLifecycle || sc == scenarioLifecycleStart }

// clientRuns reports whether client cl can run scenario sc.
func clientRuns(cl, sc string) bool { return cl == clientClaimload || !lifecycle(sc) }

// The request every load sends, apart from its event id.
const (
	benchNamespace = "bench"
	benchProvider  = "stripe"
	dupPrefix      = "settled"
)

// readyTimeout bounds the wait for a started server to answer health checks
// as SERVING (claimd migrates its database first).
const readyTimeout = 60 * time.Second

// bench is one run of the harness.
type bench struct {
	opts     options
	ctx      context.Context
	servers  *testenv.Servers
	pgPID    int // the postmaster, parent of every PostgreSQL process
	redisPID int
	dbs      map[string]string // target → its PostgreSQL database, until dropped
	report   Report

	// authFile is claimd's --auth-file, naming one principal whose token
	// (the first line of tokenFile) every load client sends: the figures
	// include authentication and the principal's rate limiter.
	authFile, tokenFile, token string
	// fastKeyFile is claimd's --fast-tier-key-file, shared by every claimd
	// that uses the bench's Redis.
	fastKeyFile string
}

// writeAuth writes the auth file and the token file into the work
// directory. The principal's rate is far above what the machine serves, so
// the limiter is consulted on every call but never refuses one.
func (b *bench) writeAuth() error {
	b.token = auth.NewToken()
	b.tokenFile = filepath.Join(b.opts.workDir, "bench.token")
	b.authFile = filepath.Join(b.opts.workDir, "auth.yaml")
	if err := os.WriteFile(b.tokenFile, []byte(b.token+"\n"), 0o600); err != nil {
		return err
	}
	b.fastKeyFile = filepath.Join(b.opts.workDir, "fast-tier.key")
	key := make([]byte, 32)
	rand.Read(key)
	if err := os.WriteFile(b.fastKeyFile, []byte(hex.EncodeToString(key)+"\n"), 0o600); err != nil {
		return err
	}
	conf := fmt.Sprintf(`version: 1
principals:
  bench:
    tokens: [%q]
    namespaces: [%q]
    roles: [claim, read]
    rate: {per_second: 10000000, burst: 10000000}
`, auth.HashToken(b.token), benchNamespace)
	return os.WriteFile(b.authFile, []byte(conf), 0o600)
}

// env is the environment of the Go processes the run starts: GOMAXPROCS
// set to -cores when it is given.
func (b *bench) env() []string {
	if b.opts.cores <= 0 {
		return nil
	}
	return append(os.Environ(), fmt.Sprintf("GOMAXPROCS=%d", b.opts.cores))
}

// withToken is ctx carrying the bench principal's token.
func (b *bench) withToken(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+b.token)
}

func (b *bench) bin(name string) string { return filepath.Join(b.opts.binDir, name) }

// startServers starts Redis and a durable PostgreSQL (fsync and synchronous
// commit on, as in production) with the project's test tooling, and creates
// the databases of the naive handler and of pgbench.
func (b *bench) startServers() error {
	s, err := testenv.StartServers(b.opts.workDir, testenv.Options{Durable: true})
	if err != nil {
		return err
	}
	b.servers = s
	b.dbs = map[string]string{targetNaive: "naive", targetClaimd: "claimd", targetClaimdHeap: "claimdheap"}
	if b.pgPID, err = postmasterPID(s.Postgres.Dir()); err != nil {
		return fmt.Errorf("postmaster pid: %w", err)
	}
	if b.redisPID, err = redisPID(b.ctx, s.Redis.URL()); err != nil {
		return fmt.Errorf("redis pid: %w", err)
	}
	for _, db := range []string{"naive", "pgbench", "claimdheap"} {
		if err := b.adminExec("CREATE DATABASE " + db); err != nil {
			return err
		}
	}
	// pgbench inserts into claimd's own claims table, made in public where
	// its unqualified statements find it.
	out, err := exec.CommandContext(b.ctx, b.bin("claimd"), "migrate", "--postgres-url", b.pgURL("pgbench"), "--postgres-schema", "public").CombinedOutput()
	if err != nil {
		return fmt.Errorf("claimd migrate (pgbench database): %w\n%s", err, out)
	}
	logf("redis-server pid %d at %s; postgres pid %d at %s (durable)", b.redisPID, s.Redis.URL(), b.pgPID, s.Postgres.URL())
	return nil
}

// pgURL is the URL of database db on the benchmark's PostgreSQL.
func (b *bench) pgURL(db string) string {
	u, err := url.Parse(b.servers.Postgres.URL())
	if err != nil {
		panic(err) // testenv builds it
	}
	u.Path = "/" + db
	return u.String()
}

// redisURL is the URL of database n on the benchmark's Redis.
func (b *bench) redisURL(n int) string {
	u, err := url.Parse(b.servers.Redis.URL())
	if err != nil {
		panic(err)
	}
	u.Path = fmt.Sprintf("/%d", n)
	return u.String()
}

func (b *bench) adminExec(sql string) error { return b.execIn("postgres", sql) }

// execIn runs one statement in database db.
func (b *bench) execIn(db, sql string) error {
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, b.pgURL(db))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: %w", sql, err)
	}
	return nil
}

// settleServers drops what the runs so far left in the shared servers (the
// databases of targets already measured, every Redis key) and checkpoints
// PostgreSQL, so that the next run does not pay for vacuuming or flushing
// the previous one's data.
func (b *bench) settleServers() error {
	for t, db := range b.dbs {
		if !b.measured(t) {
			continue
		}
		if err := b.adminExec("DROP DATABASE IF EXISTS " + db + " WITH (FORCE)"); err != nil {
			return err
		}
		delete(b.dbs, t)
	}
	if err := b.adminExec("CHECKPOINT"); err != nil {
		return err
	}
	return flushRedis(b.ctx, b.servers.Redis.URL())
}

// measured reports whether target t has results.
func (b *bench) measured(t string) bool {
	if t == targetPython {
		return len(b.report.Python) > 0
	}
	for _, x := range slices.Concat(b.report.Runs, b.report.Scaling, b.report.Python, b.report.Low, b.report.OpenLoop) {
		if x.Target == t {
			return true
		}
	}
	return false
}

// redisMeter and pgMeter meter the shared servers.
func (b *bench) redisMeter() meter { return pidMeter("redis", b.redisPID) }
func (b *bench) pgMeter() meter    { return treeMeter("postgres", b.pgPID) }

// target is a server under load.
type target struct {
	id       string
	server   *proc
	addr     string
	httpAddr string // claimd's HTTP listener (Connect, REST)
	meters   []meter
	claimd   bool // speaks the whole API (authenticated): settle keys with Transition, verify with Get
	// replicas are the further claimd processes of a scaling run, serving
	// replicaAddrs; server and addr are the first.
	replicas     []*proc
	replicaAddrs []string
}

// peakRSS is the largest VmHWM of t's server processes, in MiB.
func (t *target) peakRSS() (float64, error) {
	peak := 0.0
	for _, p := range append([]*proc{t.server}, t.replicas...) {
		v, err := readPeakRSS(p.pid())
		if err != nil {
			return 0, err
		}
		peak = max(peak, v)
	}
	return peak, nil
}

// addrs are the addresses of every process of t.
func (t *target) addrs() []string { return append([]string{t.addr}, t.replicaAddrs...) }

// stop stops every process of t.
func (t *target) stop() error {
	err := t.server.stop()
	for _, p := range t.replicas {
		if serr := p.stop(); serr != nil && err == nil {
			err = serr
		}
	}
	return err
}

// startTarget starts the server of target id on a free port.
func (b *bench) startTarget(id string) (*target, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	t := &target{id: id, addr: fmt.Sprintf("127.0.0.1:%d", port)}
	logPath := filepath.Join(b.opts.workDir, id+".log")
	var args []string
	bin := b.bin("claimd")
	switch id {
	case targetNoop:
		bin, args = b.bin("noop"), []string{"--listen", t.addr}
	case targetNaive:
		bin = b.bin("naive")
		args = []string{"--listen", t.addr, "--redis-url", b.redisURL(1), "--postgres-url", b.pgURL("naive")}
		t.meters = []meter{b.redisMeter(), b.pgMeter()}
	case targetEmbedded, targetEmbeddedRelaxed, targetClaimd, targetClaimdHeap, targetPython, targetGrowth:
		t.claimd = true
		httpPort, err := freePort()
		if err != nil {
			return nil, err
		}
		t.httpAddr = fmt.Sprintf("127.0.0.1:%d", httpPort)
		args = claimdArgs(t.addr, t.httpAddr, b.authFile)
		if id == targetClaimd || id == targetClaimdHeap || id == targetPython || id == targetGrowth {
			args = append(args, "--redis-url", b.redisURL(0), "--fast-tier-key-file", b.fastKeyFile, "--postgres-url", b.pgURL(b.dbs[id]))
			t.meters = []meter{b.redisMeter(), b.pgMeter()}
		} else {
			args = append(args, "--data-dir", filepath.Join(b.opts.workDir, id))
		}
		if id == targetEmbeddedRelaxed {
			args = append(args, "--sqlite-durability", "relaxed")
		}
		if id == targetClaimdHeap {
			args = append(args, "--gc-heap-headroom", strconv.Itoa(heapHeadroomBefore))
		}
	default:
		return nil, fmt.Errorf("unknown target %q (want one of %v)", id, allTargets)
	}
	p, err := startProc(id, bin, args, logPath, b.env())
	if err != nil {
		return nil, err
	}
	t.server = p
	t.meters = append([]meter{pidMeter("server", p.pid())}, t.meters...)
	if err := b.waitReady(t); err != nil {
		p.stop()
		return nil, err
	}
	return t, nil
}

// claimdArgs are the flags claimd runs with. Request logging is off (warn
// level): the naive and no-op handlers log nothing either. Authentication is
// on: every call of the load carries a bearer token.
func claimdArgs(listen, httpListen, authFile string) []string {
	return []string{"serve", "--listen", listen, "--http-listen", httpListen, "--log-level", "warn", "--auth-file", authFile}
}

// waitReady polls the gRPC health service until it answers SERVING.
func (b *bench) waitReady(t *target) error {
	cc, err := grpc.NewClient(t.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	deadline := time.Now().Add(readyTimeout)
	for {
		ctx, cancel := context.WithTimeout(b.ctx, time.Second)
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		if t.server.exited() {
			return fmt.Errorf("%s exited before it was ready; see %s", t.id, t.server.log)
		}
		if time.Now().After(deadline) || b.ctx.Err() != nil {
			return fmt.Errorf("%s not SERVING after %v (last: %v, %v); see %s", t.id, readyTimeout, resp.GetStatus(), err, t.server.log)
		}
		time.Sleep(50 * time.Millisecond) // polling a process we do not control
	}
}

// with starts target id, in a database of its own named db when db is
// not "" (dropped by settleServers once its results are in), runs fn on it
// and stops it.
func (b *bench) with(id, db string, fn func(t *target) error) (err error) {
	logf("starting %s", id)
	if db != "" {
		b.dbs[id] = db
		if err := b.adminExec("CREATE DATABASE " + db); err != nil {
			return err
		}
	}
	t, err := b.startTarget(id)
	if err != nil {
		return err
	}
	defer func() {
		if serr := t.stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	return fn(t)
}

// runTarget starts a target, settles the keys its duplicate scenarios
// claim, runs every scenario under every client, and stops it.
func (b *bench) runTarget(id string) error {
	return b.with(id, "", b.measureTarget)
}

// measureTarget is runTarget's work on the started target.
func (b *bench) measureTarget(t *target) error {
	id := t.id
	if err := b.settle(t); err != nil {
		return fmt.Errorf("settling %d keys: %w", b.opts.dupKeys, err)
	}
	for _, sc := range b.opts.scenarios {
		if !measures(id, sc) {
			continue
		}
		for _, cl := range b.opts.clients {
			if !clientRuns(cl, sc) {
				continue
			}
			res, err := b.load(t, sc, cl)
			if err != nil {
				return fmt.Errorf("%s/%s: %w", sc, cl, err)
			}
			logf("%-16s %-8s %-10s %8.0f %s  p50 %6.2fms  p99 %6.2fms  errors %d  cpu %s %s",
				id, sc, cl, res.Rate, res.Unit, res.P50, res.P99, res.Errors, fmtCPU(res.CPU), res.Check)
			b.report.Runs = append(b.report.Runs, res)
		}
	}
	if slices.Contains(lowTargets, id) && slices.Contains(b.opts.scenarios, scenarioLifecycleStart) && slices.Contains(b.opts.clients, clientClaimload) {
		if err := b.runLow(t); err != nil {
			return err
		}
	}
	if b.opts.perf == "" || id != targetClaimd || !slices.Contains(b.opts.clients, clientClaimload) {
		return nil
	}
	for _, sc := range profiledScenarios {
		if slices.Contains(b.opts.scenarios, sc) {
			if err := b.profile(t, sc, b.spec(sc), "", b.report.find(id, sc, clientClaimload)); err != nil {
				return fmt.Errorf("profiling %s: %w", sc, err)
			}
		}
	}
	return nil
}

// targetReplicas is the target id of a scaling run of n replicas.
func targetReplicas(n int) string { return fmt.Sprintf("claimd-x%d", n) }

// runReplicas measures the lifecycle scenario on n claimd replicas sharing
// one Redis and one PostgreSQL database, with claimload spreading its
// connections over them (one per replica). Their CPU is summed as
// "server".
func (b *bench) runReplicas(n int) (err error) {
	id := targetReplicas(n)
	logf("starting %s", id)
	b.dbs[id] = "replicas"
	if err := b.adminExec("CREATE DATABASE replicas"); err != nil {
		return err
	}
	t := &target{id: id, claimd: true, meters: []meter{b.redisMeter(), b.pgMeter()}}
	defer func() {
		if serr := t.stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	var servers []meter
	for i := range n {
		port, err := freePort()
		if err != nil {
			return err
		}
		httpPort, err := freePort()
		if err != nil {
			return err
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		args := append(claimdArgs(addr, fmt.Sprintf("127.0.0.1:%d", httpPort), b.authFile),
			"--redis-url", b.redisURL(0), "--fast-tier-key-file", b.fastKeyFile, "--postgres-url", b.pgURL("replicas"))
		p, err := startProc(fmt.Sprintf("%s-%d", id, i), b.bin("claimd"), args, filepath.Join(b.opts.workDir, fmt.Sprintf("%s-%d.log", id, i)), b.env())
		if err != nil {
			return err
		}
		if i == 0 {
			t.server, t.addr = p, addr
		} else {
			t.replicas, t.replicaAddrs = append(t.replicas, p), append(t.replicaAddrs, addr)
		}
		servers = append(servers, pidMeter("server", p.pid()))
		// One at a time: the first migrates the database, the others find
		// it migrated.
		if err := b.waitReady(&target{id: t.id, server: p, addr: addr}); err != nil {
			return err
		}
	}
	t.meters = append([]meter{sumMeter("server", servers...)}, t.meters...)
	for _, sc := range []string{scenarioLifecycle} {
		res, err := b.load(t, sc, clientClaimload)
		if err != nil {
			return fmt.Errorf("%s: %w", sc, err)
		}
		logf("%-16s %-8s %-10s %8.0f %s  p50 %6.2fms  p99 %6.2fms  errors %d  cpu %s",
			id, sc, clientClaimload, res.Rate, res.Unit, res.P50, res.P99, res.Errors, fmtCPU(res.CPU))
		b.report.Scaling = append(b.report.Scaling, res)
	}
	return nil
}
