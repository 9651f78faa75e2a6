package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/claimd/claimd/internal/tiers"
)

// monthPartition names the audit partition of m's month.
func monthPartition(m time.Time) string {
	return fmt.Sprintf("audit_log_y%04dm%02d", m.Year(), int(m.Month()))
}

// partitionSet lists the partitions of audit_log.
func partitionSet(t *testing.T, e *env) map[string]bool {
	t.Helper()
	rows, _ := e.db.Query(e.ctx(), `SELECT c.relname::text FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'audit_log'::regclass`)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	for _, n := range names {
		set[n] = true
	}
	return set
}

func TestEnsureAndDropAuditPartitions(t *testing.T) {
	e := newEnv(t)
	jan2020 := time.Date(2020, 1, 15, 12, 0, 0, 0, time.UTC)
	_, before, err := e.store.Stats(e.ctx())
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // idempotent
		if err := e.store.EnsureAuditPartitions(e.ctx(), jan2020, 2); err != nil {
			t.Fatalf("EnsureAuditPartitions(2020-01, 2) error = %v", err)
		}
	}
	have := partitionSet(t, e)
	for _, n := range []string{"audit_log_y2020m01", "audit_log_y2020m02", "audit_log_y2020m03"} {
		if !have[n] {
			t.Errorf("EnsureAuditPartitions(2020-01, 2): %s missing", n)
		}
	}
	if _, after, err := e.store.Stats(e.ctx()); err != nil || after != before+3 {
		t.Errorf("Stats() partitions = %d, %v; want %d", after, err, before+3)
	}

	// An audit row lands in its month's partition.
	e.clk.Set(jan2020)
	e.claim(e.params("evt_2020"))
	var part string
	if err := e.db.QueryRow(e.ctx(), `SELECT tableoid::regclass::text FROM audit_log WHERE key = 'evt_2020'`).Scan(&part); err != nil {
		t.Fatal(err)
	}
	if part != "audit_log_y2020m01" {
		t.Errorf("audit row of 2020-01-15 is in %s, want audit_log_y2020m01", part)
	}

	// March ends after the cutoff: kept. January and February: dropped.
	cutoff := time.Date(2020, 3, 15, 0, 0, 0, 0, time.UTC)
	dropped, err := e.store.DropAuditPartitionsBefore(e.ctx(), cutoff)
	if err != nil {
		t.Fatalf("DropAuditPartitionsBefore(%v) error = %v", cutoff, err)
	}
	if diff := cmp.Diff([]string{"audit_log_y2020m01", "audit_log_y2020m02"}, dropped); diff != "" {
		t.Errorf("DropAuditPartitionsBefore(%v) dropped (-want +got):\n%s", cutoff, diff)
	}
	if have := partitionSet(t, e); have["audit_log_y2020m01"] || !have["audit_log_y2020m03"] {
		t.Errorf("after drop, partitions = %v; want 2020m01 gone and 2020m03 kept", have)
	}
	if rows := e.audit("evt_2020"); len(rows) != 0 {
		t.Errorf("audit rows of a dropped month = %v, want none", rows)
	}
	if dropped, err := e.store.DropAuditPartitionsBefore(e.ctx(), cutoff); err != nil || len(dropped) != 0 {
		t.Errorf("DropAuditPartitionsBefore(again) = %v, %v; want nothing", dropped, err)
	}
	// The claim itself is not audit: its record stays.
	if e.get("evt_2020") == nil {
		t.Errorf("dropping audit partitions deleted a claim")
	}
}

func TestEnsureAuditPartitionsConcurrently(t *testing.T) {
	e := newEnv(t)
	at := time.Date(2031, 5, 1, 0, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = e.store.EnsureAuditPartitions(e.ctx(), at, 5)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("EnsureAuditPartitions #%d error = %v", i, err)
		}
	}
	have := partitionSet(t, e)
	for m := range 6 {
		if n := monthPartition(at.AddDate(0, m, 0)); !have[n] {
			t.Errorf("partition %s missing", n)
		}
	}
}

