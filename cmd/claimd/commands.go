package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/claimd/claimd/internal/auth"
	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/horizon"
	"github.com/claimd/claimd/internal/janitor"
	"github.com/claimd/claimd/internal/server"
	"github.com/claimd/claimd/internal/tiers/migrations"
	"github.com/claimd/claimd/internal/tiers/postgres"
)

// version is set at build time: make build passes
// -ldflags "-X main.version=$(scripts/version.sh semver)", the version
// make dist stamps on every artifact.
var version = "dev"

// versionString is what claimd version and claimd --version print.
func versionString() string {
	bi, _ := debug.ReadBuildInfo()
	return describeBuild(version, bi)
}

// describeBuild names a build: the version stamped with -ldflags when one
// was (make build: scripts/version.sh), else the main module's version as the
// Go toolchain recorded it (a go install at a tag, or the pseudo-version
// go build derives from the checkout), else "dev"; then the commit when
// the build recorded it, and the Go version.
func describeBuild(stamped string, bi *debug.BuildInfo) string {
	v, rev := stamped, ""
	if bi != nil {
		if v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				rev = " (" + s.Value[:12] + ")"
			}
		}
	}
	return "claimd " + v + rev + " " + runtime.Version()
}

// runVersion prints the version: main.version, set at build time (make
// build passes scripts/version.sh semver), and the commit when the build recorded it.
func runVersion(_ context.Context, args []string, stdout, _ io.Writer) error {
	if err := parse(bareFlagSet("version"), args); err != nil {
		return err
	}
	fmt.Fprintln(stdout, versionString())
	return nil
}

// migrateConfig is the migrate command's flags: the durable tier and the
// log.
type migrateConfig struct {
	server.TierConfig
	server.LogConfig
}

func bindMigrate(fs *flag.FlagSet, c *migrateConfig) {
	bindDurable(fs, &c.TierConfig)
	bindLog(fs, &c.LogConfig)
}

// runMigrate applies the durable tier's pending migrations and says which
// it applied, or that there were none.
func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		c          migrateConfig
		partitions int
	)
	fs := newFlagSet("migrate")
	bindMigrate(fs, &c)
	fs.IntVar(&partitions, "partition-claims", 0, fmt.Sprintf("PostgreSQL only, once, at low traffic: after migrating, hash-partition the claims table by identity into this many partitions (%d to %d; see docs/scaling.md); 0 leaves it as it is",
		postgres.MinClaimPartitions, postgres.MaxClaimPartitions))
	if err := parse(fs, args); err != nil {
		return err
	}
	if partitions != 0 && c.PostgresURL == "" {
		return fmt.Errorf("%w: --partition-claims needs --postgres-url: the embedded tier has one claims table", errUsage)
	}
	if c.PostgresURL != "" {
		cfg := postgres.Config{URL: c.PostgresURL, Schema: c.PostgresSchema}
		res, err := postgres.MigrateWith(ctx, cfg)
		if err != nil {
			return fmt.Errorf("migrate postgres: %w", err)
		}
		fmt.Fprintf(stdout, "postgres schema %s: %s\n", c.PostgresSchema, res)
		if partitions != 0 {
			if err := postgres.PartitionClaims(ctx, cfg, partitions); err != nil {
				return fmt.Errorf("migrate postgres: %w", err)
			}
			fmt.Fprintf(stdout, "postgres schema %s: claims hash-partitioned by identity into %d partitions\n", c.PostgresSchema, partitions)
		}
		return nil
	}
	// The embedded tier migrates when it opens.
	st, _, err := openTiers(ctx, &c.TierConfig, &c.LogConfig, stderr)
	if err != nil {
		return err
	}
	defer st.Close()
	if m, ok := st.Durable.(interface{ Migrated() migrations.Result }); ok {
		fmt.Fprintf(stdout, "%s: %s\n", st.Mode, m.Migrated())
	}
	return nil
}

// openTiers opens the tiers of migrate and prune, and their log on stderr;
// serve opens its own (server.New). Both have the crash points of a -tags
// chaos build.
func openTiers(ctx context.Context, c *server.TierConfig, lc *server.LogConfig, stderr io.Writer) (*server.Tiers, *slog.Logger, error) {
	log, err := lc.Logger(stderr)
	if err != nil {
		return nil, nil, err
	}
	withCrashPoints(c)
	st, err := server.OpenTiers(ctx, c, nil, log)
	return st, log, err
}

// providersConfig is the providers command's flags.
type providersConfig struct {
	server.RegistryConfig
	Check string
	Dump  bool
}

func bindProviders(fs *flag.FlagSet, c *providersConfig) {
	bindRegistry(fs, &c.RegistryConfig)
	fs.StringVar(&c.Check, "check", "", "validate this providers `FILE` and exit (non-zero on errors)")
	fs.BoolVar(&c.Dump, "dump", false, "print the built-in providers.yaml, a starting point for a file of your own (or one that says extends: builtin)")
}

