package twotier_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/memory"
	"github.com/claimd/claimd/internal/tiers/sqlite"
	"github.com/claimd/claimd/internal/tiers/tierstest"
	"github.com/claimd/claimd/internal/tiers/twotier"
)

// TestEmbeddedPair holds the default of `claimd` with no flags — the
// in-process fast tier in front of SQLite — to the full suite: it is
// production for everyone who runs one binary.
func TestEmbeddedPair(t *testing.T) {
	tierstest.Run(t, func(t *testing.T) tierstest.Opener {
		path := filepath.Join(t.TempDir(), "claimd.db")
		return func(t *testing.T) tiers.Store {
			lite, err := sqlite.New(context.Background(), sqlite.Config{Path: path})
			if err != nil {
				t.Fatal(err)
			}
			// A restart loses the in-process fast tier and local cache, as
			// a real restart does; only SQLite persists.
			return twotier.New(memory.New(memory.Config{}), lite, twotier.Config{})
		}
	})
}
