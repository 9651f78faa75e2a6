package postgres_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/claimd/claimd/internal/auditfile"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/postgres"
)

// auditMonth writes a month of audit rows through the Store in March 2020
// (two keys: a claim with a payload hash and an actor, its duplicate, its
// transitions to SETTLED, a DUPLICATE after, and a released claim) and one
// row in April, and returns ListAudit's answers for the two March keys.
func auditMonth(t *testing.T, e *env) map[string][]tiers.AuditEntry {
	t.Helper()
	mar := time.Date(2020, 3, 10, 8, 0, 0, 123456000, time.UTC)
	if err := e.store.EnsureAuditPartitions(e.ctx(), mar, 1); err != nil {
		t.Fatal(err)
	}
	e.clk.Set(mar)
	p := e.params("evt_a")
	p.PayloadHash = bytes.Repeat([]byte{7}, 32)
	p.Actor = tiers.Actor{Principal: "billing-worker", Transport: "grpc"}
	tok := e.claim(p).Record.Token
	e.clk.Advance(time.Second)
	p.Now = e.clk.Now()
	e.claim(p) // IN_PROGRESS
	e.transition("evt_a", tok, tiers.StateProcessing)
	e.clk.Advance(time.Second)
	e.transition("evt_a", tok, tiers.StateSettled)
	p.Now = e.clk.Now()
	e.claim(p) // DUPLICATE

	b := e.claim(e.params("evt_b")).Record.Token
	if _, err := e.store.Release(e.ctx(), tiers.ReleaseParams{Key: key("evt_b"), Now: e.clk.Now(), Token: b, SecretHash: ownerHash}); err != nil {
		t.Fatal(err)
	}
	e.clk.Set(time.Date(2020, 4, 2, 0, 0, 0, 0, time.UTC))
	e.claim(e.params("evt_april"))

	want := map[string][]tiers.AuditEntry{}
	for _, k := range []string{"evt_a", "evt_b"} {
		got, next, err := e.store.ListAudit(e.ctx(), key(k), tiers.Page{Size: tiers.MaxPageSize})
		if err != nil || next != "" {
			t.Fatalf("ListAudit(%q) = _, %q, %v", k, next, err)
		}
		want[k] = got
	}
	if n := len(want["evt_a"]); n != 5 {
		t.Fatalf("ListAudit(evt_a) has %d entries, want 5 (claim, claim, two transitions, claim)", n)
	}
	return want
}

// readBack compares what the export at path holds for each key with want.
func readBack(t *testing.T, path string, want map[string][]tiers.AuditEntry) {
	t.Helper()
	for k, w := range want {
		got, err := auditfile.ReadKey(path, key(k))
		if err != nil {
			t.Fatalf("ReadKey(%s, %q) error = %v", filepath.Base(path), k, err)
		}
		if diff := cmp.Diff(w, got); diff != "" {
			t.Errorf("ReadKey(%s, %q) differs from ListAudit (-ListAudit +file):\n%s", filepath.Base(path), k, diff)
		}
	}
}

func TestExportAuditPartition(t *testing.T) {
	e := newEnv(t)
	want := auditMonth(t, e)
	dir := t.TempDir()
	f, err := auditfile.Create(dir, "audit_log_y2020m03.parquet")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, err := e.store.ExportAuditPartition(e.ctx(), postgres.AuditPartitionName(time.Date(2020, 3, 1, 0, 0, 0, 0, time.UTC)), f)
	if err != nil {
		t.Fatalf("ExportAuditPartition(2020-03) error = %v", err)
	}
	if n != 7 {
		t.Errorf("ExportAuditPartition(2020-03) wrote %d rows, want 7 (evt_a's 5, evt_b's claim and release)", n)
	}
	readBack(t, f.Path(), want)
	if got, _ := auditfile.ReadKey(f.Path(), key("evt_april")); len(got) != 0 {
		t.Errorf("March's export holds April's row: %v", got)
	}
	if st, err := os.Stat(f.Path()); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("export file: %v, %v; want mode 0600", st, err)
	}
	if !partitionSet(t, e)["audit_log_y2020m03"] {
		t.Errorf("ExportAuditPartition dropped its partition")
	}

	if _, err := e.store.ExportAuditPartition(e.ctx(), "audit_log_y1999m01", f); !errors.Is(err, postgres.ErrNoAuditPartition) {
		t.Errorf("ExportAuditPartition(a month without a partition) error = %v, want ErrNoAuditPartition", err)
	}
	if _, err := e.store.ExportAuditPartition(e.ctx(), "claims", f); !errors.Is(err, postgres.ErrNoAuditPartition) {
		t.Errorf("ExportAuditPartition(claims) error = %v, want ErrNoAuditPartition", err)
	}
}

// failingSink takes the rows and fails to make them durable.
type failingSink struct{ rows int }

func (s *failingSink) Write(*auditfile.Row) error { s.rows++; return nil }
func (s *failingSink) Commit() error              { return errors.New("disk full") }

func TestArchiveAuditPartition(t *testing.T) {
	e := newEnv(t)
	want := auditMonth(t, e)
	const mar = "audit_log_y2020m03"

	// An export that fails leaves the partition where it was.
	sink := &failingSink{}
	if _, err := e.store.ArchiveAuditPartition(e.ctx(), mar, sink); err == nil {
		t.Fatalf("ArchiveAuditPartition(a sink that cannot commit) error = nil")
	}
	if sink.rows != 7 || !partitionSet(t, e)[mar] {
		t.Fatalf("after a failed archive: sink had %d rows, partition kept %v; want 7 rows and the partition kept", sink.rows, partitionSet(t, e)[mar])
	}
	if got, _, _ := e.store.ListAudit(e.ctx(), key("evt_a"), tiers.Page{}); len(got) != 5 {
		t.Errorf("after a failed archive ListAudit(evt_a) has %d entries, want 5", len(got))
	}

	// A pass that died after its detach left March detached and marked:
	// the next archive exports it from there.
	for _, sql := range []string{
		`COMMENT ON TABLE ` + mar + ` IS 'claimd: detached to drop'`,
		`ALTER TABLE audit_log DETACH PARTITION ` + mar + ` CONCURRENTLY`,
	} {
		if _, err := e.db.Exec(e.ctx(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}

	dir := t.TempDir()
	f, err := auditfile.Create(dir, mar+".parquet")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n, err := e.store.ArchiveAuditPartition(e.ctx(), mar, f); err != nil || n != 7 {
		t.Fatalf("ArchiveAuditPartition(%s) = %d, %v; want 7 rows", mar, n, err)
	}
	if have := partitionSet(t, e); have[mar] || tableExists(t, e, mar) || !have["audit_log_y2020m04"] {
		t.Errorf("after archiving March: partitions %v; want March gone, April kept", have)
	}
	if got, _, _ := e.store.ListAudit(e.ctx(), key("evt_a"), tiers.Page{}); len(got) != 0 {
		t.Errorf("after archiving, ListAudit(evt_a) = %v, want nothing (the month is in the file)", got)
	}
	readBack(t, f.Path(), want)
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 || entries[0].Name() != mar+".parquet" {
		t.Errorf("export dir holds %v, %v; want only %s.parquet (no temporary file)", entries, err, mar)
	}
}
