package memory

import (
	"testing"

	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/tierstest"
)

// TestFastContract holds the in-process fast tier to the same Fast contract
// cases as the Redis tier.
func TestFastContract(t *testing.T) {
	tierstest.RunFast(t, func(t *testing.T) tiers.Fast { return New(Config{}) })
}
