package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/postgres"
	"github.com/claimd/claimd/internal/tiers/tierstest"
)

// hashPartitions is how many partitions the test splits claims into.
const hashPartitions = 8

// TestConformanceHashPartitionedClaims holds the PostgreSQL tier to the
// storage contract with its claims table hash-partitioned by identity (the
// option docs/scaling.md describes for a table past one primary's comfort):
// every query runs unchanged. The subtests share the database.
func TestConformanceHashPartitionedClaims(t *testing.T) {
	url := testenv.Postgres(t, postgres.Migrate)
	if err := postgres.PartitionClaims(context.Background(), postgres.Config{URL: url}, hashPartitions); err != nil {
		t.Fatalf("PartitionClaims() error = %v", err)
	}
	tierstest.RunDurable(t, func(t *testing.T) func(t *testing.T) tiers.Durable {
		return func(t *testing.T) tiers.Durable {
			s, err := postgres.New(context.Background(), postgres.Config{URL: url})
			if err != nil {
				t.Fatalf("New() error = %v", err)
			}
			return s
		}
	})
}

// TestPartitionClaimsKeepsRowsAndRefusesTwice: the rows claimed before the
// conversion are there after it, and a second conversion or a partition
// count out of bounds is refused without touching the table.
func TestPartitionClaimsKeepsRowsAndRefusesTwice(t *testing.T) {
	ctx := context.Background()
	url := testenv.Postgres(t, postgres.Migrate)
	s, err := postgres.New(ctx, postgres.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	p := tiers.ClaimParams{Key: tiers.Key{Namespace: "billing", Provider: "stripe", Key: "evt_before"}, Now: time.Now(), Lease: time.Minute, TTL: time.Hour, Holder: "pod-a"}
	if _, err := s.Claim(ctx, p); err != nil {
		t.Fatal(err)
	}
	s.Close()
	for _, n := range []int{1, postgres.MaxClaimPartitions + 1} {
		if err := postgres.PartitionClaims(ctx, postgres.Config{URL: url}, n); err == nil || !strings.Contains(err.Error(), "partitions, want") {
			t.Errorf("PartitionClaims(%d) error = %v, want the bounds", n, err)
		}
	}
	if err := postgres.PartitionClaims(ctx, postgres.Config{URL: url}, 4); err != nil {
		t.Fatalf("PartitionClaims(4) error = %v", err)
	}
	if err := postgres.PartitionClaims(ctx, postgres.Config{URL: url}, 4); err == nil || !strings.Contains(err.Error(), "already partitioned") {
		t.Errorf("PartitionClaims again error = %v, want already partitioned", err)
	}
	s, err = postgres.New(ctx, postgres.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rec, err := s.Get(ctx, p.Key)
	if err != nil || rec.Holder != "pod-a" {
		t.Fatalf("Get(evt_before) after partitioning = %+v, %v; want pod-a's record", rec, err)
	}
	p.Holder = "pod-b"
	if res, err := s.Claim(ctx, p); err != nil || res.Outcome != tiers.OutcomeInProgress {
		t.Fatalf("Claim(evt_before) after partitioning = %v, %v; want IN_PROGRESS (the unique key still holds)", res.Outcome, err)
	}
}

// TestEstimatedStats: the metrics sampler's count of claims is PostgreSQL's
// own estimate, summed over the partitions of a partitioned table (never
// the partitioned parent, which an ANALYZE gives the total too), and stands
// on the last VACUUM's count when the statistics were reset.
func TestEstimatedStats(t *testing.T) {
	for _, partitions := range []int{0, 4} {
		t.Run(fmt.Sprintf("partitions=%d", partitions), func(t *testing.T) {
			ctx := context.Background()
			url := testenv.Postgres(t, postgres.Migrate)
			if partitions > 0 {
				if err := postgres.PartitionClaims(ctx, postgres.Config{URL: url}, partitions); err != nil {
					t.Fatal(err)
				}
			}
			s, err := postgres.New(ctx, postgres.Config{URL: url})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			const n = 37
			for i := range n {
				p := tiers.ClaimParams{Key: tiers.Key{Namespace: "billing", Provider: "stripe", Key: fmt.Sprintf("evt_%d", i)},
					Now: time.Now(), Lease: time.Minute, TTL: time.Hour, Holder: "pod-a"}
				if res, err := s.Claim(ctx, p); err != nil || res.Outcome != tiers.OutcomeAcquired {
					t.Fatalf("Claim(%s) = %v, %v; want ACQUIRED", p.Key.Key, res.Outcome, err)
				}
			}
			// The inserting backends report their rows when they go idle,
			// within a second or so (PostgreSQL's minimum interval between
			// reports): the estimate reaches n then. Reported after the
			// VACUUM below, they would be counted on top of its count.
			wait, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			poll := time.NewTicker(20 * time.Millisecond)
			defer poll.Stop()
			for {
				claims, _, err := s.EstimatedStats(wait)
				if err != nil {
					t.Fatalf("EstimatedStats() while the inserts' statistics arrive: %v", err)
				}
				if claims == n {
					break
				}
				select {
				case <-wait.Done():
					t.Fatalf("EstimatedStats() = %d claims 30 s after %d inserts, want %d", claims, n, n)
				case <-poll.C:
				}
			}
			db := openDB(t, url, postgres.DefaultSchema)
			check := func(when string) {
				t.Helper()
				exact, parts, err := s.Stats(ctx)
				if err != nil || exact != n {
					t.Fatalf("%s: Stats() = %d, %v; want %d", when, exact, err, n)
				}
				claims, estParts, err := s.EstimatedStats(ctx)
				if err != nil || claims != n || estParts != parts {
					t.Errorf("%s: EstimatedStats() = %d claims, %d partitions, %v; want %d, %d", when, claims, estParts, err, n, parts)
				}
			}
			// VACUUM counts each partition's live rows and reports them
			// at once; ANALYZE of a partitioned table sets its parent's
			// reltuples to the total as well.
			if _, err := db.Exec(ctx, "VACUUM ANALYZE claims"); err != nil {
				t.Fatal(err)
			}
			check("after VACUUM ANALYZE")
			if _, err := db.Exec(ctx, "SELECT pg_stat_reset()"); err != nil {
				t.Fatal(err)
			}
			check("after pg_stat_reset()")
		})
	}
}
