package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/claimd/claimd/internal/tiers"
)

// TestInspectPlans: ListAudit reads one key's log through audit_log_key
// (0007) in every month's partition, never by scanning a partition, in the
// generic plan its prepared statement settles on; ListClaims of a
// provider's keys reads the claims' primary key.
func TestInspectPlans(t *testing.T) {
	ctx := context.Background()
	s, clk, _ := pausedWrites(t, 0)
	for i := range 60 {
		if _, err := s.Claim(ctx, batchParams(clk, fmt.Sprintf("evt_%d", i), "pod-a")); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	c := conn.Conn()
	if _, err := c.Exec(ctx, `ANALYZE claims, audit_log`); err != nil {
		t.Fatal(err)
	}
	// Partition pruning happens when a generic plan runs; EXPLAIN would
	// show none of the partitions' scans.
	p := genericPlan(t, c, auditListSQL, `SET LOCAL enable_partition_pruning = off`)
	if strings.Contains(p, "Seq Scan") || strings.Contains(p, "Bitmap Heap Scan") || strings.Contains(p, "Sort") || strings.Contains(p, "Filter") ||
		strings.Count(p, "Index Scan using audit_log_y") != partitionsAhead+1 || !strings.Contains(p, "(ROW(at, id) > ROW($4, $5)))") {
		t.Errorf("generic plan of audit_list.sql:\n%s\nwant an index scan of audit_log_key in each partition, in order, "+
			"the key and the position its condition: no sequential scan, no sort, no filter", p)
	}

	// ListClaims of keys: the statement it runs, explained with its values.
	var plan strings.Builder
	rows, err := c.Query(ctx, `EXPLAIN SELECT provider, key FROM claims WHERE namespace = $1 AND provider = $2 AND key = ANY ($3::text[])
		ORDER BY first_seen_at DESC, provider DESC, key DESC LIMIT $4`, "billing", "stripe", []string{"evt_1", "evt_2"}, 101)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(line + "\n")
	}
	if !strings.Contains(plan.String(), "claims_pkey") || strings.Contains(plan.String(), "Seq Scan") {
		t.Errorf("plan of ListClaims by keys:\n%s\nwant the primary key", plan.String())
	}
	// And the listing itself answers.
	recs, _, err := s.ListClaims(ctx, tiers.ClaimFilter{Namespace: "billing", Provider: "stripe", Keys: []string{"evt_1", "evt_2"}}, tiers.Page{})
	if err != nil || len(recs) != 2 {
		t.Fatalf("ListClaims(evt_1, evt_2) = %d records, %v; want 2", len(recs), err)
	}
}
