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
// Each subtest gets a database of its own; reopening it is a restart.
func TestConformance(t *testing.T) {
	tierstest.RunDurable(t, func(t *testing.T) func(t *testing.T) tiers.Durable {
		url := testenv.Postgres(t, postgres.Migrate)
		return func(t *testing.T) tiers.Durable {
			s, err := postgres.New(context.Background(), postgres.Config{URL: url})
			if err != nil {
				t.Fatalf("New() error = %v", err)
			}
			return s
		}
	})
}
