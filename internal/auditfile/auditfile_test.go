package auditfile_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/claimd/claimd/internal/auditfile"
	"github.com/claimd/claimd/internal/tiers"
)

var k = tiers.Key{Namespace: "billing", Provider: "stripe", Key: "evt_1"}

func write(t *testing.T, dir, name string, rows ...auditfile.Row) string {
	t.Helper()
	f, err := auditfile.Create(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := range rows {
		if err := f.Write(&rows[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Commit(); err != nil {
		t.Fatalf("Commit() error = %v", err)
	}
	return f.Path()
}

func TestReadKeyOrderAndFilter(t *testing.T) {
	at := time.Date(2026, 11, 3, 10, 0, 0, 1000, time.UTC)
	row := func(id int64, key string, at time.Time, op, outcome, reason, state string) auditfile.Row {
		return auditfile.Row{ID: id, At: at, Namespace: k.Namespace, Provider: k.Provider, Key: key, Op: op,
			Outcome: outcome, Reason: reason, State: state, Token: 1, Holder: "pod-a", LoggedAt: at}
	}
	var rows []auditfile.Row
	// More rows than one write batch, of another key, around k's three
	// (written out of order: the reader sorts by at, then id).
	for i := range 3000 {
		rows = append(rows, row(int64(10+i), "evt_other", at, "claim", "ACQUIRED", "NEW", "RECEIVED"))
	}
	rows = append(rows,
		row(3, k.Key, at.Add(time.Second), "transition", "", "", "SETTLED"),
		row(2, k.Key, at, "claim", "DUPLICATE", "", "PROCESSING"),
		row(1, k.Key, at, "claim", "ACQUIRED", "NEW", "RECEIVED"),
		row(9, k.Key, at.Add(time.Hour), "claim", "DEFERRED", "", "UNSPECIFIED"))
	path := write(t, t.TempDir(), "m.parquet", rows...)

	got, err := auditfile.ReadKey(path, k)
	if err != nil {
		t.Fatalf("ReadKey() error = %v", err)
	}
	entry := func(at time.Time, op tiers.AuditOp, o tiers.Outcome, r tiers.Reason, s tiers.State) tiers.AuditEntry {
		return tiers.AuditEntry{At: at, Op: op, Outcome: o, Reason: r, State: s, Token: 1, Holder: "pod-a"}
	}
	want := []tiers.AuditEntry{
		entry(at, tiers.AuditClaim, tiers.OutcomeAcquired, tiers.ReasonNew, tiers.StateReceived),
		entry(at, tiers.AuditClaim, tiers.OutcomeDuplicate, 0, tiers.StateProcessing),
		entry(at.Add(time.Second), tiers.AuditTransition, 0, 0, tiers.StateSettled),
		entry(at.Add(time.Hour), tiers.AuditClaim, tiers.OutcomeDeferred, 0, tiers.StateUnspecified),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ReadKey() (-want +got):\n%s", diff)
	}
}

func TestReadKeyRefuses(t *testing.T) {
	dir := t.TempDir()
	notParquet := filepath.Join(dir, "x.parquet")
	if err := os.WriteFile(notParquet, []byte("id,at\n1,2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := write(t, dir, "bad.parquet", auditfile.Row{Namespace: k.Namespace, Provider: k.Provider, Key: k.Key, Op: "claim", Outcome: "MAYBE", State: "RECEIVED"})
	for _, tc := range []struct{ desc, path, want string }{
		{"missing file", filepath.Join(dir, "none.parquet"), "no such file"},
		{"not Parquet", notParquet, "not a Parquet file"},
		{"unknown enum name", bad, `unknown outcome "MAYBE"`},
	} {
		if _, err := auditfile.ReadKey(tc.path, k); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: ReadKey() error = %v, want one containing %q", tc.desc, err, tc.want)
		}
	}
}

func TestCloseWithoutCommitLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	f, err := auditfile.Create(dir, "m.parquet")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Write(&auditfile.Row{Op: "claim"}); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("Close() error = %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("after Close without Commit the directory holds %v, want nothing", entries)
	}
	if _, err := auditfile.Create(filepath.Join(dir, "missing"), "m.parquet"); err == nil {
		t.Errorf("Create(a directory that does not exist) error = nil; the operator's directory is not created")
	}
}
