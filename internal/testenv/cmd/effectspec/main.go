// Command effectspec drives a claimd client's receiver through the failures
// that only separate processes can show: a receiver killed between its
// effect's commit and its settle, and one paused past its lease and woken
// after a takeover (clients/GUARD.md, "Exactly-once effects";
// clients/guardspec/README.md, "Effect processes", which states the
// receiver protocol). Every client language keeps a receiver beside its
// tests and runs effectspec on SQLite and on PostgreSQL:
//
//	effectspec -claimd-bin PATH | -claimd 127.0.0.1:PORT
//	           -db sqlite:PATH | -db postgres://URL
//	           [-events 50] [-scenarios crash,zombie-new-first,zombie-old-first,raise]
//	           [-seed S] [-lease 500ms] [-timeout 30s] [-v]
//	           -- RECEIVER-COMMAND ARGS…
//
// -claimd-bin starts that claimd binary with embedded tiers in a temporary
// directory, on free loopback ports, and stops it (SIGTERM to its PID) at
// the end; -claimd uses a running one. effectspec creates the ledger table
// (effects.ledger_schema of clients/guardspec/scenarios.json) in -db, then
// for each scenario, in a namespace of its own, starts the receiver as
// RECEIVER-COMMAND ARGS… --claimd ADDR --namespace NS --db DB (DB exactly as
// -db), waits for its ready line, and sends SIGKILL, SIGSTOP and SIGCONT to
// its process group. Every wait has a bound (-timeout); none stands in for
// synchronisation: leases are -lease long and redeliveries wait for the
// lease's end in claimd (wait_ms).
//
// At the end it reads the ledger, the fence rows (claimd_effects) and
// claimd's records, prints one line of counts per scenario, e.g.
//
//	crash: 50 events, 50 ledger rows, 0 written twice, 0 never written, 12 recovered, gates …
//
// and exits 1 after a line per violation: an event written twice or never,
// a record not SETTLED with the event's result, an answer the scenario
// rules out, a receiver that broke the protocol or did not exit when its
// standard input closed, and (with -claimd-bin, whose claimd serves this run
// alone) a count of recovered settles in claimd's metrics other than the
// answers that say the effect was done. The crash scenario's gates are drawn from -seed,
// printed on the first line, so that a draw can be replayed. Exit status 2
// is a usage or setup error.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/claimd/claimd/clients/go/claimd"
	"github.com/claimd/claimd/clients/go/claimdtest"
)

// scenarioNames are the scenarios in the order they run.
var scenarioNames = []string{"crash", "zombie-new-first", "zombie-old-first", "raise"}

