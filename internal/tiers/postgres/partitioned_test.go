package postgres_test

import (
	"context"
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
