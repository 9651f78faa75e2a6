package server

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/auditfile"
	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/janitor"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/postgres"
)

// TestJanitorExportsBeforeDropping: with --audit-export-dir, a pass writes
// each month retention drops to DIR/<partition>.parquet before dropping it;
// when the export cannot be written the partition stays, the pass fails
// and names it, and the next pass exports and drops it.
func TestJanitorExportsBeforeDropping(t *testing.T) {
	s := newPostgres(t, testenv.Postgres(t, postgres.Migrate))
	clk := clock.NewFake(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	sep := time.Date(2026, 9, 14, 9, 30, 0, 0, time.UTC)
	if err := s.EnsureAuditPartitions(testCtx(t), sep, 3); err != nil {
		t.Fatal(err)
	}
	claimAt(t, s, "evt_sep", sep)
	claimAt(t, s, "evt_oct", time.Date(2026, 10, 2, 0, 0, 0, 0, time.UTC))
	k := tiers.Key{Namespace: "billing", Provider: "stripe", Key: "evt_sep"}
	want, _, err := s.ListAudit(testCtx(t), k, tiers.Page{})
	if err != nil || len(want) != 1 {
		t.Fatalf("ListAudit(evt_sep) = %v, %v; want its claim", want, err)
	}

	dir := filepath.Join(t.TempDir(), "archive") // not there yet: the export fails
	tr := Tiers{Target: postgresTarget(s), DurableKind: "postgres"}
	j, err := tr.Janitor(RetentionConfig{Batch: 100, Retention: 35 * 24 * time.Hour, AuditExportDir: dir},
		janitor.Config{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	// Cutoff 2026-10-29 (35 days): September ended by then, October not.
	rep, err := j.Pass(testCtx(t), false)
	if err == nil || rep.Audit.ExportFailed != "audit_log_y2026m09" || len(rep.Audit.Partitions) != 0 {
		t.Fatalf("Pass(export dir missing) = %+v, %v; want an error naming audit_log_y2026m09 and nothing dropped", rep.Audit, err)
	}
	if got, _, _ := s.ListAudit(testCtx(t), k, tiers.Page{}); len(got) != 1 {
		t.Errorf("after a failed export ListAudit(evt_sep) = %v; want the month kept", got)
	}

	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	rep, err = j.Pass(testCtx(t), false)
	if err != nil {
		t.Fatalf("Pass() error = %v", err)
	}
	wantFile := filepath.Join(dir, "audit_log_y2026m09.parquet")
	if len(rep.Audit.Exported) != 1 || rep.Audit.Exported[0] != wantFile ||
		len(rep.Audit.Partitions) != 1 || rep.Audit.Partitions[0] != "audit_log_y2026m09" || rep.Audit.ExportFailed != "" {
		t.Errorf("Pass() audit = %+v; want September exported to %s and dropped", rep.Audit, wantFile)
	}
	if got, _, _ := s.ListAudit(testCtx(t), k, tiers.Page{}); len(got) != 0 {
		t.Errorf("after the pass ListAudit(evt_sep) = %v; want the month dropped", got)
	}
	got, err := auditfile.ReadKey(wantFile, k)
	if err != nil || len(got) != 1 || !got[0].At.Equal(want[0].At) || got[0].Outcome != tiers.OutcomeAcquired {
		t.Errorf("ReadKey(September's export, evt_sep) = %v, %v; want %v", got, err, want)
	}
	oct := tiers.Key{Namespace: "billing", Provider: "stripe", Key: "evt_oct"}
	if got, _, _ := s.ListAudit(testCtx(t), oct, tiers.Page{}); len(got) != 1 {
		t.Errorf("ListAudit(evt_oct) = %v; want October kept (it ends after the cutoff)", got)
	}
}

func TestAuditExportDirRefused(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{file, filepath.Join(t.TempDir(), "missing")} {
		r := RetentionConfig{Batch: 1, Retention: time.Hour, AuditExportDir: dir}
		if err := r.Check(); !errors.Is(err, ErrUsage) {
			t.Errorf("Check(--audit-export-dir %s) error = %v, want ErrUsage", dir, err)
		}
	}
	// The embedded tier has no partitions to export.
	tr := Tiers{Target: sqliteTarget(nil), DurableKind: "sqlite"}
	if _, err := tr.Janitor(RetentionConfig{Batch: 1, Retention: time.Hour, AuditExportDir: t.TempDir()}, janitor.Config{}); !errors.Is(err, ErrUsage) {
		t.Errorf("Janitor(sqlite, --audit-export-dir) error = %v, want ErrUsage", err)
	}
}
