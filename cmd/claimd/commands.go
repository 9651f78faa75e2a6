package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/horizon"
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
	st, err := openStores(ctx, &c, nil)
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

func runPrune(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		c      commonConfig
		dryRun bool
		grace  time.Duration
		batch  int
	)
	fs := newFlagSet("prune", stderr)
	bindCommon(fs, &c)
	fs.BoolVar(&dryRun, "dry-run", false, "report what would be deleted, delete nothing")
	fs.DurationVar(&grace, "grace", time.Hour, "keep claims this long past their window")
	fs.IntVar(&batch, "batch", 1000, "rows deleted per statement")
	if err := parse(fs, args); err != nil {
		return err
	}
	st, err := openStores(ctx, &c, nil)
	if err != nil {
		return err
	}
	defer st.Close()
	cutoff := clock.Real{}.Now().Add(-grace)
	if dryRun {
		fmt.Fprintf(stdout, "dry run: would delete claims whose window ended before %s\n", cutoff.Format(time.RFC3339))
		return nil
	}
	total := 0
	for {
		n, err := st.durable.Prune(ctx, cutoff, batch)
		if err != nil {
			return fmt.Errorf("prune: %w", err)
		}
		total += n
		if n < batch {
			break
		}
	}
	fmt.Fprintf(stdout, "pruned %d claims whose window ended before %s\n", total, cutoff.Format(time.RFC3339))
	return nil
}