func TestWriteCreatesItsMissingAuditPartition(t *testing.T) {
	e := newEnv(t)
	far := time.Date(2033, 7, 9, 10, 0, 0, 0, time.UTC)
	if partitionSet(t, e)[monthPartition(far)] {
		t.Fatalf("partition %s exists before the test", monthPartition(far))
	}
	e.clk.Set(far)
	res := e.claim(e.params("evt_far"))
	if res.Outcome != tiers.OutcomeAcquired {
		t.Fatalf("Claim(evt_far) outcome = %v, want ACQUIRED", res.Outcome)
	}
	if !partitionSet(t, e)[monthPartition(far)] {
		t.Errorf("Claim at %v did not create partition %s", far, monthPartition(far))
	}
	if rows := e.audit("evt_far"); len(rows) != 1 {
		t.Errorf("audit rows of evt_far = %d, want 1", len(rows))
	}
	// The other writes heal the same way.
	e.clk.Set(far.AddDate(1, 0, 0))
	e.transition("evt_far", res.Record.Token, tiers.StateProcessing)
	if !partitionSet(t, e)[monthPartition(far.AddDate(1, 0, 0))] {
		t.Errorf("Transition did not create its month's partition")
	}
}

// januaryBehindAReader gives e the audit partition of January 2020 and
// opens a transaction that has run query (a reader of audit_log or of that
// month), left open for the test to end.
func januaryBehindAReader(t *testing.T, e *env, query string) (jan time.Time, reader pgx.Tx) {
	t.Helper()
	jan = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := e.store.EnsureAuditPartitions(e.ctx(), jan, 0); err != nil {
		t.Fatal(err)
	}
	reader, err := e.db.Begin(e.ctx())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reader.Rollback(context.Background()) })
	if _, err := reader.Exec(e.ctx(), query); err != nil {
		t.Fatal(err)
	}
	return jan, reader
}

// TestPartitionMaintenanceGivesUpBehindALongQuery: creating a partition
// needs an exclusive lock on audit_log, and every write queues behind it
// while it waits; dropping one waits for the month's readers. Behind a long
// reader, maintenance must give up (retryably) after its lock timeout
// rather than wait indefinitely.
func TestPartitionMaintenanceGivesUpBehindALongQuery(t *testing.T) {
	e := newEnv(t)
	old, reader := januaryBehindAReader(t, e, `SELECT count(*) FROM audit_log`)
	err := e.store.EnsureAuditPartitions(e.ctx(), time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC), 0)
	if !errors.Is(err, tiers.ErrUnavailable) {
		t.Errorf("EnsureAuditPartitions(behind a reader) error = %v, want ErrUnavailable (lock timeout)", err)
	}
	dropped, err := e.store.DropAuditPartitionsBefore(e.ctx(), old.AddDate(0, 1, 0))
	if !errors.Is(err, tiers.ErrUnavailable) || len(dropped) != 0 {
		t.Errorf("DropAuditPartitionsBefore(behind a reader) = %v, %v; want nothing, ErrUnavailable", dropped, err)
	}
	if err := reader.Rollback(e.ctx()); err != nil {
		t.Fatal(err)
	}
	dropped, err = e.store.DropAuditPartitionsBefore(e.ctx(), old.AddDate(0, 1, 0))
	if err != nil || len(dropped) != 1 {
		t.Errorf("DropAuditPartitionsBefore(reader gone) = %v, %v; want [audit_log_y2020m01]", dropped, err)
	}
}

