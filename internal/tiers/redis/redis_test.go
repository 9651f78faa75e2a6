package redis

import (
	"testing"

	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/tierstest"
)

// TestFastConformance holds the Redis fast tier to the Fast contract that
// every fast tier passes. Subtests share one server; the suite gives each
// its own namespace.
func TestFastConformance(t *testing.T) {
	tierstest.RunFast(t, func(t *testing.T) tiers.Fast {
		s, err := New(testCtx(t), Config{URL: testenv.Redis(t)})
		if err != nil {
			t.Fatalf("New() error = %v", err)
		}
		return s
	})
}
