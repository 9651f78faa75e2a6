package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers/postgres"
)

// auditSection is the audit trail of claimd inspect's text output: from
// its heading to the blank line after it.
func auditSection(out string) string {
	_, rest, ok := strings.Cut(out, "\naudit trail")
	if !ok {
		return ""
	}
	sec, _, _ := strings.Cut(rest, "\n\n")
	return "audit trail" + sec
}

// TestAuditExportThenInspectFile: claimd on PostgreSQL writes a key's
// story; claimd audit-export writes this month to a file; claimd inspect
// --file shows that key's audit trail line for line as claimd inspect shows
// it live.
func TestAuditExportThenInspectFile(t *testing.T) {
	t.Parallel()
	url := testenv.Postgres(t, postgres.Migrate)
	p := start(t, "--postgres-url", url)
	conn := p.conn(t)
	waitServing(t, conn)
	ctx := context.Background()
	month := time.Now().UTC().Format("2006-01")
	claims := pb.NewClaimServiceClient(conn)
	claim := func(holder string) *pb.ClaimResponse {
		t.Helper()
		res, err := claims.Claim(ctx, &pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: "evt_1"},
			Holder: holder, Lease: durationpb.New(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	first := claim("pod-a")
	claim("pod-b") // IN_PROGRESS
	for _, to := range []pb.EventState{pb.EventState_EVENT_STATE_PROCESSING, pb.EventState_EVENT_STATE_SETTLED} {
		if _, err := claims.Transition(ctx, &pb.TransitionRequest{Namespace: "billing", Provider: "stripe", Key: "evt_1",
			FencingToken: first.GetFencingToken(), LeaseSecret: first.GetLeaseSecret(), To: to}); err != nil {
			t.Fatal(err)
		}
	}
	claim("pod-c") // DUPLICATE

	inspect := []string{"inspect", "--address", p.grpc, "--namespace", "billing", "--provider", "stripe", "--key", "evt_1"}
	live := runEnv(t, nil, inspect...)
	want := auditSection(live.stdout)
	if live.code != 0 || !strings.Contains(want, "(5 entries)") {
		t.Fatalf("claimd inspect (live) = exit %d, %s %s; want 5 audit entries", live.code, live.stdout, live.stderr)
	}

	dir := t.TempDir()
	r := runEnv(t, []string{"CLAIMD_POSTGRES_URL=" + url}, "audit-export", "--month", month, "--out", dir)
	file := filepath.Join(dir, postgres.AuditPartitionName(time.Now())+".parquet")
	if r.code != 0 || !strings.Contains(r.stdout, "5 audit rows to "+file) {
		t.Fatalf("claimd audit-export = exit %d, %q %q; want 5 rows written to %s", r.code, r.stdout, r.stderr, file)
	}
	if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("exported file: %v, %v; want mode 0600", st, err)
	}

	// The server is stopped: --file reads the file alone.
	p.stop(t)
	got := runEnv(t, nil, append(inspect, "--file", file)...)
	if got.code != 0 || auditSection(got.stdout) != want {
		t.Errorf("claimd inspect --file = exit %d, stderr %q, audit trail:\n%s\nwant (live):\n%s", got.code, got.stderr, auditSection(got.stdout), want)
	}
	if !strings.Contains(got.stdout, "exported audit month "+file) {
		t.Errorf("claimd inspect --file does not say where it read:\n%s", got.stdout)
	}

	for _, tc := range []struct {
		desc string
		args []string
		code int
		want string
	}{
		{"a key the month lacks", []string{"inspect", "--namespace", "billing", "--provider", "stripe", "--key", "evt_2", "--file", file}, 1, "holds no audit entry of evt_2"},
		{"not an export", []string{"inspect", "--namespace", "billing", "--provider", "stripe", "--key", "evt_1", "--file", filepath.Join(dir, "none.parquet")}, 3, "no such file"},
		{"a month without a partition", []string{"audit-export", "--postgres-url", url, "--month", "1999-01", "--out", dir}, 1, "1999-01 has no audit partition"},
		{"a bad month", []string{"audit-export", "--postgres-url", url, "--month", "1999-13", "--out", dir}, 2, "want YYYY-MM"},
		{"no directory", []string{"audit-export", "--postgres-url", url, "--month", month, "--out", filepath.Join(dir, "nope")}, 2, "not an existing directory"},
		{"no PostgreSQL", []string{"audit-export", "--month", month, "--out", dir}, 2, "--postgres-url is required"},
	} {
		if r := runEnv(t, nil, tc.args...); r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%s: claimd %s = exit %d, stderr %q; want exit %d saying %q", tc.desc, tc.args[0], r.code, r.stderr, tc.code, tc.want)
		}
	}
}
