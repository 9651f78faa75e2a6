package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"math"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// Names of the baselines in the report.
const (
	baselineRedis    = "redis-benchmark"
	baselinePgSingle = "pgbench single-row"
	baselinePgBatch  = "pgbench 64-row"
)

// batchRows is the number of rows of pgbench's batched insert: the size of
// claimd's group commit batches at most.
const batchRows = 64

// runBaselines measures the limits of the servers themselves, with their
// own tools, at the callers of the load runs: Redis SET NX EX, and
// PostgreSQL's single-row and 64-row INSERT … ON CONFLICT into claimd's
// claims table, each in its own transaction with synchronous commit.
func (b *bench) runBaselines() error {
	r, err := b.redisBenchmark()
	if err != nil {
		return fmt.Errorf("redis-benchmark: %w", err)
	}
	b.addBaseline(r)
	for _, batch := range []int{1, batchRows} {
		r, err := b.pgbench(batch)
		if err != nil {
			return fmt.Errorf("pgbench (%d rows): %w", batch, err)
		}
		b.addBaseline(r)
		// The next run starts on an empty table, as this one did.
		if err := b.execIn("pgbench", "TRUNCATE claims"); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) addBaseline(r Result) {
	logf("%-20s %10.0f %s  p50 %6.2fms  p99 %6.2fms  cpu %s", r.Target, r.Rate, r.Unit, r.P50, r.P99, fmtCPU(r.CPU))
	b.report.Baselines = append(b.report.Baselines, r)
}

// redisBenchmark runs SET NX EX on random keys (database 2, apart from the
// targets'). redis-benchmark counts requests, not time: a short run finds
// the rate, then the measured run sends what that rate serves in the
// configured duration.
func (b *bench) redisBenchmark() (Result, error) {
	port := strconv.Itoa(b.servers.Redis.Port())
	args := func(n int) []string {
		return []string{"-h", "127.0.0.1", "-p", port, "--dbnum", "2", "-c", strconv.Itoa(b.opts.callers),
			"-n", strconv.Itoa(n), "-r", "1000000000", "--csv",
			"SET", "bench:__rand_int__", "v", "NX", "EX", "302400"}
	}
	probe, _, err := b.redisBenchmarkOnce(args(20000))
	if err != nil {
		return Result{}, err
	}
	n := max(int(probe.Rate*b.opts.duration.Seconds()), 1000)
	var (
		res Result
		cmd *exec.Cmd
	)
	cpu, _, err := measure([]meter{b.redisMeter()}, func() (err error) {
		res, cmd, err = b.redisBenchmarkOnce(args(n))
		return err
	})
	if err != nil {
		return Result{}, err
	}
	res.CPU = cpu
	res.CPU["client"] = clientCPU(cmd)
	return res, nil
}

func (b *bench) redisBenchmarkOnce(args []string) (Result, *exec.Cmd, error) {
	cmd := exec.CommandContext(b.ctx, "redis-benchmark", args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return Result{}, nil, fmt.Errorf("%w\n%s", err, stderr.String())
	}
	// "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
	rows, err := csv.NewReader(&stdout).ReadAll()
	if err != nil || len(rows) != 2 || len(rows[1]) < 7 {
		return Result{}, nil, fmt.Errorf("unexpected output (%v):\n%s", err, stdout.String())
	}
	num := func(i int) float64 { v, _ := strconv.ParseFloat(rows[1][i], 64); return v }
	n, _ := strconv.Atoi(args[slices.Index(args, "-n")+1])
	return Result{
		Target: baselineRedis, Scenario: "SET NX EX", Client: "redis-benchmark", Callers: b.opts.callers,
		Requests: int64(n), Seconds: float64(n) / num(1), Rate: num(1), Unit: "ops/s",
		P50: num(4), P99: num(6),
	}, cmd, nil
}

// pgbench runs INSERT … ON CONFLICT DO NOTHING of rows new rows per
// statement into claims, in a database of its own, with a transaction and
// a synchronous commit per statement.
func (b *bench) pgbench(rows int) (Result, error) {
	name, target := "single", baselinePgSingle
	if rows > 1 {
		name, target = "batch", baselinePgBatch
	}
	script := filepath.Join(b.opts.workDir, "pgbench-"+name+".sql")
	if err := os.WriteFile(script, []byte(pgbenchScript(rows)), 0o644); err != nil {
		return Result{}, err
	}
	logDir := filepath.Join(b.opts.workDir, "pgbench-"+name)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return Result{}, err
	}
	u, err := url.Parse(b.pgURL("pgbench"))
	if err != nil {
		return Result{}, err
	}
	secs := max(int(math.Ceil(b.opts.duration.Seconds())), 1)
	cmd := exec.CommandContext(b.ctx, "pgbench", "-n", "-h", u.Hostname(), "-p", u.Port(), "-U", u.User.Username(),
		"-c", strconv.Itoa(b.opts.callers), "-j", "2", "-T", strconv.Itoa(secs), "-M", "prepared",
		"-f", script, "-l", "--log-prefix", filepath.Join(logDir, "log"), "pgbench")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cpu, _, err := measure([]meter{b.pgMeter()}, func() error {
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%w\n%s%s", err, stdout.String(), stderr.String())
		}
		return nil
	})
	if err != nil {
		return Result{}, err
	}
	tps, failed, err := parsePgbench(stdout.String())
	if err != nil {
		return Result{}, err
	}
	lat, err := pgbenchLatencies(logDir)
	if err != nil {
		return Result{}, err
	}
	res := Result{
		Target: target, Scenario: fmt.Sprintf("INSERT %d row(s)", rows), Client: "pgbench", Callers: b.opts.callers,
		Seconds: float64(secs), Requests: int64(len(lat)), Errors: failed, Rate: tps * float64(rows), Unit: "rows/s",
		CPU: cpu,
	}
	res.CPU["client"] = clientCPU(cmd)
	res.P50, res.P99 = percentileMs(lat, 50), percentileMs(lat, 99)
	return res, nil
}

