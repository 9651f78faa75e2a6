// Command benchrun is claimd's benchmark harness: in one run on one machine
// it measures claimd with its production tiers (Redis + PostgreSQL) and with
// its embedded tiers, the baselines those figures are judged against (a
// no-op server of the same proto, the hand-written naive handler,
// redis-benchmark and pgbench on the same servers), under two load clients
// (ghz and the lean claimload), reading the CPU seconds of every process
// from /proc. It writes the figures as JSON, as BENCHMARKS.md and as an SVG
// plot.
//
// scripts/bench.sh builds the binaries and runs it; see BENCHMARKS.md for
// the command line.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// options are benchrun's flags.
type options struct {
	binDir    string // claimd, claimload, noop, naive
	ghz       string
	workDir   string
	out       string // BENCHMARKS.md
	svg       string
	json      string
	notes     string // hand-written analysis included in the report
	duration  time.Duration
	callers   int
	contend   int
	dupKeys   int
	targets   []string
	clients   []string
	scenarios []string
	baselines bool
	cores     int    // GOMAXPROCS of the Go processes; 0: the runtime's default (every core)
	replicas  []int  // claimd replica counts of the scaling runs (lifecycle scenario)
	python    string // the Python baseline's interpreter (its venv's); "" skips it
	pyScript  string
	pySrc     string // PYTHONPATH: claimd's Python client
	pyThreads int
	command   string
	render    string  // results JSON to render instead of measuring
	perf      string  // perf binary for the profiles of claimd; "" skips them
	growth    []int64 // stored claims of the growth runs; none skips them
}

