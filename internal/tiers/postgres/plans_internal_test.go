package postgres

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// paramRef is a statement's reference to a parameter, $1 and so on.
var paramRef = regexp.MustCompile(`\$(\d+)`)

// genericPlan returns the plan PostgreSQL caches for sql once pgx has run it
// often enough (plan_cache_mode=force_generic_plan makes it the first one),
// on c with its session settings. setup runs first, in the same
// transaction: transition_batch.sql's own settings, or a test's.
func genericPlan(t *testing.T, c *pgx.Conn, sql string, setup ...string) string {
	t.Helper()
	ctx := context.Background()
	params := 0
	for _, m := range paramRef.FindAllStringSubmatch(sql, -1) {
		var n int
		fmt.Sscan(m[1], &n)
		params = max(params, n)
	}
	nulls := strings.TrimSuffix(strings.Repeat("NULL, ", params), ", ")
	var b pgx.Batch
	b.Queue(`BEGIN`)
	for _, s := range setup {
		b.Queue(s)
	}
	b.Queue(`SET LOCAL plan_cache_mode = force_generic_plan`)
	b.Queue(`PREPARE plan_probe AS ` + sql)
	b.Queue(`EXPLAIN EXECUTE plan_probe(` + nulls + `)`)
	b.Queue(`DEALLOCATE plan_probe`)
	b.Queue(`COMMIT`)
	br := c.SendBatch(ctx, &b)
	for range 3 + len(setup) {
		if _, err := br.Exec(); err != nil {
			t.Fatalf("plan of %.40q: %v", sql, err)
		}
	}
	rows, err := br.Query()
	if err != nil {
		t.Fatal(err)
	}
	var plan strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(line + "\n")
	}
	if err := errors.Join(rows.Err(), br.Close()); err != nil {
		t.Fatal(err)
	}
	return plan.String()
}

// TestKeyLookupPlans: every statement that reads claims by key must read it
// through its primary key in the generic plan pgx's prepared statement
// settles on, whatever the table looked like when the plan was made: never
// analyzed and empty (a new database), or analyzed while it held a few
// dozen rows (autovacuum's first ANALYZE of a new database). A sequential
// scan cached then stays cached until the next ANALYZE, up to a minute of
// autovacuum's naptime, while the table grows by thousands of rows a
// second. Both claims layouts: one table, and hash partitions.
func TestKeyLookupPlans(t *testing.T) {
	for _, partitions := range []int{0, 4} {
		t.Run(fmt.Sprintf("partitions=%d", partitions), func(t *testing.T) { testKeyLookupPlans(t, partitions) })
	}
}

func testKeyLookupPlans(t *testing.T, partitions int) {
	ctx := context.Background()
	s, clk, _ := pausedWrites(t, partitions)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	c := conn.Conn()
	statements := map[string]string{
		"get.sql": getSQL, "transition.sql": transitionSQL, "renew.sql": renewSQL, "release.sql": releaseSQL,
		"entity_lock.sql": entityLockSQL, "entity_holder.sql": entityHolderSQL, "entity_hold.sql": entityHoldSQL,
		"deferral.sql": deferralSQL, "entity_lock_existing.sql": entityLockExistingSQL,
		"entity_settle.sql": entitySettleSQL, "entity_free.sql": entityFreeSQL, "entity_forget.sql": entityForgetSQL,
		"entity_get.sql": entityGetSQL,
	}
	var setup []string
	if partitions > 0 {
		// A generic plan prunes partitions when it runs; EXPLAIN would
		// show none of their scans.
		setup = append(setup, `SET LOCAL enable_partition_pruning = off`)
	}
	check := func(when string) {
		t.Helper()
		for name, sql := range statements {
			if p := genericPlan(t, c, sql, setup...); strings.Contains(p, "Seq Scan") || !strings.Contains(p, "_pkey") {
				t.Errorf("generic plan of %s on %s:\n%s\nwant every table read through its primary key, no sequential scan", name, when, p)
			}
		}
	}
	check("empty tables never analyzed")
	for i := range 60 {
		if _, err := s.Claim(ctx, batchParams(clk, fmt.Sprintf("evt_%d", i), "pod-a")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Exec(ctx, `ANALYZE claims, entities, deferrals`); err != nil {
		t.Fatal(err)
	}
	check("tables analyzed at 60 claims")
}