// pgbenchScript inserts rows claims of random new keys, with the columns
// a first claim writes.
func pgbenchScript(rows int) string {
	return fmt.Sprintf(`\set r random(1, 1000000000000)
INSERT INTO claims (namespace, provider, key, state, token, version, attempt, reason,
                    holder, first_seen_at, lease_expires_at, window_expires_at, updated_at)
SELECT 'pgbench', 'stripe', 'k' || (:r::bigint * %[1]d + g), 1, 1, 1, 1, 1,
       'pgbench', now(), now() + interval '60 seconds', now() + interval '84 hours', now()
FROM generate_series(0, %[2]d) AS g
ON CONFLICT DO NOTHING;
`, rows, rows-1)
}

var (
	tpsRe    = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)
	failedRe = regexp.MustCompile(`number of failed transactions: ([0-9]+)`)
)

func parsePgbench(out string) (tps float64, failed int64, err error) {
	m := tpsRe.FindStringSubmatch(out)
	if m == nil {
		return 0, 0, fmt.Errorf("pgbench: no tps in output:\n%s", out)
	}
	tps, _ = strconv.ParseFloat(m[1], 64)
	if m := failedRe.FindStringSubmatch(out); m != nil {
		failed, _ = strconv.ParseInt(m[1], 10, 64)
	}
	return tps, failed, nil
}

// pgbenchLatencies reads the per-transaction logs of pgbench -l: the third
// field of each line is the transaction's latency in microseconds.
func pgbenchLatencies(dir string) ([]float64, error) {
	files, err := filepath.Glob(filepath.Join(dir, "log.*"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("pgbench logs in %s: %v", dir, err)
	}
	var lat []float64
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 3 {
				continue
			}
			if us, err := strconv.ParseFloat(fields[2], 64); err == nil {
				lat = append(lat, us/1000)
			}
		}
		fh.Close()
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	slices.Sort(lat)
	return lat, nil
}

// percentileMs is the p-th percentile (nearest rank) of sorted.
func percentileMs(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

// flushRedis empties every database of the benchmark's Redis.
func flushRedis(ctx context.Context, redisURL string) error {
	opts, err := goredis.ParseURL(redisURL)
	if err != nil {
		return err
	}
	c := goredis.NewClient(opts)
	defer c.Close()
	return c.FlushAll(ctx).Err()
}

// redisPID asks Redis for its process id (INFO server).
func redisPID(ctx context.Context, redisURL string) (int, error) {
	opts, err := goredis.ParseURL(redisURL)
	if err != nil {
		return 0, err
	}
	c := goredis.NewClient(opts)
	defer c.Close()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("no process_id in INFO server")
}
