package server

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/claimd/claimd/internal/auditfile"
	"github.com/claimd/claimd/internal/tiers/postgres"
)

// AuditExport is what claimd audit-export writes: the audit partition of
// Month from the PostgreSQL database at URL (schema Schema) to
// Dir/<partition>.parquet.
type AuditExport struct {
	URL, Schema string
	Month       time.Time
	Dir         string
}

// ExportAuditMonth writes e's month to a file and returns its path and row
// count. It reads one snapshot of the partition and changes nothing in the
// database (no migration, no drop: the janitor drops, see
// --audit-export-dir); an existing file of the same name is replaced.
func ExportAuditMonth(ctx context.Context, e AuditExport) (path string, rows int64, err error) {
	if e.URL == "" {
		return "", 0, fmt.Errorf("%w: --postgres-url is required: only PostgreSQL keeps the audit log by month", ErrUsage)
	}
	if st, err := os.Stat(e.Dir); err != nil || !st.IsDir() {
		return "", 0, fmt.Errorf("%w: --out %q is not an existing directory", ErrUsage, e.Dir)
	}
	s, err := postgres.New(ctx, postgres.Config{URL: e.URL, Schema: e.Schema})
	if err != nil {
		return "", 0, fmt.Errorf("postgres: %w", err)
	}
	defer s.Close()
	name := postgres.AuditPartitionName(e.Month)
	f, err := auditfile.Create(e.Dir, name+".parquet")
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	if rows, err = s.ExportAuditPartition(ctx, name, f); err != nil {
		return "", 0, err
	}
	return f.Path(), rows, nil
}
