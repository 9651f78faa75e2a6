package postgres_test

import (
	"context"
	"testing"

	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/postgres"
	"github.com/claimd/claimd/internal/tiers/tierstest"
)

// TestConformance holds the PostgreSQL tier, alone, to the storage contract.
// The subtests share one database, each in its namespace, as replicas of
// claimd share one; reopening it is a restart.
func TestConformance(t *testing.T) {
	url := testenv.Postgres(t, postgres.Migrate)
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
