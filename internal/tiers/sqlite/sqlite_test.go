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
// database file; reopening it is a restart. The suite runs with group commit
// (the default), with every write in its own transaction, and relaxed.
func TestDurableContract(t *testing.T) {
	for _, tc := range []struct {
		desc string
		cfg  Config
	}{
		{"default", Config{}},
		{"unbatched", Config{MaxBatch: 1}},
		{"relaxed", Config{Durability: DurabilityRelaxed}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			tierstest.RunDurable(t, func(t *testing.T) func(t *testing.T) tiers.Durable {
				cfg := tc.cfg
				cfg.Path = filepath.Join(t.TempDir(), "claimd.db")
				return func(t *testing.T) tiers.Durable {
					s, err := New(context.Background(), cfg)
					if err != nil {
						t.Fatalf("New(%+v) error = %v", cfg, err)
					}
					t.Cleanup(func() { s.Close() })
					return s
				}
			})
		})
	}
}