func main() {
	var o options
	var targets, clients, scenarios string
	flag.StringVar(&o.binDir, "bin", "", "directory holding the claimd, claimload, noop and naive binaries")
	flag.StringVar(&o.ghz, "ghz", "ghz", "ghz binary")
	flag.StringVar(&o.workDir, "work", "", "scratch directory for servers, logs and data (default: a new temporary one, removed at the end)")
	flag.StringVar(&o.out, "out", "BENCHMARKS.md", "report to write")
	flag.StringVar(&o.svg, "svg", "bench/results.svg", "plot to write")
	flag.StringVar(&o.json, "json", "bench/results.json", "raw results to write")
	flag.StringVar(&o.notes, "notes", "bench/NOTES.md", "hand-written analysis to include in the report")
	flag.StringVar(&o.perf, "perf", "", "perf binary: profile claimd (Redis + PostgreSQL) in the duplicate, new-key and Claim(start) → SETTLED scenarios with one more claimload run each, and report its CPU by component; empty for none")
	flag.DurationVar(&o.duration, "duration", 15*time.Second, "duration of each load run")
	flag.IntVar(&o.callers, "c", 50, "concurrent callers")
	flag.IntVar(&o.contend, "contend", 64, "callers contending one key")
	flag.IntVar(&o.dupKeys, "dup-keys", 1000, "settled keys the duplicate scenarios draw from")
	flag.StringVar(&targets, "targets", strings.Join(allTargets, ","), "targets to measure")
	flag.StringVar(&clients, "clients", "claimload,ghz", "load clients")
	flag.StringVar(&scenarios, "scenarios", strings.Join(allScenarios, ","), "scenarios")
	flag.BoolVar(&o.baselines, "baselines", true, "run redis-benchmark and pgbench")
	flag.IntVar(&o.cores, "cores", 0, "GOMAXPROCS of claimd, the baseline handlers and the load clients (0: every core of the machine)")
	flag.StringVar(&o.python, "python", "", "interpreter of the Python baseline's virtualenv (claimd's guard against Powertools' idempotency on Redis); empty to skip it")
	flag.StringVar(&o.pyScript, "py-script", "bench/python/guard_vs_powertools.py", "the Python baseline's script")
	flag.StringVar(&o.pySrc, "py-src", "clients/python/src", "claimd's Python client source, put on PYTHONPATH")
	flag.IntVar(&o.pyThreads, "py-threads", 8, "threads of the Python baseline")
	growth := flag.String("growth", "100000,1000000,10000000", "stored claims (PostgreSQL) of the growth runs, new keys on claimd (Redis + PostgreSQL) at each; Redis holds 1000000 settled records from that size on; empty for none")
	replicas := flag.String("replicas", "1,2,4", "claimd replica counts of the scaling runs (lifecycle scenario, claimload, one Redis and one PostgreSQL); empty for none")
	flag.StringVar(&o.command, "command", "", "the command line to quote in the report")
	flag.StringVar(&o.render, "render", "", "write the report and plot from this results JSON (of an earlier run) instead of measuring, e.g. after editing the notes")
	flag.Parse()
	o.targets, o.clients, o.scenarios = split(targets), split(clients), split(scenarios)
	for _, r := range split(*replicas) {
		n, err := strconv.Atoi(r)
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "benchrun: -replicas: %q is not a replica count\n", r)
			os.Exit(2)
		}
		o.replicas = append(o.replicas, n)
	}
	for _, g := range split(*growth) {
		n, err := strconv.ParseInt(g, 10, 64)
		if err != nil || n < 1 || (len(o.growth) > 0 && n <= o.growth[len(o.growth)-1]) {
			fmt.Fprintf(os.Stderr, "benchrun: -growth: %q is not a count of claims larger than the one before\n", g)
			os.Exit(2)
		}
		o.growth = append(o.growth, n)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "benchrun:", err)
		os.Exit(1)
	}
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func run(o options) (err error) {
	if o.render != "" {
		return render(o)
	}
	if o.binDir == "" {
		return fmt.Errorf("-bin is required")
	}
	if o.workDir == "" {
		dir, err := os.MkdirTemp("", "claimd-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		o.workDir = dir
	}
	// testenv runs PostgreSQL as nobody, which must reach its directory.
	if err := os.Chmod(o.workDir, 0o755); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	b := &bench{opts: o, ctx: ctx}
	if err := b.writeAuth(); err != nil {
		return err
	}
	b.report.Started = time.Now().UTC()
	b.report.Machine = machineInfo()
	b.report.Options = reportOptions(o)
	logf("machine: %s, load %s", b.report.Machine.CPU, b.report.Machine.LoadBefore)

	if err := b.startServers(); err != nil {
		return err
	}
	defer func() {
		if cerr := b.servers.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("stopping Redis and PostgreSQL: %w", cerr)
		}
	}()
	b.report.Versions = b.versions()

	// The targets first, the baselines last, and after each the data it
	// left is dropped: autovacuum working through one run's rows must not
	// bill its CPU to the next.
	for _, name := range o.targets {
		if err := b.runTarget(name); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := b.settleServers(); err != nil {
			return err
		}
	}
	for _, n := range o.replicas {
		if err := b.runReplicas(n); err != nil {
			return fmt.Errorf("%d replicas: %w", n, err)
		}
		if err := b.settleServers(); err != nil {
			return err
		}
	}
	if o.python != "" {
		if err := b.runPython(); err != nil {
			return err
		}
		if err := b.settleServers(); err != nil {
			return err
		}
	}
	if o.baselines {
		if err := b.runBaselines(); err != nil {
			return err
		}
	}
	// After the baselines: its rate is half the naive handler's.
	if err := b.runOpenLoop(); err != nil {
		return err
	}
	// Last: it leaves the most behind.
	if len(o.growth) > 0 {
		if err := b.settleServers(); err != nil {
			return err
		}
		if err := b.runGrowth(o.growth); err != nil {
			return fmt.Errorf("growth: %w", err)
		}
	}
	b.report.Finished = time.Now().UTC()
	b.report.Machine.LoadAfter = loadAvg()

	if err := b.writeJSON(o.json); err != nil {
		return err
	}
	if err := writeSVG(o.svg, &b.report); err != nil {
		return err
	}
	if err := writeMarkdown(o.out, &b.report, o.svg, o.json, o.notes); err != nil {
		return err
	}
	logf("wrote %s, %s and %s", o.out, o.svg, o.json)
	return nil
}

// render writes the report and the plot of a stored run.
func render(o options) error {
	data, err := os.ReadFile(o.render)
	if err != nil {
		return err
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Errorf("%s: %w", o.render, err)
	}
	if err := writeSVG(o.svg, &r); err != nil {
		return err
	}
	return writeMarkdown(o.out, &r, o.svg, o.render, o.notes)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s benchrun: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
