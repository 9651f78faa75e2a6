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
	"strings"
	"syscall"

	"github.com/claimd/claimd/internal/server"
	"github.com/claimd/claimd/internal/textclip"
)

// reexec executes claimd anew to apply the timer slack
// (server.Config.Reexec). main sets it: serve run by tests in their own
// process must not execute the test binary, and applies no slack.
var reexec func(env []string) error

func main() {
	reexec = server.ExecSelf
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := realMain(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "claimd:", err)
		os.Exit(exitCode(err))
	}
}

// exitCode is 2 for usage errors, the code of an exitError (claimd
// reconcile's), 1 for everything else.
func exitCode(err error) int {
	if e := (*exitError)(nil); errors.As(err, &e) {
		return e.code
	}
	if errors.Is(err, errUsage) {
		return 2
	}
	return 1
}

// errUsage marks a usage error (exit 2); serve's checks return it too.
var errUsage = server.ErrUsage

// command is one subcommand of claimd.
type command struct {
	name    string // as typed: "serve", "token new"
	summary string // one line, for claimd --help
	// flags registers the command's flags on fs: for its help, and for the
	// keys a config file may hold. nil for a command without flags.
	flags func(fs *flag.FlagSet)
	run   func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands lists claimd's commands in the order --help shows them. It is a
// function, not a variable, because parse consults it while the commands
// run.
func commands() []command {
	return []command{
		{"serve", "serve gRPC (default 127.0.0.1:50051) and HTTP (127.0.0.1:8080: the API over HTTP/JSON, Connect, gRPC-Web; metrics); the default command",
			func(fs *flag.FlagSet) { bindServe(fs, new(server.Config)) },
			func(ctx context.Context, args []string, _, stderr io.Writer) error {
				return runServe(ctx, args, stderr)
			}},
		{"migrate", "apply the durable tier's schema migrations and say which ran (serve also applies them at start)",
			func(fs *flag.FlagSet) { bindMigrate(fs, new(migrateConfig)) }, runMigrate},
		{"providers", "print the provider registry as derived (ttl = horizon + margin); --check FILE validates a file, --dump prints the built-in one",
			func(fs *flag.FlagSet) { bindProviders(fs, new(providersConfig)) }, runProviders},
		{"prune", "run one retention pass now and report what it deleted (--dry-run: what it would)",
			func(fs *flag.FlagSet) { bindPrune(fs, new(pruneConfig)) }, runPrune},
		{"audit-export", "write one month of PostgreSQL's audit log to DIR/<partition>.parquet (--month YYYY-MM --out DIR), for DuckDB, ClickHouse, Spark or claimd inspect --file",
			func(fs *flag.FlagSet) { bindAuditExport(fs, new(auditExportConfig)) }, runAuditExport},
		{"capacity", "size Redis, PostgreSQL and CPU for an event rate (--rate 2000/s), from sizes measured on real servers",
			func(fs *flag.FlagSet) { bindCapacity(fs, new(capacityConfig)) }, runCapacity},
		{"token new", "print a fresh bearer token and the auth file lines that list its hash",
			func(fs *flag.FlagSet) { bindToken(fs, new(string)) }, runTokenNew},
		{"effects-schema", "print the DDL of claimd_effects, the guards' effect fence in the handler's database (--dialect postgres, sqlite or mysql)",
			func(fs *flag.FlagSet) { bindEffectsSchema(fs, new(string)) }, runEffectsSchema},
		{"reconcile", "compare a provider's own list of events (Stripe's /v1/events pages, JSONL) with a namespace's claims over the API; prints what needs a person, exits 1 when anything does",
			func(fs *flag.FlagSet) { bindReconcile(fs, new(reconcileConfig)) }, runReconcile},
		{"inspect", "show one key over the API: its record, what its next delivery would be answered and why, its audit trail (who asked, how), its entity; exits 1 when it has no record",
			func(fs *flag.FlagSet) { bindInspect(fs, new(inspectConfig)) }, runInspect},
		{"version", "print the version (as does claimd --version)", nil, runVersion},
	}
}

// usage is claimd's help: its commands and how flags are configured.
func usage() string {
	var b strings.Builder
	b.WriteString("claimd: atomic, durable deduplication of webhook deliveries.\n\nUsage: claimd <command> [flags]\n\nCommands:\n")
	width := len("help")
	for _, c := range commands() {
		width = max(width, len(c.name))
	}
	for _, c := range commands() {
		fmt.Fprintf(&b, "  %-*s %s\n", width, c.name, c.summary)
	}
	fmt.Fprintf(&b, "  %-*s %s\n", width, "help", `this help; "claimd help <command>" (or "claimd <command> --help") lists a command's flags`)
	b.WriteString(`
Configuration: every flag can also be set by the environment variable CLAIMD_
and its name in capitals, dashes as underscores (--postgres-url is
CLAIMD_POSTGRES_URL), or by a key of a YAML file given with --config FILE (or
CLAIMD_CONFIG), named as the flag without its dashes (postgres-url: ...).
The command line wins over the environment, which wins over the config file,
which wins over the default.

Tiers: with no flags, embedded tiers under --data-dir (no servers needed).
--postgres-url alone: PostgreSQL only. --redis-url with --postgres-url: Redis in
front of PostgreSQL.
`)
	return b.String()
}

// realMain runs the command args name (serve when args start with a flag
// or are empty). Help is printed on stdout and is no error.
func realMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	name := "serve"
	if len(args) > 0 {
		switch args[0] {
		case "-h", "-help", "--help":
			fmt.Fprint(stdout, usage())
			return nil
		case "-version", "--version":
			return runVersion(ctx, args[1:], stdout, stderr)
		case "help":
			if len(args) == 1 {
				fmt.Fprint(stdout, usage())
				return nil
			}
			return realMain(ctx, append(args[1:], "--help"), stdout, stderr)
		}
		if !strings.HasPrefix(args[0], "-") {
			name, args = args[0], args[1:]
		}
	}
	if name == "token" {
		switch {
		case len(args) > 0 && args[0] == "new":
			name, args = "token new", args[1:]
		case len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help"):
			name = "token new"
		default:
			fmt.Fprintln(stderr, "usage: claimd token new [--principal NAME]")
			return fmt.Errorf("%w: token: want the subcommand new", errUsage)
		}
	}
	for _, c := range commands() {
		if c.name != name {
			continue
		}
		err := c.run(ctx, args, stdout, stderr)
		if h := (*helpRequested)(nil); errors.As(err, &h) {
			fmt.Fprint(stdout, help(h.fs))
			return nil
		}
		return err
	}
	fmt.Fprint(stderr, usage())
	return fmt.Errorf("%w: unknown command %s", errUsage, textclip.Quote(name, maxEcho))
}