// waitForLockWait returns once a session of the test's database other
// than the test's own waits for a lock.
func waitForLockWait(t *testing.T, e *env) {
	t.Helper()
	ctx := e.ctx()
	for {
		var waiting bool
		if err := e.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND wait_event_type = 'Lock')`).Scan(&waiting); err != nil {
			t.Fatalf("waiting for a session to wait for a lock: %v", err)
		}
		if waiting {
			return
		}
	}
}

// TestPartitionDropLeavesWritesFlowing: dropping an old month must not lock
// audit_log against the writes of the current one, neither while it waits
// for a reader of the old month (a plain DROP of the partition holds
// audit_log exclusively while it waits, and every claim's audit row queues
// behind it) nor while its commit removes the month's files. The drop
// detaches the partition concurrently first; a claim goes through while the
// drop waits, and the drop finishes once the reader is gone.
func TestPartitionDropLeavesWritesFlowing(t *testing.T) {
	e := newEnv(t)
	old, reader := januaryBehindAReader(t, e, `SELECT count(*) FROM audit_log_y2020m01`)

	type result struct {
		dropped []string
		err     error
	}
	done := make(chan result, 1)
	go func() {
		d, err := e.store.DropAuditPartitionsBefore(e.ctx(), old.AddDate(0, 1, 0))
		done <- result{d, err}
	}()
	waitForLockWait(t, e)

	// The drop waits for the reader; a claim of this month does not wait
	// for the drop.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := e.store.Claim(ctx, e.params("evt_during_drop")); err != nil {
		t.Fatalf("Claim while the drop of an old month waited for its reader: %v (the drop locked audit_log)", err)
	}
	if rows := e.audit("evt_during_drop"); len(rows) != 1 {
		t.Errorf("audit rows of evt_during_drop = %d, want 1", len(rows))
	}

	if err := reader.Rollback(e.ctx()); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		// The reader outlived the drop's lock timeout: the partition is
		// left detach-pending, and the next pass finishes it.
		if !errors.Is(r.err, tiers.ErrUnavailable) {
			t.Fatalf("DropAuditPartitionsBefore(behind a reader) error = %v, want nil or ErrUnavailable", r.err)
		}
		r.dropped, r.err = e.store.DropAuditPartitionsBefore(e.ctx(), old.AddDate(0, 1, 0))
	}
	if r.err != nil || !cmp.Equal(r.dropped, []string{"audit_log_y2020m01"}) {
		t.Errorf("DropAuditPartitionsBefore = %v, %v; want [audit_log_y2020m01]", r.dropped, r.err)
	}
	if tableExists(t, e, "audit_log_y2020m01") {
		t.Errorf("audit_log_y2020m01 still exists after its drop")
	}
}

// tableExists says whether the claimd schema has a table name.
func tableExists(t *testing.T, e *env, name string) bool {
	t.Helper()
	var ok bool
	if err := e.db.QueryRow(e.ctx(), `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestPartitionDropFinishesWhatAPassLeft: a pass that died between its
// steps leaves a partition detach-pending, or detached and marked; the next
// one finishes either. A table someone detached by hand (no mark) is not
// claimd's to drop.
func TestPartitionDropFinishesWhatAPassLeft(t *testing.T) {
	e := newEnv(t)
	jan := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := e.store.EnsureAuditPartitions(e.ctx(), jan, 2); err != nil {
		t.Fatal(err)
	}
	exec := func(sql string) {
		t.Helper()
		if _, err := e.db.Exec(e.ctx(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// January: detached and marked, as after a crash before its drop.
	exec(`COMMENT ON TABLE audit_log_y2020m01 IS 'claimd: detached to drop'`)
	exec(`ALTER TABLE audit_log DETACH PARTITION audit_log_y2020m01 CONCURRENTLY`)
	// February: detached by hand, kept by its operator.
	exec(`ALTER TABLE audit_log DETACH PARTITION audit_log_y2020m02`)

	cutoff := jan.AddDate(0, 3, 0)
	if names, err := e.store.AuditPartitionsBefore(e.ctx(), cutoff); err != nil || !cmp.Equal(names, []string{"audit_log_y2020m01", "audit_log_y2020m03"}) {
		t.Errorf("AuditPartitionsBefore = %v, %v; want January (marked) and March, not February (detached by hand)", names, err)
	}
	dropped, err := e.store.DropAuditPartitionsBefore(e.ctx(), cutoff)
	if err != nil || !cmp.Equal(dropped, []string{"audit_log_y2020m01", "audit_log_y2020m03"}) {
		t.Errorf("DropAuditPartitionsBefore = %v, %v; want [audit_log_y2020m01 audit_log_y2020m03]", dropped, err)
	}
	if tableExists(t, e, "audit_log_y2020m01") || !tableExists(t, e, "audit_log_y2020m02") {
		t.Errorf("after the drop: January exists %v (want false), February exists %v (want true)",
			tableExists(t, e, "audit_log_y2020m01"), tableExists(t, e, "audit_log_y2020m02"))
	}
}
