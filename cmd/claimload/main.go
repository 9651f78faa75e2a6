// Command claimload is a lean closed-loop load client for
// idempotency.v1.ClaimService.Claim: c callers, each sending its next Claim
// as soon as the previous one is answered, for a fixed duration. It exists
// because a general tool (ghz) spends most of a small machine's CPU on
// itself and hides the server's cost; claimload reuses its request and reply
// messages and records latencies into preallocated slices.
//
// It prints a JSON summary on stdout (with -json) or a line of text:
// requests, errors by gRPC code, rps, latency percentiles, and the count of
// each outcome and serving tier in the answers.
//
//	claimload -addr 127.0.0.1:50051 -c 50 -d 15s -scenario new -prefix run1
//
// Scenarios (the key of request number n; ghz templates in bench/ use the
// same scheme):
//
//	new      <prefix>-<n>: every key new
//	dup      <dup-prefix>-<n mod dup-keys>: keys settled before the run
//	mix      every tenth request new, the rest dup
//	contend  <prefix>: every caller claims the same key
//	lifecycle        <prefix>-<n>: a whole event per key: Claim, Transition
//	                 to PROCESSING, Transition to SETTLED with a small result
//	lifecycle-start  the same with Claim(start) then SETTLED (one RPC fewer)
//
// In the lifecycle scenarios the rate is events per second and the summary
// has the p50, p99 and p99.9 of each RPC.
//
// Open loop: with -rate R, requests (events, in a lifecycle scenario) are
// due at a fixed arrival rate, request n at start + n/R, whoever sends it;
// -c bounds how many are in flight. Each latency is measured from the time
// the request was due, not from when a caller got round to sending it, so
// a server that falls behind is charged for the wait of every request
// queued behind it (no coordinated omission). The summary then says how
// many requests went out late and by how much at most. -addr takes a comma-separated list of
// replicas; -token-file a bearer token sent on every call.
//
// With -settle it first claims and settles the dup-keys keys, so that dup
// and mix meet settled duplicates (bench/cmd/benchrun does the same before
// its runs).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "claimload:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("claimload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg Config
	addrs := fs.String("addr", "127.0.0.1:50051", "server address, or several (replicas) separated by commas")
	tokenFile := fs.String("token-file", "", "file whose first line is a bearer token to send on every call")
	fs.IntVar(&cfg.Callers, "c", 50, "concurrent callers (with -rate: the most requests in flight)")
	fs.Float64Var(&cfg.Rate, "rate", 0, "open loop: requests (lifecycle: events) due per second, latency measured from when each was due; 0: closed loop")
	fs.DurationVar(&cfg.Duration, "d", 15*time.Second, "duration of the run")
	fs.IntVar(&cfg.Conns, "conns", 1, "gRPC connections shared by the callers (round robin)")
	scenario := fs.String("scenario", "new", "new, dup, mix, contend, lifecycle or lifecycle-start")
	fs.StringVar(&cfg.Namespace, "namespace", "bench", "ClaimRequest.namespace")
	fs.StringVar(&cfg.Provider, "provider", "stripe", "ClaimRequest.provider")
	fs.StringVar(&cfg.Prefix, "prefix", "load", "prefix of new keys (the key itself for contend); make it unique per run")
	fs.StringVar(&cfg.DupPrefix, "dup-prefix", "settled", "prefix of the keys settled before the run")
	fs.IntVar(&cfg.DupKeys, "dup-keys", 1000, "number of settled keys")
	fs.StringVar(&cfg.Holder, "holder", "claimload", "ClaimRequest.holder")
	asJSON := fs.Bool("json", false, "print the summary as JSON")
	settleFirst := fs.Bool("settle", false, "before the run, claim and settle the dup-keys keys (Claim, then Transition to PROCESSING and SETTLED)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if cfg.Scenario, err = ParseScenario(*scenario); err != nil {
		return err
	}
	for _, a := range strings.Split(*addrs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			cfg.Addrs = append(cfg.Addrs, a)
		}
	}
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			return err
		}
		line, _, _ := strings.Cut(string(b), "\n")
		cfg.Token = strings.TrimSpace(line)
	}
	if err := cfg.validate(); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if *settleFirst {
		if err := Settle(ctx, cfg); err != nil {
			return err
		}
	}
	sum, err := Run(ctx, cfg)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(sum)
	}
	_, err = fmt.Fprintln(stdout, sum)
	return err
}

func (c *Config) validate() error {
	switch {
	case len(c.Addrs) == 0:
		return errors.New("-addr names no server")
	case c.Callers < 1:
		return errors.New("-c must be at least 1")
	case c.Duration <= 0:
		return errors.New("-d must be positive")
	case c.Conns < 1:
		return errors.New("-conns must be at least 1")
	case c.DupKeys < 1:
		return errors.New("-dup-keys must be at least 1")
	case c.Rate < 0 || math.IsInf(c.Rate, 0) || math.IsNaN(c.Rate):
		return errors.New("-rate must be a positive number of requests per second, or 0 for a closed loop")
	case c.Rate > 0 && time.Duration(float64(time.Second)/c.Rate) < time.Microsecond:
		return errors.New("-rate is over a million requests per second")
	}
	return nil
}
