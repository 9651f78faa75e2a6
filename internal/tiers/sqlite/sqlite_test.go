package sqlite

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/tierstest"
)

// TestDurableContract holds the embedded durable tier to the full conformance
// suite: it is what claimd runs with no flags. Each subtest gets its own
// database file; reopening it is a restart.
func TestDurableContract(t *testing.T) {
	tierstest.RunDurable(t, func(t *testing.T) func(t *testing.T) tiers.Durable {
		path := filepath.Join(t.TempDir(), "claimd.db")
		return func(t *testing.T) tiers.Durable {
			s, err := New(context.Background(), Config{Path: path})
			if err != nil {
				t.Fatalf("New(%q) error = %v", path, err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
	})
}
