// Command chaos is claimd's fault-injection suite (`make chaos`): it starts
// its own Redis, PostgreSQL and claimd replicas on loopback, drives callers
// racing through the whole lifecycle of many keys, injects one fault per
// scenario mid-load, records every call, and checks the history
// (internal/chaos): one owner at a time, settled once, retryable failures,
// attempt recognition, convergence, agreement with the durable audit log,
// and per-key linearizability with porcupine. A crash-point matrix kills
// claimd at named points and asserts what the next delivery sees. The
// results go to RELIABILITY.md; any violation makes it exit 1.
//
// scripts/chaos.sh builds claimd (twice: the production build and the one
// with -tags chaos that has the crash points) and runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/claimd/claimd/internal/horizon"
)

// options are the suite's flags.
type options struct {
	binDir      string
	workDir     string
	out         string
	vizDir      string
	notes       string
	command     string
	duration    time.Duration
	converge    time.Duration
	groups      int
	racers      int
	replicas    int
	maxKeys     int
	releaseRate float64
	scenarios   []string
	crash       bool
}

// suite is one run.
type suite struct {
	opts        options
	ctx         context.Context
	backends    *backends
	claimd      string // production build
	claimdChaos string // -tags chaos build
	providers   []byte // the registry every replica loads
	lifecycles  map[string]*horizon.Lifecycle
}

func main() {
	var o options
	var scen string
	flag.StringVar(&o.binDir, "bin", "", "directory holding claimd and claimd-chaos (built with -tags chaos)")
	flag.StringVar(&o.workDir, "work", "", "scratch directory for servers, logs and data (default: a new temporary one, removed at the end)")
	flag.StringVar(&o.out, "out", "RELIABILITY.md", "report to write")
	flag.StringVar(&o.vizDir, "viz", filepath.Join(os.TempDir(), "claimd-chaos-viz"), "directory for porcupine's visualizations of keys that cannot be linearized (emptied first)")
	flag.StringVar(&o.notes, "notes", "cmd/chaos/NOTES.md", "hand-written analysis to include in the report")
	flag.StringVar(&o.command, "command", "", "the command line to quote in the report")
	flag.DurationVar(&o.duration, "duration", 20*time.Second, "load of each scenario; the fault starts at a third of it")
	flag.DurationVar(&o.converge, "converge", 20*time.Second, "after the load, how long every key's callers have to finish")
	flag.IntVar(&o.groups, "keys-in-flight", 8, "keys raced at once")
	flag.IntVar(&o.racers, "racers", 4, "callers racing on each key")
	flag.IntVar(&o.replicas, "replicas", 2, "claimd replicas on one Redis and one PostgreSQL")
	flag.IntVar(&o.maxKeys, "max-keys", 5000, "keys per scenario at most")
	flag.Float64Var(&o.releaseRate, "release-rate", 0.1, "share of owners that Release instead of settling (hands the key to a loser)")
	flag.StringVar(&scen, "scenarios", "", "comma-separated subset of the scenarios (default: all)")
	flag.BoolVar(&o.crash, "crash-matrix", true, "run the crash-point matrix")
	flag.Parse()
	o.scenarios = split(scen)
	code, err := run(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	os.Exit(code)
}

// run returns 1 when a violation was found, 0 otherwise; err is a run that
// could not be carried out.
func run(o options) (int, error) {
	if o.binDir == "" {
		return 0, fmt.Errorf("-bin is required")
	}
	if o.workDir == "" {
		dir, err := os.MkdirTemp("", "claimd-chaos-")
		if err != nil {
			return 0, err
		}
		defer os.RemoveAll(dir)
		o.workDir = dir
	}
	// testenv runs PostgreSQL as nobody, which must reach its directory.
	if err := os.Chmod(o.workDir, 0o755); err != nil {
		return 0, err
	}
	if o.vizDir != "" {
		os.RemoveAll(o.vizDir) // only this run's visualizations
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	s := &suite{opts: o, ctx: ctx,
		claimd: filepath.Join(o.binDir, "claimd"), claimdChaos: filepath.Join(o.binDir, "claimd-chaos")}
	lc, err := lifecycleYAML()
	if err != nil {
		return 0, err
	}
	s.providers = []byte(providersYAML + lc)
	if s.lifecycles, err = lifecycles(s.providers); err != nil {
		return 0, fmt.Errorf("the suite's providers.yaml: %w", err)
	}
	rep := report{Started: time.Now().UTC(), Options: o, Machine: machine()}

	b, err := startBackends(o.workDir)
	if err != nil {
		return 0, err
	}
	s.backends = b
	defer func() {
		if err := b.close(); err != nil {
			logf("stopping Redis and PostgreSQL: %v", err)
		}
	}()

	for _, sc := range scenarios() {
		if !selected(o.scenarios, sc.name) {
			continue
		}
		logf("scenario %s (%s)", sc.name, sc.mode)
		rep.Scenarios = append(rep.Scenarios, s.runScenario(sc))
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
	}
	if o.crash {
		rep.Crash = s.runCrashMatrix()
	}
	rep.Finished = time.Now().UTC()
	rep.print(os.Stdout)
	if err := rep.writeMarkdown(o.out); err != nil {
		return 0, err
	}
	logf("wrote %s; visualizations (if any) under %s", o.out, o.vizDir)
	if rep.failed() {
		return 1, nil
	}
	return 0, nil
}

func selected(list []string, name string) bool {
	if len(list) == 0 {
		return true
	}
	for _, s := range list {
		if s == name {
			return true
		}
	}
	return false
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

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s chaos: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
