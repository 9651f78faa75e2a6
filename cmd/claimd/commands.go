package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/claimd/claimd/internal/auth"
	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/horizon"
	"github.com/claimd/claimd/internal/janitor"
	"github.com/claimd/claimd/internal/tiers/postgres"
)

// version is set at build time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

func versionString() string {
	rev := ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				rev = " (" + s.Value[:12] + ")"
			}
		}
	}
	return "claimd " + version + rev + " " + runtime.Version()
}

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c commonConfig
	fs := newFlagSet("migrate", stderr)
	bindCommon(fs, &c)
	if err := parse(fs, args); err != nil {
		return err
	}
	if c.PostgresURL != "" {
		if err := postgres.Migrate(ctx, c.PostgresURL); err != nil {
			return fmt.Errorf("migrate postgres: %w", err)
		}
		fmt.Fprintln(stdout, "postgres: schema up to date")
		return nil
	}
	// The embedded tier migrates when it opens.
	log, err := c.logger(stderr)
	if err != nil {
		return err
	}
	st, err := openStores(ctx, &c, nil, log)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: schema up to date\n", st.mode)
	return st.Close()
}

func runProviders(args []string, stdout, stderr io.Writer) error {
	var (
		c     commonConfig
		check string
	)
	fs := newFlagSet("providers", stderr)
	bindCommon(fs, &c)
	fs.StringVar(&check, "check", "", "validate this providers file and exit (non-zero on errors)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if check != "" {
		reg, err := horizon.LoadFile(check)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: ok (%d providers and groups)\n", check, len(reg.List()))
		return nil
	}
	reg, err := c.registry()
	if err != nil {
		return err
	}
	return reg.Table(stdout, clock.Real{}.Now(), c.ReviewAge)
}

// runToken prints a fresh bearer token on the first line (so a script can
// take it with head -1) and the auth file lines that list its hash. claimd
// never sees the token again: the file keeps only the hash.
func runToken(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "new" {
		fmt.Fprintln(stderr, "usage: claimd token new [--principal NAME]")
		return fmt.Errorf("%w: token: want the subcommand new", errUsage)
	}
	var principal string
	fs := newFlagSet("token new", stderr)
	fs.StringVar(&principal, "principal", "", "the principal the token is for: the printed lines then name it")
	if err := parse(fs, args[1:]); err != nil {
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

func runPrune(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		c      commonConfig
		r      retentionConfig
		dryRun bool
	)
	fs := newFlagSet("prune", stderr)
	bindCommon(fs, &c)
	bindRetention(fs, &r)
	fs.BoolVar(&dryRun, "dry-run", false, "count what a pass would delete, delete nothing")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := r.check(); err != nil {
		return err
	}
	log, err := c.logger(stderr)
	if err != nil {
		return err
	}
	st, err := openStores(ctx, &c, nil, log)
	if err != nil {
		return err
	}
	defer st.Close()
	j, err := r.janitor(st, janitor.Config{Clock: clock.Real{}, Logger: log})
	if err != nil {
		return err
	}
	rep, err := j.Pass(ctx, dryRun)
	printPass(stdout, st, rep)
	if err != nil {
		return fmt.Errorf("prune: %w", err)
	}
	return nil
}

// printPass reports a pass for an operator: what went (or would go), and
// the cutoffs that decided it.
func printPass(w io.Writer, st *stores, rep janitor.Report) {
	if rep.Skipped {
		fmt.Fprintf(w, "skipped: another replica's janitor holds the lock (PostgreSQL advisory lock %d); nothing done\n", postgres.JanitorLockKey(""))
		return
	}
	verb := "deleted"
	if rep.DryRun {
		verb = "would delete"
		fmt.Fprintln(w, "dry run: nothing deleted")
	}
	fmt.Fprintf(w, "claims %s: %d (window ended before %s)\n", verb, rep.Claims, rep.ClaimsCutoff.Format(time.RFC3339))
	if st.durableKind == "postgres" {
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
		return
	}
	fmt.Fprintf(w, "audit rows %s: %d (written before %s)\n", verb, rep.Audit.Rows, rep.AuditCutoff.Format(time.RFC3339))
}
