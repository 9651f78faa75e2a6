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
// (the default) and with every write in its own transaction: the two write
// paths. DurabilityRelaxed is not a third run: it differs from the default
// only in the synchronous pragma, which TestDurabilityPragma checks on every
// connection, and what it gives up (commits an OS crash may take back) no
// test in a running OS can show; a third run of the suite repeated the
// default's, 11 of this package's 38 s of CPU under -race.
func TestDurableContract(t *testing.T) {
	for _, tc := range []struct {
		desc string
		cfg  Config
	}{
		{"default", Config{}},
		{"unbatched", Config{MaxBatch: 1}},
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
