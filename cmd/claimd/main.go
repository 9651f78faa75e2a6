// Command claimd serves the claim API. Main is wiring only: parse flags,
// construct the stores and the service, serve, drain on a signal.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := realMain(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "claimd:", err)
		}
		os.Exit(exitCode(err))
	}
}

// exitCode is 2 for usage errors, 1 for everything else.
func exitCode(err error) int {
	if errors.Is(err, flag.ErrHelp) || errors.Is(err, errUsage) {
		return 2
	}
	return 1
}

var errUsage = errors.New("usage")

const usage = `claimd: atomic, durable deduplication of webhook deliveries.

Usage:
  claimd [serve] [flags]        serve gRPC (default 127.0.0.1:50051) and HTTP (127.0.0.1:9090)
  claimd migrate [flags]        apply the durable tier's schema migrations
  claimd providers [flags]      print the provider registry as derived (ttl = horizon + margin)
  claimd providers --check FILE validate a providers file; non-zero exit on errors
  claimd prune [--dry-run]      run one retention pass and report counts
  claimd capacity --rate 2000/s [--provider stripe] [--result-bytes N]
                                size Redis, PostgreSQL and CPU for an event rate
  claimd token new [--principal NAME]
                                print a fresh bearer token and the auth file line listing its hash
  claimd version                print the version

Tiers: with no flags, embedded tiers under --data-dir (no servers needed).
--postgres-url alone: PostgreSQL only. --redis-url with --postgres-url: Redis in
front of PostgreSQL. Run "claimd <command> -h" for a command's flags.
`

func realMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return runServe(ctx, args, stderr)
	case "migrate":
		return runMigrate(ctx, args, stdout, stderr)
	case "providers":
		return runProviders(args, stdout, stderr)
	case "prune":
		return runPrune(ctx, args, stdout, stderr)
	case "token":
		return runToken(args, stdout, stderr)
	case "capacity":
		return runCapacity(args, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, versionString())
		return nil
	case "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("%w: unknown command %q", errUsage, cmd)
}
