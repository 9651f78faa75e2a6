package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/claimd/claimd/internal/server"
	"github.com/claimd/claimd/internal/tiers/postgres"
)

// auditExportConfig is claimd audit-export's flags.
type auditExportConfig struct {
	server.TierConfig
	Month, Out string
}

func bindAuditExport(fs *flag.FlagSet, c *auditExportConfig) {
	bindDurable(fs, &c.TierConfig)
	fs.StringVar(&c.Month, "month", "", "the UTC month to export, YYYY-MM; required")
	fs.StringVar(&c.Out, "out", "", "existing directory the file is written to, as <partition>.parquet (mode 0600); required")
}

// runAuditExport writes one month of PostgreSQL's audit log to a Parquet
// file (internal/auditfile), without dropping it.
func runAuditExport(ctx context.Context, args []string, stdout, _ io.Writer) error {
	var c auditExportConfig
	fs := newFlagSet("audit-export")
	bindAuditExport(fs, &c)
	if err := parse(fs, args); err != nil {
		return err
	}
	month, err := time.Parse("2006-01", c.Month)
	if err != nil {
		return fmt.Errorf("%w: --month %q: want YYYY-MM", errUsage, c.Month)
	}
	if c.Out == "" {
		return fmt.Errorf("%w: --out is required", errUsage)
	}
	path, rows, err := server.ExportAuditMonth(ctx, server.AuditExport{URL: c.PostgresURL, Schema: c.PostgresSchema, Month: month, Dir: c.Out})
	if errors.Is(err, postgres.ErrNoAuditPartition) {
		return fmt.Errorf("audit-export: %s has no audit partition (never written, or dropped by retention): %w", c.Month, err)
	}
	if err != nil {
		return fmt.Errorf("audit-export: %w", err)
	}
	fmt.Fprintf(stdout, "exported %s: %d audit %s to %s\n", postgres.AuditPartitionName(month), rows, plural(int(rows), "row", "rows"), path)
	return nil
}