// config is effectspec's command line.
type config struct {
	claimdBin, claimdAddr string
	db                    string
	events                int
	scenarios             []string
	seed                  uint64
	lease, timeout        time.Duration
	verbose               bool
	receiver              []string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := realMain(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func realMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "effectspec:", err)
		}
		return 2
	}
	violations, err := run(ctx, cfg, stdout, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "effectspec:", err)
		return 2
	}
	if len(violations) > 0 {
		fmt.Fprintf(stdout, "effectspec: %d violations:\n", len(violations))
		for _, v := range violations {
			fmt.Fprintln(stdout, "  "+v)
		}
		return 1
	}
	fmt.Fprintln(stdout, "effectspec: no violations")
	return 0
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("effectspec", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: effectspec -claimd-bin PATH | -claimd ADDR -db sqlite:PATH|postgres://URL [flags] -- RECEIVER-COMMAND ARGS…")
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.claimdBin, "claimd-bin", "", "start this claimd binary (embedded tiers, free loopback ports) for the run")
	fs.StringVar(&cfg.claimdAddr, "claimd", "", "use the claimd already running at this address")
	fs.StringVar(&cfg.db, "db", "", "the receivers' database: sqlite:PATH or a postgres:// URL")
	fs.IntVar(&cfg.events, "events", 50, "events per scenario")
	list := fs.String("scenarios", strings.Join(scenarioNames, ","), "scenarios to run, comma-separated")
	seed := fs.Int64("seed", -1, "seed of the crash scenario's gates (default: from the clock, printed)")
	fs.DurationVar(&cfg.lease, "lease", 500*time.Millisecond, "the deliveries' lease")
	fs.DurationVar(&cfg.timeout, "timeout", 30*time.Second, "bound on every wait; reaching it is a violation")
	fs.BoolVar(&cfg.verbose, "v", false, "copy the receivers' standard error to effectspec's")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	cfg.receiver = fs.Args()
	switch {
	case (cfg.claimdBin == "") == (cfg.claimdAddr == ""):
		return cfg, errors.New("give exactly one of -claimd-bin and -claimd")
	case cfg.db == "":
		return cfg, errors.New("-db is required")
	case len(cfg.receiver) == 0:
		return cfg, errors.New("no receiver command after --")
	case cfg.events < 1:
		return cfg, fmt.Errorf("-events %d: want at least 1", cfg.events)
	case cfg.lease < 100*time.Millisecond || cfg.lease > 10*time.Second:
		return cfg, fmt.Errorf("-lease %v: want between 100ms and 10s", cfg.lease)
	case cfg.timeout < time.Second:
		return cfg, fmt.Errorf("-timeout %v: want at least 1s", cfg.timeout)
	}
	if _, _, _, err := parseDB(cfg.db); err != nil {
		return cfg, err
	}
	for _, s := range strings.Split(*list, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if !slices.Contains(scenarioNames, s) {
			return cfg, fmt.Errorf("-scenarios: unknown scenario %q (known: %s)", s, strings.Join(scenarioNames, ", "))
		}
		if !slices.Contains(cfg.scenarios, s) {
			cfg.scenarios = append(cfg.scenarios, s)
		}
	}
	if len(cfg.scenarios) == 0 {
		return cfg, errors.New("-scenarios: none given")
	}
	if *seed >= 0 {
		cfg.seed = uint64(*seed)
	} else {
		cfg.seed = uint64(time.Now().UnixNano()) % 1_000_000_000
	}
	return cfg, nil
}

// run sets up claimd and the database, runs the scenarios and returns their
// violations; an error is a setup failure.
func run(ctx context.Context, cfg config, stdout, stderr io.Writer) ([]string, error) {
	setup, cancel := context.WithTimeout(ctx, 2*cfg.timeout)
	defer cancel()
	l, err := openLedger(setup, cfg.db)
	if err != nil {
		return nil, err
	}
	defer l.Close()

	addr, metricsURL := cfg.claimdAddr, ""
	if cfg.claimdBin != "" {
		dir, err := os.MkdirTemp("", "effectspec-claimd")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		srv, err := claimdtest.Start(cfg.claimdBin, dir)
		if err != nil {
			return nil, err
		}
		defer func() {
			if err := srv.Stop(); err != nil {
				fmt.Fprintln(stderr, "effectspec: stopping claimd:", err)
			}
		}()
		addr, metricsURL = srv.Addr, "http://"+srv.HTTPAddr+"/metrics"
	}
	client, err := claimd.Dial(setup, addr, claimd.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, err
	}
	defer client.Close()

	var id [4]byte
	_, _ = rand.Read(id[:])
	r := &runner{cfg: cfg, ctx: ctx, addr: addr, client: client, ledger: l, runID: hex.EncodeToString(id[:]), metricsURL: metricsURL}
	if cfg.verbose {
		r.verbose = stderr
	}
	fmt.Fprintf(stdout, "effectspec: seed %d (replay with -seed %d), %s, claimd %s, %d events per scenario, lease %v, receiver %s\n",
		cfg.seed, cfg.seed, l.dialect, addr, cfg.events, cfg.lease, strings.Join(cfg.receiver, " "))

	var violations []string
	for _, name := range cfg.scenarios {
		if ctx.Err() != nil {
			return violations, context.Cause(ctx)
		}
		start := time.Now()
		t, v := r.scenario(name)
		fmt.Fprintf(stdout, "%s (%.1fs)\n", t, time.Since(start).Seconds())
		violations = append(violations, v...)
	}
	return violations, nil
}