func runProviders(_ context.Context, args []string, stdout, _ io.Writer) error {
	var c providersConfig
	fs := newFlagSet("providers")
	bindProviders(fs, &c)
	if err := parse(fs, args); err != nil {
		return err
	}
	switch {
	case c.Dump && c.Check != "":
		return fmt.Errorf("%w: --dump and --check go one at a time", errUsage)
	case c.Dump:
		_, err := stdout.Write(horizon.DefaultYAML())
		return err
	case c.Check != "":
		reg, err := horizon.LoadFile(c.Check)
		if err != nil {
			return err
		}
		lifecycles := 0
		for _, p := range reg.List() {
			lifecycles += len(p.Lifecycles)
		}
		fmt.Fprintf(stdout, "%s: ok (%d providers and groups, %d lifecycles)\n", c.Check, len(reg.List()), lifecycles)
		return nil
	}
	reg, err := c.Registry()
	if err != nil {
		return err
	}
	if err := reg.Table(stdout, clock.Real{}.Now(), c.ReviewAge); err != nil {
		return err
	}
	return reg.LifecycleGraphs(stdout)
}

func bindToken(fs *flag.FlagSet, principal *string) {
	fs.StringVar(principal, "principal", "", "the principal (`NAME`) the token is for: the printed lines then name it")
}

// runTokenNew prints a fresh bearer token on the first line (so a script
// can take it with head -1) and the auth file lines that list its hash.
// claimd never sees the token again: the file keeps only the hash.
func runTokenNew(_ context.Context, args []string, stdout, _ io.Writer) error {
	var principal string
	fs := newFlagSet("token new")
	bindToken(fs, &principal)
	if err := parse(fs, args); err != nil {
		return err
	}
	if principal != "" {
		if err := auth.CheckPrincipalName(principal); err != nil {
			return fmt.Errorf("%w: --principal: %v", errUsage, err)
		}
	}
	tok := auth.NewToken()
	fmt.Fprintln(stdout, tok)
	fmt.Fprintln(stdout, "# The line above is the token: hand it to the caller now; it is not stored anywhere.")
	line := fmt.Sprintf("tokens: [%q]", auth.HashToken(tok))
	if principal == "" {
		fmt.Fprintln(stdout, "# Add its hash to a principal of the auth file (--auth-file), then reload (SIGHUP):")
		fmt.Fprintln(stdout, "    "+line)
		return nil
	}
	fmt.Fprintln(stdout, "# Add its hash to the auth file (--auth-file), then reload (SIGHUP); a principal may list several tokens:")
	fmt.Fprintln(stdout, "principals:")
	fmt.Fprintln(stdout, "  "+principal+":")
	fmt.Fprintln(stdout, "    "+line)
	return nil
}

// pruneConfig is the prune command's flags.
type pruneConfig struct {
	server.TierConfig
	server.LogConfig
	server.RetentionConfig
	DryRun bool
}

func bindPrune(fs *flag.FlagSet, c *pruneConfig) {
	bindDurable(fs, &c.TierConfig)
	bindLog(fs, &c.LogConfig)
	bindRetention(fs, &c.RetentionConfig)
	fs.BoolVar(&c.DryRun, "dry-run", false, "count what a pass would delete, delete nothing")
}

func runPrune(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c pruneConfig
	fs := newFlagSet("prune")
	bindPrune(fs, &c)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := c.RetentionConfig.Check(); err != nil {
		return err
	}
	st, log, err := openTiers(ctx, &c.TierConfig, &c.LogConfig, stderr)
	if err != nil {
		return err
	}
	defer st.Close()
	j, err := st.Janitor(c.RetentionConfig, janitor.Config{Clock: clock.Real{}, Logger: log})
	if err != nil {
		return err
	}
	rep, err := j.Pass(ctx, c.DryRun)
	printPass(stdout, st, rep, postgres.JanitorLockKey(c.PostgresSchema))
	if err != nil {
		return fmt.Errorf("prune: %w", err)
	}
	return nil
}

// printPass reports a pass for an operator: what went (or would go), and
// the cutoffs that decided it. lockKey is the janitor's advisory lock.
func printPass(w io.Writer, st *server.Tiers, rep janitor.Report, lockKey int64) {
	if rep.Skipped {
		fmt.Fprintf(w, "skipped: another replica's janitor holds the lock (PostgreSQL advisory lock %d); nothing done\n", lockKey)
		return
	}
	verb := "deleted"
	if rep.DryRun {
		verb = "would delete"
		fmt.Fprintln(w, "dry run: nothing deleted")
	}
	cutoff := rep.ClaimsCutoff.Format(time.RFC3339)
	fmt.Fprintf(w, "claims %s: %d (window ended before %s)\n", verb, rep.Claims, cutoff)
	fmt.Fprintf(w, "entities %s: %d, with %d applied events (last window ended before %s)\n", verb, rep.Entities, rep.EntityEvents, cutoff)
	fmt.Fprintf(w, "deferrals %s: %d (last window ended before %s)\n", verb, rep.Deferrals, cutoff)
	if st.DurableKind == "postgres" {
		if rep.DryRun {
			verb = "would drop"
		} else {
			verb = "dropped"
		}
		parts := "none"
		if len(rep.Audit.Partitions) > 0 {
			parts = strings.Join(rep.Audit.Partitions, ", ")
		}
		fmt.Fprintf(w, "audit partitions %s: %d (%s; months ended by %s)\n", verb, len(rep.Audit.Partitions), parts, rep.AuditCutoff.Format(time.RFC3339))
		for _, f := range rep.Audit.Exported {
			fmt.Fprintf(w, "audit exported to %s\n", f)
		}
		if rep.Audit.ExportFailed != "" {
			fmt.Fprintf(w, "audit partition %s kept: its export failed\n", rep.Audit.ExportFailed)
		}
		return
	}
	fmt.Fprintf(w, "audit rows %s: %d (written before %s)\n", verb, rep.Audit.Rows, rep.AuditCutoff.Format(time.RFC3339))
}
